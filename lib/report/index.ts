// index.ts — pictures of runs and plans: the HTML training report and the plan SVG (Vega-Lite, rendered
// in Node).
export { renderSvg } from './vega.js';
export type { ChartSpec } from './vega.js';
export { trainReportHtml, xmlEscape } from './train-report.js';
export { RunRecorder, CHART_POINTS } from './run-log.js';
export type { RunLog, StepRecord, StepPoint, StepTotals, StepPartTimes, EvalRecord, EvalPoint } from './run-log.js';
export { planSvg } from './plan-chart.js';

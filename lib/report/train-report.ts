// train-report.ts — the self-contained HTML report of a training run (`embshard train --report`): loss
// and held-out logloss, held-out AUC, the time split of the steps and the throughput over time, drawn as
// inline SVG by Vega-Lite from the run log's chart points (every step of a short run; the means of spans of
// steps, the loss with its min–max band, of a long one: lib/report/run-log.ts), so its size does not grow
// with the run; no scripts, styles inline, and the run's numbers embedded as JSON data (<script
// type="application/json">, never executed). The document is well-formed XML (XHTML).
import type { StepTimes } from '../train/trainer.js';
import type { RunLog } from './run-log.js';
import { NOT_XML_CHAR, renderSvg, type ChartSpec } from './vega.js';

const PARTS: [keyof StepTimes | 'dataWait', string][] = [
  ['dataWait', 'data wait'],
  ['embeddingForward', 'embedding fwd + bottom MLP'],
  ['denseForward', 'dense fwd'],
  ['denseBackward', 'dense bwd'],
  ['communication', 'communication'],
  ['embeddingBackward', 'embedding bwd + update'],
  ['denseUpdate', 'dense update'],
];

const W = 640, H = 220;

/** Escapes text for XML content and attributes; a character XML cannot carry (a control character) becomes U+FFFD. */
export function xmlEscape(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&apos;').replace(NOT_XML_CHAR, '\uFFFD');
}

/**
 * JSON as the text of an XHTML element: `<`, `&` and `>` (so no `]]>`) as \u escapes, and the characters XML
 * cannot carry that JSON.stringify leaves raw (U+FFFE, U+FFFF) too; the text parses to the same value.
 */
function jsonText(value: unknown): string {
  return JSON.stringify(value).replace(/[<>&\uFFFE\uFFFF]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

function lossChart(log: RunLog): ChartSpec {
  const x = { field: 'step', type: 'quantitative' as const, title: 'step' };
  const y = { field: 'value', type: 'quantitative' as const, title: 'BCE loss', scale: { zero: false } };
  const color = { field: 'series', type: 'nominal' as const, title: null, scale: { domain: ['training loss', 'held-out logloss'] } };
  // points that stand for several steps: the band of their lowest and highest step loss behind the mean
  const spans = log.steps.filter((s) => s.steps > 1);
  const band = spans.length
    ? [{
        data: { values: log.steps.map((s) => ({ step: s.step, low: s.lossMin, high: s.lossMax, series: 'training loss' })) },
        mark: { type: 'area' as const, opacity: 0.25 },
        encoding: { x, y: { field: 'low', type: 'quantitative' as const, title: 'BCE loss', scale: { zero: false } }, y2: { field: 'high' }, color },
      }]
    : [];
  return {
    width: W, height: H, title: spans.length ? 'Loss (training: mean of each span of steps, band: its min–max)' : 'Loss',
    layer: [
      ...band,
      { data: { values: log.steps.map((s) => ({ step: s.step, value: s.loss, series: 'training loss' })) }, mark: { type: 'line', strokeWidth: 1 }, encoding: { x, y, color } },
      { data: { values: log.evals.map((e) => ({ step: e.step, value: e.logloss, series: 'held-out logloss' })) }, mark: { type: 'line', point: true, strokeWidth: 2 }, encoding: { x, y, color } },
    ],
  };
}

/** The 98th percentile of the points' total time (data wait included): the time chart's ceiling. */
function timeCeiling(log: RunLog): number {
  const totals = log.steps.map((s) => s.times.total + s.times.dataWait).sort((a, b) => a - b);
  return totals.length ? totals[Math.min(totals.length - 1, Math.floor(0.98 * totals.length))]! : 1;
}

function aucChart(log: RunLog): ChartSpec {
  return {
    width: W, height: H, title: 'Held-out AUC', data: { values: log.evals.map((e) => ({ step: e.step, auc: e.auc })) },
    mark: { type: 'line', point: true },
    encoding: {
      x: { field: 'step', type: 'quantitative', title: 'step' },
      y: { field: 'auc', type: 'quantitative', title: 'AUC', scale: { zero: false } },
    },
  };
}

function timeChart(log: RunLog): ChartSpec {
  const values = log.steps.flatMap((s) => PARTS.map(([k, label]) => ({ step: s.step, part: label, ms: s.times[k] })));
  const ceiling = timeCeiling(log);
  const max = Math.max(0, ...log.steps.map((s) => s.times.total + s.times.dataWait));
  const clipped = max > ceiling * 1.05;
  // the slowest step itself (a point of several steps shows their mean)
  const slowest = log.stepTotals?.slowest.ms ?? max;
  const what = log.steps.some((s) => s.steps > 1) ? 'Mean time per step by part' : 'Time per step by part';
  return {
    width: W, height: H, title: clipped ? `${what} (clipped at the 98th percentile, ${ceiling.toFixed(1)} ms; slowest step ${slowest.toFixed(0)} ms)` : what,
    data: { values },
    mark: { type: 'area', clip: true },
    encoding: {
      x: { field: 'step', type: 'quantitative', title: 'step' },
      y: { field: 'ms', type: 'quantitative', title: 'ms', stack: 'zero', ...(clipped ? { scale: { domain: [0, ceiling] } } : {}) },
      color: { field: 'part', type: 'nominal', title: null, sort: PARTS.map((p) => p[1]) },
      order: { field: 'part', sort: 'ascending' },
    },
  };
}

function throughputChart(log: RunLog): ChartSpec {
  return {
    width: W, height: H, title: 'Throughput', data: { values: log.steps.map((s) => ({ elapsed: s.elapsed, samplesPerSec: s.samplesPerSec })) },
    mark: { type: 'line', strokeWidth: 1 },
    encoding: {
      x: { field: 'elapsed', type: 'quantitative', title: 'seconds since start' },
      y: { field: 'samplesPerSec', type: 'quantitative', title: 'samples/s (per step; a span of steps: their mean)' },
    },
  };
}

/** What the steps' totals and the charts' points are, in words; undefined for a log without totals. */
function stepsLine(log: RunLog): string | undefined {
  const t = log.stepTotals;
  if (!t) return undefined;
  const widest = Math.max(1, ...log.steps.map((s) => s.steps));
  const charts = widest === 1 ? 'the charts show every step' : `the charts show ${log.steps.length} points, each the mean of up to ${widest} consecutive steps`;
  return `${t.count.toLocaleString('en-US')} steps (${t.firstStep} to ${t.last.step}): mean loss ${t.meanLoss.toFixed(4)} (min ${t.minLoss.toFixed(4)}, max ${t.maxLoss.toFixed(4)}), ` +
    `last step's loss ${t.last.loss.toFixed(4)}, slowest step ${t.slowest.step} (${t.slowest.ms.toFixed(1)} ms); ${charts}.`;
}

/** The report as one XHTML document. */
export async function trainReportHtml(log: RunLog): Promise<string> {
  const charts = [lossChart(log)];
  if (log.evals.length) charts.push(aucChart(log));
  charts.push(timeChart(log), throughputChart(log));
  const svgs = await Promise.all(charts.map(renderSvg));
  const facts = log.facts.map(([k, v]) => `<tr><th>${xmlEscape(k)}</th><td>${xmlEscape(v)}</td></tr>`).join('\n');
  const totals = stepsLine(log);
  const data = jsonText(log);
  return `<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" lang="en">
<head>
<meta charset="utf-8"/>
<title>${xmlEscape(log.title)}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { text-align: left; padding: 0.2em 1em 0.2em 0; vertical-align: top; }
th { font-weight: 600; }
figure { margin: 0 0 1.5em 0; }
</style>
</head>
<body>
<h1>${xmlEscape(log.title)}</h1>
<table>
${facts}
</table>
${totals ? `<p id="embshard-steps">${xmlEscape(totals)}</p>\n` : ''}${svgs.map((s) => `<figure>${s}</figure>`).join('\n')}
<script type="application/json" id="embshard-run">${data}</script>
</body>
</html>
`;
}

// vega.ts — renders a Vega-Lite chart to a standalone SVG string in Node (vega's headless 'none' renderer:
// no browser, no canvas, no network), the one way lib/report draws pictures.
import { View, parse } from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';

export type ChartSpec = TopLevelSpec;

/** The SVG of a Vega-Lite spec whose data are inline values. */
export async function renderSvg(spec: ChartSpec): Promise<string> {
  const view = new View(parse(compile(spec).spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

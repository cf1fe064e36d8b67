// vega.ts — renders a Vega-Lite chart to a standalone SVG string in Node (vega's headless 'none' renderer:
// no browser, no canvas, no network), the one way lib/report draws pictures.
import { View, parse } from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';

export type ChartSpec = TopLevelSpec;

/** Characters XML 1.0 allows nowhere, not even as character references (controls, U+FFFE / U+FFFF, lone surrogates). */
export const NOT_XML_CHAR = /[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/gu;

/**
 * The SVG of a Vega-Lite spec whose data are inline values. Vega escapes markup in the chart's text; a
 * character XML cannot carry (a control character in a title or a table name) becomes U+FFFD.
 */
export async function renderSvg(spec: ChartSpec): Promise<string> {
  const view = new View(parse(compile(spec).spec), { renderer: 'none' });
  try {
    return (await view.toSVG()).replace(NOT_XML_CHAR, '\uFFFD');
  } finally {
    view.finalize();
  }
}

// pictures.test.ts — `embshard train --report` and `embshard plan --svg`: the files are produced, parse as
// well-formed XML, carry no external resources or executable scripts, and the marks' data (vega writes
// each mark's values into its aria-label) are the run's numbers: the per-step losses average to the
// summary's final loss, the last AUC point is the summary's held-out AUC, the memory bars are the cost
// model's per-rank memory. Odd runs and names (no steps, one step, NaN / Infinity metrics, markup, `]]>` and
// control characters in titles, facts and table names) still give well-formed XML by the XML 1.0 rules
// (fast-xml-parser, plus the spec's character range and no `]]>` in content), whose text and embedded
// JSON are the names and numbers given.
import { describe, it, expect, vi, afterEach } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { XMLParser, XMLValidator } from 'fast-xml-parser';
import { trainReportHtml, planSvg, type RunLog } from '../../lib/report/index.js';
import { planShards, topologyPreset } from '../../lib/plan/index.js';
import { runTrain } from '../../lib/cli/train.js';
import { runPlan } from '../../lib/cli/plan.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { estimatePlan } from '../../lib/plan/cost-model.js';

afterEach(() => vi.restoreAllMocks());

/** aria-labels of the single-datum marks (points, bars; not whole lines or areas), as field → value maps. */
function marks(xml: string): Record<string, string>[] {
  return [...xml.matchAll(/aria-label="([^"]*)" role="graphics-symbol" aria-roledescription="([^"]*)"/g)]
    .filter((m) => !/line|area/.test(m[2]!))
    .map((m) => m[1]!)
    .map((l) => Object.fromEntries(l.split('; ').map((kv) => [kv.slice(0, kv.indexOf(': ')), kv.slice(kv.indexOf(': ') + 2)])));
}

function wellFormed(xml: string): void {
  const v = XMLValidator.validate(xml);
  expect(v, JSON.stringify(v)).toBe(true);
  expect(xml).not.toMatch(/<script(?![^>]*type="application\/json")/);
  expect(xml).not.toMatch(/\s(src|href)="https?:/);
  expect(xml).not.toMatch(/<link\b/);
}

describe('pictures', () => {
  it('embshard train --report writes a self-contained report whose curves are the run’s numbers', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-report-'));
    try {
      const out: string[] = [];
      vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void out.push(a.join(' ')));
      vi.spyOn(console, 'error').mockImplementation(() => undefined);
      const file = join(dir, 'run.html');
      const rc = await runTrain([
        '--model', 'custom', '--bottom', '13-16-8', '--top', '16-1', '--data', 'synthetic', '--max-rows', '300',
        '--steps', '60', '--batch', '128', '--lr', '0.05', '--eval-every', '20', '--eval-batches', '2', '--report', file, '--quiet',
      ]);
      expect(rc).toBe(0);
      const text = out.join('\n');
      const html = readFileSync(file, 'utf8');
      wellFormed(html);
      expect((html.match(/<svg\b/g) ?? []).length).toBe(4);
      const m = marks(html);
      const data = JSON.parse(/<script type="application\/json" id="embshard-run">(.*?)<\/script>/s.exec(html)![1]!);
      const losses = data.steps.map((s: { loss: number }) => s.loss) as number[];
      expect(losses.length).toBe(60);
      expect(data.stepTotals.count).toBe(60);
      expect(data.stepTotals.meanLoss).toBeCloseTo(losses.reduce((s, x) => s + x, 0) / 60, 9);
      const final = Number(/final loss \(mean of the last 50 steps\): ([0-9.]+)/.exec(text)![1]);
      expect(losses.slice(-50).reduce((s, x) => s + x, 0) / 50).toBeCloseTo(final, 4);
      const aucs = m.filter((x) => x.AUC !== undefined);
      expect(aucs.map((x) => Number(x.step))).toEqual([20, 40, 60]);
      expect(Number(aucs[2]!.AUC)).toBeCloseTo(Number(/held-out: AUC ([0-9.]+)/.exec(text)![1]), 4);
      // the held-out logloss points are the evaluations' logloss
      const ll = m.filter((x) => x.series === 'held-out logloss').map((x) => Number(x['BCE loss']));
      expect(ll.length).toBe(3);
      ll.forEach((v, i) => expect(v).toBeCloseTo(data.evals[i].logloss, 6));
      expect(Number(/held-out: AUC [0-9.]+, logloss ([0-9.]+)/.exec(text)![1])).toBeCloseTo(ll[2]!, 4);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('embshard plan --svg draws the plan: memory bars are the cost model’s per-rank memory', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-plansvg-'));
    try {
      vi.spyOn(console, 'log').mockImplementation(() => undefined);
      const svg = join(dir, 'plan.svg'), json = join(dir, 'plan.json');
      expect(await runPlan(['--model', 'criteo-kaggle', '--gpus', '8', '--out', json, '--svg', svg, '--time-budget-ms', '300'])).toBe(0);
      const xml = readFileSync(svg, 'utf8');
      wellFormed(xml);
      const plan = ShardPlan.fromJSON(readFileSync(json, 'utf8'));
      const memory = estimatePlan(plan).memory;
      const bars = marks(xml).filter((x) => x.GB !== undefined && x.rank !== undefined);
      expect(bars.map((b) => Number(b.rank))).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
      bars.forEach((b, r) => expect(Number(b.GB)).toBeCloseTo(memory[r]! / 1e9, 6));
      const tables = marks(xml).filter((x) => x.cluster !== undefined && x.table !== undefined);
      expect(tables.length).toBe(26);
      for (const t of tables) expect(t.cluster).toBe(plan.layouts[plan.tables.findIndex((x) => x.name === t.table)]!.cluster);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

/** XML 1.0's Char production: every code point a document may hold. */
const XML_CHAR = /^[\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]*$/u;

/** Well-formed by fast-xml-parser and by the rules it does not check: only XML characters, no `]]>` in content (no CDATA here). */
function strictlyWellFormed(xml: string): void {
  wellFormed(xml);
  expect(XML_CHAR.test(xml), 'a character outside XML 1.0 Char').toBe(true);
  expect(xml.includes('<![CDATA[')).toBe(false);
  expect(xml.includes(']]>'), ']]> in content').toBe(false);
}

describe('odd runs and names', () => {
  const odd = `a<b>&c"d'e ]]> \u0001\uFFFF z`;
  /** What XML can carry of a string: the characters outside XML 1.0 Char as U+FFFD. */
  const shown = (s: string) => [...s].map((c) => (XML_CHAR.test(c) ? c : '\uFFFD')).join('');
  const times = { embeddingForward: 1, denseForward: 2, denseBackward: 3, communication: 4, embeddingBackward: 5, denseUpdate: 6, total: 21, dataWait: 0.5 };
  const step = (i: number, o: Partial<RunLog['steps'][number]> = {}) => ({ step: i, steps: 1, elapsed: i / 10, loss: 0.5, lossMin: 0.5, lossMax: 0.5, samplesPerSec: 1000, times: { ...times }, ...o });
  const logs: [string, RunLog][] = [
    ['no steps', { title: 'empty', facts: [], steps: [], evals: [] }],
    ['one step', { title: 'one', facts: [['k', 'v']], steps: [step(0)], evals: [] }],
    ['markup, ]]> and control characters in the title and facts', { title: odd, facts: [[odd, `v]]>&<script>'`]], steps: [step(0), step(1)], evals: [{ step: 1, auc: 0.5, logloss: 0.7, samples: 4, evaluations: 1 }] }],
    ['NaN and Infinity metrics', { title: 'nan', facts: [], steps: [step(0, { loss: Number.NaN }), step(1, { loss: Infinity, samplesPerSec: Number.NaN }), step(2, { loss: -Infinity, times: { ...times, total: Infinity } })], evals: [{ step: 1, auc: Number.NaN, logloss: Infinity, samples: 3, evaluations: 1 }] }],
    ['huge step numbers', { title: 'huge', facts: [], steps: [step(1e15), step(1e15 + 1)], evals: [] }],
    ['points that are spans of steps', { title: 'spans', facts: [], steps: [step(4, { steps: 4, lossMin: 0.4, lossMax: 0.6 }), step(8, { steps: 4, lossMin: Number.NaN })], evals: [{ step: 8, auc: 0.6, logloss: 0.6, samples: 8, evaluations: 2 }] }],
  ];
  for (const [name, log] of logs)
    it(`the training report of a run with ${name}`, async () => {
      const html = await trainReportHtml(log);
      strictlyWellFormed(html);
      const doc = new XMLParser({ ignoreAttributes: false, parseTagValue: false, trimValues: false }).parse(html);
      expect(doc.html.head.title).toBe(shown(log.title));
      expect(doc.html.body.h1).toBe(shown(log.title));
      const rows = [doc.html.body.table?.tr ?? []].flat();
      expect(rows.map((r: { th: string; td: string }) => [r.th, r.td])).toEqual(log.facts.map(([k, v]) => [shown(k), shown(v)]));
      // the embedded JSON is the run log (as JSON holds it: NaN / Infinity as null)
      const data = /<script type="application\/json" id="embshard-run">(.*?)<\/script>/s.exec(html)![1]!;
      expect(JSON.parse(data)).toEqual(JSON.parse(JSON.stringify(log)));
    });

  it('the plan SVG of tables named with markup and control characters, and of many tables on many ranks', async () => {
    const topo = (w: number) => topologyPreset('dgx-h100', { worldSize: w });
    const named = planShards([0, 1, 2].map((i) => ({ name: `${odd}${i}`, rows: 1000 + i, dim: 16 })), topo(2), { batchSize: 64, timeBudgetMs: 200 });
    const svg = await planSvg(named, odd);
    strictlyWellFormed(svg);
    const labels = [...svg.matchAll(/aria-label="(table: [^"]*)"/g)].map((m) => new XMLParser({ ignoreAttributes: false }).parse(`<x a="${m[1]}"/>`).x['@_a'] as string);
    expect(labels.map((l) => l.slice('table: '.length, l.indexOf('; GB: '))).sort()).toEqual(named.tables.map((t) => shown(t.name)).sort());
    const many = planShards(Array.from({ length: 120 }, (_, i) => ({ name: `t${i}`, rows: 5000 + i, dim: 16 })), topo(64), { batchSize: 64, timeBudgetMs: 200 });
    const big = await planSvg(many);
    strictlyWellFormed(big);
    expect(marks(big).filter((x) => x.GB !== undefined && x.rank !== undefined).length).toBe(64);
    expect(marks(big).filter((x) => x.cluster !== undefined && x.table !== undefined).length).toBe(120);
  }, 60_000);
});

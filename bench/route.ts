// bench/route.ts — the first stage of a sharded forward alone: route() (lib/sharded/routing.ts, one native
// call per batch) on both ranks of a 2-rank plan whose tables (one feature each) are in turn row-split rb,
// row-split ub, dp, and rb with replicated and node hot-row tiers; bags of 0–3 skewed ids, for F features
// and batch size B. Per (F, B): the median wall time of one rank's call and the process CPU time per call
// (garbage collection included), and that per feature. The batches are made (and their lengths checked)
// before timing. Beside it, in turn, the same routing done per feature (one native segment call per
// feature, then one unique call per ub row group and node tier, as the native ops allow on their own):
// the ratio of the two is what one call per batch saves, measured in the same run.
// `node dist/bench/route.js` writes bench/results/route.json and bench/results/route.md.
import { JaggedBatch } from '../lib/batch.js';
import { ShardPlan } from '../lib/plan/shard-plan.js';
import { LocalLayout } from '../lib/sharded/local-layout.js';
import { route } from '../lib/sharded/routing.js';
import { exchangeOps } from '../lib/sharded/exchange-ops.js';
import { concat } from '../lib/sharded/arrays.js';
import { loadavg } from 'node:os';
import { benchArgs, envInt, envInts, machine, table, writeResults } from './report.js';

benchArgs(`usage: node dist/bench/route.js
Times route() on both ranks of a 2-rank plan, and the same routing feature by feature beside it. Writes bench/results/route.{json,md}. EMBSHARD_BENCH_FEATURES
(default 26,200), EMBSHARD_BENCH_BATCHES (default 128,2048) and EMBSHARD_BENCH_MS (per case, default 1500)
change the run.`);

const FEATURES = envInts('EMBSHARD_BENCH_FEATURES', [26, 200]);
const BATCHES = envInts('EMBSHARD_BENCH_BATCHES', [128, 2048]);
const BUDGET_MS = envInt('EMBSHARD_BENCH_MS', 1500);
const W = 2, ROWS = 100_000, DIM = 16;

function planFor(F: number, B: number): ShardPlan {
  const topology = { name: 'cpu-local', worldSize: W, ranksPerNode: W, deviceMemoryBytes: 1e12, memoryLimitBytes: 1e12, hbmBandwidth: 1e10, intraNodeBandwidth: 1e10, interNodeBandwidth: 1e10 };
  // two row groups over [a, ROWS), one per rank
  const split = (a: number) => [0, 1].map((k) => ({ rows: [a + Math.floor(((ROWS - a) * k) / 2), a + Math.floor(((ROWS - a) * (k + 1)) / 2)] as [number, number], cols: [0, DIM] as [number, number], rank: k }));
  const tables = Array.from({ length: F }, (_, i) => {
    const table = { name: `t${i}`, rows: ROWS, dim: DIM, pooling: 'sum' as const, features: [`f${i}`] };
    if (i % 4 === 0) return { table, cluster: 'rb' as const, shards: split(0) };
    if (i % 4 === 1) return { table, cluster: 'ub' as const, shards: split(0) };
    if (i % 4 === 2) return { table, cluster: 'dp' as const };
    return { table, cluster: 'rb' as const, tiers: { replicated: 64, node: 256 }, shards: split(320) };
  });
  return ShardPlan.create({ topology, batchSize: B, tables });
}

/** Bags of 0–3 ids, skewed to low rows (hot ones first), seeded. */
function batchFor(F: number, B: number, seed: number): JaggedBatch {
  let s = (seed * 7919 + 1) >>> 0;
  const next = () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296;
  const lengths = new Int32Array(F * B);
  let n = 0;
  for (let i = 0; i < lengths.length; i++) n += lengths[i] = Math.floor(next() * 4);
  const ids = new BigInt64Array(n);
  for (let i = 0; i < n; i++) ids[i] = BigInt(Math.floor(ROWS * next() ** 3));
  const batch = JaggedBatch.fromLengths({ features: Array.from({ length: F }, (_, i) => `f${i}`), batchSize: B, lengths, ids });
  void batch.offsets; // the lengths' check, once per batch, outside the timing
  return batch;
}

/** The same routing, feature by feature: one native segment call per feature, one unique call per ub row group and node tier. */
function perFeature(L: LocalLayout, batch: JaggedBatch): number {
  const K = exchangeOps();
  const B = batch.batchSize;
  const segs = new Map<string, { ids: BigInt64Array; counts: Float64Array }>();
  for (const rt of L.tables)
    for (const f of rt.features) {
      const fv = batch.feature(f);
      segs.set(f, K.segment(fv.ids, fv.lengths, fv.weights ?? null, rt.bounds, `feature '${f}'`, rt.hashCapacity));
    }
  // the ids of range s of a table's features, concatenated
  const rangeIds = (features: readonly string[], s: number) =>
    concat(features.map((f) => {
      const g = segs.get(f)!;
      let a = 0;
      for (let k = 0; k < s; k++) a += g.counts[k]!;
      return g.ids.subarray(a, a + g.counts[s]!);
    }), BigInt64Array);
  let n = 0;
  for (const rt of L.tables) {
    if (rt.cluster === 'ub') rt.groups.forEach((_, gi) => (n += K.unique(rangeIds(rt.features, 2 + gi), 1).values.length));
    if (rt.N > 0) n += K.unique(rangeIds(rt.features, 1), L.rpn).values.length;
  }
  return n + B;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
const rows: { F: number; B: number; calls: number; wallUs: number; baseUs: number }[] = [];
const load = loadavg()[0]!;
for (const F of FEATURES)
  for (const B of BATCHES) {
    const plan = planFor(F, B);
    const layouts = [0, 1].map((r) => new LocalLayout(plan, r));
    const batches = [1, 2, 3, 4].map((k) => batchFor(F, B, k));
    for (let i = 0; i < 10; i++) for (const L of layouts) route(L, batches[i % 4]!);
    for (let i = 0; i < 10; i++) for (const L of layouts) perFeature(L, batches[i % 4]!);
    // the two in turn, call by call, so both meet the same machine
    const wall: number[] = [], base: number[] = [];
    const t0 = performance.now();
    for (let it = 0; performance.now() - t0 < 2 * BUDGET_MS || it < 20; it++)
      for (const L of layouts) {
        const a = performance.now();
        route(L, batches[it % 4]!);
        const b = performance.now();
        perFeature(L, batches[it % 4]!);
        wall.push(b - a);
        base.push(performance.now() - b);
      }
    rows.push({ F, B, calls: wall.length, wallUs: median(wall) * 1000, baseUs: median(base) * 1000 });
  }

const m = machine();
const md = [
  '# route(): one rank of a 2-rank plan, one native call per batch, against the same routing feature by feature',
  '',
  `${m.cpu}, ${m.cores} cores, Node ${m.node}; 1-minute load average ${load.toFixed(2)} when the run began (a shared machine: compare the ratio, measured call by call in turn).`,
  '',
  table(
    ['features', 'batch', 'calls each', 'one call: µs (median)', 'µs / feature', 'per feature: µs (median)', 'µs / feature', 'speed-up'],
    rows.map((r) => [r.F, r.B, r.calls, r.wallUs, r.wallUs / r.F, r.baseUs, r.baseUs / r.F, `${(r.baseUs / r.wallUs).toFixed(2)}×`]),
  ),
].join('\n');
writeResults('route', { machine: m, loadAverage: load, rows }, md);

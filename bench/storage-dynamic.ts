// storage-dynamic.ts — `npm run bench:dynamic [-- --quick]`: a dynamic table's training step (lookup +
// update: id translation, admission, eviction, forward, backward) against a dense table of the same size
// on the same access pattern. Config: 4 tables, dim 64 fp32, batch 4096, 16 ids per bag, sum pooling,
// adagrad; ids from a space of 500,000 per table (quick: 100,000). Dense ids are the ids modulo the rows;
// the dynamic table gets the ids scrambled into raw 64-bit values (a bijection), as BigInt64Array for
// both. Cases: uniform and Zipf 1.05 ids with as many rows as ids (4 batches cycled: after warm-up every
// id is held), and Zipf 1.05 with a tenth as many rows as ids (a fresh batch per step: the table fills
// during the warm-up, then admits and evicts every step). Dense and dynamic steps alternate within one run, so
// their ratio (the form of the target: ≥ 60% of the dense step rate) holds on a loaded machine.
import { EmbeddingCollection, JaggedBatch } from '../lib/index.js';
import type { TableConfig } from '../lib/index.js';
import { Rng } from '../lib/random/rng.js';
import { zipfParams, zipfRank } from '../lib/random/zipf.js';
import { benchArgs, machine, table, writeResults } from './report.js';

const quick = benchArgs(`usage: node dist/bench/storage-dynamic.js [--quick]   (npm run bench:dynamic [-- --quick])
A dynamic table's training step against a dense table of the same size on the same access pattern.
Writes bench/results/storage-dynamic.{json,md}. --quick: 100,000 ids per table.`, { flags: ['--quick'] }).flags.has('--quick');
const T = 4, ROWS = quick ? 100_000 : 500_000, DIM = 64, B = 4096, L = 16;
const ITERS = quick ? 4 : 8;
const WARM = 6;
const TARGET = 0.6;
const SCRAMBLE = 0x9e3779b97f4a7c15n; // odd: multiplication mod 2^64 is a bijection

interface Case { name: string; dist: 'uniform' | number; rows: number; space: number }

/** Batches of the dense table (ids mod rows) and of the dynamic one (the full id, scrambled). */
function batches(c: Case, count: number, seed: number): { dense: JaggedBatch[]; dynamic: JaggedBatch[] } {
  const g = new Rng(seed);
  const r = () => g.float();
  const zp = typeof c.dist === 'number' ? zipfParams(c.space, c.dist) : undefined;
  const features = Array.from({ length: T }, (_, t) => `f${t}`);
  const lengths = new Int32Array(T * B).fill(L);
  const dense: JaggedBatch[] = [], dynamic: JaggedBatch[] = [];
  for (let k = 0; k < count; k++) {
    const n = T * B * L;
    const d = new BigInt64Array(n), y = new BigInt64Array(n);
    for (let i = 0; i < n; i++) {
      const id = zp ? zipfRank(zp, r()) : Math.floor(r() * c.space);
      d[i] = BigInt(id % c.rows);
      y[i] = BigInt.asIntN(64, BigInt(id + 1) * SCRAMBLE);
    }
    dense.push(JaggedBatch.fromLengths({ features, batchSize: B, lengths, ids: d }));
    dynamic.push(JaggedBatch.fromLengths({ features, batchSize: B, lengths, ids: y }));
  }
  return { dense, dynamic };
}

function collection(dynamic: boolean, rows: number): EmbeddingCollection {
  const tables: TableConfig[] = Array.from({ length: T }, (_, t) => ({
    name: `t${t}`, dim: DIM, features: [`f${t}`], ...(dynamic ? { rows: 'dynamic' as const, capacity: rows } : { rows }),
  }));
  return new EmbeddingCollection({ tables, optimizer: { type: 'adagrad', lr: 0.01 }, seed: 1 });
}

async function step(ec: EmbeddingCollection, b: JaggedBatch, grad: Float32Array): Promise<number> {
  const t0 = performance.now();
  await ec.backward(await ec.forward(b), { pooled: grad });
  return performance.now() - t0;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

const cases: Case[] = [
  { name: `uniform, ${ROWS} ids, ${ROWS} rows`, dist: 'uniform', rows: ROWS, space: ROWS },
  { name: `Zipf 1.05, ${ROWS} ids, ${ROWS} rows`, dist: 1.05, rows: ROWS, space: ROWS },
  // a table that fills within the warm-up, then admits and evicts every step
  { name: `Zipf 1.05, ${ROWS} ids, ${ROWS / 10} rows`, dist: 1.05, rows: ROWS / 10, space: ROWS },
];
const results: Record<string, unknown>[] = [];
for (const [ci, c] of cases.entries()) {
  // within capacity: 4 batches cycled (after warm-up every id is held); beyond it: a fresh batch per step
  const n = c.space > c.rows ? WARM + ITERS : 4;
  const bs = batches(c, n, 11 + ci);
  const dense = collection(false, c.rows), dyn = collection(true, c.rows);
  const grad = new Float32Array(B * dense.pooledDim).fill(1e-3);
  for (let i = 0; i < WARM; i++) {
    await step(dense, bs.dense[i % n]!, grad);
    await step(dyn, bs.dynamic[i % n]!, grad);
  }
  const s0 = Object.values(dyn.stats());
  const dt: number[] = [], yt: number[] = [];
  for (let i = 0; i < ITERS; i++) {
    dt.push(await step(dense, bs.dense[(WARM + i) % n]!, grad));
    yt.push(await step(dyn, bs.dynamic[(WARM + i) % n]!, grad));
  }
  const s1 = Object.values(dyn.stats());
  const sum = (xs: typeof s0, k: 'hits' | 'misses' | 'admissions' | 'evictions') => xs.reduce((a, s) => a + s[k], 0);
  const hits = sum(s1, 'hits') - sum(s0, 'hits'), misses = sum(s1, 'misses') - sum(s0, 'misses');
  const denseMs = median(dt), dynMs = median(yt);
  results.push({
    case: c.name, denseStepMs: denseMs, dynamicStepMs: dynMs, ratio: denseMs / dynMs, hitRate: hits / (hits + misses),
    evictionsPerStep: (sum(s1, 'evictions') - sum(s0, 'evictions')) / ITERS, admissionsPerStep: (sum(s1, 'admissions') - sum(s0, 'admissions')) / ITERS,
  });
  dense.dispose();
  dyn.dispose();
}

const md = [
  `## Dynamic tables: training step against a dense table of the same size`,
  ``,
  `${T} tables, dim ${DIM} fp32, batch ${B}, ${L} ids per bag, adagrad; median of ${ITERS} alternating steps after ${WARM} warm-up steps.`,
  `Target: the dynamic step rate ≥ ${TARGET * 100}% of the dense one.`,
  ``,
  table(
    ['ids', 'dense step ms', 'dynamic step ms', 'dynamic / dense rate', 'hit rate', 'admissions / step', 'evictions / step', 'target'],
    results.map((r) => [
      r.case as string, r.denseStepMs as number, r.dynamicStepMs as number, `${((r.ratio as number) * 100).toFixed(0)}%`, `${((r.hitRate as number) * 100).toFixed(1)}%`,
      r.admissionsPerStep as number, r.evictionsPerStep as number, (r.ratio as number) >= TARGET ? 'met' : 'missed',
    ]),
  ),
].join('\n');
writeResults('storage-dynamic', { machine: machine(), config: { T, ROWS, DIM, B, L, ITERS, WARM, optimizer: 'adagrad' }, target: TARGET, results }, md);

// bench/herald.ts — `npm run bench:herald`: embedding transmissions per step of Herald scheduling on the
// Criteo Kaggle workload (26 Zipf tables, one id per table per sample, dim 16, Adagrad state moving with
// its row) at 4, 8 and 64 ranks, counted exactly by the scheduler that drives training (no kernels run):
// Herald's allocation vs random sample placement with the same caches vs no cache (every remote row copied
// to its reader and its gradient sent back) vs the best static plan (the planner's, bytes by
// measureTraffic on the same samples). Then steps/s of HeraldEmbeddingCollection at 4 MPI ranks
// (bench/herald-rank.ts under mpirun), each schedule measured in one run beside the others. Writes
// bench/results/herald.json and bench/results/herald.md, and prints the markdown.
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stateWidth } from '../lib/config.js';
import { HeraldScheduler, type StepCounts } from '../lib/herald/scheduler.js';
import type { HeraldTable } from '../lib/herald/owners.js';
import { takeSparse } from '../lib/data/take.js';
import { planShards } from '../lib/plan/planner.js';
import { topologyPreset } from '../lib/plan/topology.js';
import { measureTraffic } from '../lib/plan/traffic.js';
import { generateBatch } from '../lib/workloads/generator.js';
import { workload } from '../lib/workloads/presets.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = here.endsWith(join('dist', 'bench')) ? join(here, '..', '..') : join(here, '..');
const outDir = join(root, 'bench', 'results');

const RANKS = (process.env.EMBSHARD_BENCH_RANKS ?? '4,8,64').split(',').map(Number);
/** samples per rank (Herald's reference runs use 256) */
const BATCH = Number(process.env.EMBSHARD_BENCH_BATCH ?? 256);
/** cache slots per rank per table */
const CACHE = Number(process.env.EMBSHARD_BENCH_CACHE ?? 1024);
/** steps that fill the caches before counting, and steps counted */
const WARM = Number(process.env.EMBSHARD_BENCH_WARM ?? 40);
const STEPS = Number(process.env.EMBSHARD_BENCH_STEPS ?? 5);
const MPI = process.env.EMBSHARD_BENCH_MPI !== '0';
const SEED = 2024;
const OPTIMIZER = 'adagrad' as const;

interface Row {
  ranks: number;
  mode: string;
  rowsPerStep: number;
  bytesPerStep: number;
  movesPerStep: number;
  copiesPerStep: number;
  gradsPerStep: number;
  hitRate: number | null;
  /** transmissions saved vs random placement with the same caches */
  vsRandom: number | null;
  scheduleMs: number | null;
}

const W0 = workload('criteo-kaggle');
/** the preset's description without its optimizer (this bench counts Adagrad's state) */
const DESCRIPTION = W0.description.replace(', SGD', '');
const tables: HeraldTable[] = W0.tables.map((t) => ({ name: t.name, rows: t.rows, dim: t.dim, stateWidth: stateWidth(OPTIMIZER, t.dim), features: t.features ?? [t.name] }));
const dim = tables[0]!.dim;

function countMode(W: number, allocation: 'herald' | 'random', cacheRows: number): { c: StepCounts; ms: number } {
  const s = new HeraldScheduler(tables, { world: W, batchSize: BATCH, cacheRows, allocation, seed: SEED });
  const sum: StepCounts = { moves: 0, evictions: 0, copies: 0, grads: 0, rows: 0, bytes: 0, reads: 0, hits: 0, score: 0 };
  let ms = 0;
  for (let step = 0; step < WARM + STEPS; step++) {
    const g = generateBatch(W0, 0, { batchSize: W * BATCH, seed: SEED, step });
    const t0 = performance.now();
    const p = s.schedule(g);
    if (step < WARM) continue;
    ms += performance.now() - t0;
    for (const k of Object.keys(sum) as (keyof StepCounts)[]) sum[k] += p.counts[k] / STEPS;
  }
  return { c: sum, ms: ms / STEPS };
}

function staticPlan(W: number): { bytes: number } {
  const specs = W0.tables.map((t) => ({ ...t, optimizer: OPTIMIZER }));
  const plan = planShards(specs, topologyPreset('dgx-h100', { worldSize: W }), { batchSize: BATCH, maxIterations: 2000, timeBudgetMs: Number.POSITIVE_INFINITY });
  const n = Math.min(STEPS, 3);
  let bytes = 0;
  for (let k = 0; k < n; k++) {
    const g = generateBatch(W0, 0, { batchSize: W * BATCH, seed: SEED, step: WARM + k });
    const locals = Array.from({ length: W }, (_, r) => takeSparse(g, Int32Array.from({ length: BATCH }, (_, j) => r * BATCH + j)));
    const t = measureTraffic(plan, locals).totals;
    bytes += (t.forward.intra + t.forward.inter + t.backward.intra + t.backward.inter) / n;
  }
  return { bytes };
}

const rows: Row[] = [];
for (const W of RANKS) {
  const her = countMode(W, 'herald', CACHE);
  const rnd = countMode(W, 'random', CACHE);
  const none = countMode(W, 'random', 0);
  const st = staticPlan(W);
  const row = (mode: string, x: { c: StepCounts; ms: number }, vs: boolean): Row => ({
    ranks: W, mode, rowsPerStep: x.c.rows, bytesPerStep: x.c.bytes, movesPerStep: x.c.moves, copiesPerStep: x.c.copies, gradsPerStep: x.c.grads,
    hitRate: x.c.reads ? x.c.hits / x.c.reads : null, vsRandom: vs ? 1 - x.c.rows / rnd.c.rows : null, scheduleMs: x.ms,
  });
  rows.push(row('herald allocation', her, true), row('random placement, same caches', rnd, false), row('no cache', none, true));
  rows.push({
    ranks: W, mode: 'best static plan (planner)', rowsPerStep: st.bytes / (4 * dim), bytesPerStep: st.bytes, movesPerStep: 0, copiesPerStep: 0, gradsPerStep: 0,
    hitRate: null, vsRandom: 1 - st.bytes / (4 * dim) / rnd.c.rows, scheduleMs: null,
  });
  console.error(`${W} ranks: herald ${her.c.rows.toFixed(0)} rows/step, random ${rnd.c.rows.toFixed(0)}, no cache ${none.c.rows.toFixed(0)}, static ${(st.bytes / (4 * dim)).toFixed(0)} row-equivalents`);
}

/** steps/s at 4 MPI ranks: bench/herald-rank.ts under mpirun, every schedule in one run */
let speed: Record<string, unknown>[] = [];
if (MPI) {
  const r = spawnSync('mpirun', ['--allow-run-as-root', '--oversubscribe', '-np', '4', process.execPath, join(root, 'dist', 'bench', 'herald-rank.js')], {
    cwd: root, encoding: 'utf8', env: { ...process.env, OMPI_ALLOW_RUN_AS_ROOT: '1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1' }, timeout: 600_000,
  });
  for (const l of (r.stdout ?? '').split('\n')) if (l.startsWith('{')) speed.push(JSON.parse(l) as Record<string, unknown>);
  if (!speed.length) console.error(`herald-rank under mpirun gave no result: ${r.stderr?.slice(-2000)}`);
}

const setup = {
  workload: DESCRIPTION, batchPerRank: BATCH, cacheRowsPerTable: CACHE, optimizer: OPTIMIZER, warmSteps: WARM, countedSteps: STEPS,
  note: 'transmissions are rows moved between ranks per step (value + state moves, value copies, gradient rows); static plans send pooled rows, counted as bytes / (4 · dim) row-equivalents',
};
mkdirSync(outDir, { recursive: true });
writeFileSync(join(outDir, 'herald.json'), JSON.stringify({ setup, rows, speed }, null, 2) + '\n');
const pct = (x: number | null) => (x === null ? '–' : `${(100 * x).toFixed(1)}%`);
const md = [
  '# Herald embedding scheduling',
  '',
  `${DESCRIPTION}; ${BATCH} samples per rank; ${CACHE.toLocaleString()} cache rows per rank per table; ${OPTIMIZER} (its state moves with a row); ` +
    `${WARM} steps fill the caches, then ${STEPS} steps are counted. Counts are exact (the scheduler that drives training, run alone).`,
  '',
  '| ranks | placement | transmissions / step (rows) | bytes / step | moves | copies | gradients | local reads | fewer than random | schedule ms / step |',
  '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ...rows.map((r) =>
    `| ${r.ranks} | ${r.mode} | ${Math.round(r.rowsPerStep).toLocaleString()} | ${Math.round(r.bytesPerStep).toLocaleString()} | ${Math.round(r.movesPerStep).toLocaleString()} | ` +
      `${Math.round(r.copiesPerStep).toLocaleString()} | ${Math.round(r.gradsPerStep).toLocaleString()} | ${pct(r.hitRate)} | ${pct(r.vsRandom)} | ${r.scheduleMs === null ? '–' : r.scheduleMs.toFixed(0)} |`,
  ),
  '',
  'Static plans send pooled partial sums, not rows: their column gives bytes / (4 · dim).',
  '',
  ...(speed.length
    ? [
        '## Steps/s at 4 MPI ranks (CPU)',
        '',
        '| schedule | steps/s | samples/s | transmissions / step |',
        '|---|---:|---:|---:|',
        ...speed.map((s) => `| ${String(s.mode)} | ${Number(s.stepsPerSec).toFixed(2)} | ${Math.round(Number(s.samplesPerSec)).toLocaleString()} | ${s.rowsPerStep === undefined ? '–' : Math.round(Number(s.rowsPerStep)).toLocaleString()} |`),
        '',
        String(speed[0]?.note ?? ''),
      ]
    : []),
];
writeFileSync(join(outDir, 'herald.md'), md.join('\n') + '\n');
console.log(md.join('\n'));

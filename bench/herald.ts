// bench/herald.ts — `npm run bench:herald`: embedding transmissions per step of Herald scheduling on the
// Criteo Kaggle workload (26 Zipf tables, one id per table per sample, dim 16, Adagrad state moving with
// its row) at 4, 8 and 64 ranks, counted exactly by the scheduler that drives training (no kernels run), on
// two workloads from the synthetic source: i.i.d. samples, and samples with session locality (a share of
// the features repeating per user session, synthetic-sessions.ts). Modes: Herald's allocation vs random
// sample placement with the same caches and the same communication plan vs caches without scheduling
// (random placement, every stale or missing row pulled and every remote row's gradient pushed: the
// baseline Herald's reductions are quoted against, cache-baseline.ts) vs no cache (every remote row copied
// to its reader and its gradient sent back) vs the best static plan (the planner's, bytes by measureTraffic
// on the same samples). Then steps/s of HeraldEmbeddingCollection at 4 MPI ranks (bench/herald-rank.ts
// under mpirun), each schedule measured in one run beside the others. Writes bench/results/herald.json and
// bench/results/herald.md, and prints the markdown.
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { JaggedBatch } from '../lib/batch.js';
import { stateWidth } from '../lib/config.js';
import { resolveSynthetic, SyntheticGenerator } from '../lib/data/synthetic.js';
import type { SessionOptions } from '../lib/data/synthetic-sessions.js';
import { CacheBaseline } from '../lib/herald/cache-baseline.js';
import { HeraldScheduler, type StepCounts } from '../lib/herald/scheduler.js';
import type { HeraldTable } from '../lib/herald/owners.js';
import { takeSparse } from '../lib/data/take.js';
import { planShards } from '../lib/plan/planner.js';
import { topologyPreset } from '../lib/plan/topology.js';
import { measureTraffic } from '../lib/plan/traffic.js';
import { workload } from '../lib/workloads/presets.js';
import { benchArgs, envInt, envInts } from './report.js';

benchArgs(`usage: node dist/bench/herald.js   (npm run bench:herald)
Embedding transmissions per step of Herald scheduling against random placement, plain caches, no cache and
the best static plan; then steps/s at 4 MPI ranks (EMBSHARD_BENCH_MPI=0 leaves them out). Writes
bench/results/herald.{json,md}. EMBSHARD_BENCH_RANKS, _BATCH, _CACHE, _WARM and _STEPS change the run.`);

const here = dirname(fileURLToPath(import.meta.url));
const root = here.endsWith(join('dist', 'bench')) ? join(here, '..', '..') : join(here, '..');
const outDir = join(root, 'bench', 'results');

const RANKS = envInts('EMBSHARD_BENCH_RANKS', [4, 8, 64]);
/** samples per rank (Herald's reference runs use 256) */
const BATCH = envInt('EMBSHARD_BENCH_BATCH', 256);
/** cache slots per rank per table; the larger ones only up to LARGE_MAX_RANKS ranks */
const CACHES = envInts('EMBSHARD_BENCH_CACHE', [1024, 16384]);
const LARGE_MAX_RANKS = 8;
/** steps that fill the caches before counting, and steps counted */
const WARM = envInt('EMBSHARD_BENCH_WARM', 40, 0);
const STEPS = envInt('EMBSHARD_BENCH_STEPS', 5);
const MPI = process.env.EMBSHARD_BENCH_MPI !== '0';
const SEED = 2024;
const OPTIMIZER = 'adagrad' as const;
/** the session-locality workload: 4,096 sessions open at a time, 8 samples each, half the features per session */
const SESSIONS: SessionOptions = { concurrent: 4096, samples: 8, share: 0.5 };

interface Row {
  workload: string;
  ranks: number;
  cacheRows: number;
  mode: string;
  rowsPerStep: number;
  bytesPerStep: number;
  movesPerStep: number | null;
  copiesPerStep: number | null;
  gradsPerStep: number | null;
  hitRate: number | null;
  /** transmissions saved vs random placement with the same caches and plan */
  vsRandom: number | null;
  /** transmissions saved vs caches without scheduling (random placement) */
  vsCache: number | null;
  scheduleMs: number | null;
}

const W0 = workload('criteo-kaggle');
/** the preset's description without its optimizer (this bench counts Adagrad's state) */
const DESCRIPTION = W0.description.replace(', SGD', '');
const tables: HeraldTable[] = W0.tables.map((t) => ({ name: t.name, rows: t.rows, dim: t.dim, stateWidth: stateWidth(OPTIMIZER, t.dim), features: t.features ?? [t.name] }));
const dim = tables[0]!.dim;
const ALPHA = W0.tables[0]!.access?.zipf ?? 1.1;

const WORKLOADS = [
  { name: 'i.i.d. samples', sessions: undefined },
  { name: `sessions (${SESSIONS.concurrent} open, ${SESSIONS.samples} samples each, ${100 * (SESSIONS.share ?? 0.5)}% of the features per session)`, sessions: SESSIONS },
] as const;

/** The global batches of a run: the synthetic Criteo Kaggle source (ids = Zipf ranks, as the workload preset's). */
function globalBatches(W: number, sessions: SessionOptions | undefined): JaggedBatch[] {
  const g = new SyntheticGenerator(
    resolveSynthetic({ batchSize: W * BATCH, preset: 'criteo-kaggle', alpha: ALPHA, scatter: false, seed: SEED, ...(sessions ? { sessions } : {}) }),
  );
  return Array.from({ length: WARM + STEPS }, (_, k) => g.batch(k).sparse);
}

type Counted = { c: StepCounts; ms: number };
const ZERO = (): StepCounts => ({ moves: 0, evictions: 0, copies: 0, grads: 0, rows: 0, bytes: 0, reads: 0, hits: 0, score: 0 });

/** Counted steps of one scheduler mode; with `baseline`, caches without scheduling on the same placement. */
function countMode(batches: JaggedBatch[], W: number, allocation: 'herald' | 'random', cacheRows: number, baseline?: CacheBaseline): { her: Counted; base?: Counted } {
  const s = new HeraldScheduler(tables, { world: W, batchSize: BATCH, cacheRows, allocation, seed: SEED });
  const sum = ZERO(), bsum = ZERO();
  let ms = 0;
  batches.forEach((g, step) => {
    const t0 = performance.now();
    const p = s.schedule(g);
    const el = performance.now() - t0;
    const b = baseline?.step(g, p.samples);
    if (step < WARM) return;
    ms += el / STEPS;
    for (const k of Object.keys(sum) as (keyof StepCounts)[]) sum[k] += p.counts[k] / STEPS;
    if (b) {
      bsum.copies += b.pulls / STEPS;
      bsum.grads += b.pushes / STEPS;
      bsum.rows += b.rows / STEPS;
      bsum.bytes += b.bytes / STEPS;
      bsum.reads += b.reads / STEPS;
      bsum.hits += b.hits / STEPS;
    }
  });
  return { her: { c: sum, ms }, ...(baseline ? { base: { c: bsum, ms: 0 } } : {}) };
}

function staticPlan(W: number, batches: JaggedBatch[]): { bytes: number } {
  const specs = W0.tables.map((t) => ({ ...t, optimizer: OPTIMIZER }));
  const plan = planShards(specs, topologyPreset('dgx-h100', { worldSize: W }), { batchSize: BATCH, maxIterations: 2000, timeBudgetMs: Number.POSITIVE_INFINITY });
  const n = Math.min(STEPS, 3);
  let bytes = 0;
  for (let k = 0; k < n; k++) {
    const g = batches[WARM + k]!;
    const locals = Array.from({ length: W }, (_, r) => takeSparse(g, Int32Array.from({ length: BATCH }, (_, j) => r * BATCH + j)));
    const t = measureTraffic(plan, locals).totals;
    bytes += (t.forward.intra + t.forward.inter + t.backward.intra + t.backward.inter) / n;
  }
  return { bytes };
}

const rows: Row[] = [];
for (const wl of WORKLOADS)
  for (const W of RANKS) {
    const batches = globalBatches(W, wl.sessions);
    const st = staticPlan(W, batches);
    const none = countMode(batches, W, 'random', 0).her;
    for (const cache of CACHES.filter((c, i) => i === 0 || W <= LARGE_MAX_RANKS)) {
      const her = countMode(batches, W, 'herald', cache).her;
      const r = countMode(batches, W, 'random', cache, new CacheBaseline(tables, W, cache));
      const rnd = r.her, base = r.base!;
      const row = (mode: string, x: Counted, opts: { plan: boolean; timed: boolean }): Row => ({
        workload: wl.name, ranks: W, cacheRows: cache, mode, rowsPerStep: x.c.rows, bytesPerStep: x.c.bytes,
        movesPerStep: opts.plan ? x.c.moves : null, copiesPerStep: x.c.copies, gradsPerStep: x.c.grads,
        hitRate: x.c.reads ? x.c.hits / x.c.reads : null, vsRandom: 1 - x.c.rows / rnd.c.rows, vsCache: 1 - x.c.rows / base.c.rows, scheduleMs: opts.timed ? x.ms : null,
      });
      rows.push(
        row('herald allocation', her, { plan: true, timed: true }),
        row('random placement, same caches and plan', rnd, { plan: true, timed: true }),
        row('caches without scheduling (random placement)', base, { plan: false, timed: false }),
        row('no cache', none, { plan: true, timed: true }),
      );
      rows.push({
        workload: wl.name, ranks: W, cacheRows: cache, mode: 'best static plan (planner)', rowsPerStep: st.bytes / (4 * dim), bytesPerStep: st.bytes, movesPerStep: null, copiesPerStep: null, gradsPerStep: null,
        hitRate: null, vsRandom: 1 - st.bytes / (4 * dim) / rnd.c.rows, vsCache: 1 - st.bytes / (4 * dim) / base.c.rows, scheduleMs: null,
      });
      console.error(
        `${wl.name}, ${W} ranks, cache ${cache}: herald ${her.c.rows.toFixed(0)} rows/step, random ${rnd.c.rows.toFixed(0)}, caches without scheduling ${base.c.rows.toFixed(0)}, no cache ${none.c.rows.toFixed(0)}, static ${(st.bytes / (4 * dim)).toFixed(0)} row-equivalents`,
      );
    }
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
  workload: DESCRIPTION, workloads: WORKLOADS.map((w) => w.name), sessions: SESSIONS, batchPerRank: BATCH, cacheRowsPerTable: CACHES, optimizer: OPTIMIZER, warmSteps: WARM, countedSteps: STEPS,
  note: 'transmissions are rows moved between ranks per step (value + state moves, value copies or pulls, gradient rows or pushes); static plans send pooled rows, counted as bytes / (4 · dim) row-equivalents',
};
mkdirSync(outDir, { recursive: true });
writeFileSync(join(outDir, 'herald.json'), JSON.stringify({ setup, rows, speed }, null, 2) + '\n');
const pct = (x: number | null) => (x === null ? '–' : `${(100 * x).toFixed(1)}%`);
const n = (x: number | null) => (x === null ? '–' : Math.round(x).toLocaleString());
const md = [
  '# Herald embedding scheduling',
  '',
  `${DESCRIPTION}, from the synthetic source (ids = Zipf ranks); ${BATCH} samples per rank; ${OPTIMIZER} (its state moves with a row); ` +
    `${WARM} steps fill the caches, then ${STEPS} steps are counted. Counts are exact (the scheduler that drives training, run alone; the caches without scheduling by cache-baseline.ts).`,
  '',
  'Modes: **herald allocation** (location-aware allocation + Herald\'s communication plan); **random placement, same caches and plan** (what the allocation alone saves); ' +
    '**caches without scheduling** (random placement; a copy is pulled when missing or stale and every remote row\'s gradient is pushed: the baseline Herald\'s reductions are quoted against); ' +
    '**no cache**; **best static plan** (pooled rows, bytes / (4 · dim) row-equivalents).',
  '',
  ...WORKLOADS.flatMap((wl) => [
    `## ${wl.name}`,
    '',
    '| ranks | cache rows / table | mode | transmissions / step (rows) | bytes / step | moves | copies / pulls | gradients / pushes | local reads | fewer than random placement | fewer than caches without scheduling | schedule ms / step |',
    '|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows
      .filter((r) => r.workload === wl.name)
      .map((r) =>
        `| ${r.ranks} | ${r.cacheRows.toLocaleString()} | ${r.mode} | ${n(r.rowsPerStep)} | ${n(r.bytesPerStep)} | ${n(r.movesPerStep)} | ${n(r.copiesPerStep)} | ${n(r.gradsPerStep)} | ` +
          `${pct(r.hitRate)} | ${r.mode.startsWith('random') ? '–' : pct(r.vsRandom)} | ${r.mode.startsWith('caches') ? '–' : pct(r.vsCache)} | ${r.scheduleMs === null ? '–' : r.scheduleMs.toFixed(0)} |`,
      ),
    '',
  ]),
  ...(speed.length
    ? [
        '## Steps/s at 4 MPI ranks (CPU)',
        '',
        '| schedule | steps/s | samples/s | main thread ms / step | transmissions / step |',
        '|---|---:|---:|---:|---:|',
        ...speed.map((s) => `| ${String(s.mode)} | ${Number(s.stepsPerSec).toFixed(2)} | ${Math.round(Number(s.samplesPerSec)).toLocaleString()} | ${Number(s.mainThreadMsPerStep).toFixed(1)} | ${s.rowsPerStep === undefined ? '–' : Math.round(Number(s.rowsPerStep)).toLocaleString()} |`),
        '',
        String(speed[0]?.note ?? ''),
      ]
    : []),
];
writeFileSync(join(outDir, 'herald.md'), md.join('\n') + '\n');
console.log(md.join('\n'));

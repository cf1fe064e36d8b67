// bench/herald-rank.ts — one rank of bench/herald.ts's speed run (launched under mpirun by it): embedding
// steps (forward, gradients, backward) of the Criteo Kaggle workload with tables capped at 200,000 rows,
// 1,024 samples per rank, Adagrad, timed for each schedule in turn on the same MPI group and the same
// global batches: Herald allocation, random placement with the same caches, no cache, and the planner's
// static plan (ShardedEmbeddingCollection). Every step prepares the next batch between its forward and its
// backward, where Trainer.fit does (a Herald collection schedules it, a sharded one exchanges its ids); the
// Herald allocation is also timed scheduling each batch inside its own step. An untimed pass runs first.
// Rank 0 prints one JSON line per schedule: steps/s, and the main thread's busy time per step (the slowest
// rank's), which a loaded machine disturbs less than the wall clock.
import { performance } from 'node:perf_hooks';
import { HeraldEmbeddingCollection } from '../lib/herald/collection.js';
import { takeSparse } from '../lib/data/take.js';
import { planShards } from '../lib/plan/planner.js';
import { topologyPreset } from '../lib/plan/topology.js';
import { createMpiGroup } from '../lib/sharded/group.js';
import { ShardedEmbeddingCollection } from '../lib/sharded/sharded.js';
import { tablesFor } from '../lib/train/embeddings.js';
import { generateBatch } from '../lib/workloads/generator.js';
import { workload } from '../lib/workloads/presets.js';
import type { JaggedBatch } from '../lib/batch.js';

const CAP = 200_000, B = 1024, CACHE = 4096, WARM = 5, STEPS = 30, SEED = 7;
const g = await createMpiGroup({ timeoutMs: 300_000 });
const W = g.size;
const base = workload('criteo-kaggle');
const wl = { ...base, tables: base.tables.map((t) => ({ ...t, rows: Math.min(t.rows, CAP), optimizer: 'adagrad' as const })) };
const features = wl.tables.map((t) => t.name);
const cfg = tablesFor(features, wl.tables.map((t) => t.rows), { dim: 16, optimizer: { type: 'adagrad', lr: 0.05 }, seed: SEED });
const globals: JaggedBatch[] = Array.from({ length: WARM + STEPS }, (_, step) => generateBatch(wl, 0, { batchSize: W * B, seed: SEED, step }));
const grad = new Float32Array(B * 16 * features.length).map((_, i) => Math.sin(i) * 1e-3);

interface Module {
  forward(b: JaggedBatch): Promise<{ pooled: Float32Array }>;
  backward(o: { pooled: Float32Array }, g: { pooled: Float32Array }): Promise<unknown>;
  dispose(): void;
}

/** local(step): the batch the step's forward takes; ahead(step): prepares it while the step before runs */
async function time(mode: string, m: Module, local: (step: number) => JaggedBatch, ahead?: (step: number) => Promise<void>, rows?: () => number): Promise<void> {
  let t0 = 0, tx = 0;
  let elu = performance.eventLoopUtilization();
  for (let step = 0; step < WARM + STEPS; step++) {
    if (step === WARM) {
      await g.barrier();
      t0 = performance.now();
      elu = performance.eventLoopUtilization();
    }
    const out = await m.forward(local(step));
    const next = ahead && step + 1 < WARM + STEPS ? ahead(step + 1) : undefined;
    await m.backward(out, { pooled: grad });
    await next;
    if (step >= WARM && rows) tx += rows();
  }
  // the main thread's busy time per step (JavaScript and synchronous native calls; waits on collectives and
  // worker threads excluded), the slowest rank's
  const busy = new Float64Array([performance.eventLoopUtilization(elu).active / STEPS]);
  const el = new Float64Array([(performance.now() - t0) / 1000]);
  await g.allReduce(el, 'max');
  await g.allReduce(busy, 'max');
  if (g.rank === 0 && mode !== 'warm-up')
    console.log(JSON.stringify({
      mode, stepsPerSec: STEPS / el[0]!, samplesPerSec: (STEPS * W * B) / el[0]!, mainThreadMsPerStep: busy[0]!, ...(rows ? { rowsPerStep: tx / STEPS } : {}),
      note: `${W} MPI ranks on one shared 2-core machine (other jobs running), CPU engines; Criteo Kaggle tables capped at ${CAP.toLocaleString()} rows, dim 16, ${B} samples per rank, ${CACHE} cache rows per table; embedding forward + backward only; ratios within this run are what to read`,
    }));
  m.dispose();
}

const modes = [
  ['herald allocation', 'herald', CACHE, true],
  ['herald allocation, each batch scheduled in its step', 'herald', CACHE, false],
  ['random placement, same caches', 'random', CACHE, true],
  ['no cache', 'random', 0, true],
] as const;
// an untimed pass first: the first mode measured otherwise pays the process's warm-up (code, allocator)
for (const [mode, allocation, cacheRows, lookAhead] of [['warm-up', 'herald', CACHE, true] as const, ...modes]) {
  const h = new HeraldEmbeddingCollection(cfg, g, { cacheRows, batchSize: B, allocation, seed: SEED });
  await time(mode, h, (s) => h.assign(globals[s]!), lookAhead ? (s) => h.prepare(globals[s]!) : undefined, () => h.lastCounts!.rows);
}
const plan = planShards(wl.tables, topologyPreset('dgx-h100', { worldSize: W, ranksPerNode: g.ranksPerNode }), { batchSize: B, maxIterations: 2000, timeBudgetMs: Number.POSITIVE_INFINITY });
const sc = new ShardedEmbeddingCollection(plan, g, { optimizer: { type: 'adagrad', lr: 0.05 }, seed: SEED });
const mine = Int32Array.from({ length: B }, (_, j) => g.rank * B + j);
const locals = globals.map((b) => takeSparse(b, mine));
await time('static plan (planner)', sc as unknown as Module, (s) => locals[s]!, (s) => sc.prepare(locals[s]!));
g.close();

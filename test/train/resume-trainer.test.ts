// resume-trainer.test.ts — a resumed run against the same run without the interruption: train N + M steps
// straight; separately train N, save, dispose everything, load, train M more on the same batches (with a
// learning-rate schedule whose warmup and decay cross the interruption). Every dense parameter and dense
// optimizer state value, every table row and optimizer state cell (a dynamic table's held ids and its
// stats too), the step counts, the learning rates of every step and the losses are compared bit for bit,
// for each embedding optimizer, fp16 / bf16 tables with stochastic rounding, dynamic tables with eviction
// and spill, disk-backed tables, and fit() with a step budget.
import { describe, it, expect } from 'vitest';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SyntheticSource, type Batch } from '../../lib/data/index.js';
import { Trainer, type StepMetrics } from '../../lib/train/index.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import type { CollectionConfig, OptimizerConfig, TableConfig } from '../../lib/config.js';
import type { DenseModelSpec, DenseOptimizerConfig } from '../../lib/train/dense.js';

const F = 3, ROWS = 40, DIM = 4, B = 16, N = 3, M = 4;
const spec: DenseModelSpec = { denseIn: 13, bottom: [8, DIM], top: [8, 1], numSparse: F, embDim: DIM, interaction: 'dot' };
const schedule = { warmupSteps: 2, decayStartStep: 2, decaySteps: 6, decayPower: 2 }; // warmup, then decay over the interruption at step 3
const data = new SyntheticSource({ batchSize: B, cardinalities: Array.from({ length: F }, () => ROWS), seed: 5 });
const batches: Batch[] = Array.from({ length: N + M }, (_, k) => data.batch(k));

interface Case {
  name: string;
  optimizer: OptimizerConfig;
  dense?: DenseOptimizerConfig;
  table?: (dir: string, t: number) => Partial<TableConfig>;
}

const cases: Case[] = [
  { name: 'sgd', optimizer: { type: 'sgd', lr: 0.5 }, dense: { type: 'sgd', lr: 0.1 } },
  { name: 'adagrad', optimizer: { type: 'adagrad', lr: 0.3 } },
  { name: 'rowwise_adagrad', optimizer: { type: 'rowwise_adagrad', lr: 0.3 } },
  { name: 'adam (bias correction by the step count)', optimizer: { type: 'adam', lr: 0.05, weightDecay: 0.01 }, dense: { type: 'adam', lr: 0.01 } },
  { name: 'fp16 tables with stochastic rounding', optimizer: { type: 'adagrad', lr: 0.3, stochasticRounding: true }, table: () => ({ dtype: 'fp16' }) },
  { name: 'bf16 tables with stochastic rounding', optimizer: { type: 'adam', lr: 0.05, stochasticRounding: true }, table: () => ({ dtype: 'bf16' }) },
  {
    name: 'dynamic tables with eviction and spill',
    optimizer: { type: 'adam', lr: 0.05 },
    table: (dir, t) => ({ rows: 'dynamic', capacity: 12, eviction: t === 1 ? 'lfu' : 'lru', admission: { minCount: t === 2 ? 2 : 1, default: 'hashed' }, spill: { path: dir } }),
  },
  {
    name: 'disk-backed tables',
    optimizer: { type: 'adagrad', lr: 0.3 },
    table: (dir) => ({ storage: { kind: 'disk', path: dir, cacheBytes: 16 * 64 } }),
  },
];

function config(c: Case, dir: string): CollectionConfig {
  return {
    tables: data.features.map((f, t) => ({
      name: f, rows: ROWS, dim: DIM, features: [f], init: { type: 'uniform', low: -0.2, high: 0.2 }, ...c.table?.(dir, t),
    }) as TableConfig),
    optimizer: c.optimizer,
    seed: 11,
  };
}

function trainer(c: Case, dir: string, lrs: number[][]): Trainer {
  return new Trainer({
    model: spec, embeddings: new EmbeddingCollection(config(c, dir)), optimizer: c.dense ?? { type: 'adagrad', lr: 0.05 }, seed: 7, schedule,
    onMetrics: (m: StepMetrics) => lrs.push([m.step, m.denseLr, m.embeddingLr, m.lrFactor]),
  });
}

function bytes(a: Float32Array | BigInt64Array): Buffer {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
}

/** Everything a run's state is made of, by table and id (dynamic tables: the ids they hold). */
function snapshot(t: Trainer) {
  const emb = t.embeddings as EmbeddingCollection;
  const tables: Record<string, unknown> = {};
  for (const f of data.features) {
    const dynamic = emb.config.tables.find((x) => x.name === f)!.dynamic !== undefined;
    const ids = dynamic ? BigInt64Array.from([...emb.heldIds(f)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))) : BigInt64Array.from({ length: ROWS }, (_, i) => BigInt(i));
    tables[f] = { ids: bytes(ids).toString('hex'), rows: bytes(emb.readRows(f, ids)).toString('hex'), state: bytes(emb.readState(f, ids)).toString('hex') };
  }
  const stats = Object.fromEntries(Object.entries(emb.stats()).map(([k, s]) => [k, { ...s }]));
  return {
    steps: t.stepCount, denseStep: t.dense.step, embStep: emb.step, embLr: emb.learningRate,
    params: bytes(t.dense.params).toString('hex'), state: bytes(t.dense.state).toString('hex'), tables, stats,
  };
}

async function checkResume(c: Case, viaFit: boolean): Promise<void> {
  const root = mkdtempSync(join(tmpdir(), 'embshard-resume-'));
  const dirA = join(root, 'a'), dirB = join(root, 'b');
  mkdirSync(dirA);
  mkdirSync(dirB);
  const lrsA: number[][] = [], lrsB: number[][] = [];
  try {
    const a = trainer(c, dirA, lrsA);
    const lossA: number[] = [];
    for (const b of batches) lossA.push(await a.step(b));
    const want = snapshot(a);
    // the cases exercise what they name: rows evicted and spilled, cache rows evicted to their files
    const dyn = Object.values((a.embeddings as EmbeddingCollection).stats());
    if (dyn.length > 0) expect(dyn.every((s) => s.evictions > 0 && (s.spilled ?? 0) > 0)).toBe(true);
    const disk = Object.values((a.embeddings as EmbeddingCollection).storageStats());
    if (c.table?.('', 0).storage) expect(disk.length > 0 && disk.every((s) => s.evictions > 0)).toBe(true);
    a.dispose();

    const b = trainer(c, dirB, lrsB);
    const lossB: number[] = [];
    await b.fit(batches.slice(0, N), { onStep: (s) => void lossB.push(s.loss) });
    await b.save(join(root, 'ck'));
    b.dispose();
    const r = await Trainer.load(join(root, 'ck'), { onMetrics: (m) => lrsB.push([m.step, m.denseLr, m.embeddingLr, m.lrFactor]) });
    try {
      expect(r.stepCount).toBe(N);
      if (viaFit) await r.fit(batches.slice(N).concat(batches.slice(0, 1)), { steps: M, onStep: (s) => void lossB.push(s.loss) });
      else for (const x of batches.slice(N)) lossB.push(await r.step(x));
      expect(lrsB).toEqual(lrsA);
      expect(lossB).toEqual(lossA);
      expect(snapshot(r)).toEqual(want);
    } finally {
      r.dispose();
    }
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

describe('a resumed Trainer equals the uninterrupted run, bit for bit', () => {
  for (const c of cases) it(c.name, () => checkResume(c, false), 30_000);
  it('fit() with a step budget, interrupted and resumed', () => checkResume(cases[3]!, true), 30_000);
});

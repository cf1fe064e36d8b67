// resume-sharded.test.ts — a resumed Trainer over a ShardedEmbeddingCollection at 2 in-process ranks (dp,
// rb split by rows and columns with replicated and node tiers, ub) against the same run without the
// interruption: N + M steps straight; N steps, save, dispose everything, load on a fresh group, M more on
// the same batches, with a schedule whose warmup and decay cross the interruption and Adam on both sides
// (bias correction by the step count). Losses, learning rates, both ranks' dense parameters and optimizer
// state, every table row and optimizer state cell and the step counts are compared bit for bit.
import { describe, it, expect } from 'vitest';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { JaggedBatch } from '../../lib/batch.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection } from '../../lib/sharded/sharded.js';
import { Trainer } from '../../lib/train/trainer.js';
import type { DenseModelSpec } from '../../lib/train/dense.js';
import type { Batch } from '../../lib/data/types.js';
import type { OptimizerConfig } from '../../lib/config.js';
import * as ref from './reference.js';

const W = 2, B = 6, N = 3, M = 3;
const spec: DenseModelSpec = { denseIn: 3, bottom: [5, 4], top: [6, 1], numSparse: 3, embDim: 4, interaction: 'dot' };
const ROWS = [30, 40, 36];
const planOf = (columnSplit: boolean) => ShardPlan.create({
  topology: { name: 'test', worldSize: W, ranksPerNode: W, deviceMemoryBytes: 1e12, memoryLimitBytes: 1e12, hbmBandwidth: 1e12, intraNodeBandwidth: 1e11, interNodeBandwidth: 1e10 },
  batchSize: B,
  tables: [
    { table: { name: 'A', rows: 30, dim: 4, pooling: 'sum', features: ['a'] }, cluster: 'dp' },
    {
      table: { name: 'Bt', rows: 40, dim: 4, pooling: 'mean', features: ['b'] },
      cluster: 'rb',
      tiers: { replicated: 4, node: 6 },
      shards: columnSplit
        ? [{ rows: [10, 24], cols: [0, 4], rank: 0 }, { rows: [24, 40], cols: [0, 2], rank: 1 }, { rows: [24, 40], cols: [2, 4], rank: 0 }]
        : [{ rows: [10, 24], cols: [0, 4], rank: 0 }, { rows: [24, 40], cols: [0, 4], rank: 1 }],
    },
    { table: { name: 'C', rows: 36, dim: 4, pooling: 'sum', features: ['c'] }, cluster: 'ub', shards: [{ rows: [0, 20], cols: [0, 4], rank: 1 }, { rows: [20, 36], cols: [0, 4], rank: 0 }] },
  ],
} as Parameters<typeof ShardPlan.create>[0]);
const schedule = { warmupSteps: 2, decayStartStep: 2, decaySteps: 5 };

function localBatch(rank: number, step: number): Batch {
  const r = ref.rng(100 * step + rank + 1);
  const bags = ROWS.map((n) => Array.from({ length: B }, () => Array.from({ length: 1 + Math.floor(r() * 3) }, () => Math.floor(n * r() * r()))));
  return {
    dense: ref.randArray(r, B * 3, 0, 2),
    sparse: JaggedBatch.fromBags(['a', 'b', 'c'], bags),
    labels: Float32Array.from({ length: B }, () => (r() < 0.4 ? 1 : 0)),
    size: B,
  };
}

const hex = (a: Float32Array): string => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('hex');

/** Both ranks' state: dense weights and optimizer state, step counts, learning rates, every table's rows and state (read collectively). */
async function snapshot(ts: Trainer[]) {
  const tables: Record<string, string[]> = {};
  for (const [t, name] of ['A', 'Bt', 'C'].entries()) {
    const ids = Array.from({ length: ROWS[t]! }, (_, i) => i);
    const embs = ts.map((x) => x.embeddings as ShardedEmbeddingCollection);
    const rows = await Promise.all(embs.map((e) => e.readRows(name, ids)));
    const state = await Promise.all(embs.map((e) => e.readState(name, ids)));
    tables[name] = [...rows.map(hex), ...state.map(hex)];
  }
  return {
    ranks: ts.map((x) => ({ steps: x.stepCount, denseStep: x.dense.step, embStep: (x.embeddings as ShardedEmbeddingCollection).step, embLr: x.embeddings.learningRate, params: hex(x.dense.params), state: hex(x.dense.state) })),
    tables,
  };
}

async function check(embOpt: OptimizerConfig, columnSplit = true): Promise<void> {
  const plan = planOf(columnSplit);
  const lrs: number[][][] = [[], [], []];
  const make = () => createInProcessGroups(W, { timeoutMs: 30_000 }).map((g, r) => new Trainer({
    model: spec, plan, group: g, optimizer: { type: 'adam', lr: 0.01 }, embeddingOptimizer: embOpt, seed: 5, schedule,
    onMetrics: (m) => lrs[r]!.push([m.step, m.denseLr, m.embeddingLr]),
  }));
  const run = async (ts: Trainer[], from: number, to: number) => {
    const out: number[] = [];
    const bs = Array.from({ length: to - from }, (_, k) => ts.map((_, r) => localBatch(r, from + k)));
    // with the next batch, whose id exchange overlaps each step (not across the interruption)
    for (let k = 0; k < bs.length; k++) out.push(...(await Promise.all(ts.map((t, r) => t.step(bs[k]![r]!, bs[k + 1]?.[r])))));
    return out;
  };
  const a = make();
  const lossA = await run(a, 0, N + M);
  const want = await snapshot(a);
  const lrsA = lrs.slice(0, 2).map((x) => x.splice(0));
  a.forEach((t) => t.dispose());

  const b = make();
  const dir = mkdtempSync(join(tmpdir(), 'embshard-resume-sharded-'));
  try {
    const lossB = await run(b, 0, N);
    await Promise.all(b.map((t) => t.save(join(dir, 'ck'))));
    b.forEach((t) => t.dispose());
    const groups = createInProcessGroups(W, { timeoutMs: 30_000 });
    const c = await Promise.all(groups.map((g, r) => Trainer.load(join(dir, 'ck'), {
      group: g, loadEmbeddings: (d) => ShardedEmbeddingCollection.load(d, plan, g), onMetrics: (m) => lrs[r]!.push([m.step, m.denseLr, m.embeddingLr]),
    })));
    try {
      expect(c.map((t) => t.stepCount)).toEqual([N, N]);
      lossB.push(...(await run(c, N, N + M)));
      expect(lrs.slice(0, 2)).toEqual(lrsA);
      expect(lossB).toEqual(lossA);
      expect(await snapshot(c)).toEqual(want);
    } finally {
      c.forEach((t) => t.dispose());
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Dynamic tables: a row-sharded one that evicts and spills, and a table of rows. */
const dynPlan = ShardPlan.create({
  topology: { name: 'test', worldSize: W, ranksPerNode: W, deviceMemoryBytes: 1e12, memoryLimitBytes: 1e12, hbmBandwidth: 1e12, intraNodeBandwidth: 1e11, interNodeBandwidth: 1e10 },
  batchSize: B,
  tables: [
    { table: { name: 'A', rows: 30, dim: 4, pooling: 'sum', features: ['a'] }, cluster: 'rb', shards: [{ rows: [0, 30], cols: [0, 4], rank: 1 }] },
    {
      table: { name: 'D', rows: 'dynamic', capacity: 10, dim: 4, pooling: 'sum', features: ['b', 'c'], eviction: 'lru', admission: { minCount: 1, default: 'hashed' } },
      cluster: 'rb',
      shards: [{ rows: [0, 4], cols: [0, 4], rank: 0 }, { rows: [4, 10], cols: [0, 4], rank: 1 }],
    },
  ],
} as Parameters<typeof ShardPlan.create>[0]);

async function dynamicSnapshot(ts: Trainer[]) {
  const embs = ts.map((x) => x.embeddings as ShardedEmbeddingCollection);
  const held = embs.map((e) => e.heldIds('D').map((h) => [h.group, h.rank, Buffer.from(h.ids.buffer, h.ids.byteOffset, h.ids.byteLength).toString('hex')]));
  const ids = [...new Set(embs.flatMap((e) => e.heldIds('D').flatMap((h) => [...h.ids])))].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const big = BigInt64Array.from(ids);
  const rows = await Promise.all(embs.map((e) => e.readRows('D', big)));
  const state = await Promise.all(embs.map((e) => e.readState('D', big)));
  const a = await Promise.all(embs.map((e) => e.readRows('A', Array.from({ length: 30 }, (_, i) => i))));
  return {
    held, rows: [...rows, ...state, ...a].map(hex), stats: embs.map((e) => e.stats()),
    ranks: ts.map((x) => ({ steps: x.stepCount, denseStep: x.dense.step, embStep: (x.embeddings as ShardedEmbeddingCollection).step, params: hex(x.dense.params), state: hex(x.dense.state) })),
  };
}

async function checkDynamic(): Promise<void> {
  const root = mkdtempSync(join(tmpdir(), 'embshard-resume-sharded-'));
  const spill = (name: string) => {
    mkdirSync(join(root, name));
    return { path: join(root, name) };
  };
  const make = (name: string) => createInProcessGroups(W, { timeoutMs: 30_000 }).map((g) => new Trainer({
    model: spec, group: g, optimizer: { type: 'adam', lr: 0.01 }, schedule,
    embeddings: new ShardedEmbeddingCollection(dynPlan, g, { optimizer: { type: 'adam', lr: 0.05 }, seed: 5, spill: spill(`${name}${g.rank}`) }),
  }));
  const bs = Array.from({ length: N + M }, (_, k) => [0, 1].map((r) => localBatch(r, k)));
  const run = async (ts: Trainer[], from: number, to: number) => {
    const out: number[] = [];
    for (let k = from; k < to; k++) out.push(...(await Promise.all(ts.map((t, r) => t.step(bs[k]![r]!, k + 1 < to ? bs[k + 1]![r] : undefined)))));
    return out;
  };
  try {
    const a = make('a');
    const lossA = await run(a, 0, N + M);
    const want = await dynamicSnapshot(a);
    expect(want.stats.flat().some((s) => s.evictions > 0 && (s.spilled ?? 0) > 0)).toBe(true);
    a.forEach((t) => t.dispose());
    const b = make('b');
    const lossB = await run(b, 0, N);
    await Promise.all(b.map((t) => t.save(join(root, 'ck'))));
    b.forEach((t) => t.dispose());
    const groups = createInProcessGroups(W, { timeoutMs: 30_000 });
    const c = await Promise.all(groups.map((g) => Trainer.load(join(root, 'ck'), {
      group: g, loadEmbeddings: (d) => ShardedEmbeddingCollection.load(d, dynPlan, g, { spill: spill(`c${g.rank}`) }),
    })));
    try {
      lossB.push(...(await run(c, N, N + M)));
      expect(lossB).toEqual(lossA);
      expect(await dynamicSnapshot(c)).toEqual(want);
    } finally {
      c.forEach((t) => t.dispose());
    }
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

describe('a resumed sharded Trainer (2 ranks: dp, rb with tiers, ub) equals the uninterrupted run, bit for bit', () => {
  it('adam tables with weight decay', () => check({ type: 'adam', lr: 0.05, weightDecay: 0.01 }), 30_000);
  it('rowwise_adagrad tables split by rows', () => check({ type: 'rowwise_adagrad', lr: 0.2 }, false), 30_000);
  it('dynamic row-sharded tables that evict and spill', () => checkDynamic(), 30_000);
  // rowwise_adagrad keeps one accumulator per column shard: the other column shards' are stored beside the
  // checkpoint and each column shard resumes with its own
  it('rowwise_adagrad tables split by columns', () => check({ type: 'rowwise_adagrad', lr: 0.2 }), 30_000);
});

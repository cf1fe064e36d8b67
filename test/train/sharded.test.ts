// sharded.test.ts — the Trainer with a sharding plan over an in-process group of 2 ranks (tables split
// into dp / rb / ub clusters, rows and columns across ranks) against one Trainer with an
// EmbeddingCollection on the global batch: the mean of the ranks' losses equals the global loss, both
// ranks hold bitwise-identical dense weights (gradients all-reduced), and dense weights and tables match
// the single-process run within 1e-5 (only summation order differs).
import { describe, it, expect } from 'vitest';
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { collectionConfigOf } from '../../lib/sharded/sharded.js';
import { Trainer, type StepTimes } from '../../lib/train/trainer.js';
import { ShardedEmbeddingCollection } from '../../lib/sharded/sharded.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DenseModelSpec } from '../../lib/train/dense.js';
import type { Batch } from '../../lib/data/types.js';
import * as ref from './reference.js';

const W = 2, B = 8;
const spec: DenseModelSpec = { denseIn: 3, bottom: [5, 4], top: [6, 1], numSparse: 3, embDim: 4, interaction: 'dot' };
const plan = ShardPlan.create({
  topology: { name: 'test', worldSize: W, ranksPerNode: W, deviceMemoryBytes: 1e12, memoryLimitBytes: 1e12, hbmBandwidth: 1e12, intraNodeBandwidth: 1e11, interNodeBandwidth: 1e10 },
  batchSize: B,
  tables: [
    { table: { name: 'A', rows: 30, dim: 4, pooling: 'sum', features: ['a'] }, cluster: 'dp' },
    {
      table: { name: 'Bt', rows: 40, dim: 4, pooling: 'sum', features: ['b'] },
      cluster: 'rb',
      shards: [{ rows: [0, 16], cols: [0, 4], rank: 0 }, { rows: [16, 40], cols: [0, 2], rank: 1 }, { rows: [16, 40], cols: [2, 4], rank: 0 }],
    },
    { table: { name: 'C', rows: 36, dim: 4, pooling: 'sum', features: ['c'] }, cluster: 'ub', shards: [{ rows: [0, 20], cols: [0, 4], rank: 1 }, { rows: [20, 36], cols: [0, 4], rank: 0 }] },
  ],
} as Parameters<typeof ShardPlan.create>[0]);

function localBatch(rank: number, step: number): Batch {
  const r = ref.rng(100 * step + rank + 1);
  const rows = [30, 40, 36];
  const bags = rows.map((n) => Array.from({ length: B }, () => Array.from({ length: 1 + Math.floor(r() * 3) }, () => Math.floor(n * r() * r()))));
  return {
    dense: ref.randArray(r, B * 3, 0, 2),
    sparse: JaggedBatch.fromBags(['a', 'b', 'c'], bags),
    labels: Float32Array.from({ length: B }, () => (r() < 0.4 ? 1 : 0)),
    size: B,
  };
}

function globalBatch(parts: Batch[]): Batch {
  const feats = ['a', 'b', 'c'];
  const bags = feats.map((f) =>
    parts.flatMap((p) => {
      const { lengths, ids } = p.sparse.feature(f);
      const out: number[][] = [];
      let o = 0;
      for (const n of lengths) {
        out.push(Array.from(ids.subarray(o, o + n), Number));
        o += n;
      }
      return out;
    }),
  );
  const cat = (k: 'dense' | 'labels') => {
    const out = new Float32Array(parts.reduce((s, p) => s + p[k].length, 0));
    let o = 0;
    for (const p of parts) (out.set(p[k], o), (o += p[k].length));
    return out;
  };
  return { dense: cat('dense'), labels: cat('labels'), sparse: JaggedBatch.fromBags(feats, bags), size: B * parts.length };
}

describe('Trainer with a sharding plan', () => {
  it('2 ranks match one trainer on the global batch', async () => {
    const embOpt = { type: 'adagrad' as const, lr: 0.1 };
    const groups = createInProcessGroups(W, { timeoutMs: 30_000 });
    const ranks = groups.map((g) => new Trainer({ model: spec, plan, group: g, optimizer: { type: 'adagrad', lr: 0.05 }, embeddingOptimizer: embOpt, seed: 3 }));
    const oracleEmb = new EmbeddingCollection(collectionConfigOf(plan, { optimizer: embOpt, seed: 3 }));
    const oracle = new Trainer({ model: spec, embeddings: oracleEmb, optimizer: { type: 'adagrad', lr: 0.05 }, seed: 3 });
    for (let step = 0; step < 3; step++) {
      const parts = [0, 1].map((r) => localBatch(r, step));
      const losses = await Promise.all(ranks.map((t, r) => t.step(parts[r]!)));
      const want = await oracle.step(globalBatch(parts));
      expect((losses[0]! + losses[1]!) / 2).toBeCloseTo(want, 6);
    }
    expect(Buffer.compare(Buffer.from(ranks[0]!.dense.params.buffer), Buffer.from(ranks[1]!.dense.params.buffer))).toBe(0);
    expect(ref.worstRatio(ranks[0]!.dense.params, oracle.dense.params, 1e-5, 1e-4)).toBeLessThanOrEqual(1);
    for (const t of plan.tables) {
      const ids = Array.from({ length: t.rows }, (_, i) => i);
      // the Trainer holds the sharded collection itself (no adapter)
      expect(ranks[0]!.embeddings).toBeInstanceOf(ShardedEmbeddingCollection);
      const [g0] = await Promise.all(ranks.map((tr) => (tr.embeddings as ShardedEmbeddingCollection).readRows(t.name, ids)));
      expect(ref.worstRatio(g0!, oracleEmb.readRows(t.name, ids), 1e-5, 1e-4)).toBeLessThanOrEqual(1);
    }
  });

  it('save → load → continue on 2 ranks gives bit-identical losses to an uninterrupted run', async () => {
    const embOpt = { type: 'adagrad' as const, lr: 0.1 };
    const make = () => {
      const groups = createInProcessGroups(W, { timeoutMs: 30_000 });
      return { groups, ranks: groups.map((g) => new Trainer({ model: spec, plan, group: g, optimizer: { type: 'adam', lr: 0.01 }, embeddingOptimizer: embOpt, seed: 5, schedule: { warmupSteps: 3 } })) };
    };
    const run = async (ts: Trainer[], from: number, to: number) => {
      const out: number[] = [];
      for (let step = from; step < to; step++) out.push(...(await Promise.all(ts.map((t, r) => t.step(localBatch(r, step))))));
      return out;
    };
    const a = make();
    const want = await run(a.ranks, 0, 5);
    const b = make();
    const dir = mkdtempSync(join(tmpdir(), 'embshard-sharded-trainer-'));
    try {
      const got = await run(b.ranks, 0, 2);
      await Promise.all(b.ranks.map((t) => t.save(join(dir, 'ck'))));
      const groups = createInProcessGroups(W, { timeoutMs: 30_000 });
      const c = await Promise.all(groups.map((g) => Trainer.load(join(dir, 'ck'), { group: g, loadEmbeddings: (d) => ShardedEmbeddingCollection.load(d, plan, g) })));
      expect(c.map((t) => t.stepCount)).toEqual([2, 2]);
      got.push(...(await run(c, 2, 5)));
      expect(got).toEqual(want);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('overlapping the dense all-reduce with the embedding backward and the next batch\'s id exchange with the dense compute is bitwise equal to not overlapping', async () => {
    const embOpt = { type: 'adagrad' as const, lr: 0.1 };
    const batches = [0, 1, 2, 3].map((step) => [0, 1].map((r) => localBatch(r, step)));
    // 'next': step(batch, next) by hand; 'fit': Trainer.fit looks ahead by itself (evaluating after step 2,
    // where it pauses its look-ahead); 'off': overlap false
    const run = async (mode: 'next' | 'fit' | 'off') => {
      const groups = createInProcessGroups(W, { timeoutMs: 30_000 });
      const overlap = mode !== 'off';
      const ranks = groups.map((g) => new Trainer({ model: spec, plan, group: g, optimizer: { type: 'adam', lr: 0.01 }, embeddingOptimizer: embOpt, seed: 7, overlap }));
      const losses: number[][] = [[], []];
      const times: StepTimes[] = [];
      const evals: number[] = [];
      if (mode === 'fit') {
        await Promise.all(ranks.map((t, r) => t.fit(batches.map((bs) => bs[r]!), {
          steps: 3,
          pauseAfter: (s) => s === 2,
          onStep: async (s) => {
            losses[r]!.push(s.loss);
            times.push(t.lastTimes!);
            if (s.step === 2) evals.push((await t.evaluate([batches[3]![r]!])).logloss);
          },
        })));
      } else {
        for (let step = 0; step < 3; step++) {
          const l = await Promise.all(ranks.map((t, r) => (overlap && step < 2 ? t.step(batches[step]![r]!, batches[step + 1]![r]!) : t.step(batches[step]![r]!))));
          l.forEach((x, r) => losses[r]!.push(x));
          times.push(...ranks.map((t) => t.lastTimes!));
        }
      }
      const params = Float32Array.from(ranks[0]!.dense.params);
      const rows: Float32Array[] = [];
      for (const t of plan.tables) rows.push(...(await Promise.all(ranks.map((tr) => (tr.embeddings as ShardedEmbeddingCollection).readRows(t.name, Array.from({ length: t.rows }, (_, i) => i))))));
      expect(ranks[0]!.overlap).toBe(overlap);
      expect(ranks.map((t) => t.stepCount)).toEqual([3, 3]);
      for (const g of groups) g.close();
      return { losses, params, rows, times, evals };
    };
    const off = await run('off');
    for (const mode of ['next', 'fit'] as const) {
      const a = await run(mode);
      expect(a.losses).toEqual(off.losses);
      expect(Buffer.compare(Buffer.from(a.params.buffer), Buffer.from(off.params.buffer))).toBe(0);
      a.rows.forEach((x, i) => expect(Buffer.compare(Buffer.from(x.buffer), Buffer.from(off.rows[i]!.buffer))).toBe(0));
      // exposed communication never exceeds the collectives' time in flight; every step communicates
      for (const t of a.times) {
        expect(t.communicationTotal).toBeGreaterThan(0);
        expect(t.communication).toBeLessThanOrEqual(t.communicationTotal);
      }
      if (mode === 'fit') expect(a.evals.length).toBe(2);
    }
    // without overlap every collective blocks the step: exposed = total; the parts add up to the step
    for (const t of off.times) {
      expect(t.communication).toBe(t.communicationTotal);
      const { total, communicationTotal: _, ...parts } = t;
      expect(Object.values(parts).reduce((x, y) => x + y, 0)).toBeCloseTo(total, 6);
    }
  });

  it('a sharded collection passed without `group`: the dense model is data parallel over its group, as with the group given', async () => {
    const embOpt = { type: 'adagrad' as const, lr: 0.1 };
    const run = async (giveGroup: boolean) => {
      const groups = createInProcessGroups(W, { timeoutMs: 30_000 });
      const ranks = groups.map(
        (g) => new Trainer({ model: spec, embeddings: new ShardedEmbeddingCollection(plan, g, { optimizer: embOpt, seed: 3 }), ...(giveGroup ? { group: g } : {}), optimizer: { type: 'adagrad', lr: 0.05 }, seed: 3 }),
      );
      for (let step = 0; step < 3; step++) await Promise.all(ranks.map((t, r) => t.step(localBatch(r, step))));
      for (const g of groups) g.close();
      return ranks.map((t) => Buffer.from(t.dense.params.buffer));
    };
    const [without, given] = [await run(false), await run(true)];
    expect(without[0]!.equals(without[1]!)).toBe(true); // one dense model on both ranks
    expect(without[0]!.equals(given[0]!)).toBe(true);
    // a group of another size than the collection's is refused
    const groups = createInProcessGroups(W), three = createInProcessGroups(3);
    expect(() => new Trainer({ model: spec, embeddings: new ShardedEmbeddingCollection(plan, groups[0]!, { optimizer: embOpt }), group: three[0]! })).toThrow(
      expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringMatching(/group has 3 ranks but the embeddings are sharded over 2/) }),
    );
    for (const g of [...groups, ...three]) g.close();
  });

  it('one process\'s tables (an EmbeddingCollection) with a group of several ranks are refused with INVALID_CONFIG', async () => {
    const groups = createInProcessGroups(W);
    const emb = () => new EmbeddingCollection(collectionConfigOf(plan, { optimizer: { type: 'sgd', lr: 0.1 } }));
    expect(() => new Trainer({ model: spec, embeddings: emb(), group: groups[0]! })).toThrow(
      expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringMatching(/group has 2 ranks but the embeddings are one process's tables/) }),
    );
    // Trainer.load of a checkpoint with a group but without loadEmbeddings: the same
    const dir = mkdtempSync(join(tmpdir(), 'embshard-one-process-'));
    try {
      await new Trainer({ model: spec, embeddings: emb() }).save(join(dir, 'ck'));
      await expect(Trainer.load(join(dir, 'ck'), { group: groups[0]! })).rejects.toMatchObject({ code: 'INVALID_CONFIG', message: expect.stringMatching(/loadEmbeddings/) });
    } finally {
      rmSync(dir, { recursive: true, force: true });
      for (const g of groups) g.close();
    }
  });

  it('a save rank 0 cannot write fails on every rank at once (the group stays whole), and a save elsewhere then works', async () => {
    const groups = createInProcessGroups(W, { timeoutMs: 30_000 });
    const ranks = groups.map((g) => new Trainer({ model: spec, plan, group: g, optimizer: { type: 'adagrad', lr: 0.05 }, seed: 3 }));
    await Promise.all(ranks.map((t, r) => t.step(localBatch(r, 0))));
    const dir = mkdtempSync(join(tmpdir(), 'embshard-save-'));
    try {
      writeFileSync(join(dir, 'a-file'), 'not a folder');
      const res = await Promise.allSettled(ranks.map((t) => t.save(join(dir, 'a-file', 'ck'))));
      // (rank 1 would otherwise wait in the save's gather until its timeout: COMM_TIMEOUT)
      expect(res.map((x) => (x as PromiseRejectedResult).reason?.code)).toEqual(['IO_ERROR', 'IO_ERROR']);
      expect((res[1] as PromiseRejectedResult).reason.message).toMatch(/failed on another rank/);
      await Promise.all(ranks.map((t) => t.save(join(dir, 'ck'))));
      const back = await Promise.all(groups.map((g) => Trainer.load(join(dir, 'ck'), { group: g, loadEmbeddings: (d) => ShardedEmbeddingCollection.load(d, plan, g) })));
      expect(Buffer.from(back[1]!.dense.params.buffer).equals(Buffer.from(ranks[1]!.dense.params.buffer))).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
      for (const g of groups) g.close();
    }
  });

  it('sources of uneven length: fit() stops on every rank at the shortest source, bitwise as if every source had been that long', async () => {
    const embOpt = { type: 'adagrad' as const, lr: 0.1 };
    const make = () => {
      const groups = createInProcessGroups(W, { timeoutMs: 30_000 });
      return { groups, ranks: groups.map((g) => new Trainer({ model: spec, plan, group: g, optimizer: { type: 'adagrad', lr: 0.05 }, embeddingOptimizer: embOpt, seed: 3 })) };
    };
    // every rank's dense weights and state and every table as rank r reads it (readRows is a collective)
    const states = async (ts: Trainer[]) => {
      const out: Buffer[][] = ts.map((t) => [Buffer.from(t.dense.params.buffer), Buffer.from(t.dense.state.buffer)]);
      for (const t of plan.tables) {
        const ids = BigInt64Array.from({ length: t.rows }, (_, j) => BigInt(j));
        const rows = await Promise.all(ts.map((tr) => (tr.embeddings as ShardedEmbeddingCollection).readRows(t.name, ids)));
        rows.forEach((x, r) => out[r]!.push(Buffer.from(x.buffer)));
      }
      return out;
    };
    // rank 0 has 2 batches, rank 1 has 3: in the second step only rank 1 could look ahead, in the third only
    // rank 1 has a batch; against two ranks with 2 batches each
    const uneven = make(), even = make();
    const got = await Promise.all(uneven.ranks.map((t, r) => t.fit(Array.from({ length: 2 + r }, (_, k) => localBatch(r, k)))));
    await Promise.all(even.ranks.map((t, r) => t.fit(Array.from({ length: 2 }, (_, k) => localBatch(r, k)))));
    expect(got.map((x) => [x.steps, x.endedElsewhere])).toEqual([[2, undefined], [2, true]]);
    const [a, b] = [await states(uneven.ranks), await states(even.ranks)];
    for (let r = 0; r < W; r++) a[r]!.forEach((x, i) => expect(x.equals(b[r]![i]!), `rank ${r} array ${i}`).toBe(true));
    // the ranks go on together from there, and an async source works the same way
    async function* src(r: number) {
      for (let k = 5; k < 7 + r; k++) yield localBatch(r, k);
    }
    const more = await Promise.all(uneven.ranks.map((t, r) => t.fit(src(r))));
    expect(more.map((x) => x.steps)).toEqual([2, 2]);
    // a source that fails on one rank: that rank rejects with its error after one more step, the other
    // stops there too instead of waiting on it
    async function* failing(r: number) {
      yield localBatch(r, 9);
      if (r === 1) throw new Error('disk read failed');
      yield localBatch(r, 10);
    }
    const last = await Promise.allSettled(uneven.ranks.map((t, r) => t.fit(failing(r))));
    expect(last[0]).toMatchObject({ status: 'fulfilled', value: { steps: 1, endedElsewhere: true } });
    expect(last[1]).toMatchObject({ status: 'rejected', reason: { message: 'disk read failed' } });
    expect(uneven.ranks.map((t) => t.stepCount)).toEqual([5, 5]);
    // an onStep that throws on one rank after a step that prepared the next batch: that rank rejects with
    // its error, the other stops there (its prepared batch dropped), and both go on together afterwards
    const three = (r: number) => Array.from({ length: 3 }, (_, k) => localBatch(r, 20 + k));
    const stopped = await Promise.allSettled(
      uneven.ranks.map((t, r) => t.fit(three(r), { onStep: () => { if (r === 0) throw new Error('logger down'); } })),
    );
    expect(stopped[0]).toMatchObject({ status: 'rejected', reason: { message: 'logger down' } });
    expect(stopped[1]).toMatchObject({ status: 'fulfilled', value: { steps: 1, endedElsewhere: true } });
    const after = await Promise.all(uneven.ranks.map((t, r) => t.fit(three(r).slice(1))));
    expect(after.map((x) => x.steps)).toEqual([2, 2]);
    expect(uneven.ranks.map((t) => t.stepCount)).toEqual([8, 8]);
    for (const g of [...uneven.groups, ...even.groups]) g.close();
  });

  it('ranks that disagree on the look-ahead reject the step with COMM_FAILED on every rank, not with an unhandled rejection', async () => {
    // rank 0 prepares a next batch, rank 1 does not: the collectives no longer match and the dense all-reduce
    // started during that step fails while the embedding backward runs (vitest fails the run on any
    // unhandled rejection)
    const groups = createInProcessGroups(W, { timeoutMs: 30_000 });
    const ranks = groups.map((g) => new Trainer({ model: spec, plan, group: g, optimizer: { type: 'sgd', lr: 0.05 }, embeddingOptimizer: { type: 'sgd', lr: 0.1 }, seed: 3 }));
    const res = await Promise.allSettled(ranks.map((t, r) => (r === 0 ? t.step(localBatch(r, 0), localBatch(r, 1)) : t.step(localBatch(r, 0)))));
    for (const x of res) expect(x).toMatchObject({ status: 'rejected', reason: { code: 'COMM_FAILED' } });
    for (const g of groups) g.close();
  });

  it('a plan without a group is refused with INVALID_CONFIG', () => {
    expect(() => new Trainer({ model: spec, plan })).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringMatching(/group/) }));
  });
});

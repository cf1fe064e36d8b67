// bad-values.test.ts — a training batch whose values are bad (a NaN / ±Inf dense feature, a label outside
// [0, 1]) or whose step turns non-finite (inputs near the float range overflow the loss) ends the step with
// nothing changed: on one trainer before anything runs; on two ranks, where the bad batch (or one of the
// wrong shape) is one rank's only, on both ranks (the rank with the bad batch names the field, the other
// the code), after which both go on training, from any batch, also after fit() stopped at such a step or
// in its onStep. The oracle of "nothing changed" is a run of the same trainers that never saw the bad
// step: its dense weights, dense optimizer state and tables must be bitwise equal. evaluate() and
// predict() reject bad batches the same way. Also the forward's and the backward's `reject` options on
// their own, for EmbeddingCollection and a sharded collection.
import { describe, it, expect } from 'vitest';
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import { EmbshardError } from '../../lib/errors.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection } from '../../lib/sharded/sharded.js';
import { Trainer } from '../../lib/train/trainer.js';
import type { DenseModelSpec } from '../../lib/train/dense.js';
import type { Batch } from '../../lib/data/types.js';
import * as ref from './reference.js';

const W = 2, B = 8;
const spec: DenseModelSpec = { denseIn: 3, bottom: [5, 4], top: [6, 1], numSparse: 2, embDim: 4, interaction: 'dot' };
const tables = [
  { name: 'A', rows: 30, dim: 4, pooling: 'sum' as const, features: ['a'] },
  { name: 'C', rows: 36, dim: 4, pooling: 'sum' as const, features: ['c'] },
];
const plan = ShardPlan.create({
  topology: { name: 'test', worldSize: W, ranksPerNode: W, deviceMemoryBytes: 1e12, memoryLimitBytes: 1e12, hbmBandwidth: 1e12, intraNodeBandwidth: 1e11, interNodeBandwidth: 1e10 },
  batchSize: B,
  tables: [
    { table: tables[0], cluster: 'dp' },
    { table: tables[1], cluster: 'ub', shards: [{ rows: [0, 20], cols: [0, 4], rank: 1 }, { rows: [20, 36], cols: [0, 4], rank: 0 }] },
  ],
} as Parameters<typeof ShardPlan.create>[0]);

function batch(seed: number): Batch {
  const r = ref.rng(seed);
  const bags = [30, 36].map((n) => Array.from({ length: B }, () => Array.from({ length: 1 + Math.floor(r() * 3) }, () => Math.floor(n * r() * r()))));
  return { dense: ref.randArray(r, B * 3, 0, 2), sparse: JaggedBatch.fromBags(['a', 'c'], bags), labels: Float32Array.from({ length: B }, () => (r() < 0.4 ? 1 : 0)), size: B };
}

/** Every bag of feature a holds id `a` twice; every bag of c, id 3. */
function bagsOf(a: number): Batch {
  const r = ref.rng(a);
  return {
    dense: ref.randArray(r, B * 3, 0, 2),
    sparse: JaggedBatch.fromBags(['a', 'c'], [Array.from({ length: B }, () => [a, a]), Array.from({ length: B }, () => [3])]),
    labels: Float32Array.from({ length: B }, (_, i) => i % 2),
    size: B,
  };
}

/** The same batch with one value changed. */
function spoiled(b: Batch, field: 'dense' | 'labels', at: number, v: number): Batch {
  const c = { ...b, [field]: Float32Array.from(b[field]) };
  c[field][at] = v;
  return c;
}

async function tableRows(emb: unknown): Promise<Float32Array[]> {
  const e = emb as EmbeddingCollection | ShardedEmbeddingCollection;
  return Promise.all(tables.map((t) => e.readRows(t.name, Array.from({ length: t.rows }, (_, i) => i))));
}

/** Dense weights, dense optimizer state and every table, as bytes. */
async function snapshot(t: Trainer): Promise<Buffer> {
  return Buffer.concat([t.dense.params, t.dense.state, ...(await tableRows(t.embeddings))].map((a) => Buffer.from(a.buffer, a.byteOffset, a.byteLength)));
}

/** Two ranks' trainers over the plan. */
function twoRanks(): Trainer[] {
  return createInProcessGroups(W, { timeoutMs: 20_000 }).map((g) => new Trainer({ model: spec, plan, group: g, optimizer: { type: 'adam', lr: 0.01 }, seed: 3 }));
}

/** Per rank, whether its dense weights, dense state and tables equal the oracle rank's, byte for byte. */
async function sameAs(ranks: Trainer[], oracle: Trainer[]): Promise<boolean[]> {
  const [a, o] = await Promise.all([Promise.all(ranks.map(snapshot)), Promise.all(oracle.map(snapshot))]);
  return a.map((x, r) => x.equals(o[r]!));
}

/** n batches per rank. */
const rankBatches = (n: number) => [0, 1].map((r) => Array.from({ length: n }, (_, k) => batch(10 * k + r + 1)));

function single(): Trainer {
  const emb = new EmbeddingCollection({ tables, optimizer: { type: 'adagrad', lr: 0.1 }, seed: 1 });
  return new Trainer({ model: spec, embeddings: emb, optimizer: { type: 'adam', lr: 0.01 }, seed: 3 });
}

describe('a training batch with bad values', () => {
  it.each([
    ['a NaN dense feature', spoiled(batch(9), 'dense', 7, NaN), /batch\.dense\[7\] \(sample 2, dense feature 1\) is NaN/],
    ['an infinite dense feature', spoiled(batch(9), 'dense', 23, -Infinity), /batch\.dense\[23\] \(sample 7, dense feature 2\) is -Infinity/],
    ['a label above 1', spoiled(batch(9), 'labels', 3, 1.5), /batch\.labels\[3\] is 1\.5: labels must lie in \[0, 1\]/],
    ['a NaN label', spoiled(batch(9), 'labels', 0, NaN), /batch\.labels\[0\] is NaN/],
  ])('one trainer: %s is INVALID_ARGUMENT naming it, and nothing changes', async (_, bad, message) => {
    const t = single(), oracle = single();
    for (const s of [1, 2]) (await t.step(batch(s)), await oracle.step(batch(s)));
    const before = await snapshot(t);
    let err: unknown;
    try {
      await t.step(bad);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(EmbshardError);
    expect((err as EmbshardError).code).toBe('INVALID_ARGUMENT');
    expect((err as Error).message).toMatch(message);
    expect(t.stepCount).toBe(2);
    expect((await snapshot(t)).equals(before)).toBe(true);
    expect(await t.step(batch(3))).toBe(await oracle.step(batch(3)));
    expect((await snapshot(t)).equals(await snapshot(oracle))).toBe(true);
  });

  it('one trainer: a step whose loss overflows is NON_FINITE_GRADIENT, nothing changes', async () => {
    const t = single(), oracle = single();
    for (const s of [1, 2]) (await t.step(batch(s)), await oracle.step(batch(s)));
    // row 1 of table A near the float range: a bag of it twice pools to +Inf, and the step turns NaN
    const emb = t.embeddings as EmbeddingCollection;
    const row1 = emb.readRows('A', [1]);
    emb.writeRows('A', [1], new Float32Array(4).fill(2e38));
    const before = await snapshot(t);
    await expect(t.step(bagsOf(1))).rejects.toMatchObject({ code: 'NON_FINITE_GRADIENT', message: expect.stringMatching(/^step 3: (the loss is NaN|the dense gradients contain NaN or Inf); nothing was updated/) });
    expect(t.stepCount).toBe(2);
    expect((await snapshot(t)).equals(before)).toBe(true);
    emb.writeRows('A', [1], row1);
    expect(await t.step(batch(3))).toBe(await oracle.step(batch(3)));
    expect((await snapshot(t)).equals(await snapshot(oracle))).toBe(true);
  });

  for (const overlap of [false, true]) {
    it(`two ranks (overlap ${overlap}): one rank's bad batch or overflowing step ends the step on both, nothing changed; both go on`, async () => {
      const make = () => createInProcessGroups(W, { timeoutMs: 20_000 }).map((g) => new Trainer({ model: spec, plan, group: g, optimizer: { type: 'adam', lr: 0.01 }, embeddingOptimizer: { type: 'adagrad', lr: 0.1 }, seed: 3, overlap }));
      const ranks = make(), oracle = make();
      const good = [0, 1, 2, 3].map((step) => [0, 1].map((r) => batch(100 * step + r + 1)));
      // rank 0's rejected steps: a NaN dense feature, then a loss that overflows (row 1 of table A pooled
      // twice; rank 1's batches read row 2), then a dense array of the wrong length
      const bad = [[spoiled(good[2]![0]!, 'dense', 4, NaN), bagsOf(2)], [bagsOf(1), bagsOf(2)], [{ ...good[2]![0]!, dense: new Float32Array(5) }, bagsOf(2)]];
      const expected: [string, RegExp][] = [
        ['INVALID_ARGUMENT', /batch\.dense\[4\] \(sample 1, dense feature 1\) is NaN/],
        ['NON_FINITE_GRADIENT', /^step 3: (the loss is NaN|the dense gradients contain NaN or Inf); nothing was updated/],
        ['LENGTH_MISMATCH', /batch\.dense must be a Float32Array of size × 3 = 24 values/],
      ];
      // step(batch, next) as fit() drives it: the next batch's ids travel during each step
      const order = (withBad: boolean) => [good[0]!, good[1]!, ...(withBad ? bad : []), good[2]!, good[3]!];
      const steps = (ts: Trainer[], list: Batch[][], k: number) => Promise.allSettled(ts.map((t, r) => t.step(list[k]![r]!, list[k + 1]?.[r])));
      const list = order(true), want = order(false);
      for (const k of [0, 1]) expect(await steps(ranks, list, k)).toEqual(await steps(oracle, want, k));
      const [rowA1] = await Promise.all(ranks.map((t) => (t.embeddings as ShardedEmbeddingCollection).readRows('A', [1])));
      await Promise.all(ranks.map((t) => (t.embeddings as ShardedEmbeddingCollection).writeRows('A', [1], new Float32Array(4).fill(2e38))));
      const before = await Promise.all(ranks.map(snapshot));
      for (const k of [2, 3, 4]) {
        const res = await steps(ranks, list, k);
        expect(res.map((x) => x.status)).toEqual(['rejected', 'rejected']);
        const [e0, e1] = res.map((x) => (x as PromiseRejectedResult).reason as EmbshardError);
        const [code, message] = expected[k - 2]!;
        expect(e0).toBeInstanceOf(EmbshardError);
        expect([e0!.code, e1!.code]).toEqual([code, code]);
        expect(e0!.message).toMatch(message);
        expect(e1!.message).toMatch(/another rank rejected/);
        expect(ranks.map((t) => t.stepCount)).toEqual([2, 2]);
        const after = await Promise.all(ranks.map(snapshot));
        expect(after.map((a, r) => a.equals(before[r]!))).toEqual([true, true]);
      }
      await Promise.all(ranks.map((t) => (t.embeddings as ShardedEmbeddingCollection).writeRows('A', [1], rowA1!)));
      for (const k of [5, 6]) expect(await steps(ranks, list, k)).toEqual(await steps(oracle, want, k - 3));
      expect(await sameAs(ranks, oracle)).toEqual([true, true]);
    }, 60_000);
  }
});

describe('after a step that failed on every rank, or a fit() stopped by its onStep', () => {
  it('fit() can go on from any batch (the batch it had prepared is dropped), and evaluate() works', async () => {
    const ranks = twoRanks(), oracle = twoRanks();
    const data = rankBatches(6);
    const bad = [0, 1].map((r) => spoiled(data[r]![2]!, 'labels', 1, r === 0 ? -1 : 0));
    // fit looks one batch ahead: the bad step had prepared data[3], which the next fit skips
    const res = await Promise.allSettled(ranks.map((t, r) => t.fit([data[r]![0]!, data[r]![1]!, bad[r]!, data[r]![3]!])));
    expect(res.map((x) => x.status)).toEqual(['rejected', 'rejected']);
    expect((res[0] as PromiseRejectedResult).reason.message).toMatch(/batch\.labels\[1\] is -1/);
    const go = (ts: Trainer[], from: number[]) => Promise.all(ts.map((t, r) => t.fit(from.map((k) => data[r]![k]!))));
    await go(oracle, [0, 1]);
    const got = await go(ranks, [4, 5]);
    await go(oracle, [4, 5]);
    expect(got.map((x) => [x.steps, x.samples])).toEqual([[2, 2 * B], [2, 2 * B]]);
    const held = (ts: Trainer[]) => Promise.all(ts.map((t, r) => t.evaluate([data[r]![3]!])));
    expect(await held(ranks)).toEqual(await held(oracle));
    expect(await sameAs(ranks, oracle)).toEqual([true, true]);
  }, 60_000);

  it('fit() stopped by its onStep after a step that prepared the next batch can go on from any batch', async () => {
    const ranks = twoRanks(), oracle = twoRanks();
    const data = rankBatches(5);
    const down = new Error('the metrics service is down');
    const res = await Promise.allSettled(ranks.map((t, r) => t.fit(data[r]!.slice(0, 3), { onStep: () => { throw down; } })));
    expect(res.map((x) => (x as PromiseRejectedResult).reason)).toEqual([down, down]);
    expect(ranks.map((t) => t.stepCount)).toEqual([1, 1]);
    const go = (ts: Trainer[], from: number[]) => Promise.all(ts.map((t, r) => t.fit(from.map((k) => data[r]![k]!))));
    await go(oracle, [0]);
    await go(ranks, [3, 4]);
    await go(oracle, [3, 4]);
    expect(await sameAs(ranks, oracle)).toEqual([true, true]);
  }, 60_000);
});

describe('evaluate() and predict() with a bad batch', () => {
  it('one trainer: a table row that is not finite makes predict() INVALID_ARGUMENT (not a finite, wrong logit); the output goes back, and predict() works once the row is finite', async () => {
    const t = single(), oracle = single();
    for (const s of [1, 2]) (await t.step(batch(s)), await oracle.step(batch(s)));
    const emb = t.embeddings as EmbeddingCollection;
    const row1 = emb.readRows('A', [1]);
    emb.writeRows('A', [1], new Float32Array(4).fill(Infinity));
    const { labels: _, ...unlabelled } = bagsOf(1);
    for (let k = 0; k < 3; k++) // an output not given back would be a fresh buffer each time; either way the call is refused
      await expect(t.predict(unlabelled)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/^pooled\[0\] \(sample 0, column 0\) is Infinity/) });
    emb.writeRows('A', [1], row1);
    expect(Buffer.from((await t.predict(unlabelled)).buffer).equals(Buffer.from((await oracle.predict(unlabelled)).buffer))).toBe(true);
  });

  it('one trainer: INVALID_ARGUMENT naming the value, before anything runs', async () => {
    const t = single();
    await t.step(batch(1));
    await expect(t.evaluate([batch(2), spoiled(batch(3), 'dense', 2, NaN)])).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/batch\.dense\[2\]/) });
    await expect(t.evaluate([spoiled(batch(3), 'labels', 0, 2)])).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/batch\.labels\[0\] is 2/) });
    const { labels: _, ...unlabelled } = spoiled(batch(3), 'dense', 5, Infinity);
    await expect(t.predict(unlabelled)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/batch\.dense\[5\] \(sample 1, dense feature 2\) is Infinity/) });
  });

  it('two ranks: a bad batch on one rank rejects the call on both, and both go on evaluating', async () => {
    const ranks = twoRanks();
    await Promise.all(ranks.map((t, r) => t.step(batch(r + 1))));
    const held = [0, 1].map((r) => [batch(50 + r), batch(60 + r)]);
    const want = await Promise.all(ranks.map((t, r) => t.evaluate(held[r]!)));
    for (const [bad, code, message] of [
      [spoiled(held[0]![1]!, 'dense', 1, NaN), 'INVALID_ARGUMENT', /batch\.dense\[1\]/],
      [{ ...held[0]![1]!, labels: new Float32Array(3) }, 'LENGTH_MISMATCH', /batch\.labels/],
    ] as const) {
      const res = await Promise.allSettled(ranks.map((t, r) => t.evaluate(r === 0 ? [held[0]![0]!, bad] : held[1]!)));
      expect(res.map((x) => x.status)).toEqual(['rejected', 'rejected']);
      const [e0, e1] = res.map((x) => (x as PromiseRejectedResult).reason as EmbshardError);
      expect([e0!.code, e1!.code]).toEqual([code, code]);
      expect(e0!.message).toMatch(message);
      expect(e1!.message).toMatch(/rank 0 rejected its batch/);
    }
    const { labels: _, ...unlabelled } = spoiled(held[0]![0]!, 'dense', 0, NaN);
    const pr = await Promise.allSettled(ranks.map((t, r) => t.predict(r === 0 ? unlabelled : held[1]![0]!)));
    expect(pr.map((x) => (x as PromiseRejectedResult).reason?.code)).toEqual(['INVALID_ARGUMENT', 'INVALID_ARGUMENT']);
    // the group is whole: the same evaluation again gives the same metrics
    expect(await Promise.all(ranks.map((t, r) => t.evaluate(held[r]!)))).toEqual(want);
  }, 60_000);
});

describe("forward's reject option", () => {
  it('sharded: one rank rejects, both forwards reject in the first exchange; not with a prepared batch', async () => {
    const groups = createInProcessGroups(W, { timeoutMs: 20_000 });
    const cols = groups.map((g) => new ShardedEmbeddingCollection(plan, g, { optimizer: { type: 'sgd', lr: 0.5 }, seed: 1 }));
    const why = new EmbshardError('INVALID_ARGUMENT', "rank 0's dense features were NaN");
    const res = await Promise.allSettled(cols.map((c, r) => c.forward(batch(r + 1).sparse, r === 0 ? { reject: why } : {})));
    expect((res[0] as PromiseRejectedResult).reason).toBe(why);
    expect((res[1] as PromiseRejectedResult).reason).toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/rank 0 rejected its batch/) });
    const outs = await Promise.all(cols.map((c, r) => c.forward(batch(r + 1).sparse)));
    expect(outs.map((o) => o.pooled.length)).toEqual([B * 8, B * 8]);
    const b = batch(9).sparse;
    await Promise.all(cols.map((c) => c.prepare(b)));
    await expect(cols[0]!.forward(b, { reject: why })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/given to prepare/) });
    await expect(cols[0]!.forward(b, { reject: 'no' as never })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/options\.reject must be an EmbshardError/) });
    for (const g of groups) g.close();
  });
});

describe("backward's reject option", () => {
  it('EmbeddingCollection: rejects with the given error, reads no gradient, changes nothing; the output goes through backward after', async () => {
    const emb = new EmbeddingCollection({ tables, optimizer: { type: 'sgd', lr: 0.5 }, seed: 1 });
    const out = await emb.forward(batch(1).sparse);
    const before = await tableRows(emb);
    const why = new EmbshardError('NON_FINITE_GRADIENT', 'the caller ends the step');
    await expect(emb.backward(out, null as never, { reject: why })).rejects.toBe(why);
    expect(await tableRows(emb)).toEqual(before);
    await expect(emb.backward(out, { pooled: new Float32Array(B * 8) }, { reject: 'no' as never })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/options\.reject must be an EmbshardError/) });
    const g = new Float32Array(B * 8).fill(1);
    await emb.backward(out, { pooled: g });
    const after = await tableRows(emb);
    // sgd, sum pooling, every gradient 1: a row moves by −lr × (its ids in the batch)
    const ids = batch(1).sparse.feature('a').ids;
    const count = new Float64Array(30);
    for (const id of ids) count[Number(id)]!++;
    for (let row = 0; row < 30; row++)
      for (let c = 0; c < 4; c++) expect(after[0]![row * 4 + c]).toBeCloseTo(before[0]![row * 4 + c]! - 0.5 * count[row]!, 5);
  });

  it('sharded: one rank rejects, the other passes good gradients: both reject, no table changes, both may go through backward again', async () => {
    const groups = createInProcessGroups(W, { timeoutMs: 20_000 });
    const cols = groups.map((g) => new ShardedEmbeddingCollection(plan, g, { optimizer: { type: 'sgd', lr: 0.5 }, seed: 1 }));
    const outs = await Promise.all(cols.map((c, r) => c.forward(batch(r + 1).sparse)));
    const before = await Promise.all(cols.map((c) => tableRows(c)));
    const why = new EmbshardError('INVALID_ARGUMENT', "rank 0's labels were bad");
    const g = () => ({ pooled: new Float32Array(B * 8).fill(1) });
    const res = await Promise.allSettled(cols.map((c, r) => c.backward(outs[r]!, g(), r === 0 ? { reject: why } : {})));
    expect((res[0] as PromiseRejectedResult).reason).toBe(why);
    expect((res[1] as PromiseRejectedResult).reason).toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/another rank rejected/) });
    expect(await Promise.all(cols.map((c) => tableRows(c)))).toEqual(before);
    await Promise.all(cols.map((c, r) => c.backward(outs[r]!, g())));
    const after = await Promise.all(cols.map((c) => tableRows(c)));
    // sgd, every gradient 1, both ranks' batches: row − lr × (its ids in both batches)
    for (const [t, f] of [[0, 'a'], [1, 'c']] as const) {
      const count = new Float64Array(tables[t]!.rows);
      for (const r of [0, 1]) for (const id of batch(r + 1).sparse.feature(f).ids) count[Number(id)]!++;
      for (let row = 0; row < count.length; row++) expect(after[0]![t]![row * 4]).toBeCloseTo(before[0]![t]![row * 4]! - 0.5 * count[row]!, 5);
    }
  });
});

// api-edges.test.ts — the Trainer's calls at their edges, on one process: fit() looking one batch ahead
// trains exactly what a fit without look-ahead (and steps by hand) train when a batch of the source is
// malformed; a trainer whose embeddings prepare the next batch (a one-rank sharded collection) goes on
// from any batch after a step or a fit() rejected one; callbacks that are not functions and a
// DenseModel given with options it would ignore are refused before anything runs; evaluate() reads no
// batch beyond maxBatches and names a batch that is not one. The oracle of "trained the same" is a
// trainer stepped by hand over the good batches: its dense weights, dense optimizer state and tables
// must be bitwise equal.
import { describe, it, expect } from 'vitest';
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection } from '../../lib/sharded/sharded.js';
import { Trainer } from '../../lib/train/trainer.js';
import { DenseModel, type DenseModelSpec } from '../../lib/train/dense.js';
import type { Batch } from '../../lib/data/types.js';
import * as ref from './reference.js';

const B = 8;
const spec: DenseModelSpec = { denseIn: 3, bottom: [5, 4], top: [6, 1], numSparse: 2, embDim: 4, interaction: 'dot' };
const tables = [
  { name: 'A', rows: 30, dim: 4, pooling: 'sum' as const, features: ['a'] },
  { name: 'C', rows: 36, dim: 4, pooling: 'sum' as const, features: ['c'] },
];
const plan = ShardPlan.create({
  topology: { name: 'test', worldSize: 1, ranksPerNode: 1, deviceMemoryBytes: 1e12, memoryLimitBytes: 1e12, hbmBandwidth: 1e12, intraNodeBandwidth: 1e11, interNodeBandwidth: 1e10 },
  batchSize: B,
  tables: [
    { table: tables[0], cluster: 'dp' },
    { table: tables[1], cluster: 'ub', shards: [{ rows: [0, 36], cols: [0, 4], rank: 0 }] },
  ],
} as Parameters<typeof ShardPlan.create>[0]);

function batch(seed: number): Batch {
  const r = ref.rng(seed);
  const bags = [30, 36].map((n) => Array.from({ length: B }, () => Array.from({ length: 1 + Math.floor(r() * 3) }, () => Math.floor(n * r()))));
  return { dense: ref.randArray(r, B * 3, 0, 2), sparse: JaggedBatch.fromBags(['a', 'c'], bags), labels: Float32Array.from({ length: B }, () => (r() < 0.4 ? 1 : 0)), size: B };
}

/** Dense weights, dense optimizer state and every table, as bytes. */
async function snapshot(t: Trainer): Promise<Buffer> {
  const e = t.embeddings as EmbeddingCollection | ShardedEmbeddingCollection;
  const rows = await Promise.all(tables.map((x) => e.readRows(x.name, Array.from({ length: x.rows }, (_, i) => i))));
  return Buffer.concat([t.dense.params, t.dense.state, ...rows].map((a) => Buffer.from(a.buffer, a.byteOffset, a.byteLength)));
}

function single(overlap = true): Trainer {
  const emb = new EmbeddingCollection({ tables, optimizer: { type: 'adagrad', lr: 0.1 }, seed: 1 });
  return new Trainer({ model: spec, embeddings: emb, optimizer: { type: 'adam', lr: 0.01 }, seed: 3, overlap });
}

/** A trainer over a one-rank sharded collection, whose prepare() binds the next forward to its batch. */
function oneRank(): Trainer {
  const [g] = createInProcessGroups(1);
  return new Trainer({ model: spec, plan, group: g!, optimizer: { type: 'adam', lr: 0.01 }, embeddingOptimizer: { type: 'adagrad', lr: 0.1 }, seed: 3 });
}

/** Steps `t` by hand over `list`, one batch at a time (no look-ahead). */
async function byHand(t: Trainer, list: Batch[]): Promise<Trainer> {
  for (const b of list) await t.step(b);
  return t;
}

const malformed: [string, (b: Batch) => Batch, RegExp][] = [
  ['a dense array of the wrong length', (b) => ({ ...b, size: B - 1 }), /batch\.dense must be a Float32Array/],
  ['a non-batch', () => null as unknown as Batch, /batch must be a \{ dense, sparse, labels, size \} object/],
];

describe('fit() with a malformed batch in its source', () => {
  for (const [what, spoil, message] of malformed)
    it(`${what}: trains every batch before it, as a fit without look-ahead does, then rejects naming it`, async () => {
      const data = [1, 2, 3, 4, 5].map(batch);
      const list = [data[0]!, data[1]!, data[2]!, spoil(data[3]!), data[4]!];
      const oracle = await byHand(single(), data.slice(0, 3));
      for (const overlap of [true, false]) {
        const t = single(overlap);
        const seen: number[] = [];
        await expect(t.fit(list, { onStep: (s) => void seen.push(s.step) })).rejects.toMatchObject({ message: expect.stringMatching(message) });
        expect(seen).toEqual([1, 2, 3]);
        expect(t.stepCount).toBe(3);
        expect((await snapshot(t)).equals(await snapshot(oracle))).toBe(true);
      }
    });
});

describe('embeddings that prepare the next batch (one-rank sharded collection)', () => {
  it('after fit() stopped at a batch with a bad value or shape, fit() and step() go on from any batch', async () => {
    const data = [1, 2, 3, 4, 5, 6].map(batch);
    const bad = [{ ...data[2]!, labels: Float32Array.from(data[2]!.labels, () => 2) }, { ...data[2]!, size: B - 1 }];
    const oracle = await byHand(oneRank(), [data[0]!, data[1]!, data[4]!, data[5]!]);
    for (const b of bad) {
      const t = oneRank();
      await expect(t.fit([data[0]!, data[1]!, b, data[3]!])).rejects.toMatchObject({ code: expect.stringMatching(/^(INVALID_ARGUMENT|LENGTH_MISMATCH)$/) });
      expect(t.stepCount).toBe(2);
      expect(await t.fit([data[4]!])).toMatchObject({ steps: 1 });
      await t.step(data[5]!);
      expect((await snapshot(t)).equals(await snapshot(oracle))).toBe(true);
    }
  });

  it('step(batch, next) then a step(next) that rejects next: the following step may take any batch', async () => {
    const data = [1, 2, 3, 4].map(batch);
    const next = { ...data[1]!, dense: Float32Array.from(data[1]!.dense, (x, i) => (i === 5 ? NaN : x)) };
    const t = oneRank();
    await t.step(data[0]!, next);
    expect(() => t.step(next)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/batch\.dense\[5\] \(sample 1, dense feature 2\) is NaN/) }));
    await t.step(data[2]!, data[3]!);
    await t.step(data[3]!);
    const oracle = await byHand(oneRank(), [data[0]!, data[2]!, data[3]!]);
    expect((await snapshot(t)).equals(await snapshot(oracle))).toBe(true);
  });
});

describe('options refused before anything runs', () => {
  it('fit(): onStep and pauseAfter must be functions (INVALID_ARGUMENT naming them); nothing trains', async () => {
    const t = single();
    const before = await snapshot(t);
    for (const k of ['onStep', 'pauseAfter']) {
      await expect(t.fit([batch(1), batch(2)], { [k]: 5 } as never)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: `fit: options.${k} must be a function` });
      expect(t.stepCount).toBe(0);
    }
    expect((await snapshot(t)).equals(before)).toBe(true);
  });

  it('onMetrics must be a function (the Trainer and Trainer.load), loadEmbeddings too', async () => {
    const emb = new EmbeddingCollection({ tables, seed: 1 });
    expect(() => new Trainer({ model: spec, embeddings: emb, onMetrics: 'log' as never })).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: 'onMetrics must be a function' }));
    for (const k of ['onMetrics', 'loadEmbeddings'])
      await expect(Trainer.load('/nonexistent-checkpoint', { [k]: {} } as never)).rejects.toMatchObject({ code: 'INVALID_CONFIG', message: `options.${k} must be a function` });
  });

  it('a DenseModel given with optimizer, seed or another device is INVALID_CONFIG rather than those going unused', () => {
    const emb = new EmbeddingCollection({ tables, seed: 1 });
    const dense = new DenseModel(spec, { optimizer: { type: 'sgd', lr: 0.5 }, seed: 2 });
    for (const [extra, message] of [
      [{ optimizer: { type: 'adam', lr: 0.01 } }, /^optimizer: the given DenseModel has its own/],
      [{ seed: 9 }, /^seed: the given DenseModel has its own/],
      [{ device: 'cuda:0' }, /^device 'cuda:0' differs from the given model's \('cpu'\)/],
    ] as const)
      expect(() => new Trainer({ model: dense, embeddings: emb, ...extra })).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringMatching(message) }));
    const t = new Trainer({ model: dense, embeddings: emb, device: 'cpu' });
    expect(t.dense.optimizer).toMatchObject({ type: 'sgd', lr: 0.5 });
    expect(t.dense.seed).toBe(2);
  });
});

describe('evaluate()', () => {
  it('reads exactly maxBatches batches from the source and closes it', async () => {
    const t = single();
    let read = 0, closed = false;
    function* source(): Generator<Batch> {
      try {
        for (let k = 1; ; k++) {
          read++;
          yield batch(k);
        }
      } finally {
        closed = true;
      }
    }
    const r = await t.evaluate(source(), { maxBatches: 2 });
    expect(r.samples).toBe(2 * B);
    expect(read).toBe(2);
    expect(closed).toBe(true);
    // the same two batches as a finite list: the same metrics
    expect(await t.evaluate([batch(1), batch(2)])).toEqual(r);
  });

  it('an item that is not a batch is INVALID_ARGUMENT', async () => {
    const t = single();
    await expect(t.evaluate([batch(1), null as unknown as Batch])).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/batch must be a \{ dense, sparse, labels, size \} object/) });
  });
});

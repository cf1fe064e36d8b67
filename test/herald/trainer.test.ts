// The Trainer with Herald-scheduled tables on 2 and 4 in-process ranks against one Trainer over one
// collection on the same global batches: each rank trains the samples its allocator assigned, with their
// dense features and labels, so the mean of the ranks' losses is the global batch's loss and, after
// several steps, the dense parameters and the tables agree within 1e-4.
import { describe, it, expect } from 'vitest';
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import type { CollectionConfig } from '../../lib/config.js';
import type { Batch } from '../../lib/data/types.js';
import { HeraldEmbeddingCollection } from '../../lib/herald/collection.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { Trainer } from '../../lib/train/trainer.js';
import type { DenseModelSpec } from '../../lib/train/dense.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';

const lib = { JaggedBatch };
const cfg: CollectionConfig = {
  tables: [
    { name: 'users', rows: 600, dim: 4, features: ['user', 'friend'] },
    { name: 'items', rows: 2000, dim: 4 },
    { name: 'tiny', rows: 7, dim: 4, pooling: 'mean' },
  ],
  optimizer: { type: 'adagrad', lr: 0.1 },
  seed: 5,
};
const spec: DenseModelSpec = { denseIn: 3, bottom: [8, 4], top: [8, 1], numSparse: 4, embDim: 4, interaction: 'dot' };

function batchOf(step: number, G: number): Batch {
  const sparse = S.globalBatch(lib, step, G) as JaggedBatch;
  const dense = Float32Array.from({ length: G * 3 }, (_, i) => Math.cos(step * 3.1 + i * 0.7));
  const labels = Float32Array.from({ length: G }, (_, i) => ((step * 7 + i * 13) % 5 < 2 ? 1 : 0));
  return { dense, sparse, labels, size: G };
}

describe('Trainer with Herald scheduling vs one Trainer on the global batches', () => {
  for (const W of [2, 4])
    it(`${W} ranks`, async () => {
      const B = 8, steps = 4;
      const groups = createInProcessGroups(W);
      const tables = groups.map((g) => new HeraldEmbeddingCollection(cfg, g, { cacheRows: 16, batchSize: B }));
      const trainers = groups.map((g, r) => new Trainer({ model: spec, embeddings: tables[r]!, group: g, optimizer: { type: 'adagrad', lr: 0.05 } }));
      const one = new Trainer({ model: spec, embeddings: new EmbeddingCollection(cfg), optimizer: { type: 'adagrad', lr: 0.05 } });
      try {
        const batches = Array.from({ length: steps + 1 }, (_, k) => batchOf(k, W * B));
        for (let k = 0; k < steps; k++) {
          const losses = await Promise.all(trainers.map((t) => t.step(batches[k]!, batches[k + 1])));
          const want = await one.step(batches[k]!);
          expect(Math.abs(losses.reduce((a, b) => a + b, 0) / W - want)).toBeLessThan(1e-5);
        }
        for (const t of trainers) expect(S.relErr(t.dense.params, one.dense.params)).toBeLessThan(1e-4);
        const oc = one.embeddings as EmbeddingCollection;
        for (const t of oc.tables) {
          const ids = Int32Array.from({ length: t.rows }, (_, j) => j);
          const got = await Promise.all(tables.map((h) => h.gather(t.name)));
          for (const g of got) expect(S.relErr(g.weights, oc.readRows(t.name, ids))).toBeLessThan(1e-4);
        }
      } finally {
        tables.forEach((t) => t.dispose());
        (one.embeddings as EmbeddingCollection).dispose();
        groups.forEach((g) => g.close());
      }
    });
});

describe('Trainer with Herald scheduling: a global batch with a bad value', () => {
  it('every rank rejects the step naming the value, nothing changes, and training goes on as if it never came', async () => {
    const W = 2, B = 8;
    const groups = createInProcessGroups(W, { timeoutMs: 20_000 });
    const tables = groups.map((g) => new HeraldEmbeddingCollection(cfg, g, { cacheRows: 16, batchSize: B }));
    const trainers = groups.map((g, r) => new Trainer({ model: spec, embeddings: tables[r]!, group: g, optimizer: { type: 'adagrad', lr: 0.05 } }));
    const one = new Trainer({ model: spec, embeddings: new EmbeddingCollection(cfg), optimizer: { type: 'adagrad', lr: 0.05 } });
    try {
      const good = Array.from({ length: 4 }, (_, k) => batchOf(k, W * B));
      const bad = batchOf(9, W * B);
      bad.labels[5] = 2;
      // the bad batch is scheduled as the next batch of step 1, like any other
      const order = [good[0]!, good[1]!, bad, good[2]!, good[3]!];
      const snap = async () => Promise.all(tables.map(async (h) => (await Promise.all(oneTables().map((t) => h.gather(t.name)))).map((g) => Array.from(g.weights))));
      const oneTables = () => (one.embeddings as EmbeddingCollection).tables;
      for (let k = 0; k < order.length; k++) {
        if (k === 2) {
          const before = [await snap(), trainers.map((t) => Array.from(t.dense.params))];
          const res = await Promise.allSettled(trainers.map((t) => t.step(order[k]!, order[k + 1])));
          for (const x of res) {
            expect(x.status).toBe('rejected');
            expect((x as PromiseRejectedResult).reason).toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/batch\.labels\[5\] is 2: labels must lie in \[0, 1\]/) });
          }
          expect(trainers.map((t) => t.stepCount)).toEqual([2, 2]);
          expect([await snap(), trainers.map((t) => Array.from(t.dense.params))]).toEqual(before);
          continue;
        }
        const losses = await Promise.all(trainers.map((t) => t.step(order[k]!, order[k + 1])));
        const want = await one.step(order[k]!);
        expect(Math.abs(losses.reduce((a, b) => a + b, 0) / W - want)).toBeLessThan(1e-5);
      }
      for (const t of trainers) expect(S.relErr(t.dense.params, one.dense.params)).toBeLessThan(1e-4);
      // evaluation, every rank its own batch: a NaN dense feature on one rank rejects every rank's call
      const held = [0, 1].map((r) => batchOf(20 + r, B));
      const want = await Promise.all(trainers.map((t, r) => t.evaluate([held[r]!])));
      const nan = { ...held[0]!, dense: Float32Array.from(held[0]!.dense, (x, i) => (i === 4 ? NaN : x)) };
      const res = await Promise.allSettled(trainers.map((t, r) => t.evaluate([r === 0 ? nan : held[r]!])));
      expect(res.map((x) => (x as PromiseRejectedResult).reason?.code)).toEqual(['INVALID_ARGUMENT', 'INVALID_ARGUMENT']);
      expect((res[0] as PromiseRejectedResult).reason.message).toMatch(/batch\.dense\[4\]/);
      expect(await Promise.all(trainers.map((t, r) => t.evaluate([held[r]!])))).toEqual(want);
    } finally {
      tables.forEach((t) => t.dispose());
      (one.embeddings as EmbeddingCollection).dispose();
      groups.forEach((g) => g.close());
    }
  });
});

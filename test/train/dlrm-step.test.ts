// dlrm-step.test.ts — one full training step of a tiny DLRM (EmbeddingCollection lookup with sum pooling
// → bottom MLP → dot interaction → top MLP → BCE → SGD on both dense weights and embedding rows) against
// a naive float64 TypeScript reference of the whole model, whose gradients are central finite
// differences of its loss. Tolerance: atol 2e-6 + rtol 1e-4 on updated values (float32 math).
import { describe, it, expect } from 'vitest';
import { EmbeddingCollection } from '../../lib/collection.js';
import { JaggedBatch } from '../../lib/batch.js';
import { Trainer } from '../../lib/train/trainer.js';
import type { DenseModelSpec } from '../../lib/train/dense.js';
import * as ref from './reference.js';

const spec: DenseModelSpec = { denseIn: 3, bottom: [4, 2], top: [3, 1], numSparse: 2, embDim: 2, interaction: 'dot' };
const bags = [
  [[0, 2], [1], [], [5, 5, 3]], // feature a: a duplicate id and an empty bag
  [[4], [0, 1], [2], [3]],
];
const rows = { a: 6, b: 5 };

describe('one step of a tiny DLRM', () => {
  it('matches the naive reference: loss, updated dense weights, updated embedding rows', async () => {
    const r = ref.rng(21);
    const emb = new EmbeddingCollection({
      tables: [
        { name: 'a', rows: rows.a, dim: 2, init: { type: 'uniform', low: -0.5, high: 0.5 } },
        { name: 'b', rows: rows.b, dim: 2, init: { type: 'uniform', low: -0.5, high: 0.5 } },
      ],
      optimizer: { type: 'sgd', lr: 0.1 },
      seed: 9,
    });
    const trainer = new Trainer({ model: spec, embeddings: emb, optimizer: { type: 'sgd', lr: 0.05 }, seed: 4 });
    const B = 4;
    const sparse = JaggedBatch.fromBags(['a', 'b'], bags);
    const dense = ref.randArray(r, B * 3, 0, 2);
    const labels = Float32Array.of(1, 0, 1, 0);

    // reference state before the step
    const P = Float64Array.from(trainer.dense.params);
    const Ta = Float64Array.from(emb.readRows('a', [0, 1, 2, 3, 4, 5]));
    const Tb = Float64Array.from(emb.readRows('b', [0, 1, 2, 3, 4]));
    const pooled = () => {
      const out = new Float64Array(B * 4);
      [Ta, Tb].forEach((T, f) =>
        bags[f]!.forEach((bag, s) => {
          for (const id of bag) for (let k = 0; k < 2; k++) out[s * 4 + f * 2 + k]! += T[id * 2 + k]!;
        }),
      );
      return out;
    };
    const loss = () => ref.bce(ref.denseForward(spec, P, dense, pooled(), B), labels);
    const wantLoss = loss();
    const gP = ref.fdGradient(loss, P), gA = ref.fdGradient(loss, Ta), gB = ref.fdGradient(loss, Tb);

    const got = await trainer.step({ dense, sparse, labels, size: B });
    expect(got).toBeCloseTo(wantLoss, 5);
    expect(trainer.stepCount).toBe(1);
    expect(ref.worstRatio(trainer.dense.params, P.map((p, i) => p - 0.05 * gP[i]!), 2e-6, 1e-4)).toBeLessThanOrEqual(1);
    expect(ref.worstRatio(emb.readRows('a', [0, 1, 2, 3, 4, 5]), Ta.map((v, i) => v - 0.1 * gA[i]!), 2e-6, 1e-4)).toBeLessThanOrEqual(1);
    expect(ref.worstRatio(emb.readRows('b', [0, 1, 2, 3, 4]), Tb.map((v, i) => v - 0.1 * gB[i]!), 2e-6, 1e-4)).toBeLessThanOrEqual(1);
    // row 4 of table a is in no bag: untouched
    expect(gA[8]).toBe(0);
    expect(Array.from(emb.readRows('a', [4]))).toEqual([Math.fround(Ta[8]!), Math.fround(Ta[9]!)]);
    emb.dispose();
  });

  it('rejects a batch whose shapes disagree with the model before anything runs', async () => {
    const emb = new EmbeddingCollection({ tables: [{ name: 'a', rows: 6, dim: 2 }, { name: 'b', rows: 5, dim: 2 }] });
    const trainer = new Trainer({ model: spec, embeddings: emb, seed: 4 });
    const before = trainer.dense.params.slice();
    const sparse = JaggedBatch.fromBags(['a', 'b'], bags);
    expect(() => trainer.step({ dense: new Float32Array(5), sparse, labels: new Float32Array(4), size: 4 })).toThrow(
      expect.objectContaining({ code: 'LENGTH_MISMATCH', message: expect.stringMatching(/batch\.dense/) }),
    );
    expect(() => trainer.step({ dense: new Float32Array(12), sparse, labels: new Float32Array(3), size: 4 })).toThrow(
      expect.objectContaining({ code: 'LENGTH_MISMATCH', message: expect.stringMatching(/batch\.labels/) }),
    );
    expect(trainer.dense.params).toEqual(before);
    expect(trainer.stepCount).toBe(0);
    // a model whose embedding width disagrees with the collection
    expect(() => new Trainer({ model: { ...spec, embDim: 3, bottom: [4, 3] }, embeddings: emb })).toThrow(
      expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringMatching(/pooledDim/) }),
    );
    expect(() => new Trainer({ model: spec })).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG' }));
    emb.dispose();
  });
});

// async.test.ts — long steps run off the event loop (a 1 ms timer keeps firing), calls on one collection
// are queued in order and never interleave (a learning rate set between them included), and dispose waits for nothing but blocks later use.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, JaggedBatch } from '../../lib/index.js';

function bigBatch(rows: number, B: number, L: number): JaggedBatch {
  const ids = new BigInt64Array(B * L);
  let x = 12345n;
  for (let i = 0; i < ids.length; i++) {
    x = (x * 6364136223846793005n + 1442695040888963407n) & 0xffffffffffffffffn;
    ids[i] = (x >> 33n) % BigInt(rows);
  }
  return JaggedBatch.fromLengths({ features: ['t'], batchSize: B, lengths: new Int32Array(B).fill(L), ids });
}

describe('async behaviour', () => {
  it('the event loop keeps firing a 1 ms timer while a long step runs', async () => {
    const ec = new EmbeddingCollection({ tables: [{ name: 't', rows: 2_000_000, dim: 64 }], optimizer: { type: 'adam', lr: 0.01 } });
    const batch = bigBatch(2_000_000, 4096, 100);
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    const t0 = performance.now();
    let steps = 0;
    while (performance.now() - t0 < 400 || steps < 2) {
      const out = await ec.forward(batch);
      await ec.backward(out, { pooled: new Float32Array(out.pooled.length).fill(1e-3) });
      steps++;
    }
    const elapsed = performance.now() - t0;
    clearInterval(timer);
    // a blocked loop would fire ~once per step; a free one fires every few ms
    expect(ticks).toBeGreaterThan(Math.max(steps * 3, elapsed / 20));
    ec.dispose();
  });

  it('queued calls run in order and see each other’s effects', async () => {
    const ec = new EmbeddingCollection({ tables: [{ name: 't', rows: 4, dim: 2, init: { type: 'constant', value: 1 } }], optimizer: { type: 'sgd', lr: 1 } });
    const batch = JaggedBatch.fromLengths({ features: ['t'], batchSize: 1, lengths: Int32Array.of(1), ids: BigInt64Array.of(2n) });
    // five outputs of the same batch (a backward reads only its batch and the gradients), then 5 updates
    // and a forward fired without awaiting in between
    const outs = [1, 2, 3, 4, 5].map(() => ec.forwardSync(batch));
    const ps = outs.map((out) => ec.backward(out, { pooled: Float32Array.of(0.5, 0.25) }));
    const f = ec.forward(batch);
    await Promise.all(ps);
    expect(Array.from((await f).pooled)).toEqual([1 - 2.5, 1 - 1.25]);
    expect(ec.step).toBe(5);
    ec.dispose();
  });

  it('a learning rate set while steps are queued applies to the steps called after it, not to those before', async () => {
    const ec = new EmbeddingCollection({ tables: [{ name: 't', rows: 4, dim: 2, init: { type: 'constant', value: 1 } }], optimizer: { type: 'sgd', lr: 1 } });
    const batch = JaggedBatch.fromLengths({ features: ['t'], batchSize: 1, lengths: Int32Array.of(1), ids: BigInt64Array.of(2n) });
    const [out1, out2, out3] = [1, 2, 3].map(() => ec.forwardSync(batch));
    const g = { pooled: Float32Array.of(0.5, 0.25) };
    const dir = mkdtempSync(join(tmpdir(), 'embshard-lr-'));
    try {
      const b1 = ec.backward(out1!, g); // lr 1
      ec.setLearningRate(10);
      expect(ec.learningRate).toBe(10);
      const b2 = ec.backward(out2!, g); // lr 10
      const saved = ec.save(dir); // written with lr 10
      ec.setLearningRate(100);
      expect(() => ec.setLearningRate(-1)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
      const f = ec.forward(batch);
      await Promise.all([b1, b2, saved]);
      // w = 1 − 1·g − 10·g
      expect(Array.from((await f).pooled)).toEqual([1 - 0.5 - 5, 1 - 0.25 - 2.5]);
      expect(ec.learningRate).toBe(100);
      const back = await EmbeddingCollection.load(dir);
      expect(back.learningRate).toBe(10);
      back.dispose();
      await ec.backward(out3!, g); // lr 100
      expect(Array.from(ec.readRows('t', [2]))).toEqual([1 - 0.5 - 5 - 50, 1 - 0.25 - 2.5 - 25]);
    } finally {
      ec.dispose();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a failing call does not break the queue', async () => {
    const ec = new EmbeddingCollection({ tables: [{ name: 't', rows: 4, dim: 2 }] });
    const bad = JaggedBatch.fromLengths({ features: ['t'], batchSize: 1, lengths: Int32Array.of(1), ids: BigInt64Array.of(9n) });
    const good = JaggedBatch.fromLengths({ features: ['t'], batchSize: 1, lengths: Int32Array.of(1), ids: BigInt64Array.of(1n) });
    const p1 = ec.forward(bad);
    const p2 = ec.forward(good);
    await expect(p1).rejects.toMatchObject({ code: 'ID_OUT_OF_RANGE' });
    expect((await p2).pooled.length).toBe(2);
    ec.dispose();
  });
});

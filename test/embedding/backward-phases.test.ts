// backward-phases.test.ts — backwardPhases(): the CPU engine's phase times of its last backward, in the
// order the phases ran, each a time within the wall time of the backward call that produced them; null
// before the first backward, and unchanged by a call rejected before it reaches the engine.
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, JaggedBatch } from '../../lib/index.js';

const PARTITIONED = ['copy+finite', 'keys', 'partition', 'several', 'single'];

function collection(): EmbeddingCollection {
  return new EmbeddingCollection({ tables: [{ name: 't', rows: 5000, dim: 16, features: ['f', 'g'] }], seed: 3 });
}

function batch(seed: number): JaggedBatch {
  const B = 256, L = 4;
  const ids = new Int32Array(2 * B * L);
  for (let i = 0; i < ids.length; i++) ids[i] = (i * 2654435761 + seed * 97) % 5000;
  return JaggedBatch.fromLengths({ features: ['f', 'g'], batchSize: B, lengths: new Int32Array(2 * B).fill(L), ids });
}

describe('backwardPhases', () => {
  it('is null before the first backward', () => {
    const ec = collection();
    expect(ec.backwardPhases()).toBeNull();
    ec.dispose();
  });

  it('names every phase of the last backward in order, each within the call\'s wall time', async () => {
    const ec = collection();
    for (let step = 0; step < 3; step++) {
      const out = await ec.forward(batch(step));
      const t0 = performance.now();
      await ec.backward(out, { pooled: new Float32Array(256 * ec.pooledDim).fill(0.01) });
      const wall = performance.now() - t0;
      const phases = ec.backwardPhases()!;
      expect(Object.keys(phases)).toEqual(PARTITIONED);
      const ms = Object.values(phases);
      for (const v of ms) expect(v).toBeGreaterThanOrEqual(0);
      expect(ms.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(wall);
    }
    ec.dispose();
  });

  it('keeps the last backward\'s phases when a later call is rejected before the engine', async () => {
    const ec = collection();
    const out = await ec.forward(batch(1));
    await ec.backward(out, { pooled: new Float32Array(256 * ec.pooledDim) });
    const before = ec.backwardPhases();
    const out2 = await ec.forward(batch(2));
    await expect(ec.backward(out2, { pooled: new Float32Array(3) })).rejects.toMatchObject({ code: 'GRAD_SIZE_MISMATCH' });
    expect(ec.backwardPhases()).toEqual(before);
    ec.dispose();
  });
});

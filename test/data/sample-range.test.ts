// sample-range.test.ts — the held-out split's size: the last ⌈fraction × N⌉ samples of the fraction as written,
// checked in integers (ceil(k·n / 100) for k/100), not with the double product, which rounds 0.07 × 100 up to
// 7.000000000000001. A source that never ends is refused rather than counted forever.
import { describe, it, expect } from 'vitest';
import { countSamples, heldOutSplit } from '../../lib/data/sample-range.js';
import { PrefetchSource } from '../../lib/data/prefetch.js';
import { SyntheticSource } from '../../lib/data/synthetic.js';
import type { Batch, BatchSource } from '../../lib/data/types.js';

/** A source that says how many samples it holds and is never read. */
function counted(n: number): BatchSource & { numSamples: number } {
  return {
    numSamples: n, features: ['a'], numDense: 0, batchSize: 1,
    async *[Symbol.asyncIterator](): AsyncIterator<Batch> {
      throw new Error('not read');
    },
  };
}

describe('heldOutSplit', () => {
  it('holds out exactly ⌈fraction × N⌉ samples, also where the double product rounds up past an integer', async () => {
    expect(0.07 * 100).toBeGreaterThan(7); // the rounding this guards against
    for (const [f, n, held] of [[0.07, 100, 7], [0.07, 1500, 105], [0.1, 3, 1], [0.25, 103, 26], [0.3, 20, 6], [1e-7, 10 ** 7, 1], [1e-7, 10 ** 7 + 1, 2]] as const) {
      const s = await heldOutSplit(counted(n), f);
      expect([f, n, s.total - s.evalStart]).toEqual([f, n, held]);
    }
    // every k/100 against ceil(k·n / 100) in integers
    for (let k = 1; k < 100; k++)
      for (const n of [2, 3, 7, 10, 99, 100, 300, 1234, 12345, 10 ** 9, 2 ** 53 - 1]) {
        const want = Number((BigInt(k) * BigInt(n) + 99n) / 100n);
        if (want >= n) continue;
        const s = await heldOutSplit(counted(n), k / 100);
        expect([k, n, s.evalStart]).toEqual([k, n, n - want]);
      }
  });

  it('the held-out range of a real source is its last ⌈fraction × N⌉ samples', async () => {
    const src = new SyntheticSource({ batchSize: 4, numBatches: 5, cardinalities: [50], seed: 3 }); // 20 samples
    const all: number[] = [];
    for await (const b of src) all.push(...b.sparse.ids);
    const s = await heldOutSplit(src, 0.3);
    expect([s.total, s.evalStart]).toEqual([20, 14]);
    const ev: number[] = [];
    for await (const b of s.eval) ev.push(...b.sparse.ids);
    expect(ev).toEqual(all.slice(14));
  });

  it('an endless source (synthetic data without numBatches) is refused at once, through a prefetch queue too', async () => {
    const endless = new SyntheticSource({ batchSize: 4, cardinalities: [50], seed: 3 });
    await expect(heldOutSplit(endless, 0.1)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/never ends/) });
    await expect(countSamples(new PrefetchSource(endless, { depth: 2 }))).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    // a finite one is counted by reading it: 3 batches of 4
    expect(await countSamples(new SyntheticSource({ batchSize: 4, numBatches: 3, cardinalities: [50], seed: 3 }))).toBe(12);
  });
});

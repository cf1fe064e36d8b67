// large-collection.test.ts — the CPU backward of a collection over 2^28 rows, which groups contributions
// by a stable radix sort of (row key, position) instead of the row partitions: a 2^28 + 4096-row table
// (1 GiB of fp32 weights at width 1) and a small table after it in the key space, a step whose ~50 k ids
// fall on a few hundred rows of each (some past 2^28), against an oracle written from the math (each
// row's contributions summed in id order in fp32, then w − lr · sum with lr a power of two, so every
// value is exact) — bit for bit; and backwardPhases() names that path's phases.
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, JaggedBatch } from '../../lib/index.js';
import { rng } from './oracle.js';

const BIG = 2 ** 28 + 4096, SMALL = 100, SMALL_DIM = 4, B = 4096, LR = 0.5;

describe('CPU backward over 2^28 rows (radix-sorted grouping)', () => {
  it('updates every touched row once with its contributions summed in id order', async () => {
    const r = rng(28);
    const ec = new EmbeddingCollection({
      tables: [
        { name: 'big', rows: BIG, dim: 1, features: ['f'] },
        { name: 'small', rows: SMALL, dim: SMALL_DIM, features: ['g'] },
      ],
      optimizer: { type: 'sgd', lr: LR },
      seed: 5,
    });
    try {
      // a few hundred rows of the big table (a tenth of them past 2^28) and every row of the small one
      const pool = Array.from({ length: 400 }, (_, k) => (k % 10 === 0 ? 2 ** 28 + Math.floor(r() * 4096) : Math.floor(r() * 2 ** 28)));
      const lengths = new Int32Array(2 * B);
      const ids: number[] = [];
      for (let f = 0; f < 2; f++)
        for (let b = 0; b < B; b++) {
          const n = 1 + Math.floor(r() * 12);
          lengths[f * B + b] = n;
          for (let k = 0; k < n; k++) ids.push(f === 0 ? pool[Math.floor(r() * pool.length)]! : Math.floor(r() * SMALL));
        }
      const batch = JaggedBatch.fromLengths({ features: ['f', 'g'], batchSize: B, lengths, ids: BigInt64Array.from(ids, (x) => BigInt(x)) });
      expect(ids.length).toBeGreaterThan(1 << 15); // enough ids for the sort's threads
      const P = ec.pooledDim; // 1 + SMALL_DIM
      const grad = new Float32Array(B * P).map(() => r() * 2 - 1);

      // the oracle: per row, Σ of its ids' bag gradients in id order (fp32), then w − lr · Σ
      const sums = [new Map<number, Float32Array>(), new Map<number, Float32Array>()];
      const dims = [1, SMALL_DIM], cols = [0, 1];
      let i = 0;
      for (let f = 0; f < 2; f++)
        for (let b = 0; b < B; b++)
          for (let k = 0; k < lengths[f * B + b]!; k++, i++) {
            const row = ids[i]!;
            let s = sums[f]!.get(row);
            if (!s) sums[f]!.set(row, (s = new Float32Array(dims[f]!)));
            for (let c = 0; c < dims[f]!; c++) s[c] = s[c]! + grad[b * P + cols[f]! + c]!;
          }
      const rowsOf = (f: number) => BigInt64Array.from([...sums[f]!.keys()], (x) => BigInt(x));
      // rows no id touches: the last rows of the big table that are not in the pool
      const untouched = BigInt64Array.from([2 ** 28 + 4095, 2 ** 28 + 4094, 2 ** 28 - 1].filter((x) => !pool.includes(x)), (x) => BigInt(x));
      const before = [await ec.readRows('big', rowsOf(0)), await ec.readRows('small', rowsOf(1))];
      const untouchedBefore = await ec.readRows('big', untouched);
      const out = await ec.forward(batch);
      await ec.backward(out, { pooled: grad });
      const after = [await ec.readRows('big', rowsOf(0)), await ec.readRows('small', rowsOf(1))];
      for (let f = 0; f < 2; f++) {
        const s = [...sums[f]!.values()];
        const expected = new Float32Array(before[f]!.length);
        for (let u = 0; u < s.length; u++)
          for (let c = 0; c < dims[f]!; c++) expected[u * dims[f]! + c] = before[f]![u * dims[f]! + c]! - LR * s[u]![c]!;
        expect(after[f]).toEqual(expected);
      }
      expect(untouched.length).toBeGreaterThan(0);
      expect(await ec.readRows('big', untouched)).toEqual(untouchedBefore);
      expect(Object.keys(ec.backwardPhases()!)).toEqual(['copy+finite', 'keys', 'sort', 'update']);
    } finally {
      ec.dispose();
    }
  }, 60_000);
});

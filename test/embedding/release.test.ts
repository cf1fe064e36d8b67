// release.test.ts — how a forward output's memory comes back: backward(out) consumes it (its arrays are
// detached and reused by later calls) unless keepOutput; release(out) for kept outputs. Later results
// stay right (checked against the naive oracle); arrays embshard did not make are left alone; a failed
// backward leaves the output readable.
import { describe, expect, it } from 'vitest';
import { EmbshardError, JaggedBatch } from '../../lib/index.js';
import type { ForwardOutput } from '../../lib/index.js';
import { allRows, pair, randomBatch, randomGrads } from './helpers.js';
import { rng, worst } from './oracle.js';

const tables = [
  { name: 'a', rows: 40, dim: 64, features: ['a'] },
  { name: 'b', rows: 30, dim: 3, pooling: 'mean' as const, features: ['b'] },
  { name: 's', rows: 20, dim: 16, pooling: 'none' as const, features: ['s'] },
];

describe('backward(out) consumes the output', () => {
  it('detaches the output arrays after the update, and later outputs (reusing the memory) still match the oracle', async () => {
    const { ec, oracle } = pair(tables, { type: 'rowwise_adagrad', lr: 0.05 });
    const r = rng(5);
    for (let step = 0; step < 6; step++) {
      const { batch, ob } = randomBatch(ec, r, { B: 33, maxLen: 6, weights: step % 2 === 1 });
      const out = step % 3 === 2 ? ec.forwardSync(batch) : await ec.forward(batch);
      const want = oracle.forward(ob);
      expect(worst(out.pooled, want.pooled, 1e-5, 1e-6)).toBeLessThanOrEqual(1);
      expect(worst(out.sequences.s!.values, want.seq.get('s')!, 1e-5, 1e-6)).toBeLessThanOrEqual(1);
      const g = randomGrads(ec, ob, r);
      if (step % 3 === 1) ec.backwardSync(out, { pooled: g.pooled, sequences: g.sequences });
      else await ec.backward(out, { pooled: g.pooled, sequences: g.sequences });
      oracle.backward(ob, g.pooled, g.seqMap);
      expect(out.pooled.length).toBe(0);
      expect(out.pooled.buffer.byteLength).toBe(0);
      expect(out.sequences.s!.values.length).toBe(0);
      expect(await ec.release(out)).toBe(0); // nothing left to release
    }
    tables.forEach((t, i) => expect(worst(allRows(ec, t.name), oracle.tables[i]!.w, 2e-5, 1e-6), t.name).toBeLessThanOrEqual(1));
    ec.dispose();
  });

  it('a failed backward leaves the output readable and the tables unchanged; a retry consumes it', async () => {
    const { ec, oracle } = pair(tables, { type: 'sgd', lr: 0.1 });
    const r = rng(8);
    const { batch, ob } = randomBatch(ec, r, { B: 9, maxLen: 4 });
    const out = await ec.forward(batch);
    const pooled = Array.from(out.pooled);
    const before = tables.map((t) => allRows(ec, t.name));
    const g = randomGrads(ec, ob, r);
    await expect(ec.backward(out, { pooled: new Float32Array(3), sequences: g.sequences })).rejects.toMatchObject({ code: 'GRAD_SIZE_MISMATCH' });
    expect(Array.from(out.pooled)).toEqual(pooled);
    tables.forEach((t, i) => expect(Array.from(allRows(ec, t.name))).toEqual(Array.from(before[i]!)));
    await ec.backward(out, { pooled: g.pooled, sequences: g.sequences });
    oracle.backward(ob, g.pooled, g.seqMap);
    expect(out.pooled.length).toBe(0);
    tables.forEach((t, i) => expect(worst(allRows(ec, t.name), oracle.tables[i]!.w, 2e-5, 1e-6), t.name).toBeLessThanOrEqual(1));
    ec.dispose();
  });

  it('an output with its batch replaced is checked against that batch and not consumed', async () => {
    const { ec } = pair(tables, { type: 'sgd', lr: 0.1 });
    const r = rng(4);
    const { batch, ob } = randomBatch(ec, r, { B: 6, maxLen: 3 });
    const out = await ec.forward(batch);
    const g = randomGrads(ec, ob, r);
    // the same shape, one id out of range: the backward must see this batch, not the forward's
    const ids = BigInt64Array.from(batch.ids as BigInt64Array);
    if (ids.length === 0) return;
    ids[ids.length - 1] = 10_000n;
    const other = JaggedBatch.fromLengths({ features: [...batch.features], batchSize: batch.batchSize, lengths: batch.lengths, ids });
    await expect(ec.backward({ ...out, batch: other }, { pooled: g.pooled, sequences: g.sequences })).rejects.toMatchObject({ code: 'ID_OUT_OF_RANGE' });
    expect(out.pooled.length).toBe(6 * ec.pooledDim);
    ec.dispose();
  });
});

describe('release(out)', () => {
  it('detaches kept output arrays, and later outputs (reusing the memory) still match the oracle', async () => {
    const { ec, oracle } = pair(tables, { type: 'adagrad', lr: 0.05 });
    const r = rng(11);
    for (let step = 0; step < 6; step++) {
      const { batch, ob } = randomBatch(ec, r, { B: 33, maxLen: 6 });
      const out = await ec.forward(batch);
      const want = oracle.forward(ob);
      expect(worst(out.pooled, want.pooled, 1e-5, 1e-6)).toBeLessThanOrEqual(1);
      expect(worst(out.sequences.s!.values, want.seq.get('s')!, 1e-5, 1e-6)).toBeLessThanOrEqual(1);
      const g = randomGrads(ec, ob, r);
      await ec.backward(out, { pooled: g.pooled, sequences: g.sequences }, { keepOutput: true });
      oracle.backward(ob, g.pooled, g.seqMap);
      expect(worst(out.pooled, want.pooled, 1e-5, 1e-6)).toBeLessThanOrEqual(1); // kept: still readable
      const n = await ec.release(out);
      expect(n).toBe(2); // pooled + one sequence
      expect(out.pooled.length).toBe(0);
      expect(out.pooled.buffer.byteLength).toBe(0);
      expect(out.sequences.s!.values.length).toBe(0);
    }
    tables.forEach((t, i) => expect(worst(allRows(ec, t.name), oracle.tables[i]!.w, 2e-5, 1e-6), t.name).toBeLessThanOrEqual(1));
    ec.dispose();
  });

  it('a second release, or arrays embshard did not make, release nothing and stay intact', async () => {
    const { ec } = pair(tables, { type: 'sgd', lr: 0.1 });
    const { batch } = randomBatch(ec, rng(3), { B: 8, maxLen: 4 });
    const out = await ec.forward(batch);
    expect(await ec.release(out)).toBe(2);
    expect(await ec.release(out)).toBe(0);
    const mine = new Float32Array(8 * ec.pooledDim).fill(1.5);
    const foreign: ForwardOutput = { pooled: mine, sequences: {}, batch };
    expect(await ec.release(foreign)).toBe(0);
    expect(mine.length).toBe(8 * ec.pooledDim);
    expect(mine[0]).toBe(1.5);
    ec.dispose();
  });

  it('rejects what is not a forward output with INVALID_ARGUMENT', async () => {
    const { ec } = pair(tables, { type: 'sgd', lr: 0.1 });
    const err = await ec.release({} as ForwardOutput).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EmbshardError);
    expect((err as EmbshardError).code).toBe('INVALID_ARGUMENT');
    ec.dispose();
  });
});

// errors.test.ts — every bad input raises EmbshardError with its code before any state changes, and
// the collection keeps working with its tables exactly as they were.
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError, JaggedBatch } from '../../lib/index.js';
import type { CollectionConfig } from '../../lib/index.js';
import { snapshot } from './helpers.js';

const config: CollectionConfig = {
  tables: [
    { name: 'u', rows: 10, dim: 4, pooling: 'sum' },
    { name: 'i', rows: 6, dim: 3, pooling: 'mean', features: ['i1', 'i2'] },
    { name: 'h', rows: 5, dim: 2, pooling: 'none' },
  ],
  optimizer: { type: 'adam', lr: 0.1 },
  seed: 3,
};
const F = ['u', 'i1', 'i2', 'h'];

function batch(ids: bigint[], lengths: number[], features = F, B = 2, weights?: Float32Array) {
  return JaggedBatch.fromLengths({ features, batchSize: B, lengths: Int32Array.from(lengths), ids: BigInt64Array.from(ids), weights });
}
const good = () => batch([1n, 2n, 0n, 5n, 3n, 4n, 1n], [1, 1, 1, 1, 1, 0, 1, 1]);

async function code(p: Promise<unknown> | (() => unknown)): Promise<string> {
  try {
    if (typeof p === "function") await p();
    else await p;
  } catch (e) {
    expect(e).toBeInstanceOf(EmbshardError);
    return (e as EmbshardError).code;
  }
  return 'no error';
}

async function trainStep(ec: EmbeddingCollection) {
  const out = await ec.forward(good());
  await ec.backward(out, { pooled: new Float32Array(2 * ec.pooledDim).fill(0.5), sequences: { h: new Float32Array(2 * 2).fill(0.5) } });
}

describe('bad input is rejected before any state changes', () => {
  it('batch and gradient errors leave the tables and the step exactly as they were', async () => {
    const ec = new EmbeddingCollection(config);
    await trainStep(ec); // optimizer state is non-zero from here on
    const before = snapshot(ec);
    const step = ec.step;
    const out = await ec.forward(good());
    const grads = { pooled: new Float32Array(2 * ec.pooledDim).fill(1), sequences: { h: new Float32Array(4).fill(1) } };
    const cases: [string, () => Promise<unknown>][] = [
      ['ID_OUT_OF_RANGE', () => ec.forward(batch([10n, 2n, 0n, 5n, 3n, 4n, 1n], [1, 1, 1, 1, 1, 0, 1, 1]))],
      ['ID_OUT_OF_RANGE', () => ec.forward(batch([-1n, 2n, 0n, 5n, 3n, 4n, 1n], [1, 1, 1, 1, 1, 0, 1, 1]))],
      ['ID_OUT_OF_RANGE', () => ec.backward({ ...out, batch: batch([1n, 2n, 0n, 5n, 3n, 4n, 9n], [1, 1, 1, 1, 1, 0, 1, 1]) }, grads)],
      ['LENGTH_MISMATCH', () => ec.forward(batch([1n, 2n], [1, 1, 1, 1, 1, 0, 1, 1]))],
      ['NEGATIVE_LENGTH', () => ec.forward(batch([1n, 2n, 0n, 5n, 3n], [1, 1, 1, 1, 1, -1, 1, 1]))],
      ['UNKNOWN_FEATURE', () => ec.forward(batch([1n, 2n, 0n, 5n, 3n, 4n, 1n], [1, 1, 1, 1, 1, 0, 1, 1], ['u', 'i1', 'zz', 'h']))],
      ['MISSING_FEATURE', () => ec.forward(batch([1n, 2n, 0n, 5n, 3n], [1, 1, 1, 1, 1, 0], ['u', 'i1', 'h']))],
      ['GRAD_SIZE_MISMATCH', () => ec.backward(out, { pooled: new Float32Array(3), sequences: grads.sequences })],
      ['GRAD_SIZE_MISMATCH', () => ec.backward(out, { sequences: grads.sequences })],
      ['GRAD_SIZE_MISMATCH', () => ec.backward(out, { pooled: grads.pooled, sequences: { h: new Float32Array(3) } })],
      ['UNKNOWN_FEATURE', () => ec.backward(out, { pooled: grads.pooled, sequences: { ...grads.sequences, u: new Float32Array(1) } })],
      ['NON_FINITE_GRADIENT', () => ec.backward(out, { pooled: grads.pooled.map((x, i) => (i === 5 ? NaN : x)), sequences: grads.sequences })],
      ['NON_FINITE_GRADIENT', () => ec.backward(out, { pooled: grads.pooled, sequences: { h: Float32Array.of(1, Infinity, 1, 1) } })],
      ['LENGTH_MISMATCH', () => ec.forward(JaggedBatch.fromBags(F, [[[1]], [[2]], [[0]], [[1]]])).then(() => ec.forward(batch([1n], [1, 0, 0, 0, 0, 0, 0, 0], F, 2, Float32Array.of(1, 2))))],
    ];
    for (const [want, fn] of cases) {
      expect(await code(fn()), want).toBe(want);
    }
    // sync twins too
    expect(await code(() => ec.forwardSync(batch([99n, 2n, 0n, 5n, 3n, 4n, 1n], [1, 1, 1, 1, 1, 0, 1, 1])))).toBe('ID_OUT_OF_RANGE');
    expect(await code(() => ec.backwardSync(out, { pooled: new Float32Array(1), sequences: grads.sequences }))).toBe('GRAD_SIZE_MISMATCH');
    // row access
    expect(await code(() => ec.readRows('u', [10n]))).toBe('ID_OUT_OF_RANGE');
    expect(await code(() => ec.readRows('nope', [1n]))).toBe('UNKNOWN_TABLE');
    expect(await code(() => ec.writeRows('u', [1n], new Float32Array(3)))).toBe('DIM_MISMATCH');
    expect(await code(() => ec.writeRows('u', [-2n], new Float32Array(4)))).toBe('ID_OUT_OF_RANGE');
    // nothing changed
    expect(ec.step).toBe(step);
    const after = snapshot(ec);
    after.forEach((a, k) => expect(Array.from(a), `array ${k}`).toEqual(Array.from(before[k]!)));
    // and the collection still trains
    await trainStep(ec);
    expect(ec.step).toBe(step + 1);
    ec.dispose();
  });

  it('an output goes through one backward: a second one (kept, queued or sync) is INVALID_ARGUMENT and changes nothing', async () => {
    const sgd: CollectionConfig = { tables: [{ name: 't', rows: 4, dim: 2 }], optimizer: { type: 'sgd', lr: 1 }, seed: 5 };
    const ec = new EmbeddingCollection(sgd);
    const one = () => batch([2n], [1], ['t'], 1);
    const g = { pooled: Float32Array.of(0.25, -0.5) };
    const w0 = Array.from(ec.readRows('t', [2n]));
    // SGD with lr 1 on one id: w ← w − g (closed form, in fp32)
    const after = (w: number[], k: number) => w.map((x, j) => Math.fround(x - k * g.pooled[j]!));
    const out = await ec.forward(one());
    await ec.backward(out, g);
    expect(Array.from(ec.readRows('t', [2n]))).toEqual(after(w0, 1));
    const err = await ec.backward(out, g).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EmbshardError);
    expect((err as EmbshardError).code).toBe('INVALID_ARGUMENT');
    expect((err as EmbshardError).message).toMatch(/already been through backward/);
    expect(await code(() => ec.backwardSync(out, g))).toBe('INVALID_ARGUMENT');
    expect(ec.step).toBe(1);
    // kept: still readable, still one backward
    const kept = await ec.forward(one());
    await ec.backward(kept, g, { keepOutput: true });
    expect(kept.pooled.length).toBe(2);
    expect(await code(ec.backward(kept, g))).toBe('INVALID_ARGUMENT');
    expect(await ec.release(kept)).toBe(1);
    // two backwards queued without awaiting: the first applies, the second is refused when its turn comes
    const twice = await ec.forward(one());
    const [a, b] = await Promise.allSettled([ec.backward(twice, g), ec.backward(twice, g)]);
    expect(a.status).toBe('fulfilled');
    expect(b.status === 'rejected' && (b.reason as EmbshardError).code).toBe('INVALID_ARGUMENT');
    expect(Array.from(ec.readRows('t', [2n]))).toEqual(after(after(after(w0, 1), 1), 1));
    expect(ec.step).toBe(3);
    // a refused backward leaves its output usable: bad gradients first, then good ones apply once
    const retry = await ec.forward(one());
    expect(await code(ec.backward(retry, { pooled: new Float32Array(3) }))).toBe('GRAD_SIZE_MISMATCH');
    await ec.backward(retry, g);
    expect(ec.step).toBe(4);
    ec.dispose();
  });

  it("nonFinite: 'skip' skips the step without changing anything", async () => {
    const ec = new EmbeddingCollection({ ...config, optimizer: { type: 'adagrad', lr: 0.1, nonFinite: 'skip' } });
    const before = snapshot(ec);
    const out = await ec.forward(good());
    const res = await ec.backward(out, { pooled: new Float32Array(2 * ec.pooledDim).fill(NaN), sequences: { h: new Float32Array(4) } });
    expect(res.skipped).toBe(true);
    expect(ec.step).toBe(0);
    snapshot(ec).forEach((a, k) => expect(Array.from(a)).toEqual(Array.from(before[k]!)));
    ec.dispose();
  });

  it("idPolicy 'modulo' wraps out-of-range and negative ids", async () => {
    const ec = new EmbeddingCollection({ tables: [{ name: 't', rows: 7, dim: 2, idPolicy: 'modulo' }] });
    const rows = ec.readRows('t', [3n, 6n]);
    const out = await ec.forward(JaggedBatch.fromLengths({ features: ['t'], batchSize: 2, lengths: Int32Array.of(1, 1), ids: BigInt64Array.of(10n, -1n) }));
    expect(Array.from(out.pooled)).toEqual(Array.from(rows));
    ec.dispose();
  });

  it('config errors', async () => {
    const cases: [string, CollectionConfig][] = [
      ['UNSUPPORTED_DTYPE', { tables: [{ name: 't', rows: 4, dim: 2, dtype: 'fp64' as never }] }],
      ['UNSUPPORTED_OPTIMIZER', { tables: [{ name: 't', rows: 4, dim: 2 }], optimizer: { type: 'lamb' as never, lr: 1 } }],
      ['DUPLICATE_FEATURE', { tables: [{ name: 't', rows: 4, dim: 2, features: ['x'] }, { name: 's', rows: 4, dim: 2, features: ['x'] }] }],
      ['INVALID_SIZE', { tables: [{ name: 't', rows: 0, dim: 2 }] }],
      ['INVALID_SIZE', { tables: [{ name: 't', rows: 4, dim: 0 }] }],
      ['INVALID_SIZE', { tables: [{ name: 't', rows: 2 ** 41, dim: 2 }] }],
      ['INVALID_SIZE', { tables: [{ name: 't', rows: 4, dim: 1e6 }] }],
      // 20 tables of 2^58 bytes: the total would wrap a 64-bit byte count
      ['INVALID_SIZE', { tables: Array.from({ length: 20 }, (_, i) => ({ name: `t${i}`, rows: 2 ** 40, dim: 65536 })) }],
      ['INVALID_CONFIG', { tables: [] }],
      ['INVALID_CONFIG', { tables: [{ name: 't', rows: 4, dim: 2 }], optimizer: { type: 'sgd', lr: NaN } }],
      ['BACKEND_UNAVAILABLE', { tables: [{ name: 't', rows: 4, dim: 2 }], device: 'tpu:0' }],
      ['BACKEND_UNAVAILABLE', { tables: [{ name: 't', rows: 4, dim: 2 }], device: 'cuda:0' }],
      ['ALLOC_FAILED', { tables: [{ name: 'small', rows: 4, dim: 2 }, { name: 'huge', rows: 2 ** 40, dim: 64 }] }],
    ];
    for (const [want, cfg] of cases) {
      const got = await code(() => new EmbeddingCollection(cfg));
      if (want === 'BACKEND_UNAVAILABLE' && cfg.device === 'cuda:0' && got === 'no error') continue; // a GPU machine
      expect(got, JSON.stringify(cfg).slice(0, 120)).toBe(want);
    }
    try {
      new EmbeddingCollection({ tables: [{ name: 'huge', rows: 2 ** 40, dim: 64 }] });
    } catch (e) {
      expect((e as Error).message).toMatch(/huge/);
      expect((e as Error).message).toMatch(/281474976710656/);
    }
  });

  it('batch construction errors', () => {
    const bad = (f: () => unknown) => {
      try {
        f();
        return 'no error';
      } catch (e) {
        return (e as EmbshardError).code;
      }
    };
    expect(bad(() => JaggedBatch.fromLengths({ features: ['a'], batchSize: 2, lengths: Int32Array.of(1), ids: new BigInt64Array(1) }))).toBe('LENGTH_MISMATCH');
    expect(bad(() => JaggedBatch.fromLengths({ features: ['a'], batchSize: 1, lengths: Int32Array.of(1), ids: new Float64Array(1) as never }))).toBe('UNSUPPORTED_DTYPE');
    expect(bad(() => JaggedBatch.fromLengths({ features: ['a', 'a'], batchSize: 1, lengths: Int32Array.of(1, 1), ids: new BigInt64Array(2) }))).toBe('DUPLICATE_FEATURE');
    expect(bad(() => JaggedBatch.fromLengths({ features: ['a'], batchSize: 0, lengths: new Int32Array(0), ids: new BigInt64Array(0) }))).toBe('INVALID_SIZE');
    // fromBags: an id that is not an integer, a bag that is not an array, weights of another shape
    for (const id of [NaN, 1.5, Infinity, 2 ** 60]) expect(bad(() => JaggedBatch.fromBags(['a'], [[[0, id]]]))).toBe('INVALID_ARGUMENT');
    expect(() => JaggedBatch.fromBags(['a'], [[[0, 1.5]]])).toThrow('bags[0][0][1] is 1.5: ids must be integers');
    expect(bad(() => JaggedBatch.fromBags(['a'], [[5 as never]]))).toBe('INVALID_ARGUMENT');
    expect(bad(() => JaggedBatch.fromBags(['a'], [[[1, 2]]], [[[0.5]]]))).toBe('LENGTH_MISMATCH');
    expect(JaggedBatch.fromBags(['a'], [[[1, 2n ** 40n]]], [[[0.5, 2]]]).ids).toEqual(BigInt64Array.of(1n, 2n ** 40n));
  });

  it('a disposed collection raises DISPOSED', async () => {
    const ec = new EmbeddingCollection(config);
    ec.dispose();
    expect(await code(() => ec.readRows('u', [1n]))).toBe('DISPOSED');
    expect(await code(() => ec.forward(good()))).toBe('DISPOSED');
    expect(ec.disposed).toBe(true);
  });
});

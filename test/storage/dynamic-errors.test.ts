// dynamic-errors.test.ts — bad dynamic-table configs and bad input give a typed EmbshardError naming the
// field before anything changes: the id map (held ids, stats) and every row and state stay as they were.
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError, JaggedBatch, type CollectionConfig, type TableConfig } from '../../lib/index.js';

function raises(f: () => unknown, code: string, field?: string): void {
  let err: unknown;
  try {
    f();
  } catch (e) {
    err = e;
  }
  expect(err, 'an error was raised').toBeInstanceOf(EmbshardError);
  expect((err as EmbshardError).code).toBe(code);
  if (field) expect((err as EmbshardError).message).toContain(field);
}

async function rejects(p: Promise<unknown>, code: string, field?: string): Promise<void> {
  const err = await p.then(() => undefined, (e: unknown) => e);
  expect(err, 'the promise rejected').toBeInstanceOf(EmbshardError);
  expect((err as EmbshardError).code).toBe(code);
  if (field) expect((err as EmbshardError).message).toContain(field);
}

const dyn = (extra: Partial<TableConfig> & Record<string, unknown>): CollectionConfig => ({
  tables: [{ name: 'd', rows: 'dynamic', capacity: 8, dim: 4, ...extra } as TableConfig],
});

describe('dynamic table configs', () => {
  it('reject a missing, non-positive or fractional capacity naming the field', () => {
    raises(() => new EmbeddingCollection({ tables: [{ name: 'd', rows: 'dynamic', dim: 4 }] }), 'INVALID_CONFIG', 'tables[0].capacity');
    for (const capacity of [0, -3, 1.5, 2 ** 31, Number.NaN]) raises(() => new EmbeddingCollection(dyn({ capacity })), 'INVALID_SIZE', 'tables[0].capacity');
    raises(() => new EmbeddingCollection(dyn({ capacity: '8' as never })), 'INVALID_SIZE', 'tables[0].capacity');
  });

  it('reject dynamic fields on a table with numeric rows, bad admission / eviction, unknown fields and idPolicy', () => {
    raises(() => new EmbeddingCollection({ tables: [{ name: 'd', rows: 10, dim: 4, capacity: 8 }] }), 'INVALID_CONFIG', 'tables[0].capacity');
    raises(() => new EmbeddingCollection({ tables: [{ name: 'd', rows: 10, dim: 4, eviction: 'lru' }] }), 'INVALID_CONFIG', 'tables[0].eviction');
    raises(() => new EmbeddingCollection(dyn({ admission: { minCount: 0 } })), 'INVALID_CONFIG', 'tables[0].admission.minCount');
    raises(() => new EmbeddingCollection(dyn({ admission: { minCount: 2, candidates: 0 } })), 'INVALID_CONFIG', 'tables[0].admission.candidates');
    raises(() => new EmbeddingCollection(dyn({ admission: { minCount: 2, minCnt: 3 } as never })), 'INVALID_CONFIG', 'tables[0].admission.minCnt: unknown field');
    raises(() => new EmbeddingCollection(dyn({ eviction: 'fifo' as never })), 'INVALID_CONFIG', 'tables[0].eviction');
    raises(() => new EmbeddingCollection(dyn({ capacty: 8 })), 'INVALID_CONFIG', 'tables[0].capacty: unknown field');
    raises(() => new EmbeddingCollection(dyn({ idPolicy: 'modulo' })), 'INVALID_CONFIG', 'tables[0].idPolicy');
    raises(() => new EmbeddingCollection({ tables: [{ name: 'd', rows: 'Dynamic' as never, dim: 4 }] }), 'INVALID_SIZE', 'rows');
  });

  it('values nested deep, or huge, are named short in the message: no stack overflow, no message the size of the value', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 100_000; i++) deep = [deep];
    for (const [field, cfg] of [['capacity', { capacity: deep }], ['admission.minCount', { admission: { minCount: deep } }], ['eviction', { eviction: deep }], ['admission.default', { admission: { default: 'x'.repeat(1e6) } }]] as const) {
      raises(() => new EmbeddingCollection(dyn(cfg as never)), field === 'capacity' ? 'INVALID_SIZE' : 'INVALID_CONFIG', `tables[0].${field}`);
      try {
        new EmbeddingCollection(dyn(cfg as never));
      } catch (e) {
        expect((e as Error).message.length).toBeLessThan(400);
      }
    }
  });

  it('accept the documented fields', () => {
    const ec = new EmbeddingCollection(dyn({ admission: { minCount: 2, candidates: 100 }, eviction: 'lfu' }));
    expect(ec.tables[0]!.dynamic).toEqual({ capacity: 8, minCount: 2, candidates: 100, default: 'zero', eviction: 'lfu' });
    expect(ec.stats()).toEqual({ d: { hits: 0, misses: 0, admissions: 0, evictions: 0, rows: 0, candidates: 0 } });
    ec.dispose();
  });
});

describe('bad input to a collection with a dynamic table', () => {
  /** A collection that has trained two steps, and a snapshot of everything it holds. */
  async function trained() {
    const ec = new EmbeddingCollection({ tables: [{ name: 'd', rows: 'dynamic', capacity: 4, dim: 2, features: ['a'] }, { name: 's', rows: 5, dim: 2 }], optimizer: { type: 'adagrad', lr: 0.1 } });
    for (const ids of [[1n, 2n, 3n, 1n], [4n, 5n, 1n, 2n]]) {
      const batch = JaggedBatch.fromLengths({ features: ['a', 's'], batchSize: 2, lengths: Int32Array.of(2, 2, 1, 1), ids: BigInt64Array.of(...ids, 0n, 4n) });
      const out = await ec.forward(batch);
      await ec.backward(out, { pooled: new Float32Array(2 * ec.pooledDim).fill(0.5) });
    }
    const snap = () => {
      const held = ec.heldIds('d');
      return { held, stats: ec.stats(), rows: ec.readRows('d', held), state: ec.readState('d', held), s: ec.readRows('s', [0, 1, 2, 3, 4]) };
    };
    return { ec, snap, before: snap() };
  }

  it('wrong id types, a lengths sum that disagrees, unknown and missing features: errors, nothing changes', async () => {
    const { ec, snap, before } = await trained();
    raises(() => JaggedBatch.fromLengths({ features: ['a', 's'], batchSize: 1, lengths: Int32Array.of(1, 1), ids: Float64Array.of(9, 0) as never }), 'UNSUPPORTED_DTYPE', 'ids');
    await rejects(ec.forward({ features: ['a', 's'], ids: [9n, 0n] } as never), 'INVALID_ARGUMENT', 'JaggedBatch');
    const short = JaggedBatch.fromLengths({ features: ['a', 's'], batchSize: 1, lengths: Int32Array.of(2, 1), ids: BigInt64Array.of(9n, 0n) });
    await rejects(ec.forward(short), 'LENGTH_MISMATCH', 'lengths');
    const negative = JaggedBatch.fromLengths({ features: ['a', 's'], batchSize: 1, lengths: Int32Array.of(3, -1), ids: BigInt64Array.of(9n, 10n) });
    await rejects(ec.forward(negative), 'NEGATIVE_LENGTH', 'lengths');
    const unknown = JaggedBatch.fromLengths({ features: ['a', 'x'], batchSize: 1, lengths: Int32Array.of(1, 1), ids: BigInt64Array.of(9n, 0n) });
    await rejects(ec.forward(unknown), 'UNKNOWN_FEATURE', "'x'");
    const missing = JaggedBatch.fromLengths({ features: ['a'], batchSize: 1, lengths: Int32Array.of(1), ids: BigInt64Array.of(9n) });
    await rejects(ec.forward(missing), 'MISSING_FEATURE', "'s'");
    const ok = JaggedBatch.fromLengths({ features: ['a', 's'], batchSize: 1, lengths: Int32Array.of(1, 1), ids: BigInt64Array.of(9n, 0n) });
    await rejects(ec.forward(ok, { admitt: false } as never), 'INVALID_ARGUMENT', 'admitt');
    expect(snap()).toEqual(before);
    ec.dispose();
  });

  it('a non-finite gradient, a write to an id without a row, a stale output: errors, nothing changes', async () => {
    const { ec, snap, before } = await trained();
    const batch = JaggedBatch.fromLengths({ features: ['a', 's'], batchSize: 1, lengths: Int32Array.of(2, 1), ids: BigInt64Array.of(1n, 2n, 0n) });
    const out = await ec.forward(batch);
    const after = snap(); // 1 and 2 were hits: the map counted them, rows unchanged
    await rejects(ec.backward(out, { pooled: Float32Array.of(Number.NaN, 0, 0, 0) }), 'NON_FINITE_GRADIENT');
    expect(snap()).toEqual(after);
    raises(() => ec.writeRows('d', [77n], new Float32Array(2)), 'ID_OUT_OF_RANGE', '77');
    raises(() => ec.writeState('d', [1n, 78n], new Float32Array(4)), 'ID_OUT_OF_RANGE', '78');
    // an output older than an eviction cannot update: its slots may hold other ids now
    const fresh = JaggedBatch.fromLengths({ features: ['a', 's'], batchSize: 1, lengths: Int32Array.of(3, 0), ids: BigInt64Array.of(100n, 101n, 102n) });
    const evicting = await ec.forward(fresh);
    expect(ec.stats()['d']!.evictions).toBeGreaterThan(before.stats['d']!.evictions);
    const mid = snap();
    await rejects(ec.backward(out, { pooled: new Float32Array(ec.pooledDim).fill(1) }), 'INVALID_ARGUMENT', 'stale');
    expect(snap()).toEqual(mid);
    await ec.backward(evicting, { pooled: new Float32Array(ec.pooledDim).fill(1) });
    // the same when the evicting forward is only queued when backward is called
    const first = await ec.forward(JaggedBatch.fromLengths({ features: ['a', 's'], batchSize: 1, lengths: Int32Array.of(1, 0), ids: BigInt64Array.of(100n) }));
    const queued = ec.forward(JaggedBatch.fromLengths({ features: ['a', 's'], batchSize: 1, lengths: Int32Array.of(4, 0), ids: BigInt64Array.of(200n, 201n, 202n, 203n) }));
    const late = ec.backward(first, { pooled: new Float32Array(ec.pooledDim).fill(1) });
    await queued;
    await rejects(late, 'INVALID_ARGUMENT', 'stale');
    ec.dispose();
  });

  it('an evaluation forward (admit: false) admits nothing and reads zero for ids without a row', async () => {
    const { ec, snap, before } = await trained();
    const batch = JaggedBatch.fromLengths({ features: ['a', 's'], batchSize: 2, lengths: Int32Array.of(1, 1, 0, 0), ids: BigInt64Array.of(1n, 555n) });
    const out = await ec.forward(batch, { admit: false });
    expect(Array.from(out.pooled.subarray(0, 2))).toEqual(Array.from(ec.readRows('d', [1n])));
    expect(Array.from(out.pooled.subarray(4, 6))).toEqual([0, 0]);
    expect(snap()).toEqual(before);
    ec.dispose();
  });
});

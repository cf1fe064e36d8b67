// The hot-id remap (lib/plan/remap.ts, applied natively by native/shard/id_remap.h): on small tables, every
// id of [0, rows) against an oracle written from the definition (hot id i → row i; the cold ids below K, in
// order, take the rows the hot ids ≥ K left, in order; every other id keeps its row): a bijection, hot ids
// first, native apply = the definition, native invert ∘ apply = identity; the errors name the field.
import { describe, expect, it } from 'vitest';
import { loadAddon } from '../../lib/native.js';
import { IdRemap } from '../../lib/plan/remap.js';
import { normalizeTable } from '../../lib/plan/tables.js';
import { Rng } from '../../lib/random/rng.js';

interface NativeRemap {
  apply(ids: BigInt64Array | Int32Array | Uint32Array, out: BigInt64Array, what: string): void;
  invert(ids: BigInt64Array | Int32Array | Uint32Array, out: BigInt64Array, what: string): void;
}
const Native = (loadAddon() as unknown as { placement: { IdRemap: new (rows: number, from: BigInt64Array, to: BigInt64Array) => NativeRemap } }).placement.IdRemap;

/** The remap of every id, straight from the definition. */
function oracle(rows: number, hot: number[]): number[] {
  const K = hot.length;
  const isHot = new Set(hot);
  const map = Array.from({ length: rows }, (_, i) => i);
  hot.forEach((id, i) => (map[id] = i));
  const cold = Array.from({ length: K }, (_, i) => i).filter((i) => !isHot.has(i));
  const left = hot.filter((id) => id >= K).sort((a, b) => a - b);
  cold.forEach((c, j) => (map[c] = left[j]!));
  return map;
}

function nativeOf(r: IdRemap): NativeRemap {
  return new Native(r.rows, BigInt64Array.from(r.from, BigInt), BigInt64Array.from(r.to, BigInt));
}

function randomHot(rng: Rng, rows: number, k: number, bias: 'any' | 'low' | 'high'): number[] {
  const s = new Set<number>();
  while (s.size < k) {
    const id = bias === 'low' ? rng.int(0, Math.min(rows - 1, 2 * k)) : bias === 'high' ? rng.int(Math.max(0, rows - 2 * k), rows - 1) : rng.int(0, rows - 1);
    s.add(id);
  }
  return [...s];
}

describe('IdRemap', () => {
  it('is a bijection of [0, rows) that puts hot id i on row i and moves nothing else it need not', () => {
    const rng = new Rng(3);
    for (let trial = 0; trial < 60; trial++) {
      const rows = rng.int(1, 300);
      const k = rng.int(0, Math.min(rows, 40));
      const hot = randomHot(rng, rows, k, (['any', 'low', 'high'] as const)[trial % 3]);
      const r = new IdRemap(rows, hot);
      const want = oracle(rows, hot);
      const all = Float64Array.from({ length: rows }, (_, i) => i);
      r.applyInPlace(all);
      expect(Array.from(all)).toEqual(want);
      expect(Array.from(all).sort((a, b) => a - b)).toEqual(Array.from({ length: rows }, (_, i) => i)); // coverage
      hot.forEach((id, i) => expect(all[id]).toBe(i));
      // only the hot ids that are not already on their row and the cold ids they displace move
      expect(r.from.length).toBe(want.filter((v, i) => v !== i).length);
    }
  });

  it('native apply equals the definition on every id type; invert ∘ apply is the identity', () => {
    const rng = new Rng(4);
    for (let trial = 0; trial < 30; trial++) {
      const rows = rng.int(1, 5000);
      const hot = randomHot(rng, rows, rng.int(0, Math.min(rows, 300)), (['any', 'low', 'high'] as const)[trial % 3]);
      const r = new IdRemap(rows, hot);
      const n = nativeOf(r);
      const want = BigInt64Array.from(oracle(rows, hot), BigInt);
      for (const ids of [BigInt64Array.from({ length: rows }, (_, i) => BigInt(i)), Int32Array.from({ length: rows }, (_, i) => i), Uint32Array.from({ length: rows }, (_, i) => i)]) {
        const out = new BigInt64Array(rows);
        n.apply(ids, out, 'ids');
        expect(out).toEqual(want);
        const back = new BigInt64Array(rows);
        n.invert(out, back, 'rows');
        expect(back).toEqual(BigInt64Array.from({ length: rows }, (_, i) => BigInt(i)));
      }
    }
  });

  it('rejects bad hot ids (naming the field) and ids outside the table before writing anything', () => {
    expect(() => normalizeTable({ name: 't', rows: 10, dim: 4, hotIds: [1, 2, 1] })).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringContaining('table.hotIds[2]: id 1 is listed twice') }));
    expect(() => normalizeTable({ name: 't', rows: 10, dim: 4, hotIds: [10] })).toThrow(expect.objectContaining({ message: expect.stringContaining('table.hotIds[0]') }));
    expect(() => normalizeTable({ name: 't', rows: 10, dim: 4, hotIds: [0.5] })).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG' }));
    const n = nativeOf(new IdRemap(10, [7, 3]));
    const out = new BigInt64Array(3).fill(-1n);
    expect(() => n.apply(Int32Array.from([1, 10, 2]), out, "feature 'f'")).toThrow(expect.objectContaining({ code: 'ID_OUT_OF_RANGE', message: expect.stringContaining("feature 'f': id 10") }));
    expect(out).toEqual(new BigInt64Array(3).fill(-1n));
    // the native side accepts only a bijection
    expect(() => new Native(10, BigInt64Array.from([1n, 2n]), BigInt64Array.from([2n, 3n]))).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });
});

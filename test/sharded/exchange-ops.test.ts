// The sharded runtime's native per-id kernels against naive TypeScript references written from their
// definitions (lib/sharded/exchange-ops.ts): range segmentation, dedup, wire packing (fp16 / bf16 rounding on
// closed-form cases), pooling and gradient reduction over unique rows, and their argument checks.
import { describe, it, expect } from 'vitest';
import { exchangeOps } from '../../lib/sharded/exchange-ops.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import { rng } from './scenario.mjs';

const K = exchangeOps();

describe('shard kernels', () => {
  it('segment: stable split by row range, relative ids, per-range bag lengths', () => {
    const rand = rng(3);
    const B = 7, bounds = Float64Array.from([0, 3, 10, 10, 25]);
    const lengths = Int32Array.from({ length: B }, () => Math.floor(rand() * 5));
    const n = lengths.reduce((a, b) => a + b, 0);
    const ids = Int32Array.from({ length: n }, () => Math.floor(rand() * 25));
    const w = Float32Array.from({ length: n }, (_, i) => i + 0.5);
    const s = K.segment(ids, lengths, w, bounds, 'f');
    // naive: walk ranges in order, ids in order
    const S = bounds.length - 1;
    const expIds: bigint[] = [], expPos: number[] = [], expW: number[] = [];
    const expLen = new Array(S * B).fill(0);
    for (let r = 0; r < S; r++) {
      let i = 0;
      for (let b = 0; b < B; b++)
        for (let k = 0; k < lengths[b]!; k++, i++) {
          const v = ids[i]!;
          if (v >= bounds[r]! && v < bounds[r + 1]!) {
            expIds.push(BigInt(v - bounds[r]!));
            expPos.push(i);
            expW.push(w[i]!);
            expLen[r * B + b]++;
          }
        }
    }
    expect(Array.from(s.ids)).toEqual(expIds);
    expect(Array.from(s.pos)).toEqual(expPos);
    expect(Array.from(s.weights!)).toEqual(expW);
    expect(Array.from(s.lengths)).toEqual(expLen);
    expect(Array.from(s.counts)).toEqual(Array.from({ length: S }, (_, r) => expLen.slice(r * B, (r + 1) * B).reduce((a, b) => a + b, 0)));
    expect(() => K.segment(Int32Array.from([25]), Int32Array.from([1]), null, bounds, "feature 'f'")).toThrow(expect.objectContaining({ code: 'ID_OUT_OF_RANGE', message: expect.stringMatching(/feature 'f'/) }));
    expect(() => K.segment(Int32Array.from([1]), Int32Array.from([2]), null, bounds, 'f')).toThrow(expect.objectContaining({ code: 'LENGTH_MISMATCH' }));
  });

  it('allFinite: false exactly when some value is NaN or ±Inf (subnormals, zeros and the largest floats are finite)', () => {
    const r = rng(3);
    for (const n of [0, 1, 7, 4096, 4097, 10_001]) {
      const a = Float32Array.from({ length: n }, () => (r() - 0.5) * 1e30);
      if (n > 2) a.set([3.4028234663852886e38, -1.401298464324817e-45, -0], n - 3);
      expect(K.allFinite(a)).toBe(a.every(Number.isFinite));
      for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY])
        for (const at of n > 0 ? [0, n >> 1, n - 1] : []) {
          const b = a.slice();
          b[at] = bad;
          expect(K.allFinite(b), `${bad} at ${at} of ${n}`).toBe(false);
          expect(K.allFinite(b.subarray(0, at))).toBe(true);
        }
    }
  });

  it('unique: distinct ids ordered by (id mod m, id), inverse, per-residue counts', () => {
    const ids = BigInt64Array.from([5n, 2n, 5n, 9n, 4n, 2n, 7n]);
    const u = K.unique(ids, 3);
    // residues: 9→0; 4,7→1; 2,5→2
    expect(Array.from(u.values)).toEqual([9n, 4n, 7n, 2n, 5n]);
    expect(Array.from(u.counts)).toEqual([1, 2, 2]);
    expect(Array.from(u.inverse, (k) => u.values[k])).toEqual(Array.from(ids));
    expect(Array.from(K.divideIds(u.values, 3))).toEqual([3n, 1n, 2n, 0n, 1n]);
  });

  it('pack / unpack: column slices, row lists, fp16 / bf16 round to nearest even', () => {
    const m = Float32Array.from([1, 2, 3, 4, 5, 6, 7, 8, 9]); // 3 × 3
    const dst = new Float32Array(4);
    K.pack(m, 3, Int32Array.from([2, 0]), 0, 2, 1, 3, 'fp32', dst, 0);
    expect(Array.from(dst)).toEqual([8, 9, 2, 3]);
    const vals = Float32Array.from([1.5, -2.25, 1024, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 65520, 1 + 2 ** -9, 1 + 3 * 2 ** -9]);
    const h = new Uint16Array(8);
    K.pack(vals, 8, null, 0, 1, 0, 8, 'fp16', h, 0);
    const back = new Float32Array(8);
    K.unpack(h, 0, 'fp16', 1, 8, back, 8, null, 0, 0, false);
    // exact values stay; a half-ulp tie rounds to even (1), 3 half-ulps to 1 + 2^-9; 65520 overflows to inf
    expect(Array.from(back.subarray(0, 6))).toEqual([1.5, -2.25, 1024, 1, 1 + 2 ** -9, Infinity]);
    const b16 = new Uint16Array(8);
    K.pack(vals, 8, null, 0, 1, 0, 8, 'bf16', b16, 0);
    K.unpack(b16, 0, 'bf16', 1, 8, back, 8, null, 0, 0, false);
    expect(Array.from(back.subarray(6, 8))).toEqual([1, 1 + 2 ** -7]); // bf16: ulp(1) = 2^-7; 1/4 and 3/4 ulp
    // unpack with add into a strided destination at rows idx, column offset 1
    const acc = new Float32Array(6).fill(1);
    K.unpack(Float32Array.from([10, 20]), 0, 'fp32', 2, 1, acc, 3, Int32Array.from([1, 0]), 0, 1, true);
    expect(Array.from(acc)).toEqual([1, 21, 1, 1, 11, 1]);
    expect(() => K.pack(m, 3, null, 2, 2, 0, 3, 'fp32', new Float32Array(6), 0)).toThrow(expect.objectContaining({ code: 'LENGTH_MISMATCH' }));
    expect(() => K.pack(m, 3, null, 0, 1, 0, 3, 'fp8' as 'fp16', new Uint16Array(3), 0)).toThrow(expect.objectContaining({ code: 'UNSUPPORTED_DTYPE' }));
  });

  it('poolUnique and gradUnique agree with a per-id reference (weights, mean, sequences)', () => {
    const rand = rng(9);
    const B = 5, dim = 3, stride = 7, col = 2;
    const lengths = Int32Array.from([2, 0, 3, 1, 2]);
    const n = 8;
    const uniq = 4;
    const inverse = Int32Array.from({ length: n }, () => Math.floor(rand() * uniq));
    const rows = Float32Array.from({ length: uniq * dim }, () => rand() - 0.5);
    const w = Float32Array.from({ length: n }, () => 0.5 + rand());
    const pooled = new Float32Array(B * stride);
    K.poolUnique(rows, dim, inverse, lengths, w, pooled, stride, col, null);
    const grad = Float32Array.from({ length: B * stride }, () => rand() - 0.5);
    const out = new Float32Array(uniq * dim);
    const fullLen = Int32Array.from([4, 1, 3, 2, 2]);
    K.gradUnique(grad, stride, col, dim, inverse, lengths, w, fullLen, true, null, out);
    const expPooled = new Float32Array(B * stride), expOut = new Float32Array(uniq * dim);
    let i = 0;
    for (let b = 0; b < B; b++)
      for (let k = 0; k < lengths[b]!; k++, i++)
        for (let c = 0; c < dim; c++) {
          // fp32 arithmetic, operation by operation, as the kernel does it
          expPooled[b * stride + col + c] = Math.fround(expPooled[b * stride + col + c]! + Math.fround(w[i]! * rows[inverse[i]! * dim + c]!));
          const scale = Math.fround(w[i]! / fullLen[b]!);
          expOut[inverse[i]! * dim + c] = Math.fround(expOut[inverse[i]! * dim + c]! + Math.fround(grad[b * stride + col + c]! * scale));
        }
    expect(Array.from(pooled)).toEqual(Array.from(expPooled));
    expect(Array.from(out)).toEqual(Array.from(expOut));
    // sequences: row of id i goes to output row seqPos[i]; its gradient comes from there
    const seqPos = Int32Array.from([7, 6, 5, 4, 3, 2, 1, 0]);
    const seq = new Float32Array(n * dim);
    K.poolUnique(rows, dim, inverse, lengths, null, seq, dim, 0, seqPos);
    for (let j = 0; j < n; j++) expect(Array.from(seq.subarray(seqPos[j]! * dim, seqPos[j]! * dim + dim))).toEqual(Array.from(rows.subarray(inverse[j]! * dim, inverse[j]! * dim + dim)));
    expect(() => K.poolUnique(rows, dim, Int32Array.from([0, 9, 0, 0, 0, 0, 0, 0]), lengths, null, pooled, stride, col, null)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });

  it('gradTerms and groupRows: each id\'s gradient row and scale, and each distinct row\'s ids ascending (the device reduction\'s lists)', () => {
    const rand = rng(13);
    const lengths = Int32Array.from([2, 0, 3, 1, 2]), fullLen = Int32Array.from([4, 1, 3, 2, 2]);
    const n = 8, U = 4;
    const w = Float32Array.from({ length: n }, () => 0.5 + rand());
    const row = new Int32Array(2 + n).fill(-1), scale = new Float32Array(3 + n).fill(-1);
    expect(K.gradTerms(lengths, w, fullLen, true, null, row, 2, scale, 3)).toBe(n);
    // naive: id i of bag b reads gradient row b with scale w_i / fullLen_b (mean)
    const expRow: number[] = [], expScale: number[] = [];
    lengths.forEach((len, b) => {
      for (let k = 0; k < len; k++) expRow.push(b), expScale.push(Math.fround(w[expRow.length - 1]! / fullLen[b]!));
    });
    expect(Array.from(row)).toEqual([-1, -1, ...expRow]);
    expect(Array.from(scale)).toEqual([-1, -1, -1, ...expScale]);
    // sum pooling without weights: scale 1; sequences: the id's own row, scale 1
    K.gradTerms(lengths, null, null, false, null, row, 0, scale, 0);
    expect(Array.from(scale.subarray(0, n))).toEqual(new Array(n).fill(1));
    const seqPos = Int32Array.from([7, 6, 5, 4, 3, 2, 1, 0]);
    K.gradTerms(lengths, w, null, false, seqPos, row, 0, scale, 0);
    expect(Array.from(row.subarray(0, n))).toEqual(Array.from(seqPos));
    expect(Array.from(scale.subarray(0, n))).toEqual(new Array(n).fill(1));
    expect(() => K.gradTerms(lengths, null, null, false, null, new Int32Array(n - 1), 0, new Float32Array(n), 0)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    // groupRows: a stable counting sort of the positions by their distinct row
    const inverse = Int32Array.from({ length: n }, () => Math.floor(rand() * U));
    const start = new Int32Array(1 + U + 1), order = new Int32Array(n + 2);
    K.groupRows(inverse, U, start, 1, order, 2);
    for (let u = 0; u < U; u++) {
      const mine = Array.from(inverse.keys()).filter((i) => inverse[i] === u);
      expect(Array.from(order.subarray(2 + start[1 + u]!, 2 + start[2 + u]!))).toEqual(mine);
    }
    expect(start[1]).toBe(0);
    expect(start[1 + U]).toBe(n);
    expect(() => K.groupRows(Int32Array.from([0, U]), U, start, 0, order, 0)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });
});

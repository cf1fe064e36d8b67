// arrays.ts — typed-array helpers of the sharded runtime: concatenation, and the arrays of a wire dtype
// (fp32 values as Float32Array, fp16 / bf16 bit patterns as Uint16Array).
import type { Wire, WireArray } from './exchange-ops.js';

export function concat<T extends BigInt64Array | Int32Array | Float32Array | Float64Array | Uint16Array>(parts: T[], Ctor: new (n: number) => T): T {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Ctor(n);
  let o = 0;
  for (const p of parts) {
    (out as unknown as { set(a: T, o: number): void }).set(p, o);
    o += p.length;
  }
  return out;
}

/** Wire arrays of one dtype, concatenated. */
export function concatWire(parts: WireArray[], wire: Wire): WireArray {
  return wire === 'fp32' ? concat(parts as Float32Array[], Float32Array) : concat(parts as Uint16Array[], Uint16Array);
}

/** Bytes of one value of a wire dtype. */
export function wireBytes(wire: Wire): number {
  return wire === 'fp32' ? 4 : 2;
}


// rng.ts — the package's one random-number generator, counter-based: every value is a pure function of
// (seed, stream, counter), so any batch, any sample, can be generated alone, in any order, on any thread,
// and comes out the same on every platform. The synthetic data source (lib/data) calls the hash functions
// per value; the workload generators (lib/workloads) and tests draw sequences from an Rng. All arithmetic
// is 32-bit integer (Math.imul), no allocation.

/** murmur3's 32-bit finalizer: a bijective avalanche mix of a 32-bit word. */
export function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Mixes two 32-bit words into one (order-sensitive). */
export function hash2(a: number, b: number): number {
  return fmix32((Math.imul(fmix32(a) ^ 0x9e3779b9, 0x01000193) + (b | 0)) | 0);
}

/** Mixes three 32-bit words into one. */
export function hash3(a: number, b: number, c: number): number {
  return hash2(hash2(a, b), c);
}

/** Splits a non-negative safe integer into a 32-bit key (hash of its two halves). */
export function hashIndex(key: number, i: number): number {
  const lo = i >>> 0;
  const hi = Math.floor(i / 4294967296) >>> 0;
  return hash3(key, lo, hi);
}

const GOLDEN = 0x9e3779b9;

/** The k-th 32-bit draw of stream `key`. */
export function draw32(key: number, k: number): number {
  return fmix32((key + Math.imul(k + 1, GOLDEN)) | 0);
}

/** A 32-bit word to a uniform in the open interval (0, 1). */
export function unit(x: number): number {
  return ((x >>> 0) + 0.5) * 2.3283064365386963e-10; // 2^-32
}

/**
 * A 32-bit word to an approximately standard-normal value: the sum of its two 16-bit halves as uniforms
 * (a triangular distribution on [-√6, √6]) — mean 0, variance exactly 1.
 */
export function triangular(x: number): number {
  const a = ((x & 0xffff) + 0.5) * (1 / 65536);
  const b = ((x >>> 16) + 0.5) * (1 / 65536);
  return (a + b - 1) * 2.449489742783178; // √6
}

/** Successive draws of one stream of a seed: draw k of stream (seed, stream) is draw32(hash2(seed, stream), k). */
export class Rng {
  private k = 0;
  private readonly key: number;
  /** `stream` separates independent sequences of one seed (e.g. rank × step). */
  constructor(seed: number, stream = 0) {
    this.key = hash2(seed | 0, stream | 0);
  }
  /** Uniform 32-bit unsigned integer. */
  u32(): number {
    return draw32(this.key, this.k++);
  }
  /** Uniform double in [0, 1) with 53 random bits. */
  float(): number {
    return ((this.u32() >>> 5) * 67108864 + (this.u32() >>> 6)) / 9007199254740992;
  }
  /** Uniform integer in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.float() * (hi - lo + 1));
  }
}

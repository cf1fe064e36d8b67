// rng.ts — the seeded random generator of the workload generators: xoshiro128** (Blackman & Vigna) seeded
// through splitmix32, so a (seed, stream) pair always gives the same sequence on every platform.

function splitmix32(x: number): () => number {
  let s = x >>> 0;
  return () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
}

export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  /** `stream` separates independent sequences of one seed (e.g. rank × step). */
  constructor(seed: number, stream = 0) {
    const sm = splitmix32((seed >>> 0) ^ Math.imul(stream + 1, 0x27d4eb2f));
    this.a = sm();
    this.b = sm();
    this.c = sm();
    this.d = sm() | 1;
  }

  /** Uniform 32-bit unsigned integer. */
  u32(): number {
    const r = Math.imul(((Math.imul(this.b, 5) << 7) | (Math.imul(this.b, 5) >>> 25)) >>> 0, 9) >>> 0;
    const t = (this.b << 9) >>> 0;
    this.c ^= this.a;
    this.d ^= this.b;
    this.b ^= this.c;
    this.a ^= this.d;
    this.c ^= t;
    this.d = ((this.d << 11) | (this.d >>> 21)) >>> 0;
    this.a >>>= 0;
    this.b >>>= 0;
    this.c >>>= 0;
    return r;
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

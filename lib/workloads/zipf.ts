// zipf.ts — draws row ids from the access model of lib/plan/access.ts (Zipf over row ids, hottest = row 0) by
// inverting its CDF F(x) = pw(x) / pw(rows), pw(x) = ((x + 1)^(1−α) − 1) / (1 − α) (log(x + 1) at α = 1,
// x at α = 0); row = ⌊F⁻¹(u)⌋. This is NVIDIA's synthetic-Criteo inverse-CDF sampler, so the frequencies
// the planner assumes are exactly the ones the generator produces.
import type { Rng } from './rng.js';

export class ZipfSampler {
  readonly rows: number;
  readonly alpha: number;
  private readonly total: number;

  constructor(rows: number, alpha: number) {
    this.rows = rows;
    this.alpha = alpha;
    this.total = this.pw(rows);
  }

  private pw(x: number): number {
    const a = this.alpha;
    if (a === 0) return x;
    if (a === 1) return Math.log1p(x);
    return Math.expm1((1 - a) * Math.log1p(x)) / (1 - a);
  }

  /** One row id in [0, rows). */
  sample(rng: Rng): number {
    const y = rng.float() * this.total;
    const a = this.alpha;
    let x: number;
    if (a === 0) x = y;
    else if (a === 1) x = Math.expm1(y);
    else x = Math.expm1(Math.log1p((1 - a) * y) / (1 - a));
    const r = Math.floor(x);
    return r >= this.rows ? this.rows - 1 : r < 0 ? 0 : r;
  }

  /** Fills out[offset, offset + count) with row ids. */
  fill(rng: Rng, out: Int32Array | Float64Array, offset: number, count: number): void {
    for (let i = 0; i < count; i++) out[offset + i] = this.sample(rng);
  }
}

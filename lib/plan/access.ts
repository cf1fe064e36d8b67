// access.ts — the access-frequency model of a table (Zipf over row ids, optionally with a measured head and
// a shuffled tail):
// the probability mass of a row range and the expected number of distinct rows among n independent lookups
// in a row range. These drive the cost model's expected traffic (ub dedup, dp/tier gradient all-gathers).
import { EmbshardError } from '../errors.js';
import type { AccessStats } from './types.js';

/** Gauss–Legendre nodes and weights on [-1, 1], 8 points. */
const GL_X = [-0.9602898564975363, -0.7966664774136267, -0.525532409916329, -0.1834346424956498, 0.1834346424956498, 0.525532409916329, 0.7966664774136267, 0.9602898564975363];
const GL_W = [0.1012285362903763, 0.2223810344533745, 0.3137066458778873, 0.362683783378362, 0.362683783378362, 0.3137066458778873, 0.2223810344533745, 0.1012285362903763];

/**
 * A range of at most this many rows is summed row by row unless it starts at SMOOTH_FROM or later; a longer
 * one has its first EXACT_ROWS / 4 rows summed so, the rest integrated.
 */
const EXACT_ROWS = 2048;
/**
 * From this row on the Zipf shape changes so little from one row to the next that the midpoint rule below
 * is off by about (α+1)(α+2) / (24 x²) < 1e-10 relative: a short range there is integrated, not summed row
 * by row (a table split into many short row groups would otherwise cost a pass over all its rows).
 */
const SMOOTH_FROM = 65536;

export class AccessModel {
  readonly rows: number;
  readonly alpha: number;
  /** measured head probabilities (rows 0..head.length-1) */
  private readonly head: Float64Array;
  /** headCum[i] = Σ head[0, i) */
  private readonly headCum: Float64Array;
  private readonly headMass: number;
  /** mass of the tail (rows ≥ head.length) and its Zipf normaliser */
  private readonly tailMass: number;
  private readonly tailDen: number;
  /** the tail's probabilities are the Zipf shape's, in an unknown row order (types.ts AccessStats.tail) */
  private readonly shuffled: boolean;
  private readonly cache = new Map<string, number>();

  constructor(rows: number, stats: AccessStats = {}) {
    this.rows = rows;
    this.alpha = stats.zipf ?? 0;
    const top = stats.top;
    const H = top ? Math.min(top.counts.length, rows) : 0;
    this.head = new Float64Array(H);
    let hm = 0;
    if (top && H > 0) {
      const denom = H === rows ? top.counts.slice(0, H).reduce((a, b) => a + b, 0) : top.total;
      if (!(denom > 0)) throw new EmbshardError('INVALID_CONFIG', 'access.top: counts sum to zero');
      for (let i = 0; i < H; i++) hm += (this.head[i] = top.counts[i]! / denom);
    }
    this.headCum = new Float64Array(H + 1);
    for (let i = 0; i < H; i++) this.headCum[i + 1] = this.headCum[i]! + this.head[i]!;
    this.headMass = Math.min(1, hm);
    this.tailMass = H < rows ? 1 - this.headMass : 0;
    this.tailDen = this.pw(rows) - this.pw(H);
    this.shuffled = stats.tail === 'shuffled' && H < rows;
  }

  /** Antiderivative-like potential of the Zipf CDF: F(x) ∝ pw(x) − pw(0). */
  private pw(x: number): number {
    const a = this.alpha;
    if (a === 0) return x;
    if (a === 1) return Math.log1p(x);
    return Math.expm1((1 - a) * Math.log1p(x)) / (1 - a);
  }

  /** Probability mass of rows [a, b). */
  mass(a: number, b: number): number {
    a = Math.max(0, a);
    b = Math.min(this.rows, b);
    if (b <= a) return 0;
    const H = this.head.length;
    let m = 0;
    if (a < H) {
      const e = Math.min(b, H);
      m += this.headCum[e]! - this.headCum[a]!;
      a = e;
    }
    if (b > a && this.tailMass > 0) m += this.shuffled ? (this.tailMass * (b - a)) / (this.rows - H) : (this.tailMass * (this.pw(b) - this.pw(a))) / this.tailDen;
    return m;
  }

  /** Probability of row i (continuous in the tail, for quadrature). */
  private prob(x: number): number {
    if (x < this.head.length) return this.head[Math.floor(x)]!;
    return (this.tailMass * (this.pw(x + 1) - this.pw(x))) / this.tailDen;
  }

  /** Σ_{i∈[a,b)} f(prob(i)) for tail rows (a ≥ head length), each pw(i) evaluated once (same values as prob). */
  private sumRows(f: (p: number) => number, a: number, b: number): number {
    let s = 0;
    let lo = this.pw(a);
    for (let i = a; i < b; i++) {
      const hi = this.pw(i + 1);
      s += f((this.tailMass * (hi - lo)) / this.tailDen);
      lo = hi;
    }
    return s;
  }

  /** Σ_{i∈[i0,b)} f(p_i) over tail rows in rank order (a ≥ head length). */
  private rankedTail(f: (p: number) => number, i0: number, b: number): number {
    let s = 0;
    let i = i0;
    if (this.alpha === 0) {
      s += (b - i) * f(this.prob(i));
    } else if (b - i <= EXACT_ROWS && i < SMOOTH_FROM) {
      s += this.sumRows(f, i, b);
      i = b;
    } else {
      if (b - i > EXACT_ROWS) {
        const stop = i + EXACT_ROWS / 4;
        s += this.sumRows(f, i, stop);
        i = stop;
      }
      // midpoint rule: Σ_{i}^{b-1} f(i) ≈ ∫_{i-1/2}^{b-1/2} f(x) dx, on geometric segments, 8-point Gauss each
      let lo = i - 0.5;
      const end = b - 0.5;
      while (lo < end) {
        const hi = Math.min(end, lo * 1.5);
        const mid = (lo + hi) / 2, half = (hi - lo) / 2;
        let seg = 0;
        for (let k = 0; k < 8; k++) seg += GL_W[k]! * f(this.prob(mid + half * GL_X[k]!));
        s += seg * half;
        lo = hi;
      }
    }
    return s;
  }

  /** E[distinct tail rows hit by n lookups], the tail in rank order (a shuffled tail's rows share it evenly). */
  private tailDistinct(n: number, f: (p: number) => number): number {
    const key = `tail|${n}`;
    let v = this.cache.get(key);
    if (v === undefined) this.cache.set(key, (v = this.rankedTail(f, this.head.length, this.rows)));
    return v;
  }

  /** Whether rows [a, b) lie in the tail and take O(1) evaluations (uniform, shuffled, or one quadrature segment). */
  private cheap(a: number, b: number): boolean {
    return a >= this.head.length && (this.alpha === 0 || this.shuffled || (a >= SMOOTH_FROM && b - a <= EXACT_ROWS));
  }

  /** E[number of distinct rows of [a, b) hit by n independent lookups] = Σ 1 − (1 − p_i)^n. */
  expectedDistinct(n: number, a: number, b: number): number {
    a = Math.max(0, a);
    b = Math.min(this.rows, b);
    if (b <= a || n <= 0) return 0;
    const f = (p: number): number => (p >= 1 ? 1 : -Math.expm1(n * Math.log1p(-p)));
    // a range of the tail that costs a few evaluations is not worth a cache entry (a table split into
    // thousands of row groups would fill the cache with them)
    if (this.cheap(a, b)) return this.shuffled ? ((b - a) / (this.rows - this.head.length)) * this.tailDistinct(n, f) : this.rankedTail(f, a, b);
    const key = `${n}|${a}|${b}`;
    const hit = this.cache.get(key);
    if (hit !== undefined) return hit;
    let s = 0;
    let i = a;
    const H = this.head.length;
    for (; i < b && i < H; i++) s += f(this.head[i]!);
    if (i < b) {
      if (this.shuffled) s += ((b - i) / (this.rows - H)) * this.tailDistinct(n, f);
      else s += this.rankedTail(f, i, b);
    }
    if (this.cache.size > 200_000) this.cache.clear();
    this.cache.set(key, s);
    return s;
  }
}

const models = new WeakMap<object, AccessModel>();

/** The (cached) access model of a table. */
export function accessModel(t: { rows: number; access: AccessStats }): AccessModel {
  let m = models.get(t);
  if (!m) {
    m = new AccessModel(t.rows, t.access);
    models.set(t, m);
  }
  return m;
}

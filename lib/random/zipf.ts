// zipf.ts — the package's one Zipf-like sampler: ranks drawn by inverse CDF (the NVIDIA
// DeepLearningExamples synthetic-Criteo convention), the exact probability of every rank under it (the
// access model lib/plan/access.ts assumes), the rank → id scatter of the synthetic data, and ZipfSampler,
// which draws row ids (rank = row, hottest = row 0) for the planner's workload generators.
//
// A continuous power law X on [1, N+1) with density ∝ x^-α is drawn by inverting its CDF:
//   X = (u·((N+1)^(1−α) − 1) + 1)^(1/(1−α))        (α ≠ 1)
//   X = (N+1)^u                                     (α = 1)
// and the rank is r = ⌊X⌋ − 1 ∈ [0, N): rank 0 is the hottest. So, exactly,
//   P(r) = (G(r+2) − G(r+1)) / (G(N+1) − G(1)),  G(x) = x^(1−α)  (ln x when α = 1),
// a power law that decays like the discrete Zipf law r ↦ (r+1)^-α / H(N, α) (the ratio of neighbouring
// ranks converges to ((r+1)/(r+2))^α down the tail) but with a flatter head, since rank r takes the mass of
// the interval [r+1, r+2). α = 0 is uniform.
//
// Ranks are then scattered over ids by an affine bijection of [0, N): id = (a·r + c) mod N with
// gcd(a, N) = 1, a ≈ 0.618·N (so consecutive hot ranks land far apart), c a seeded offset; the product
// a·r stays below 2^53, so it is exact in doubles.
import { EmbshardError } from '../errors.js';
import { hash2, type Rng } from './rng.js';

export interface ZipfParams {
  /** Population size (table cardinality). */
  n: number;
  /** the exponent in use: exactly 1 for exponents within 1e-9 of 1 */
  alpha: number;
  /** (N+1)^(1−α) − 1, or ln(N+1) when α = 1. */
  span: number;
  /** 1/(1−α), unused when α = 1. */
  inv: number;
}

/**
 * Exponents this close to 1 are taken as 1: for them (N+1)^(1−α) − 1 and the differences of G cancel
 * to a few significant digits (at α = 1 + 2^−52 the rank-0 probability came out 0.036 instead of 0.050),
 * while the α = 1 law differs from theirs by about |1 − α|·ln(N+1) relative, under 1e-7 for any N < 2^53.
 */
const ALPHA_ONE_TOLERANCE = 1e-9;

/** The exponent the sampler and the rank probabilities use: α, or exactly 1 within ALPHA_ONE_TOLERANCE of it. */
function exponent(alpha: number): number {
  return Math.abs(alpha - 1) <= ALPHA_ONE_TOLERANCE ? 1 : alpha;
}

export function zipfParams(n: number, alphaIn: number): ZipfParams {
  if (!Number.isSafeInteger(n) || n <= 0) throw new EmbshardError('INVALID_SIZE', `zipf population must be a positive integer (got ${n})`);
  if (!Number.isFinite(alphaIn) || alphaIn < 0) throw new EmbshardError('INVALID_ARGUMENT', `alpha must be a finite number >= 0 (got ${alphaIn})`);
  const alpha = exponent(alphaIn);
  if (alpha === 1) return { n, alpha, span: Math.log(n + 1), inv: 0 };
  return { n, alpha, span: Math.pow(n + 1, 1 - alpha) - 1, inv: 1 / (1 - alpha) };
}

/** The rank (0 = hottest) for a uniform u ∈ (0, 1). */
export function zipfRank(p: ZipfParams, u: number): number {
  const x = p.alpha === 1 ? Math.exp(u * p.span) : Math.pow(u * p.span + 1, p.inv);
  const r = Math.floor(x) - 1;
  return r < 0 ? 0 : r >= p.n ? p.n - 1 : r;
}

function G(x: number, alpha: number): number {
  return alpha === 1 ? Math.log(x) : Math.pow(x, 1 - alpha);
}

/** Exact probability of rank r under zipfRank with a uniform u. */
export function zipfRankProbability(n: number, alphaIn: number, r: number): number {
  if (r < 0 || r >= n) return 0;
  const alpha = exponent(alphaIn);
  return (G(r + 2, alpha) - G(r + 1, alpha)) / (G(n + 1, alpha) - G(1, alpha));
}

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

export interface Scatter {
  n: number;
  a: number;
  c: number;
}

/** The seeded affine bijection rank → id of [0, n). */
export function makeScatter(n: number, seed: number, feature: number): Scatter {
  if (n === 1) return { n, a: 1, c: 0 };
  const limit = Math.floor(9007199254740991 / n); // a·r < a·n must stay below 2^53
  let a = Math.max(1, Math.min(Math.floor(n * 0.6180339887498949), limit - 1));
  while (gcd(a, n) !== 1) a--;
  const c = hash2(seed ^ 0x5ca77e4, feature) % n;
  return { n, a, c };
}

export function scatter(s: Scatter, r: number): number {
  return (s.a * r + s.c) % s.n;
}

/** Row ids of one table drawn from its Zipf access model (row 0 hottest), by zipfRank of uniform draws. */
export class ZipfSampler {
  readonly rows: number;
  readonly alpha: number;
  private readonly params: ZipfParams;

  constructor(rows: number, alpha: number) {
    this.params = zipfParams(rows, alpha);
    this.rows = rows;
    this.alpha = alpha;
  }

  /** One row id in [0, rows). */
  sample(rng: Rng): number {
    return zipfRank(this.params, rng.float());
  }

  /** Fills out[offset, offset + count) with row ids. */
  fill(rng: Rng, out: Int32Array | Float64Array, offset: number, count: number): void {
    for (let i = 0; i < count; i++) out[offset + i] = zipfRank(this.params, rng.float());
  }
}

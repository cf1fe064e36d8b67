// planted.ts — the ground-truth click model behind the synthetic data. Every (feature f, row id) has a
// hidden score z_f(id), a unit-variance value hashed from (seed, f, id) — no per-row memory, so tables of
// any size. The click logit of a sample is
//   logit = bias + Σ_f c_f · Σ_{id ∈ bag_f} z_f(id) + Σ_j v_j · (x_j − μ_j) / σ_j
// with c_f = sparseScale / √(F · h_f) (h_f the mean bag length), v_j = denseScale/√D · t_j for a hashed
// unit-variance t_j, and μ_j, σ_j the exact mean and standard deviation of dense feature j. The label is
// Bernoulli(sigmoid(logit)). Sum pooling of a 1-wide embedding plus a linear layer represents this model
// exactly, so a DLRM can learn it; sigmoid(logit) is the Bayes-optimal score, and its AUC on the generated
// labels is the best AUC reachable on that data.
//
// Dense feature j is x_j = ln(1 + K_j), K_j geometric on {0, 1, …} with mean m_j = 0.5 · 2^(10·j/(D−1))
// (0.5 … 512): count-like, heavy-tailed, and log-transformed as DLRM does with Criteo's integer columns.
import { EmbshardError } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { hash2, hash3, triangular } from '../random/rng.js';

export interface PlantedOptions {
  /** Standard deviation (roughly) of the sparse part of the logit. Default 1.5. */
  sparseScale?: number | undefined;
  /** Standard deviation of the dense part of the logit. Default 0.5. */
  denseScale?: number | undefined;
  /** Logit offset; sets the click rate. Default −1.6 (about 25 % clicks at the default scales). */
  bias?: number | undefined;
}

export interface PlantedConfig {
  sparseScale: number;
  denseScale: number;
  bias: number;
}

const PLANTED_FIELDS = fieldsOf<PlantedOptions>({ sparseScale: true, denseScale: true, bias: true });

export function resolvePlanted(o: PlantedOptions | undefined): PlantedConfig {
  if (o !== undefined) {
    if (o === null || typeof o !== 'object') throw new EmbshardError('INVALID_CONFIG', 'planted must be an object');
    rejectUnknownFields(o, PLANTED_FIELDS, 'planted');
  }
  const r = { sparseScale: o?.sparseScale ?? 1.5, denseScale: o?.denseScale ?? 0.5, bias: o?.bias ?? -1.6 };
  for (const [k, v] of Object.entries(r))
    if (typeof v !== 'number' || !Number.isFinite(v)) throw new EmbshardError('INVALID_ARGUMENT', `planted.${k} must be a finite number (got ${String(v)})`);
  if (r.sparseScale < 0 || r.denseScale < 0) throw new EmbshardError('INVALID_ARGUMENT', 'planted.sparseScale and planted.denseScale must be >= 0');
  return r;
}

/** Mean of dense feature j's geometric count K (before the log). */
export function denseCountMean(j: number, numDense: number): number {
  return 0.5 * Math.pow(2, numDense > 1 ? (10 * j) / (numDense - 1) : 0);
}

/** Exact mean and standard deviation of ln(1 + K), K geometric with mean m (sums the series to 1e-15). */
export function logGeometricMoments(m: number): { mean: number; std: number } {
  const q = m / (1 + m);
  let p = 1 - q; // P(K = 0)
  // tail = P(K > k) = q^(k+1), kept as a product: 1 − Σ p by subtraction stalls at its rounding error
  // (about 1e-15) and would run the loop to its cap
  let s1 = 0, s2 = 0, tail = 1;
  for (let k = 0; tail > 1e-15 && k < 1e7; k++) {
    const x = Math.log1p(k);
    s1 += p * x;
    s2 += p * x * x;
    tail *= q;
    p *= q;
  }
  return { mean: s1, std: Math.sqrt(Math.max(s2 - s1 * s1, 0)) };
}

/** Streams of the planted model, derived from the data seed. */
export const PLANTED_STREAM = 0x91a7ed;

export class PlantedModel {
  readonly key: number;
  /** c_f per feature. */
  readonly sparseCoef: Float64Array;
  /** v_j / σ_j per dense feature. */
  readonly denseCoef: Float64Array;
  /** μ_j per dense feature. */
  readonly denseMean: Float64Array;
  /** Geometric parameter q_j = m_j / (1 + m_j) per dense feature. */
  readonly denseQ: Float64Array;

  constructor(seed: number, meanHotness: readonly number[], numDense: number, readonly cfg: PlantedConfig) {
    this.key = hash2(seed, PLANTED_STREAM);
    const F = meanHotness.length;
    this.sparseCoef = Float64Array.from(meanHotness, (h) => cfg.sparseScale / Math.sqrt(F * h));
    this.denseCoef = new Float64Array(numDense);
    this.denseMean = new Float64Array(numDense);
    this.denseQ = new Float64Array(numDense);
    for (let j = 0; j < numDense; j++) {
      const m = denseCountMean(j, numDense);
      const { mean, std } = logGeometricMoments(m);
      this.denseQ[j] = m / (1 + m);
      this.denseMean[j] = mean;
      const t = triangular(hash3(this.key, 0xde45e, j));
      this.denseCoef[j] = std > 0 ? (cfg.denseScale / Math.sqrt(numDense)) * t / std : 0;
    }
  }

  /** z_f(id): the hidden unit-variance score of row `id` of feature f. */
  hiddenScore(f: number, id: number): number {
    return triangular(hash3(this.key, f, id));
  }
}

export function sigmoid(x: number): number {
  return x >= 0 ? 1 / (1 + Math.exp(-x)) : Math.exp(x) / (1 + Math.exp(x));
}

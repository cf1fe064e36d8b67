// optimizer-values.ts — the hyper-parameters every optimizer shares (lr, eps, beta1, beta2, weightDecay),
// checked once for the embedding collection's config and the dense model's, as the float32 values the
// kernels use: a number beyond float32 would become ±Inf there, and a beta just below 1 rounds to 1.
import { EmbshardError } from './errors.js';

export interface OptimizerValues {
  lr: number;
  eps: number;
  beta1: number;
  beta2: number;
  weightDecay: number;
}

/** The largest finite float32: the optimizers' values (learning rates included) must lie within it. */
export const FLOAT32_MAX = 3.4028234663852886e38;

function bad(field: string, what: string, v: unknown): never {
  throw new EmbshardError('INVALID_CONFIG', `${field} must be ${what} (got ${typeof v === 'string' ? `'${v}'` : String(v)})`, { path: field });
}

/** A finite number ≥ 0 that stays finite in float32. */
function nonNegative(v: unknown, field: string): number {
  if (typeof v !== 'number' || !(v >= 0 && v <= FLOAT32_MAX)) bad(field, 'a number in [0, 3.4028235e38] (finite in float32)', v);
  return v;
}

/** A number finite in float32, of either sign. */
function finite32(v: unknown, field: string): number {
  if (typeof v !== 'number' || !(Math.abs(v) <= FLOAT32_MAX)) bad(field, 'a number finite in float32 (|x| <= 3.4028235e38)', v);
  return v;
}

/** A number in [0, 1) whose float32 value is below 1 too. */
function beta(v: unknown, field: string): number {
  if (typeof v !== 'number' || !(v >= 0 && v < 1)) bad(field, 'a number in [0, 1)', v);
  if (Math.fround(v) === 1) bad(field, 'below 1 in float32 (the optimizer computes in float32, where it rounds to 1)', v);
  return v;
}

/**
 * The shared hyper-parameters of optimizer config `o` at `path` ('optimizer'), defaults filled in: lr is
 * required; eps 1e-8, beta1 0.9, beta2 0.999, weightDecay 0 (either sign here; the dense model takes
 * only ≥ 0). INVALID_CONFIG naming the field otherwise.
 */
export function optimizerValues(o: { lr?: unknown; eps?: unknown; beta1?: unknown; beta2?: unknown; weightDecay?: unknown }, path: string): OptimizerValues {
  return {
    lr: nonNegative(o.lr, `${path}.lr`),
    eps: nonNegative(o.eps ?? 1e-8, `${path}.eps`),
    beta1: beta(o.beta1 ?? 0.9, `${path}.beta1`),
    beta2: beta(o.beta2 ?? 0.999, `${path}.beta2`),
    weightDecay: finite32(o.weightDecay ?? 0, `${path}.weightDecay`),
  };
}

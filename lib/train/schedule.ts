// schedule.ts — the learning-rate schedule of a training run (DLRM's LRPolicyScheduler shape): linear
// warmup, constant, then polynomial decay. A pure function of the step, so a resumed run follows the
// same learning rates as an uninterrupted one. It scales both the dense and the embedding optimizer.
import { EmbshardError } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';

export interface LrSchedule {
  /** Steps of linear warmup: step t < warmupSteps runs at (t+1)/warmupSteps of the base rate. Default 0. */
  warmupSteps?: number;
  /** First step of the decay. Default warmupSteps: the decay follows the warmup (DLRM requires it not to start before). */
  decayStartStep?: number;
  /** Length of the decay; 0 = no decay. Default 0. */
  decaySteps?: number;
  /** Exponent of the decay ((remaining/decaySteps)^power). Default 2, as DLRM. */
  decayPower?: number;
  /** Floor of the factor once decaying. Default 0. */
  minFactor?: number;
}

export type ResolvedSchedule = Required<LrSchedule>;

const SCHEDULE_FIELDS = fieldsOf<LrSchedule>({ warmupSteps: true, decayStartStep: true, decaySteps: true, decayPower: true, minFactor: true });

export function resolveSchedule(s: LrSchedule = {}): ResolvedSchedule {
  rejectUnknownFields(s, SCHEDULE_FIELDS, 'schedule'); // also: an object at all
  const int = (v: number | undefined, name: string) => {
    const x = v ?? 0;
    if (!Number.isSafeInteger(x) || x < 0) throw new EmbshardError('INVALID_CONFIG', `schedule.${name} must be a non-negative integer (got ${String(v)})`);
    return x;
  };
  const num = (v: number | undefined, d: number, name: string, lo: number, hi: number) => {
    const x = v ?? d;
    if (typeof x !== 'number' || !Number.isFinite(x) || x < lo || x > hi)
      throw new EmbshardError('INVALID_CONFIG', `schedule.${name} must be a number in [${lo}, ${hi}] (got ${String(v)})`);
    return x;
  };
  const warmupSteps = int(s.warmupSteps, 'warmupSteps');
  return {
    warmupSteps,
    decayStartStep: s.decayStartStep === undefined ? warmupSteps : int(s.decayStartStep, 'decayStartStep'),
    decaySteps: int(s.decaySteps, 'decaySteps'),
    decayPower: num(s.decayPower, 2, 'decayPower', 0, 16),
    minFactor: num(s.minFactor, 0, 'minFactor', 0, 1),
  };
}

/** Factor of the base learning rate for the step with 0-based index `step`. */
export function lrFactor(s: ResolvedSchedule, step: number): number {
  if (step < s.warmupSteps) return (step + 1) / s.warmupSteps;
  if (s.decaySteps > 0 && step >= s.decayStartStep) {
    const k = Math.min(step - s.decayStartStep, s.decaySteps);
    return Math.max(s.minFactor, ((s.decaySteps - k) / s.decaySteps) ** s.decayPower);
  }
  return 1;
}

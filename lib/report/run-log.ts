// run-log.ts — what a training run records for its report, in memory that does not grow with the run:
// exact totals of every step (count, mean / min / max loss, time by part, the slowest and the last step)
// and of the evaluations, plus at most CHART_POINTS points per chart. A run of up to CHART_POINTS steps
// keeps every step as a point; a longer one merges neighbouring points pairwise whenever the points would
// exceed it, so each point is the mean of a span of consecutive steps (with its min / max loss). The
// evaluations are kept the same way. Plain JSON, so the report embeds it as data and tests can compare the
// pictures' numbers with the run's.
import type { EvalResult, StepMetrics, StepTimes } from '../train/trainer.js';

/** The most points a chart of a run log holds: runs of up to this many steps (evaluations) keep each one. */
export const CHART_POINTS = 2048;

/** Milliseconds of a step by part, plus the wait for its batch. */
export type StepPartTimes = StepTimes & { dataWait: number };

/** One training step as recorded. */
export interface StepRecord {
  step: number;
  /** Seconds since training started, at the end of this step. */
  elapsed: number;
  loss: number;
  samplesPerSec: number;
  times: StepPartTimes;
}

/** A chart point: one step, or the means over a span of consecutive steps. */
export interface StepPoint extends StepRecord {
  /** The span's last step (`step`) and how many steps it covers, ending there. */
  steps: number;
  /** The lowest and highest loss of a step in the span. */
  lossMin: number;
  lossMax: number;
}

/** One held-out evaluation as recorded. */
export interface EvalRecord {
  step: number;
  auc: number;
  logloss: number;
  samples: number;
}

/** A chart point of the evaluations: one, or the means over consecutive ones (`evaluations` of them, the last at `step`). */
export interface EvalPoint extends EvalRecord {
  evaluations: number;
}

/** Exact totals over every recorded step. */
export interface StepTotals {
  count: number;
  firstStep: number;
  meanLoss: number;
  minLoss: number;
  maxLoss: number;
  meanSamplesPerSec: number;
  /** Milliseconds by part, summed over the steps. */
  times: StepPartTimes;
  /** The step of the longest total time (data wait included), and that time. */
  slowest: { step: number; ms: number };
  /** The last step, as recorded. */
  last: StepRecord;
}

export interface RunLog {
  title: string;
  /** Label → value lines shown at the top of the report (model, data, held-out samples, …). */
  facts: [string, string][];
  /** The chart points of the steps, in step order (at most CHART_POINTS). */
  steps: StepPoint[];
  /** Totals of every step; undefined when none was recorded. */
  stepTotals?: StepTotals;
  /** The chart points of the evaluations, in step order (at most CHART_POINTS). */
  evals: EvalPoint[];
  /** How many evaluations ran, and the last one as recorded. */
  evalTotals?: { count: number; last: EvalRecord };
}

const TIME_PARTS = ['embeddingForward', 'denseForward', 'denseBackward', 'communication', 'communicationTotal', 'embeddingBackward', 'denseUpdate', 'total', 'dataWait'] as const;
/** Every part of StepPartTimes is in TIME_PARTS (a part added to StepTimes fails to compile here until it is). */
const EVERY_PART: Exclude<keyof StepPartTimes, (typeof TIME_PARTS)[number]> extends never ? true : never = true;
void EVERY_PART;

/** Step times with each part's value. */
function partTimes(value: (k: (typeof TIME_PARTS)[number], i: number) => number): StepPartTimes {
  const t = {} as StepPartTimes;
  TIME_PARTS.forEach((k, i) => (t[k] = value(k, i)));
  return t;
}

/** Consecutive records folded into one: the last step, the count, sums for the means, the loss range. */
interface Bucket {
  step: number;
  elapsed: number;
  count: number;
  /** Sums of the values, in the order the series was made with. */
  sums: number[];
  min: number;
  max: number;
}

/**
 * A series of numeric records over steps held in at most `capacity` buckets: every record its own bucket
 * until the buckets are full, then neighbours merged pairwise (each bucket twice as wide) as often as the
 * series needs. The first value of each record is the one whose min / max is kept.
 */
class Downsampled {
  private readonly closed: Bucket[] = [];
  private open: Bucket | undefined;
  /** How many records every closed bucket holds (a power of two). */
  private width = 1;

  /** `capacity`: even, so that full buckets merge in pairs. */
  constructor(private readonly capacity: number) {}

  add(step: number, elapsed: number, values: readonly number[]): void {
    if (!this.open) {
      if (this.closed.length === this.capacity) this.halve();
      this.open = { step, elapsed, count: 0, sums: values.map(() => 0), min: Infinity, max: -Infinity };
    }
    const b = this.open;
    b.step = step;
    b.elapsed = elapsed;
    b.count++;
    values.forEach((v, i) => (b.sums[i]! += v));
    b.min = minOf(b.min, values[0]!);
    b.max = maxOf(b.max, values[0]!);
    if (b.count === this.width) {
      this.closed.push(b);
      this.open = undefined;
    }
  }

  /** The buckets, oldest first (the last one may be partly filled). */
  buckets(): readonly Bucket[] {
    return this.open ? [...this.closed, this.open] : this.closed;
  }

  private halve(): void {
    for (let i = 0; i < this.closed.length / 2; i++) {
      const [a, b] = [this.closed[2 * i]!, this.closed[2 * i + 1]!];
      this.closed[i] = { step: b.step, elapsed: b.elapsed, count: a.count + b.count, sums: a.sums.map((s, j) => s + b.sums[j]!), min: minOf(a.min, b.min), max: maxOf(a.max, b.max) };
    }
    this.closed.length /= 2;
    this.width *= 2;
  }
}

/** min / max that keep a NaN: a step whose loss is NaN shows as NaN in its span's range. */
const minOf = (a: number, b: number) => (Number.isNaN(a) || Number.isNaN(b) ? NaN : Math.min(a, b));
const maxOf = (a: number, b: number) => (Number.isNaN(a) || Number.isNaN(b) ? NaN : Math.max(a, b));

export class RunRecorder {
  readonly title: string;
  private readonly facts: [string, string][] = [];
  private readonly stepSeries: Downsampled;
  private readonly evalSeries: Downsampled;
  private totals: StepTotals | undefined;
  private lossSum = 0;
  private rateSum = 0;
  private evalTotals: RunLog['evalTotals'];

  constructor(title: string) {
    this.title = title;
    this.stepSeries = new Downsampled(CHART_POINTS);
    this.evalSeries = new Downsampled(CHART_POINTS);
  }

  /** Records one step: the trainer's metrics, seconds since training started, and the wait for its batch (ms). */
  step(m: StepMetrics, elapsed: number, dataWait: number): void {
    const rec: StepRecord = { step: m.step, elapsed, loss: m.loss, samplesPerSec: m.samplesPerSec, times: { ...m.times, dataWait } };
    this.stepSeries.add(rec.step, rec.elapsed, [rec.loss, rec.samplesPerSec, ...TIME_PARTS.map((k) => rec.times[k])]);
    const ms = rec.times.total + rec.times.dataWait;
    const t = (this.totals ??= {
      count: 0, firstStep: rec.step, meanLoss: NaN, minLoss: Infinity, maxLoss: -Infinity, meanSamplesPerSec: NaN, times: partTimes(() => 0), slowest: { step: rec.step, ms }, last: rec,
    });
    t.count++;
    this.lossSum += rec.loss;
    this.rateSum += rec.samplesPerSec;
    t.meanLoss = this.lossSum / t.count;
    t.meanSamplesPerSec = this.rateSum / t.count;
    t.minLoss = minOf(t.minLoss, rec.loss);
    t.maxLoss = maxOf(t.maxLoss, rec.loss);
    for (const k of TIME_PARTS) t.times[k] += rec.times[k];
    if (ms > t.slowest.ms) t.slowest = { step: rec.step, ms };
    t.last = rec;
  }

  evaluation(step: number, r: EvalResult): void {
    const rec: EvalRecord = { step, auc: r.auc, logloss: r.logloss, samples: r.samples };
    this.evalSeries.add(step, 0, [rec.auc, rec.logloss, rec.samples]);
    this.evalTotals = { count: (this.evalTotals?.count ?? 0) + 1, last: rec };
  }

  fact(label: string, value: string): void {
    this.facts.push([label, value]);
  }

  /** The run so far, as the report draws it (a fresh copy: later records do not change it). */
  get log(): RunLog {
    const steps = this.stepSeries.buckets().map((b): StepPoint => {
      const mean = b.sums.map((s) => s / b.count);
      return {
        step: b.step, steps: b.count, elapsed: b.elapsed, loss: mean[0]!, lossMin: b.min, lossMax: b.max, samplesPerSec: mean[1]!,
        times: partTimes((_, i) => mean[i + 2]!),
      };
    });
    const evals = this.evalSeries.buckets().map((b): EvalPoint => ({ step: b.step, evaluations: b.count, auc: b.sums[0]! / b.count, logloss: b.sums[1]! / b.count, samples: b.sums[2]! / b.count }));
    return {
      title: this.title, facts: this.facts.map(([k, v]) => [k, v]), steps, evals,
      ...(this.totals ? { stepTotals: structuredClone(this.totals) } : {}),
      ...(this.evalTotals ? { evalTotals: structuredClone(this.evalTotals) } : {}),
    };
  }
}

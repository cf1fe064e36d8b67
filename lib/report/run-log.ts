// run-log.ts — what a training run records for its report: per step the loss, throughput and where the
// time went, per evaluation the held-out AUC and logloss, and a description of the run. Plain JSON, so
// the report embeds it as data and tests can compare the pictures' numbers with the run's.
import type { EvalResult, StepMetrics, StepTimes } from '../train/trainer.js';

export interface StepRecord {
  step: number;
  /** Seconds since training started, at the end of this step. */
  elapsed: number;
  loss: number;
  samplesPerSec: number;
  /** Milliseconds of this step by part, plus the wait for its batch. */
  times: StepTimes & { dataWait: number };
}

export interface EvalRecord {
  step: number;
  auc: number;
  logloss: number;
  samples: number;
}

export interface RunLog {
  title: string;
  /** Label → value lines shown at the top of the report (model, data, held-out samples, …). */
  facts: [string, string][];
  steps: StepRecord[];
  evals: EvalRecord[];
}

export class RunRecorder {
  readonly log: RunLog;

  constructor(title: string) {
    this.log = { title, facts: [], steps: [], evals: [] };
  }

  step(m: StepMetrics, elapsed: number, dataWait: number): void {
    this.log.steps.push({ step: m.step, elapsed, loss: m.loss, samplesPerSec: m.samplesPerSec, times: { ...m.times, dataWait } });
  }

  evaluation(step: number, r: EvalResult): void {
    this.log.evals.push({ step, auc: r.auc, logloss: r.logloss, samples: r.samples });
  }

  fact(label: string, value: string): void {
    this.log.facts.push([label, value]);
  }
}

// run-log.test.ts — the training report's run log stays the same size however long the run: 200,000 steps
// fed to the recorder give at most CHART_POINTS chart points and a report of bounded size, while the exact
// totals (steps, mean / min / max loss, time by part, the slowest and the last step, the evaluations) and
// every point (the mean of the consecutive steps it covers, with their min / max loss) equal a brute-force
// computation over all the steps; a run of up to CHART_POINTS steps keeps every step as it was recorded.
import { describe, expect, it } from 'vitest';
import { CHART_POINTS, RunRecorder, type StepPartTimes } from '../../lib/report/run-log.js';
import { trainReportHtml } from '../../lib/report/train-report.js';
import type { StepMetrics } from '../../lib/train/trainer.js';

/** A deterministic, irregular number in [0, 1) for step i and channel c. */
function noise(i: number, c: number): number {
  const x = Math.sin(i * 12.9898 + c * 78.233) * 43758.5453;
  return x - Math.floor(x);
}

interface Fed {
  step: number;
  elapsed: number;
  loss: number;
  samplesPerSec: number;
  times: StepPartTimes;
}

const PART_NAMES = ['embeddingForward', 'denseForward', 'denseBackward', 'communication', 'communicationTotal', 'embeddingBackward', 'denseUpdate', 'total', 'dataWait'] as const;

/** Steps 1…n with losses that fall with noise, irregular times, and one slow step. */
function steps(n: number): Fed[] {
  return Array.from({ length: n }, (_, j) => {
    const i = j + 1;
    const t = (c: number) => 1 + 4 * noise(i, c);
    const parts = { embeddingForward: t(1), denseForward: t(2), denseBackward: t(3), communication: t(4), embeddingBackward: t(5), denseUpdate: t(6) };
    const total = Object.values(parts).reduce((s, x) => s + x, 0) + (i === Math.floor(n / 3) ? 500 : 0);
    return {
      step: i, elapsed: i * 0.01, loss: 0.7 / (1 + i / 1000) + 0.1 * noise(i, 7), samplesPerSec: 1e5 * (1 + noise(i, 8)),
      times: { ...parts, communicationTotal: 2 * parts.communication, total, dataWait: noise(i, 9) },
    };
  });
}

function feed(r: RunRecorder, fed: Fed[]): void {
  for (const s of fed) {
    const m: StepMetrics = { step: s.step, loss: s.loss, lrFactor: 1, denseLr: 0.1, embeddingLr: 0.1, batchSize: 64, samplesPerSec: s.samplesPerSec, times: { ...s.times } };
    r.step(m, s.elapsed, s.times.dataWait);
  }
}

const sum = (xs: number[]) => xs.reduce((s, x) => s + x, 0);

describe('RunRecorder', () => {
  it('a run of 200,000 steps: bounded points and report, exact totals, each point the mean of its steps', async () => {
    const N = 200_000;
    const fed = steps(N);
    const r = new RunRecorder('long run');
    feed(r, fed);
    for (let e = 1; e <= 5000; e++) r.evaluation(e * 40, { auc: 0.7 + 0.1 * noise(e, 10), logloss: 0.45 + 0.05 * noise(e, 11), samples: 1024, ctr: 0.25 });
    const log = r.log;

    // the totals, brute force over every step, summed in step order as the recorder does
    const t = log.stepTotals!;
    expect(t.count).toBe(N);
    expect(t.firstStep).toBe(1);
    let lossSum = 0, rateSum = 0;
    for (const s of fed) (lossSum += s.loss), (rateSum += s.samplesPerSec);
    expect(t.meanLoss).toBe(lossSum / N);
    expect(t.meanSamplesPerSec).toBe(rateSum / N);
    expect(t.minLoss).toBe(fed.reduce((m, s) => Math.min(m, s.loss), Infinity));
    expect(t.maxLoss).toBe(fed.reduce((m, s) => Math.max(m, s.loss), -Infinity));
    for (const k of PART_NAMES) {
      let partSum = 0;
      for (const s of fed) partSum += s.times[k];
      expect(t.times[k], k).toBe(partSum);
    }
    const slow = fed.reduce((b, s) => (s.times.total + s.times.dataWait > b.times.total + b.times.dataWait ? s : b));
    expect(t.slowest).toEqual({ step: Math.floor(N / 3), ms: slow.times.total + slow.times.dataWait });
    expect(t.last).toEqual(fed[N - 1]);
    expect(log.evalTotals!.count).toBe(5000);
    expect(log.evalTotals!.last).toEqual({ step: 200_000, auc: 0.7 + 0.1 * noise(5000, 10), logloss: 0.45 + 0.05 * noise(5000, 11), samples: 1024 });

    // bounded points: consecutive spans of steps covering every step once, each the mean of its steps
    expect(log.steps.length).toBeLessThanOrEqual(CHART_POINTS);
    expect(log.steps.length).toBeGreaterThan(CHART_POINTS / 4);
    expect(sum(log.steps.map((p) => p.steps))).toBe(N);
    let first = 1;
    for (const p of log.steps) {
      const span = fed.slice(first - 1, p.step);
      expect(span.length).toBe(p.steps);
      expect(p.elapsed).toBe(span[span.length - 1]!.elapsed);
      expect(p.loss).toBeCloseTo(sum(span.map((s) => s.loss)) / span.length, 9);
      expect(p.lossMin).toBe(span.reduce((m, s) => Math.min(m, s.loss), Infinity));
      expect(p.lossMax).toBe(span.reduce((m, s) => Math.max(m, s.loss), -Infinity));
      expect(p.samplesPerSec).toBeCloseTo(sum(span.map((s) => s.samplesPerSec)) / span.length, 3);
      expect(p.times.total).toBeCloseTo(sum(span.map((s) => s.times.total)) / span.length, 6);
      first = p.step + 1;
    }
    expect(first).toBe(N + 1);
    expect(log.evals.length).toBeLessThanOrEqual(CHART_POINTS);
    expect(sum(log.evals.map((e) => e.evaluations))).toBe(5000);

    // the report: bounded, and it says what the points are
    const html = await trainReportHtml(log);
    expect(html.length).toBeLessThan(4_000_000);
    expect(html).toContain(`200,000 steps (1 to 200000): mean loss ${t.meanLoss.toFixed(4)}`);
    expect(html).toMatch(/the charts show \d+ points, each the mean of up to \d+ consecutive steps/);
  }, 120_000);

  it('the chart points and the log stay the same size from 50,000 to 400,000 steps', () => {
    const sizes = [50_000, 400_000].map((n) => {
      const r = new RunRecorder('run');
      feed(r, steps(n));
      const log = r.log;
      return { points: log.steps.length, json: JSON.stringify(log).length };
    });
    // the same number of points whatever the run (within a factor of two: the spans double as it grows)
    expect(sizes[1]!.json).toBeLessThan(2.2 * sizes[0]!.json);
    for (const s of sizes) expect(s.points).toBeLessThanOrEqual(CHART_POINTS);
  }, 120_000);

  it(`a run of up to ${CHART_POINTS} steps keeps every step as recorded`, () => {
    for (const n of [0, 1, 3, CHART_POINTS]) {
      const fed = steps(n);
      const r = new RunRecorder('short');
      feed(r, fed);
      const log = r.log;
      expect(log.steps).toEqual(fed.map((s) => ({ ...s, steps: 1, lossMin: s.loss, lossMax: s.loss })));
      expect(log.stepTotals?.count).toBe(n || undefined);
    }
  });

  it('a span of steps with a NaN loss shows NaN in its mean and range', () => {
    const fed = steps(CHART_POINTS + 2);
    fed[0]!.loss = Number.NaN;
    const r = new RunRecorder('nan');
    feed(r, fed);
    const log = r.log;
    expect(log.steps[0]!.steps).toBe(2);
    expect([log.steps[0]!.loss, log.steps[0]!.lossMin, log.steps[0]!.lossMax]).toEqual([NaN, NaN, NaN]);
    expect(log.steps[1]!.lossMin).toBe(Math.min(fed[2]!.loss, fed[3]!.loss));
    expect([log.stepTotals!.meanLoss, log.stepTotals!.minLoss]).toEqual([NaN, NaN]);
  });
});

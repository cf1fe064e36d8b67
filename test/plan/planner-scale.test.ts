// The planner at many ranks: the few least-loaded ranks picked without sorting them all (against a full
// sort), short row ranges deep in a Zipf tail costed in a few evaluations yet as the row-by-row sum, and a
// time budget that has passed before the search leaves the best baseline as the plan.
import { afterEach, describe, expect, it } from 'vitest';
import { AccessModel } from '../../lib/plan/access.js';
import { planShardsReport } from '../../lib/plan/planner.js';
import { firstRanks, ranksInOrder } from '../../lib/plan/state.js';
import { topologyPreset } from '../../lib/plan/topology.js';
import { Rng } from '../../lib/random/rng.js';
import { workload } from '../../lib/workloads/presets.js';

describe('firstRanks / ranksInOrder', () => {
  it('give the order a full sort gives, ties broken by rank', () => {
    const rng = new Rng(7);
    for (const W of [1, 2, 9, 100, 1000]) {
      // few distinct values: many ties
      const per = Array.from({ length: W }, () => rng.int(0, 5));
      const mem = Array.from({ length: W }, () => rng.int(0, 3));
      const cmp = (x: number, y: number): number => per[x]! - per[y]! || mem[x]! - mem[y]! || x - y;
      const sorted = Array.from({ length: W }, (_, r) => r).sort(cmp);
      for (const k of [0, 1, 3, 8, 64, 65, 200, W]) expect(firstRanks(W, k, cmp)).toEqual(sorted.slice(0, Math.min(k, W)));
      expect([...ranksInOrder(W, cmp)]).toEqual(sorted);
    }
  });
});

describe('access model deep in the tail', () => {
  // p_i of Zipf(α) over `rows` rows, straight from the definition (the mass of [i, i + 1) under (1 + x)^−α)
  const zipfP = (i: number, rows: number, a: number) => (Math.pow(i + 2, 1 - a) - Math.pow(i + 1, 1 - a)) / (Math.pow(rows + 1, 1 - a) - 1);
  const log1p = Math.log1p;
  afterEach(() => {
    Math.log1p = log1p;
  });

  it('a short range far from the head matches the row-by-row sum Σ 1 − (1 − p_i)^n', () => {
    const rows = 40_000_000, a = 1.1;
    const m = new AccessModel(rows, { zipf: a });
    for (const [n, lo, hi] of [[1e9, 65_536, 66_146], [3e8, 1_000_000, 1_002_048], [5e5, 39_999_000, rows], [1e12, 70_000, 71_000]] as const) {
      let brute = 0;
      for (let i = lo; i < hi; i++) brute += -Math.expm1(n * Math.log1p(-zipfP(i, rows, a)));
      expect(Math.abs(m.expectedDistinct(n, lo, hi) - brute) / brute).toBeLessThan(1e-6);
    }
  });

  it('costs a few evaluations, not one per row', () => {
    const m = new AccessModel(40_000_000, { zipf: 1.1 });
    let calls = 0;
    Math.log1p = (x: number) => (calls++, log1p(x));
    // 1,500 rows of a table split into tens of thousands of row groups
    m.expectedDistinct(1e9, 20_000_000, 20_001_500);
    Math.log1p = log1p;
    expect(calls).toBeLessThan(100);
  });
});

describe('time budget', () => {
  it('passed before the search: the plan is the fastest baseline, unsearched', () => {
    for (const gpus of [8, 16]) {
      const w = workload('criteo-kaggle');
      const r = planShardsReport(w.tables, topologyPreset('dgx-h100', { worldSize: gpus }), { batchSize: 4096, timeBudgetMs: 0 });
      const fit = r.baselines.filter((b) => b.time !== null);
      const best = fit.reduce((x, y) => (y.time! < x.time! ? y : x));
      expect(r.iterations).toBe(0);
      expect(r.start).toBe(best.name);
      expect(r.time).toBe(best.time);
    }
  });
});

// local-names.test.ts — a rank's engine names its tables and features after the plan's
// (`<feature>@<table>#r<a>-<b>c<c0>-<c1>`), and plan names may hold '@' and '#' themselves: tables and
// features whose built names coincide (table 'p@u' with feature 'f' and table 'u' with feature 'f@p', on
// the same rank and row range) still train as one EmbeddingCollection over the global batch.
import { describe, expect, it } from 'vitest';
import { randomBags, runCase, type PlanTables } from './odd-harness.js';

const sh = (r0: number, r1: number, rank: number) => ({ rows: [r0, r1] as [number, number], cols: [0, 4] as [number, number], rank });

describe('plan names that hold the engine names\' separators', () => {
  it("tables 'p@u' / 'u' with features 'f' / 'f@p' on one rank and range, rb and ub, 2 ranks: equal to one collection", async () => {
    const tables: PlanTables = [
      { table: { name: 'p@u', rows: 10, dim: 4, pooling: 'sum', features: ['f'] }, cluster: 'rb', shards: [sh(0, 10, 0)] },
      { table: { name: 'u', rows: 10, dim: 4, pooling: 'sum', features: ['f@p'] }, cluster: 'rb', shards: [sh(0, 10, 0)] },
      { table: { name: 'v@x', rows: 8, dim: 4, pooling: 'mean', features: ['g'] }, cluster: 'ub', shards: [sh(0, 8, 1)] },
      { table: { name: 'x', rows: 8, dim: 4, pooling: 'mean', features: ['g@v'] }, cluster: 'ub', shards: [sh(0, 8, 1)] },
    ];
    const r = await runCase({ W: 2, rpn: 2, hier: false, tables, bags: randomBags(() => 3, 3, (rows, u) => Math.floor(rows * u)), cfg: { optimizer: { type: 'adagrad', lr: 0.1 }, seed: 5 } });
    expect(r.outErr).toBeLessThan(1e-5);
    expect(r.tableErr).toBeLessThan(1e-5);
    expect(r.stateErr).toBeLessThan(1e-5);
    expect(r.traffic).toEqual([]);
  });
});

// dynamic-plan.test.ts — dynamic tables (rows: 'dynamic') in plans: the JSON form round-trips (version 3),
// layouts a dynamic table cannot take are refused naming the field (dp, hot tiers, column splits,
// hot-id remaps, spill), capacity sizes memory, and the planner never produces a refused layout.
import { describe, expect, it } from 'vitest';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { planShards } from '../../lib/plan/planner.js';
import { topologyPreset } from '../../lib/plan/topology.js';
import { DYNAMIC_MAP_ROW_BYTES } from '../../lib/plan/constants.js';
import { rowBytes } from '../../lib/plan/tables.js';
import type { PlanTableSpec } from '../../lib/plan/types.js';

const topo = (W: number, rpn = W, mem?: number) => ({ ...topologyPreset('cpu', { worldSize: W, ranksPerNode: rpn }), ...(mem ? { memoryLimitBytes: mem, deviceMemoryBytes: mem } : {}) });
const dyn = (extra: Record<string, unknown> = {}): PlanTableSpec => ({ name: 'd', rows: 'dynamic', capacity: 1000, dim: 16, features: ['f'], ...extra }) as PlanTableSpec;

function planJSON(cluster: string, shards: unknown[], extra: Record<string, unknown> = {}, table: Record<string, unknown> = {}) {
  return { format: 'embshard.plan', version: 3, topology: topo(2), batchSize: 8, tables: [{ ...dyn(table), cluster, shards, ...extra }] };
}

function planError(json: unknown): { code?: string; message: string; path?: unknown } {
  try {
    ShardPlan.fromJSON(json);
  } catch (e) {
    const err = e as { code?: string; message: string; details?: { path?: unknown } };
    return { code: err.code, message: err.message, path: err.details?.path };
  }
  throw new Error('expected INVALID_PLAN');
}

describe('dynamic tables in plans', () => {
  it('round-trip as version 3 with their id-map settings; row shards split the capacity', () => {
    const p = ShardPlan.fromJSON(planJSON('rb', [{ rows: [0, 600], cols: [0, 16], rank: 0 }, { rows: [600, 1000], cols: [0, 16], rank: 1 }], {}, { admission: { minCount: 3 }, eviction: 'lfu' }));
    const t = p.table('d');
    expect(t.rows).toBe(1000);
    expect(t.dynamic).toEqual({ capacity: 1000, minCount: 3, candidates: 1000, eviction: 'lfu', default: 'zero' });
    expect(t.access.tail).toBe('shuffled');
    const j = p.toJSON();
    expect(j.version).toBe(3);
    expect(j.tables[0]).toMatchObject({ rows: 'dynamic', capacity: 1000, admission: { minCount: 3, candidates: 1000 }, eviction: 'lfu' });
    expect(ShardPlan.fromJSON(JSON.stringify(j)).toJSON()).toEqual(j);
    // a hashed default is kept (and only then written)
    const h = ShardPlan.fromJSON(planJSON('rb', [{ rows: [0, 1000], cols: [0, 16], rank: 0 }], {}, { admission: { default: 'hashed' } }));
    expect(h.table('d').dynamic).toMatchObject({ minCount: 1, default: 'hashed' });
    expect(h.toJSON().tables[0]).toMatchObject({ admission: { minCount: 1, default: 'hashed' } });
    expect(j.tables[0]!.admission).not.toHaveProperty('default');
    // a plan without dynamic tables still writes version 2
    expect(ShardPlan.create({ topology: topo(1), batchSize: 4, tables: [{ table: { name: 'x', rows: 5, dim: 4 }, cluster: 'dp' }] }).toJSON().version).toBe(2);
  });

  it('refuses what a dynamic table cannot be, naming the field', () => {
    const full = (rank: number) => ({ rows: [0, 1000], cols: [0, 16], rank });
    expect(planError(planJSON('dp', []))).toMatchObject({ code: 'INVALID_PLAN', path: '$.tables[0].cluster' });
    expect(planError(planJSON('rb', [{ rows: [100, 1000], cols: [0, 16], rank: 0 }], { tiers: { replicated: 100, node: 0 } }))).toMatchObject({ code: 'INVALID_PLAN', path: '$.tables[0].tiers' });
    expect(planError(planJSON('ub', [{ rows: [0, 1000], cols: [0, 8], rank: 0 }, { rows: [0, 1000], cols: [8, 16], rank: 1 }]))).toMatchObject({ code: 'INVALID_PLAN', path: '$.tables[0].shards' });
    expect(planError(planJSON('rb', [full(0)], {}, { hotIds: [1, 2] }))).toMatchObject({ code: 'INVALID_PLAN', path: '$.tables[0].hotIds' });
    expect(planError(planJSON('rb', [full(0)], {}, { spill: { path: '/tmp' } }))).toMatchObject({ code: 'INVALID_PLAN', path: '$.tables[0].spill' });
    expect(planError(planJSON('rb', [full(0)], {}, { access: { top: { counts: [5], total: 10 } } }))).toMatchObject({ code: 'INVALID_PLAN', path: '$.tables[0].access.top' });
    expect(planError(planJSON('rb', [full(0)], {}, { capacity: 0 }))).toMatchObject({ code: 'INVALID_PLAN', path: '$.tables[0].capacity' });
    expect(planError(planJSON('rb', [full(0)], {}, { admission: { minCount: 2, extra: 1 } }))).toMatchObject({ code: 'INVALID_PLAN' });
    expect(planError(planJSON('rb', [full(0)], {}, { admission: { minCount: 2, default: 'random' } }))).toMatchObject({ code: 'INVALID_PLAN', path: '$.tables[0].admission.default' });
    expect(planError({ ...planJSON('rb', [full(0)]), version: 2 })).toMatchObject({ code: 'INVALID_PLAN', path: '$.tables[0].rows' });
    // dynamic fields on a table with numeric rows
    expect(planError({ ...planJSON('rb', [full(0)]), tables: [{ name: 'd', rows: 1000, dim: 16, capacity: 5, cluster: 'rb', shards: [full(0)] }] })).toMatchObject({ path: '$.tables[0].capacity' });
  });

  it('the planner sizes a dynamic table by its capacity and never gives it a refused layout', () => {
    const perRow = rowBytes({ dim: 64, dtype: 'fp32', optimizer: 'adagrad' } as never, 64) + DYNAMIC_MAP_ROW_BYTES;
    // skewed, hot, and larger than one rank: a plain table of this shape gets tiers or splits
    const tables: PlanTableSpec[] = [
      { name: 'big', rows: 'dynamic', capacity: 40_000, dim: 64, optimizer: 'adagrad', features: ['b0', 'b1'], poolingFactors: [20, 20], access: { zipf: 1.1 } },
      { name: 'seq', rows: 'dynamic', capacity: 5_000, dim: 64, pooling: 'none', features: ['s'], poolingFactors: [30] },
      { name: 'plain', rows: 3_000, dim: 64, features: ['p'], poolingFactors: [4], access: { zipf: 1.1 } },
    ];
    const mem = Math.ceil(perRow * 40_000 * 0.6); // the big table needs two ranks
    const plan = planShards(tables, topo(4, 2, mem), { batchSize: 256, timeBudgetMs: 1500 });
    for (const name of ['big', 'seq']) {
      const i = plan.tables.findIndex((t) => t.name === name);
      const l = plan.layouts[i]!;
      expect(l.cluster === 'rb' || l.cluster === 'ub').toBe(true);
      expect(l.tiers).toEqual({ replicated: 0, node: 0 });
      for (const g of l.groups) expect(g.shards.map((s) => [s.c0, s.c1])).toEqual([[0, 64]]);
    }
    expect(plan.layouts[0]!.groups.length).toBeGreaterThan(1);
    // memory: capacity × (row + state + id map) per rank, within the limit
    for (const m of plan.memoryPerRank()) expect(m).toBeLessThanOrEqual(mem);
    // a capacity no set of ranks holds is infeasible
    expect(() => planShards([{ ...tables[0]!, capacity: 10 * 40_000 } as PlanTableSpec], topo(4, 2, mem), { batchSize: 256, timeBudgetMs: 300 })).toThrow(/cannot be placed|cannot be packed/);
  });
});

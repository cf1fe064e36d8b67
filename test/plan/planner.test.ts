// Planner and baselines: plan invariants as property tests over random models (every cell owned by exactly
// one shard per replica group, memory limits held, ranks in range), the planner never worse than the best
// whole-table placement (exhaustive search) nor, from its own starts alone, than the best baseline under its
// own cost model, and infeasible models.
import { describe, expect, it } from 'vitest';
import { BASELINES } from '../../lib/plan/baselines.js';
import { estimatePlan } from '../../lib/plan/cost-model.js';
import { baselinePlan, planShards, planShardsReport } from '../../lib/plan/planner.js';
import { ShardPlan, type PlanJSON } from '../../lib/plan/shard-plan.js';
import { topologyPreset } from '../../lib/plan/topology.js';
import type { TableSpec, Topology } from '../../lib/plan/types.js';
import { Rng } from '../../lib/random/rng.js';
import { randomTables, smallTopology } from './helpers.js';

const EL = { fp32: 4, fp16: 2, bf16: 2 } as const;
const STATE = { sgd: [0, 0], adagrad: [4, 0], rowwise_adagrad: [0, 4], adam: [8, 0] } as const;

/** Independent check of a plan's JSON: cell ownership per replica group, memory, ranks. */
function checkInvariants(plan: ShardPlan): void {
  const j: PlanJSON = plan.toJSON();
  const W = j.topology.worldSize, rpn = j.topology.ranksPerNode;
  const mem = new Float64Array(W);
  for (const t of j.tables) {
    const [se, sr] = STATE[t.optimizer!];
    const row = (cols: number) => cols * (EL[t.dtype!] + se) + sr;
    const R = t.tiers?.replicated ?? 0, N = t.tiers?.node ?? 0;
    for (const s of t.shards) {
      expect(Number.isInteger(s.rank) && s.rank >= 0 && s.rank < W).toBe(true);
      mem[s.rank] += (s.rows[1] - s.rows[0]) * row(s.cols[1] - s.cols[0]);
    }
    if (t.cluster === 'dp') {
      expect(t.shards).toHaveLength(0);
      for (let r = 0; r < W; r++) mem[r] += t.rows * row(t.dim);
      continue;
    }
    for (let r = 0; r < W; r++) {
      mem[r] += R * row(t.dim);
      for (let k = 0; k < N; k++) if (k % rpn === r % rpn) mem[r] += row(t.dim);
    }
    // every cell after the tiers: exactly one shard; tier cells: every rank (replicated) or one rank per node
    for (let row_ = 0; row_ < t.rows; row_++)
      for (let c = 0; c < t.dim; c++) {
        const owners = t.shards.filter((s) => row_ >= s.rows[0] && row_ < s.rows[1] && c >= s.cols[0] && c < s.cols[1]).map((s) => s.rank);
        if (row_ < R + N) expect(owners).toHaveLength(0);
        else expect(owners, `${t.name}[${row_}, ${c}]`).toHaveLength(1);
        const api = plan.ownersOf(t.name, row_, c);
        if (row_ < R) expect(api).toEqual(Array.from({ length: W }, (_, r) => r));
        else if (row_ < R + N) expect(api).toEqual(Array.from({ length: W / rpn }, (_, n) => n * rpn + ((row_ - R) % rpn)));
        else expect(api).toEqual(owners);
      }
  }
  for (let r = 0; r < W; r++) expect(mem[r]!, `rank ${r} memory`).toBeLessThanOrEqual(j.topology.memoryLimitBytes);
  expect([...plan.memoryPerRank()]).toEqual([...mem].map((x) => expect.closeTo(x, 3)));
}

function randomCase(seed: number): { tables: TableSpec[]; topo: Topology; B: number } {
  const rng = new Rng(seed);
  const [W, rpn] = ([[2, 2], [4, 2], [8, 4], [16, 8], [8, 2]] as const)[seed % 5]!;
  const tables = randomTables(rng, rng.int(2, 9), { maxRows: 80 });
  let total = 0;
  for (const t of tables) total += t.rows * t.dim * 16;
  // between a tight and a loose memory limit
  const topo = smallTopology(W, rpn, (total / W) * (1.3 + rng.float() * 3));
  return { tables, topo: { ...topo, intraNodeBandwidth: 1e11 * (1 + rng.float()), interNodeBandwidth: 1e10 * (1 + rng.float()) }, B: rng.int(1, 64) };
}

describe('plan invariants over random models', () => {
  it('hold for the planner and every baseline that fits (25 models)', () => {
    let checked = 0;
    for (let seed = 0; seed < 25; seed++) {
      const { tables, topo, B } = randomCase(seed);
      const plans: ShardPlan[] = [planShards(tables, topo, { batchSize: B, timeBudgetMs: 1500 })];
      for (const b of BASELINES) {
        try {
          plans.push(baselinePlan(b, tables, topo, { batchSize: B }));
        } catch (e) {
          expect(e).toMatchObject({ code: 'PLAN_INFEASIBLE' });
        }
      }
      for (const p of plans) checkInvariants(p);
      checked += plans.length;
    }
    expect(checked).toBeGreaterThan(90);
  });
});

describe('planShards', () => {
  it('keeps its incremental cost bookkeeping equal to a fresh estimate of the plan it returns (40 models)', () => {
    for (let seed = 100; seed < 140; seed++) {
      const { tables, topo, B } = randomCase(seed);
      const r = planShardsReport(tables, topo, { batchSize: B, timeBudgetMs: 1500 });
      expect(estimatePlan(r.plan).time).toBeCloseTo(r.time, 12);
      for (const b of r.baselines) if (b.time !== null) expect(estimatePlan(baselinePlan(b.name, tables, topo, { batchSize: B })).time).toBeCloseTo(b.time, 12);
    }
  });

  // The oracle: every placement of whole tables (each table dp, or rb / ub on one rank), enumerated and
  // scored with the cost model, on models small enough to enumerate. The planner's search space contains
  // all of them, so its plan must never be slower — from all its starts, and from its own starts alone
  // (without the best baseline as a start).
  // one node of 2 ranks (20 models), and 2 or 4 nodes of 2 ranks under the hierarchical protocol (10 models of
  // 2-3 tables each), where the search runs with replica syncs costed flat first
  it.each([
    { W: 2, first: 0, count: 20, maxTables: 4 },
    { W: 4, first: 50, count: 10, maxTables: 3 },
    { W: 8, first: 70, count: 10, maxTables: 3 },
  ])('is never slower than the best whole-table placement, found by exhaustive search ($count small models, $W ranks in nodes of 2)', ({ W, first, count, maxTables }) => {
    const worse: string[] = [];
    for (let seed = first; seed < first + count; seed++) {
      const rng = new Rng(seed);
      const tables = randomTables(rng, rng.int(2, maxTables), { maxRows: 80 });
      let total = 0;
      for (const t of tables) total += t.rows * t.dim * 16;
      const topo = { ...smallTopology(W, 2, (total / W) * (1.3 + rng.float() * 3)), intraNodeBandwidth: 1e11 * (1 + rng.float()) };
      const B = rng.int(1, 64);
      const choices = 2 * W + 1; // rb on rank r, ub on rank r, dp
      let best = Infinity;
      for (let k = 0; k < choices ** tables.length; k++) {
        let x = k;
        const placed = tables.map((t) => {
          const o = x % choices;
          x = Math.floor(x / choices);
          if (o === 2 * W) return { table: t, cluster: 'dp' as const, shards: [] };
          const whole = { rows: [0, t.rows] as [number, number], cols: [0, t.dim] as [number, number], rank: o % W };
          return { table: t, cluster: o < W ? ('rb' as const) : ('ub' as const), shards: [whole] };
        });
        const p = ShardPlan.create({ topology: topo, batchSize: B, tables: placed });
        if (Math.max(...p.memoryPerRank()) <= topo.memoryLimitBytes) best = Math.min(best, estimatePlan(p).time);
      }
      for (const fromBaselines of [true, false]) {
        const r = planShardsReport(tables, topo, { batchSize: B, fromBaselines, timeBudgetMs: Number.POSITIVE_INFINITY });
        if (r.time > best * (1 + 1e-9)) worse.push(`model ${seed}${fromBaselines ? '' : ' (own starts)'}: ${(r.time / best).toFixed(3)}× the best whole-table placement`);
      }
    }
    expect(worse).toEqual([]);
  });

  it('from its own starts alone (no baseline as a start) is never slower than the best baseline, and places every model a baseline places (40 models)', () => {
    const worse: string[] = [];
    for (let seed = 100; seed < 140; seed++) {
      const { tables, topo, B } = randomCase(seed);
      let best = Infinity;
      for (const b of BASELINES) {
        try {
          best = Math.min(best, estimatePlan(baselinePlan(b, tables, topo, { batchSize: B })).time);
        } catch (e) {
          expect(e).toMatchObject({ code: 'PLAN_INFEASIBLE' });
        }
      }
      let time: number;
      try {
        time = planShardsReport(tables, topo, { batchSize: B, fromBaselines: false, timeBudgetMs: Number.POSITIVE_INFINITY }).time;
      } catch (e) {
        worse.push(`model ${seed}: ${(e as Error).message}`);
        continue;
      }
      if (time > best * (1 + 1e-9)) worse.push(`model ${seed}: ${(time / best).toFixed(3)}× the best baseline`);
    }
    expect(worse).toEqual([]);
  });

  it('uses the hierarchical protocol by default on several nodes of several ranks, and flat when told or on one node', () => {
    const tables: TableSpec[] = [{ name: 'a', rows: 5000, dim: 16, poolingFactors: [4] }, { name: 'b', rows: 300, dim: 8 }];
    expect(planShards(tables, smallTopology(8, 4), { batchSize: 16, timeBudgetMs: 300 }).hierarchical).toBe(true);
    expect(planShards(tables, smallTopology(8, 4), { batchSize: 16, timeBudgetMs: 300, hierarchical: false }).hierarchical).toBe(false);
    expect(planShards(tables, smallTopology(8, 8), { batchSize: 16, timeBudgetMs: 300 }).hierarchical).toBe(false);
    expect(planShards(tables, smallTopology(8, 1), { batchSize: 16, timeBudgetMs: 300 }).hierarchical).toBe(false);
    expect(baselinePlan('table-wise', tables, smallTopology(8, 4), { batchSize: 16 }).hierarchical).toBe(true);
    expect(() => planShards(tables, smallTopology(8, 4), { batchSize: 16, hierarchical: 1 as never })).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringContaining('hierarchical') }));
  });

  it('plans a single rank (every shard on rank 0)', () => {
    const plan = planShards([{ name: 't', rows: 10, dim: 4 }, { name: 'u', rows: 60, dim: 16, access: { zipf: 1.1 } }], smallTopology(1, 1), { batchSize: 2, timeBudgetMs: 500 });
    for (const t of plan.toJSON().tables) for (const s of t.shards) expect(s.rank).toBe(0);
    checkInvariants(plan);
  });

  it('is deterministic', () => {
    const { tables, topo, B } = randomCase(7);
    const a = planShards(tables, topo, { batchSize: B, maxIterations: 200, timeBudgetMs: 60_000 });
    const b = planShards(tables, topo, { batchSize: B, maxIterations: 200, timeBudgetMs: 60_000 });
    expect(a.toJSON()).toEqual(b.toJSON());
  });

  it('raises PLAN_INFEASIBLE naming the table and the shortfall in bytes', () => {
    const topo = smallTopology(2, 2, 1e6);
    const tables: TableSpec[] = [
      { name: 'small', rows: 100, dim: 64 },
      { name: 'big', rows: 10_000, dim: 64 },
    ];
    // 10,000 × 64 × 4 + 100 × 64 × 4 = 2,585,600 bytes > 2 × 1e6: short by 585,600
    let err: unknown;
    try {
      planShards(tables, topo, { batchSize: 4 });
    } catch (e) {
      err = e;
    }
    expect(err).toMatchObject({ code: 'PLAN_INFEASIBLE', details: { table: 'big', shortfallBytes: 585_600 } });
    expect((err as Error).message).toContain("'big'");
    expect((err as Error).message).toContain('585600');
    // one row larger than a rank
    expect(() => planShards([{ name: 'wide', rows: 2, dim: 65536, optimizer: 'adam' }], smallTopology(2, 2, 1e5), { batchSize: 1 })).toThrow(
      expect.objectContaining({ code: 'PLAN_INFEASIBLE', message: expect.stringContaining("'wide'") }),
    );
    // just fits: planned within the limits
    const ok = planShards([{ name: 'fits', rows: 7_000, dim: 64 }], topo, { batchSize: 4 });
    expect(Math.max(...ok.memoryPerRank())).toBeLessThanOrEqual(1e6);
  });

  it('a hardware preset over ranks that fill no whole number of its nodes: INVALID_CONFIG naming worldSize and the ranksPerNode that fit', () => {
    expect(() => topologyPreset('dgx-h100', { worldSize: 12 })).toThrow(
      expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringMatching(/^worldSize: 12 ranks do not fill whole dgx-h100 nodes of 8 GPUs; give ranksPerNode .*e\.g\. 6 or 4 or 3 or 2$/) }),
    );
    expect(() => topologyPreset('dgx-h100', { worldSize: 13 })).toThrow(expect.objectContaining({ message: expect.not.stringContaining('e.g.') }));
    expect(topologyPreset('dgx-h100', { worldSize: 12, ranksPerNode: 4 }).ranksPerNode).toBe(4);
    expect(topologyPreset('dgx-h100', { worldSize: 16 }).ranksPerNode).toBe(8);
    expect(topologyPreset('dgx-h100', { worldSize: 4 }).ranksPerNode).toBe(4);
  });

  it('rejects a bad batch size and wire dtype', () => {
    const topo = smallTopology(2, 2);
    expect(() => planShards([{ name: 't', rows: 10, dim: 4 }], topo, { batchSize: 0 })).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringContaining('batchSize') }));
    expect(() => planShards([{ name: 't', rows: 10, dim: 4 }], topo, { batchSize: 1, wire: { forward: 'fp8' as never } })).toThrow(expect.objectContaining({ message: expect.stringContaining('wire.forward') }));
  });
});

// The cost model against hand-computed cases and against the mean of exact traffic on generated batches.
import { describe, expect, it } from 'vitest';
import { AccessModel } from '../../lib/plan/access.js';
import { estimatePlan } from '../../lib/plan/cost-model.js';
import { planShards } from '../../lib/plan/planner.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { measureTraffic } from '../../lib/plan/traffic.js';
import { COMM_PHASES, FWD_OUT, Load, metric, RECV_INTER, SENT_INTER, SENT_INTRA } from '../../lib/plan/load.js';
import { simulate } from '../../lib/plan/simulator.js';
import { generateBatches } from '../../lib/workloads/generator.js';
import type { Workload } from '../../lib/workloads/presets.js';
import { smallTopology } from './helpers.js';

describe('access model', () => {
  const zipfP = (i: number, rows: number, a: number) => (Math.pow(i + 2, 1 - a) - Math.pow(i + 1, 1 - a)) / (Math.pow(rows + 1, 1 - a) - 1);

  it('expected distinct rows equal the row-by-row sum Σ 1 − (1 − p_i)^n', () => {
    const rows = 100_000, a = 1.1;
    const m = new AccessModel(rows, { zipf: a });
    for (const [n, lo, hi] of [[10_000, 0, rows], [500, 10, 5000], [1e6, 3000, rows], [64, 99_000, rows]] as const) {
      let brute = 0;
      for (let i = lo; i < hi; i++) brute += 1 - Math.pow(1 - zipfP(i, rows, a), n);
      expect(Math.abs(m.expectedDistinct(n, lo, hi) - brute) / brute).toBeLessThan(1e-4);
    }
  });

  it('mass of a range is Σ p_i; uniform is closed-form', () => {
    const m = new AccessModel(1000, { zipf: 1.1 });
    let s = 0;
    for (let i = 17; i < 400; i++) s += zipfP(i, 1000, 1.1);
    expect(m.mass(17, 400)).toBeCloseTo(s, 12);
    expect(m.mass(0, 1000)).toBeCloseTo(1, 12);
    const u = new AccessModel(10);
    expect(u.expectedDistinct(5, 0, 10)).toBeCloseTo(10 * (1 - Math.pow(0.9, 5)), 12);
  });

  it('a measured head overrides the first rows', () => {
    const m = new AccessModel(100, { top: { counts: [50, 25], total: 100 } });
    expect(m.mass(0, 1)).toBeCloseTo(0.5, 12);
    expect(m.mass(1, 2)).toBeCloseTo(0.25, 12);
    expect(m.mass(2, 100)).toBeCloseTo(0.25, 12); // uniform tail
    expect(m.mass(2, 3)).toBeCloseTo(0.25 / 98, 12);
  });
});

describe('cost model: hand-computed cases', () => {
  it('rb table split by rows over two nodes', () => {
    // W = 4, 2 per node; 100 rows × 8, uniform; one feature with 2 ids per bag; B = 10; fp32 wire.
    const plan = ShardPlan.create({
      topology: smallTopology(4, 2),
      batchSize: 10,
      tables: [
        {
          table: { name: 't', rows: 100, dim: 8, features: ['f'], poolingFactors: [2] },
          cluster: 'rb',
          shards: [
            { rows: [0, 50], cols: [0, 8], rank: 0 },
            { rows: [50, 100], cols: [0, 8], rank: 2 },
          ],
        },
      ],
    });
    const e = estimatePlan(plan);
    // per source and holder: lengths 10·4 + ids (20 · 0.5) · 8 = 120 in; outputs 10 · 8 · 4 = 320 back, 320 grads
    const c0 = e.load.counters(0);
    expect(c0.forward.sentIntra).toBeCloseTo(320, 9);
    expect(c0.forward.sentInter).toBeCloseTo(120 + 640, 9);
    expect(c0.forward.recvIntra).toBeCloseTo(120, 9);
    expect(c0.forward.recvInter).toBeCloseTo(240 + 320, 9);
    expect(c0.forward.local).toBeCloseTo(120 + 320, 9);
    expect(c0.backward).toEqual({ sentIntra: 0, sentInter: 320, recvIntra: 320, recvInter: 640, local: 320 });
    const c1 = e.load.counters(1);
    expect(c1.forward).toEqual({ sentIntra: 120, sentInter: 120, recvIntra: 320, recvInter: 320, local: 0 });
    // fwdIn stage: rank 0 receives 240 B over IB (1e10 B/s) → 24 ns, the slowest
    expect(e.stages.fwdIn).toBeCloseTo(240 / 1e10, 15);
    // HBM: rank 0 looks up 4 sources × 10 ids × 8 × 4 B; updates E[distinct of 80 draws in 50 rows] rows (read+write 32 B)
    expect(e.load.get(20, 0)).toBeCloseTo(1280, 9);
    expect(e.load.get(21, 0)).toBeCloseTo(50 * (1 - Math.pow(0.99, 80)) * 64, 9);
    // an 8-wide shard gathers at TorchRec's quarter-block penalty (1.75)
    expect(e.stages.fwdLookup).toBeCloseTo((1280 * 1.75) / 1e12, 18);
  });

  it('simulator: a stage\'s intra- and inter-node transfers overlap under the flat protocol and add under the hierarchical one', () => {
    const topo = smallTopology(4, 2); // intra 1e11 B/s, inter 1e10 B/s
    const load = new Load(topo);
    load.add(metric(FWD_OUT, SENT_INTRA), 0, 3e8); // 3 ms on NVLink
    load.add(metric(FWD_OUT, RECV_INTER), 0, 2e7); // 2 ms on the network
    expect(simulate(load, topo).stages.fwdOut).toBeCloseTo(3e-3, 12);
    expect(simulate(load, topo, true).stages.fwdOut).toBeCloseTo(5e-3, 12);
  });

  it('dp table: sparse gradient all-gather of the unique rows', () => {
    const plan = ShardPlan.create({
      topology: smallTopology(4, 2),
      batchSize: 5,
      tables: [{ table: { name: 'd', rows: 10, dim: 4, features: ['f'] }, cluster: 'dp' }],
    });
    const e = estimatePlan(plan);
    const z = 10 * (1 - Math.pow(0.9, 5)) * (8 + 16);
    const c = e.load.counters(3).backward;
    expect(c.sentIntra).toBeCloseTo(z, 9);
    expect(c.sentInter).toBeCloseTo(2 * z, 9);
    expect(c.recvIntra).toBeCloseTo(z, 9);
    expect(c.recvInter).toBeCloseTo(2 * z, 9);
    expect(e.load.counters(3).forward).toEqual({ sentIntra: 0, sentInter: 0, recvIntra: 0, recvInter: 0, local: 0 });
    expect(e.stages.sync).toBeCloseTo((2 * z) / 1e10, 15);
  });

  it('memory includes optimizer state, dp replicas and tiers', () => {
    const topo = smallTopology(4, 2);
    const plan = ShardPlan.create({
      topology: topo,
      batchSize: 1,
      tables: [
        { table: { name: 'a', rows: 100, dim: 8, optimizer: 'adagrad' }, cluster: 'rb', shards: [{ rows: [0, 100], cols: [0, 8], rank: 1 }] },
        { table: { name: 'b', rows: 10, dim: 8, optimizer: 'rowwise_adagrad', dtype: 'fp16' }, cluster: 'dp' },
        { table: { name: 'c', rows: 20, dim: 4, optimizer: 'adam' }, cluster: 'ub', tiers: { replicated: 2, node: 5 }, shards: [{ rows: [7, 20], cols: [0, 4], rank: 0 }] },
      ],
    });
    // a: 100 × 8 × (4 + 4) on rank 1; b: 10 × (8 × 2 + 4) everywhere; c: rows of 4 × (4 + 8) = 48 B:
    //   2 replicated everywhere, node tier 5 rows → local rank 0 holds 3, local rank 1 holds 2; 13 rows on rank 0
    const m = plan.memoryPerRank();
    expect([...m]).toEqual([200 + 48 * (2 + 3 + 13), 6400 + 200 + 48 * (2 + 2), 200 + 48 * (2 + 3), 200 + 48 * (2 + 2)]);
  });
});

describe('cost model vs exact traffic', () => {
  it('expected bytes per phase match the mean of measured bytes within 3%', () => {
    const w: Workload = {
      name: 'mini',
      description: '',
      source: '',
      tables: [
        { name: 'big', rows: 200_000, dim: 32, features: ['big'], poolingFactors: [8], access: { zipf: 1.1 } },
        { name: 'mid', rows: 5_000, dim: 16, features: ['mid', 'mid2'], poolingFactors: [3, 2], access: { zipf: 1.2 } },
        { name: 'seq', rows: 50_000, dim: 16, pooling: 'none', features: ['seq'], poolingFactors: [20], access: { zipf: 1.15 } },
        { name: 'tiny', rows: 40, dim: 8, features: ['tiny'], access: { zipf: 0.5 } },
      ],
      bags: { big: { kind: 'fixed', n: 8 }, mid: { kind: 'fixed', n: 3 }, mid2: { kind: 'fixed', n: 2 }, seq: { kind: 'fixed', n: 20 }, tiny: { kind: 'fixed', n: 1 } },
    };
    const topo = smallTopology(8, 4, 1e7);
    const B = 64;
    const planned = planShards(w.tables, topo, { batchSize: B, timeBudgetMs: 2000 });
    // and a hand-made plan that uses every cluster and both tiers
    const mixed = ShardPlan.create({
      topology: topo,
      batchSize: B,
      tables: [
        { table: w.tables[0]!, cluster: 'ub', tiers: { replicated: 64, node: 512 }, shards: [{ rows: [576, 100_000], cols: [0, 32], rank: 1 }, { rows: [100_000, 200_000], cols: [0, 16], rank: 5 }, { rows: [100_000, 200_000], cols: [16, 32], rank: 6 }] },
        { table: w.tables[1]!, cluster: 'dp' },
        { table: w.tables[2]!, cluster: 'rb', tiers: { replicated: 0, node: 100 }, shards: [{ rows: [100, 1000], cols: [0, 16], rank: 2 }, { rows: [1000, 50_000], cols: [0, 16], rank: 7 }] },
        { table: w.tables[3]!, cluster: 'rb', shards: [{ rows: [0, 40], cols: [0, 8], rank: 3 }] },
      ],
    });
    expect(planned.hierarchical).toBe(true); // two nodes of four ranks: the hierarchical protocol by default
    for (const plan of [planned, planned.withProtocol(false), mixed, mixed.withProtocol(true)]) {
      const e = estimatePlan(plan);
      const sums = new Float64Array(COMM_PHASES.length);
      const steps = 6;
      for (let s = 0; s < steps; s++) {
        const t = measureTraffic(plan, generateBatches(w, 8, { batchSize: B, seed: 11, step: s }));
        for (let p = 0; p < COMM_PHASES.length; p++) for (let r = 0; r < 8; r++) sums[p] += (t.load.get(metric(p, SENT_INTRA), r) + t.load.get(metric(p, SENT_INTER), r)) / steps;
      }
      for (let p = 0; p < COMM_PHASES.length; p++) {
        let exp = 0;
        for (let r = 0; r < 8; r++) exp += e.load.get(metric(p, SENT_INTRA), r) + e.load.get(metric(p, SENT_INTER), r);
        if (exp === 0 && sums[p] === 0) continue;
        expect(Math.abs(sums[p]! - exp) / exp, `phase ${COMM_PHASES[p]}`).toBeLessThan(0.03);
      }
    }
  });
});

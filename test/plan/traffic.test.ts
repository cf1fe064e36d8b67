// measureTraffic against a brute-force per-id count written from docs/wire-protocol.md (helpers.ts).
import { describe, expect, it } from 'vitest';
import { JaggedBatch } from '../../lib/batch.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { measureTraffic } from '../../lib/plan/traffic.js';
import { Rng } from '../../lib/random/rng.js';
import { generateBatches } from '../../lib/workloads/generator.js';
import { workload } from '../../lib/workloads/presets.js';
import { topologyPreset } from '../../lib/plan/topology.js';
import { baselinePlan, planShards } from '../../lib/plan/planner.js';
import { bruteForceTraffic, randomBatches, randomPlan, randomTables, smallTopology } from './helpers.js';

describe('measureTraffic', () => {
  it('equals the brute-force per-id count on 60 random plans and batches', () => {
    const rng = new Rng(7);
    for (let trial = 0; trial < 60; trial++) {
      const [W, rpn] = ([[4, 2], [8, 4], [6, 3], [4, 4], [2, 1]] as const)[trial % 5]!;
      const topo = smallTopology(W, rpn);
      const plan = randomPlan(rng, randomTables(rng, rng.int(1, 4)), topo);
      const batches = randomBatches(rng, plan, { weighted: trial % 3 === 0, int64: trial % 2 === 0 });
      const got = measureTraffic(plan, batches).perRank;
      expect(got).toEqual(bruteForceTraffic(plan, batches));
    }
  });

  it('equals the brute-force per-id count under the hierarchical protocol on 60 random plans and batches', () => {
    const rng = new Rng(11);
    for (let trial = 0; trial < 60; trial++) {
      const [W, rpn] = ([[4, 2], [8, 4], [6, 3], [8, 2], [6, 2]] as const)[trial % 5]!;
      const plan = randomPlan(rng, randomTables(rng, rng.int(1, 4)), smallTopology(W, rpn), 4, true);
      const batches = randomBatches(rng, plan, { weighted: trial % 3 === 0, int64: trial % 2 === 0 });
      expect(measureTraffic(plan, batches).perRank).toEqual(bruteForceTraffic(plan, batches));
    }
  });

  it('counts a hand-computed rb row split: partial sums from both row groups', () => {
    // 2 ranks on 2 nodes; table 10 rows × 8 cols, rows [0,5) on rank 0, [5,10) on rank 1; fp32 wire
    const plan = ShardPlan.create({
      topology: smallTopology(2, 1),
      batchSize: 2,
      tables: [
        {
          table: { name: 't', rows: 10, dim: 8, features: ['f'] },
          cluster: 'rb',
          shards: [
            { rows: [0, 5], cols: [0, 8], rank: 0 },
            { rows: [5, 10], cols: [0, 8], rank: 1 },
          ],
        },
      ],
    });
    // rank 0: bags [1, 7], [2]; rank 1: bags [], [9, 9, 3]
    const b0 = JaggedBatch.fromBags(['f'], [[[1, 7], [2]]]);
    const b1 = JaggedBatch.fromBags(['f'], [[[], [9, 9, 3]]]);
    const t = measureTraffic(plan, [b0, b1]).perRank;
    // rank 0 → rank 1 (inter): ids in [5,10): 1 → 2·4 + 1·8 = 16; local (rank 0, group 0): 2·4 + 2·8 = 24
    // rank 1 → rank 0: ids in [0,5): 1 → 2·4 + 8 = 16; local: 2·4 + 2·8 = 24
    // outputs: every (group, source) returns B × 8 × 4 = 64 bytes: rank 0 sends 64 to rank 1 and 64 to itself
    expect(t[0]!.forward).toEqual({ sentIntra: 0, sentInter: 16 + 64, recvIntra: 0, recvInter: 16 + 64, local: 24 + 64 });
    expect(t[1]!.forward).toEqual({ sentIntra: 0, sentInter: 16 + 64, recvIntra: 0, recvInter: 16 + 64, local: 24 + 64 });
    expect(t[0]!.backward).toEqual({ sentIntra: 0, sentInter: 64, recvIntra: 0, recvInter: 64, local: 64 });
  });

  it('counts a hand-computed ub table with tiers: dedup across features, replicated all-gather, node tier', () => {
    // 4 ranks, 2 per node; rows [0,2) replicated, [2,6) node tier (row k of the tier on local rank k mod 2), [6,20) on rank 3
    const plan = ShardPlan.create({
      topology: smallTopology(4, 2),
      batchSize: 1,
      tables: [{ table: { name: 't', rows: 20, dim: 4, features: ['a', 'b'] }, cluster: 'ub', tiers: { replicated: 2, node: 4 }, shards: [{ rows: [6, 20], cols: [0, 4], rank: 3 }] }],
    });
    const empty = JaggedBatch.fromBags(['a', 'b'], [[[]], [[]]]);
    // rank 0: a = [0, 0, 3, 10], b = [10, 11, 1]
    const b0 = JaggedBatch.fromBags(['a', 'b'], [[[0, 0, 3, 10]], [[10, 11, 1]]]);
    const t = measureTraffic(plan, [b0, empty, empty, empty]).perRank;
    const grad = 8 + 4 * 4;
    // replicated {0,1}: 2 rows → 2·24 = 48 to each of 3 others (1 intra, 2 inter)
    // node tier: id 3 = tier row 1 → local rank 1 = rank 1 (intra): 8 in, 16 back, 16 grad;
    //   node sync: rank 1 sends 1 row (24 B) to rank 3 (local rank 1 of node 1)
    // ub: distinct {10, 11} → rank 3 (inter): 16 in, 2·16 back, 2·16 grad
    expect(t[0]!.forward).toEqual({ sentIntra: 8, sentInter: 16, recvIntra: 16, recvInter: 32, local: 0 });
    expect(t[0]!.backward).toEqual({ sentIntra: 48 + 16, sentInter: 2 * 48 + 32, recvIntra: 0, recvInter: 0, local: 0 });
    expect(t[1]!.backward).toEqual({ sentIntra: 0, sentInter: grad, recvIntra: 48 + 16, recvInter: 0, local: 0 });
    expect(t[3]!.backward).toEqual({ sentIntra: 0, sentInter: 0, recvIntra: 0, recvInter: 48 + 32 + grad, local: 0 });
  });

  it('runs on 1,024 simulated ranks and conserves bytes (sent = received, per direction and link)', () => {
    const w = workload('criteo-kaggle');
    const topo = topologyPreset('dgx-h100', { worldSize: 1024 });
    for (const plan of [baselinePlan('row-wise', w.tables, topo, { batchSize: 2 }), planShards(w.tables, topo, { batchSize: 2, maxIterations: 20 })]) {
      const t = measureTraffic(plan, generateBatches(w, 1024, { batchSize: 2, seed: 5 }));
      for (const dir of ['forward', 'backward'] as const) {
        let si = 0, ri = 0, sx = 0, rx = 0;
        for (const c of t.perRank) (si += c[dir].sentIntra), (ri += c[dir].recvIntra), (sx += c[dir].sentInter), (rx += c[dir].recvInter);
        expect(si).toBe(ri);
        expect(sx).toBe(rx);
      }
      expect(t.totals.forward.inter).toBeGreaterThan(0);
    }
  });

  it('rejects batches that do not match the plan', () => {
    const rng = new Rng(3);
    const plan = randomPlan(rng, randomTables(rng, 2), smallTopology(2, 2));
    const good = randomBatches(rng, plan);
    expect(() => measureTraffic(plan, good.slice(0, 1))).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    const missing = JaggedBatch.fromBags(['t0f0'], [[[0]]]);
    expect(() => measureTraffic(plan, [missing, missing])).toThrow(expect.objectContaining({ code: 'MISSING_FEATURE' }));
    const t0 = plan.tables[0]!;
    const feats = plan.tables.flatMap((t) => t.features);
    const outOfRange = JaggedBatch.fromBags(feats, feats.map((f) => [[f === t0.features[0] ? t0.rows : 0]]));
    expect(() => measureTraffic(plan, [outOfRange, outOfRange])).toThrow(expect.objectContaining({ code: 'ID_OUT_OF_RANGE' }));
  });
});

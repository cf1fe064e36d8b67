// The project's all-to-all goal on the skewed sequence workload, checked on an exact count: one generated step
// at the batch the plan was made for (8 GPUs of dgx-h100, 2,048 samples per rank, ≈ 11.5 M ids), bytes counted
// by the brute-force per-id counter written from docs/wire-protocol.md (helpers.ts), not by measureTraffic.
import { describe, expect, it } from 'vitest';
import { baselinePlan, planShards } from '../../lib/plan/planner.js';
import { topologyPreset } from '../../lib/plan/topology.js';
import type { RankCounters } from '../../lib/plan/types.js';
import { generateBatches } from '../../lib/workloads/generator.js';
import { workload } from '../../lib/workloads/presets.js';
import { bruteForceTraffic } from './helpers.js';

/** Σ over ranks of bytes sent to other ranks, both directions (all-to-alls and all-gathers). */
const sent = (c: RankCounters[]) => c.reduce((s, x) => s + x.forward.sentIntra + x.forward.sentInter + x.backward.sentIntra + x.backward.sentInter, 0);

describe('seq-skewed target on exact traffic', () => {
  it('8 × dgx-h100 at the planned batch: ≥ 85% fewer bytes sent than row-wise, no rank over its memory limit', () => {
    const w = workload('seq-skewed');
    const topo = topologyPreset('dgx-h100', { worldSize: 8 });
    const B = 2048;
    const plan = planShards(w.tables, topo, { batchSize: B, maxIterations: 5000, timeBudgetMs: Number.POSITIVE_INFINITY });
    const rowWise = baselinePlan('row-wise', w.tables, topo, { batchSize: B });
    const batches = generateBatches(w, 8, { batchSize: B, seed: 2024 });
    const mine = sent(bruteForceTraffic(plan, batches));
    const base = sent(bruteForceTraffic(rowWise, batches));
    // row-wise sends every remote id and one row slice per id each way (≥ 2 × 64 × 4 bytes; ~7/8 of ids are remote)
    expect(base).toBeGreaterThan(batches.reduce((s, b) => s + b.ids.length, 0) * (3 / 4) * 2 * 64 * 4);
    expect(1 - mine / base).toBeGreaterThanOrEqual(0.85);
    for (const m of plan.memoryPerRank()) expect(m).toBeLessThanOrEqual(topo.memoryLimitBytes);
  }, 300_000);
});

// simulator.ts — predicted time of the embedding stage of one iteration, from a Load (exact traffic from
// measureTraffic, or expected traffic from the cost model) and the topology's bandwidths.
//
// Overlap model (bulk-synchronous, no pipelining across phases):
//   the step is six phases in order — forward input all-to-all, forward lookup, forward output all-to-all,
//   backward gradient all-to-all, backward local reduce + optimizer update, gradient all-gathers (dp tables
//   and hot tiers). Each phase ends when its slowest rank ends, so
//       T = Σ_phase max_rank t(phase, rank).
//   Within a communication phase a rank's NVLink and InfiniBand transfers proceed in parallel and links are
//   full duplex: t = max(max(sentIntra, recvIntra) / intraBW, max(sentInter, recvInter) / interBW).
//   Under the hierarchical protocol a phase's node-level step (reduction, deduplication, relay) and its
//   rail-aligned cross-node step depend on each other, so they add instead: t = intra + inter.
//   Compute phases: t = width-penalised HBM bytes / HBM bandwidth. Messages to self are free (no link), and
//   per-message latency is not modelled.
import { COMM_PHASES, EFF_BWD, EFF_FWD, HBM_BWD, HBM_FWD, Load, metric, RECV_INTER, RECV_INTRA, SENT_INTER, SENT_INTRA } from './load.js';
import { EmbshardError } from '../errors.js';
import { normalizeTopology } from './topology.js';
import type { Topology } from './types.js';

export const STAGES = ['fwdIn', 'fwdLookup', 'fwdOut', 'bwdComm', 'bwdUpdate', 'sync'] as const;
export type Stage = (typeof STAGES)[number];

export interface SimResult {
  /** predicted embedding-stage time per iteration, seconds */
  time: number;
  /** critical path per stage (max over ranks), seconds */
  stages: Record<Stage, number>;
  /** per rank: Σ over stages of its own time (what the planner balances), seconds */
  perRank: Float64Array;
  /** HBM bytes (raw) per rank, forward + backward */
  hbmBytes: Float64Array;
}

/** Time of each stage on each rank: out[stage * W + r], seconds. */
export function stageTimes(load: Load, topo: Topology, out: Float64Array = new Float64Array(STAGES.length * load.W), hierarchical = false): Float64Array {
  const W = load.W, d = load.data;
  const bi = 1 / topo.intraNodeBandwidth, bx = 1 / topo.interNodeBandwidth, bh = 1 / topo.hbmBandwidth;
  const comm = (phase: number, stage: number) => {
    const si = metric(phase, SENT_INTRA) * W, sx = metric(phase, SENT_INTER) * W;
    const ri = metric(phase, RECV_INTRA) * W, rx = metric(phase, RECV_INTER) * W;
    for (let r = 0; r < W; r++) {
      const a = Math.max(d[si + r]!, d[ri + r]!) * bi;
      const b = Math.max(d[sx + r]!, d[rx + r]!) * bx;
      out[stage * W + r] = hierarchical ? a + b : a > b ? a : b;
    }
  };
  comm(0, 0);
  for (let r = 0; r < W; r++) out[W + r] = d[EFF_FWD * W + r]! * bh;
  comm(1, 2);
  comm(2, 3);
  for (let r = 0; r < W; r++) out[4 * W + r] = d[EFF_BWD * W + r]! * bh;
  comm(3, 5);
  return out;
}

/** Predicted embedding-stage time of one iteration (see the overlap model above). */
export function simulate(load: Load, topo: Topology, hierarchical = false): SimResult {
  if (!(load instanceof Load)) throw new EmbshardError('INVALID_ARGUMENT', 'simulate: load must be a Load (measureTraffic(...).load or expectedLoad(...))');
  normalizeTopology(topo, 'simulate: topology', 'INVALID_ARGUMENT');
  if (load.W !== topo.worldSize || load.rpn !== topo.ranksPerNode)
    throw new EmbshardError('INVALID_ARGUMENT', `simulate: the load is of ${load.W} ranks, ${load.rpn} per node; topology has ${topo.worldSize}, ${topo.ranksPerNode} per node`);
  if (typeof hierarchical !== 'boolean') throw new EmbshardError('INVALID_ARGUMENT', 'simulate: hierarchical must be a boolean');
  const W = load.W;
  const t = stageTimes(load, topo, undefined, hierarchical);
  const stages = {} as Record<Stage, number>;
  const perRank = new Float64Array(W);
  let time = 0;
  STAGES.forEach((s, k) => {
    let m = 0;
    for (let r = 0; r < W; r++) {
      const v = t[k * W + r]!;
      perRank[r] += v;
      if (v > m) m = v;
    }
    stages[s] = m;
    time += m;
  });
  const hbmBytes = new Float64Array(W);
  for (let r = 0; r < W; r++) hbmBytes[r] = load.get(HBM_FWD, r) + load.get(HBM_BWD, r);
  return { time, stages, perRank, hbmBytes };
}

/** Plan objective: critical-path time and Σ_r (per-rank time)², the tie-breaker that spreads load. */
export function objective(load: Load, topo: Topology, scratch?: Float64Array, hierarchical = false): { time: number; spread: number; perRank: Float64Array } {
  const W = load.W;
  const t = stageTimes(load, topo, scratch, hierarchical);
  const perRank = new Float64Array(W);
  let time = 0;
  for (let k = 0; k < STAGES.length; k++) {
    let m = 0;
    for (let r = 0; r < W; r++) {
      const v = t[k * W + r]!;
      perRank[r] += v;
      if (v > m) m = v;
    }
    time += m;
  }
  let spread = 0;
  for (let r = 0; r < W; r++) spread += perRank[r]! * perRank[r]!;
  return { time, spread, perRank };
}

export { COMM_PHASES };

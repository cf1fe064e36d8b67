// cost-model.ts — the analytical cost model: the expected per-rank Load of one step for a table layout
// (the same byte accounting as docs/wire-protocol.md and measureTraffic, with every count replaced by its
// expectation under the table's access model), and the plan-level estimate built from it.
//
// For a rank with local batch B, feature f of table t draws n_f = B · poolingFactor_f ids, N = Σ_f n_f.
// A row group [a, b) gets n_f · m(a, b) of them (m = access mass) and E_distinct(N, a, b) distinct rows;
// all ranks are statistically identical, so a destination's expected bytes are the same from every source.
import { EmbshardError } from '../errors.js';
import { MAX_BATCH_SIZE } from '../data/types.js';
import { accessModel } from './access.js';
import { blockPenalty, DTYPE_BYTES, ID_BYTES, LENGTH_BYTES, WEIGHT_BYTES } from './constants.js';
import { groupHolders, nodeColumns, type ShardCols, type TableLayout } from './layout.js';
import { BWD, EFF_BWD, EFF_FWD, FWD_IN, FWD_OUT, HBM_BWD, HBM_FWD, Load, LOCAL, metric, RECV_INTER, RECV_INTRA, SENT_INTER, SENT_INTRA, SYNC } from './load.js';
import { objective, simulate, type SimResult } from './simulator.js';
import { elemBytes, idsPerSample, rowUpdateBytes } from './tables.js';
import type { Table, Topology, WireDtypes } from './types.js';
import type { ShardPlan } from './shard-plan.js';

export interface CostContext {
  topo: Topology;
  /** per-rank batch size */
  batchSize: number;
  wire: WireDtypes;
  /** rb / ub exchanges and replica syncs use the hierarchical protocol (docs/wire-protocol.md) */
  hierarchical: boolean;
  /**
   * Cost the replica syncs (dp tables, replicated tiers) as the flat protocol's all-gather even under the
   * hierarchical protocol: the planner's conservative first descent (planner.ts).
   */
  flatReplicaSync?: boolean;
}

/**
 * Rows one holder sends across nodes in the rail all-reduce of node sums (docs/wire-protocol.md), and
 * receives alike: its node's `uNode` rows but those homed on its own node, then the global sums of the
 * `U / nodes` rows homed there to each other node.
 */
function railAllReduceBytes(uNode: number, U: number, nodes: number): number {
  return ((uNode + U) * (nodes - 1)) / nodes;
}

/** Adds the expected Load of one table under `layout` to `out`. */
export function addExpectedTableLoad(t: Table, l: TableLayout, ctx: CostContext, out: Load): void {
  const { topo, batchSize: B, wire } = ctx;
  const W = topo.worldSize, rpn = topo.ranksPerNode, nodes = W / rpn;
  const am = accessModel(t);
  const fw = DTYPE_BYTES[wire.forward], bw = DTYPE_BYTES[wire.backward];
  const N = B * idsPerSample(t);
  const pooled = t.pooling !== 'none';
  const dim = t.dim;

  const hier = ctx.hierarchical && nodes > 1;
  // the gradient sync of rows [a, b) replicated on every rank (dp table, replicated tier); returns U
  const replicaSync = (a: number, b: number): number => {
    const rowGrad = ID_BYTES + dim * bw;
    const u = am.expectedDistinct(N, a, b), U = am.expectedDistinct(W * N, a, b);
    if (!hier || ctx.flatReplicaSync) {
      out.allToOne(SYNC, new Float64Array(W).fill(u * rowGrad), true, true);
      return U;
    }
    // each local index holds 1/rpn of the rows: the ranks' rows in, the node sums all-reduced across nodes
    // (to each row's home node, the global sums back), the global sums out
    const uNode = am.expectedDistinct(rpn * N, a, b);
    const across = railAllReduceBytes(uNode / rpn, U / rpn, nodes) * rowGrad;
    for (let r = 0; r < W; r++) {
      out.add(metric(SYNC, LOCAL), r, ((u + U) / rpn) * rowGrad);
      out.add(metric(SYNC, SENT_INTRA), r, (((u + U) * (rpn - 1)) / rpn) * rowGrad);
      out.add(metric(SYNC, RECV_INTRA), r, (((u + U) * (rpn - 1)) / rpn) * rowGrad);
      out.add(metric(SYNC, SENT_INTER), r, across);
      out.add(metric(SYNC, RECV_INTER), r, across);
    }
    return U;
  };

  if (l.cluster === 'dp') {
    const U = replicaSync(0, t.rows);
    for (let r = 0; r < W; r++) addFullRowHbm(t, r, N, U, out);
    return;
  }

  const R = l.tiers.replicated, Nn = l.tiers.node;
  if (R > 0) {
    const U = replicaSync(0, R);
    const m = am.mass(0, R);
    for (let r = 0; r < W; r++) addFullRowHbm(t, r, N * m, U, out);
  }
  if (Nn > 0) {
    // ub inside the node; the tier's rows are spread over local ranks, taken as an even share each
    const u = am.expectedDistinct(N, R, R + Nn) / rpn;
    const uNode = am.expectedDistinct(rpn * N, R, R + Nn) / rpn;
    const U = am.expectedDistinct(W * N, R, R + Nn) / rpn;
    // every rank exchanges u rows' worth with each local rank of its node (itself: local)
    const addIntra = (phase: number, perMsg: number) => {
      for (let r = 0; r < W; r++) {
        out.add(metric(phase, LOCAL), r, perMsg);
        out.add(metric(phase, SENT_INTRA), r, perMsg * (rpn - 1));
        out.add(metric(phase, RECV_INTRA), r, perMsg * (rpn - 1));
      }
    };
    addIntra(FWD_IN, u * ID_BYTES);
    addIntra(FWD_OUT, u * dim * fw);
    addIntra(BWD, u * dim * bw);
    const zs = railAllReduceBytes(uNode, U, nodes) * (ID_BYTES + dim * bw);
    for (let r = 0; r < W; r++) {
      out.add(metric(SYNC, SENT_INTER), r, zs);
      out.add(metric(SYNC, RECV_INTER), r, zs);
      addFullRowHbm(t, r, rpn * u, U, out);
    }
  }

  const xIn = new Float64Array(W), xOut = new Float64Array(W), xBwd = new Float64Array(W);
  const relayed: RelayedRequests | undefined = hier && pooled && l.cluster === 'rb' ? { all: 0, ownNode: new Float64Array(nodes), recv: new Float64Array(nodes) } : undefined;
  const wBytes = t.weighted ? WEIGHT_BYTES : 0;
  const F = t.features.length;
  for (const g of l.groups) {
    const m = am.mass(g.a, g.b);
    const U = am.expectedDistinct(W * N, g.a, g.b);
    const { ranks, cols } = groupHolders(g);
    if (l.cluster === 'rb') {
      const nG = N * m;
      const inB = F * B * LENGTH_BYTES + nG * (ID_BYTES + wBytes);
      if (relayed) addRelayedRequests(relayed, ranks, rpn, nodes, inB);
      ranks.forEach((d, k) => {
        const c = cols[k]!;
        if (hier && pooled) {
          // every source's request and partial sums pass d's node-mate with the source's local index: nodes × each
          addToNodeMates(out, d, rpn, nodes * inB, nodes * F * B * c * fw, nodes * F * B * c * bw);
          return;
        }
        xIn[d] += inB;
        xOut[d] += (pooled ? F * B : nG) * c * fw;
        xBwd[d] += (pooled ? F * B : nG) * c * bw;
      });
      addShardHbm(t, g.shards, W * nG, U, out);
    } else if (hier) {
      const u = am.expectedDistinct(N, g.a, g.b);
      const uNode = am.expectedDistinct(rpn * N, g.a, g.b);
      addUbHierGroup(out, ranks, cols, rpn, nodes, u, uNode, fw, bw);
      addShardHbm(t, g.shards, rpn * u + (nodes - 1) * uNode, U, out);
    } else {
      const u = am.expectedDistinct(N, g.a, g.b);
      ranks.forEach((d, k) => {
        const c = cols[k]!;
        xIn[d] += u * ID_BYTES;
        xOut[d] += u * c * fw;
        xBwd[d] += u * c * bw;
      });
      addShardHbm(t, g.shards, W * u, U, out);
    }
  }
  if (relayed) {
    flushRelayedRequests(out, relayed, rpn);
    // one node-reduced vector per (source, feature, other node holding the table), rail-aligned, each way
    const y = nodeColumns(l, rpn, nodes);
    let total = 0;
    for (let n = 0; n < nodes; n++) total += y[n]!;
    for (let r = 0; r < W; r++) {
      const own = y[Math.floor(r / rpn)]!;
      const v = F * B, mine = (nodes - 1) * own * v, others = (total - own) * v;
      out.add(metric(FWD_OUT, SENT_INTER), r, mine * fw);
      out.add(metric(FWD_OUT, RECV_INTER), r, others * fw);
      out.add(metric(BWD, SENT_INTER), r, others * bw);
      out.add(metric(BWD, RECV_INTER), r, mine * bw);
    }
  }
  if (l.groups.length > 0) {
    out.allToOne(FWD_IN, xIn);
    out.allToOne(FWD_OUT, xOut, true);
    out.allToOne(BWD, xBwd);
  }
}

/** d receives `req` (forward input) from every rank of its node, itself included (local), sends it `fwd` (forward output) and receives `bwd` (backward). */
function addToNodeMates(out: Load, d: number, rpn: number, req: number, fwd: number, bwd: number): void {
  const base = Math.floor(d / rpn) * rpn;
  for (let q = base; q < base + rpn; q++) {
    out.msg(FWD_IN, q, d, req);
    out.msg(FWD_OUT, d, q, fwd);
    out.msg(BWD, q, d, bwd);
  }
}

/**
 * Hierarchical rb: every rank's request for a row group crosses once to each other node holding it, to the
 * rank with its local index. Every rank of a node sends and receives alike, so a table's groups add up as:
 * each rank sends k requests (k: nodes holding the group), one fewer on a holding node (`ownNode`), and a
 * rank on a holding node receives one from each other node; the ranks get them once per table
 * (flushRelayedRequests). O(holders) per group.
 */
interface RelayedRequests {
  /** Σ over groups of k × request bytes */
  all: number;
  /** per node: Σ over the groups it holds of the request bytes (its own node's request stays inside) */
  ownNode: Float64Array;
  /** per node: Σ over the groups it holds of (nodes − 1) × request bytes */
  recv: Float64Array;
}

function addRelayedRequests(x: RelayedRequests, holders: readonly number[], rpn: number, nodes: number, inB: number): void {
  const held = holders.length === 1 ? [Math.floor(holders[0]! / rpn)] : [...new Set(holders.map((d) => Math.floor(d / rpn)))];
  x.all += held.length * inB;
  for (const n of held) {
    x.ownNode[n] += inB;
    x.recv[n] += (nodes - 1) * inB;
  }
}

function flushRelayedRequests(out: Load, x: RelayedRequests, rpn: number): void {
  for (let r = 0; r < x.recv.length * rpn; r++) {
    const n = Math.floor(r / rpn);
    out.add(metric(FWD_IN, SENT_INTER), r, x.all - x.ownNode[n]!);
    if (x.recv[n] !== 0) out.add(metric(FWD_IN, RECV_INTER), r, x.recv[n]!);
  }
}

/**
 * Expected bytes of one ub row group under the hierarchical protocol: sources reach holders on their own
 * node directly; for a holder on another node they go through their node's rank with the holder's local
 * index, which sends the node's distinct ids (uNode) across and relays rows and gradients back.
 */
function addUbHierGroup(out: Load, ranks: readonly number[], cols: readonly number[], rpn: number, nodes: number, u: number, uNode: number, fw: number, bw: number): void {
  for (let m = 0; m < nodes; m++) {
    const relay = new Float64Array(rpn); // columns the rank with local index j of node m relays
    ranks.forEach((d, k) => {
      const c = cols[k]!;
      if (Math.floor(d / rpn) === m) {
        for (let r = m * rpn; r < (m + 1) * rpn; r++) {
          out.msg(FWD_IN, r, d, u * ID_BYTES);
          out.msg(FWD_OUT, d, r, u * c * fw);
          out.msg(BWD, r, d, u * c * bw);
        }
        return;
      }
      const a = m * rpn + (d % rpn);
      relay[d % rpn] += c;
      out.msg(FWD_IN, a, d, uNode * ID_BYTES);
      out.msg(FWD_OUT, d, a, uNode * c * fw);
      out.msg(BWD, a, d, uNode * c * bw);
    });
    for (let j = 0; j < rpn; j++) {
      if (relay[j] === 0) continue;
      const a = m * rpn + j;
      for (let r = m * rpn; r < (m + 1) * rpn; r++) {
        out.msg(FWD_IN, r, a, u * ID_BYTES);
        out.msg(FWD_OUT, a, r, u * relay[j]! * fw);
        out.msg(BWD, r, a, u * relay[j]! * bw);
      }
    }
  }
}

/**
 * HBM bytes on the shards of one row group: `lookups` rows read (forward; each `cols` wide) and `updates`
 * distinct rows updated (backward: read + write of row and optimizer state). Shared with measureTraffic.
 */
export function addShardHbm(t: Table, shards: readonly ShardCols[], lookups: number, updates: number, out: Load): void {
  const el = elemBytes(t);
  for (const s of shards) {
    const c = s.c1 - s.c0, p = blockPenalty(c);
    const f = lookups * c * el, b = updates * rowUpdateBytes(t, c);
    out.add(HBM_FWD, s.rank, f);
    out.add(EFF_FWD, s.rank, f * p);
    out.add(HBM_BWD, s.rank, b);
    out.add(EFF_BWD, s.rank, b * p);
  }
}

/** HBM bytes of full-width rows on one rank (dp tables and hot tiers). */
export function addFullRowHbm(t: Table, rank: number, lookups: number, updates: number, out: Load): void {
  addShardHbm(t, [{ c0: 0, c1: t.dim, rank }], lookups, updates, out);
}

/** The expected Load of a whole plan. */
export function expectedLoad(tables: readonly Table[], layouts: readonly TableLayout[], ctx: CostContext): Load {
  const load = new Load(ctx.topo);
  tables.forEach((t, i) => addExpectedTableLoad(t, layouts[i]!, ctx, load));
  return load;
}

export interface PlanEstimate extends SimResult {
  load: Load;
  memory: Float64Array;
}

/** Cost-model estimate of a plan: expected per-rank bytes, per-stage critical path and per-rank time. */
export function estimatePlan(plan: ShardPlan, batchSize = plan.batchSize): PlanEstimate {
  if (!(Number.isSafeInteger(batchSize) && batchSize > 0 && batchSize <= MAX_BATCH_SIZE))
    throw new EmbshardError('INVALID_ARGUMENT', `batchSize: must be an integer in [1, ${MAX_BATCH_SIZE}] (got ${String(batchSize)})`, { path: 'batchSize' });
  const ctx: CostContext = { topo: plan.topology, batchSize, wire: plan.wire, hierarchical: plan.hierarchical };
  const load = expectedLoad(plan.tables, plan.layouts, ctx);
  return { ...simulate(load, plan.topology, plan.hierarchical), load, memory: plan.memoryPerRank() };
}

export { objective };

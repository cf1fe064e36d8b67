// traffic.ts — measureTraffic: the exact bytes every rank sends, receives and keeps local in one step of a
// plan, for one concrete local batch per rank, byte for byte as docs/wire-protocol.md defines them, plus the
// HBM bytes of lookups and updates. Ids become rows by the table's hot-id remap (remap.ts). No kernels run; ids are sorted per (rank, table) in typed arrays, so
// 1,024 simulated ranks with small batches take seconds.
import { JaggedBatch } from '../batch.js';
import { EmbshardError } from '../errors.js';
import { DTYPE_BYTES, ID_BYTES, LENGTH_BYTES, WEIGHT_BYTES } from './constants.js';
import { addFullRowHbm, addShardHbm } from './cost-model.js';
import { groupHolders, nodeColumns, type TableLayout } from './layout.js';
import { BWD, FWD_IN, FWD_OUT, Load, SYNC } from './load.js';
import { remapOf } from './remap.js';
import { dynamicKeys } from './dynamic-keys.js';
import type { ShardPlan } from './shard-plan.js';
import type { RankCounters, Table } from './types.js';

export interface TrafficReport {
  /** wire-protocol counters of every rank */
  perRank: RankCounters[];
  /** the same bytes split by phase, plus HBM bytes (input to simulate()) */
  load: Load;
  /** Σ over ranks of bytes sent to other ranks, by direction and link */
  totals: { forward: { intra: number; inter: number }; backward: { intra: number; inter: number }; local: number };
}

function lowerBound(a: Float64Array, x: number, lo = 0, hi = a.length): number {
  while (lo < hi) {
    const m = (lo + hi) >>> 1;
    if (a[m]! < x) lo = m + 1;
    else hi = m;
  }
  return lo;
}

/** Number of distinct values in the sorted slice a[lo, hi). */
function distinct(a: Float64Array, lo: number, hi: number): number {
  let u = 0, prev = NaN;
  for (let i = lo; i < hi; i++) {
    const v = a[i]!;
    if (v !== prev) {
      u++;
      prev = v;
    }
  }
  return u;
}

/** Sorted unique values of the sorted slice a[lo, hi). */
function uniqueOf(a: Float64Array, lo = 0, hi = a.length): Float64Array {
  const out = new Float64Array(distinct(a, lo, hi));
  let k = 0, prev = NaN;
  for (let i = lo; i < hi; i++) {
    const v = a[i]!;
    if (v !== prev) out[k++] = prev = v;
  }
  return out;
}

function concatSorted(parts: readonly Float64Array[]): Float64Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Float64Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out.sort();
}

interface RankTableIds {
  /** per feature, sorted */
  features: Float64Array[];
  /** all features, sorted */
  all: Float64Array;
  batchSize: number;
  weighted: boolean;
}

/** Validates one rank's batch against the plan's features and returns its ids per table, sorted. */
function collect(plan: ShardPlan, batch: JaggedBatch, rank: number, keys: readonly ((Float64Array | undefined)[][] | undefined)[]): RankTableIds[] {
  const owner = new Map<string, Table>();
  for (const t of plan.tables) for (const f of t.features) owner.set(f, t);
  for (const f of batch.features)
    if (!owner.has(f)) throw new EmbshardError('UNKNOWN_FEATURE', `batches[${rank}] has feature '${f}', which no table of the plan reads`);
  let sum = 0;
  for (let i = 0; i < batch.lengths.length; i++) {
    const n = batch.lengths[i]!;
    if (n < 0) throw new EmbshardError('NEGATIVE_LENGTH', `batches[${rank}].lengths[${i}] is negative (${n})`);
    sum += n;
  }
  if (sum !== batch.ids.length) throw new EmbshardError('LENGTH_MISMATCH', `batches[${rank}]: lengths sum to ${sum} but there are ${batch.ids.length} ids`);
  return plan.tables.map((t, ti) => {
    const remap = remapOf(t);
    const features = t.features.map((f, k) => {
      if (!batch.features.includes(f)) throw new EmbshardError('MISSING_FEATURE', `batches[${rank}] lacks feature '${f}' of table '${t.name}'`);
      const ids = batch.feature(f).ids;
      const a = new Float64Array(ids.length);
      const dyn = keys[ti]?.[rank]?.[k];
      if (dyn) a.set(dyn); // a dynamic table: row-space keys of its raw ids (dynamic-keys.ts)
      else if (ids instanceof BigInt64Array) for (let i = 0; i < ids.length; i++) a[i] = Number(ids[i]!);
      else a.set(ids);
      remap?.applyInPlace(a); // ids → rows (hot ids first); ids out of range stay so and fail below
      a.sort();
      if (a.length > 0 && (a[0]! < 0 || a[a.length - 1]! >= t.rows)) {
        const badId = a[0]! < 0 ? a[0]! : a[a.length - 1]!;
        throw new EmbshardError('ID_OUT_OF_RANGE', `batches[${rank}] feature '${f}': id ${badId} is outside table '${t.name}' (${t.rows} rows)`);
      }
      return a;
    });
    return { features, all: features.length === 1 ? features[0]! : concatSorted(features), batchSize: batch.batchSize, weighted: batch.weights !== undefined };
  });
}

/** Exact traffic of one step: `batches[r]` is rank r's local batch. */
export function measureTraffic(plan: ShardPlan, batches: readonly JaggedBatch[]): TrafficReport {
  const topo = plan.topology;
  const W = topo.worldSize, rpn = topo.ranksPerNode, nodes = W / rpn;
  if (!Array.isArray(batches) || batches.length !== W)
    throw new EmbshardError('INVALID_ARGUMENT', `batches must hold one local batch per rank (${W}); got ${Array.isArray(batches) ? batches.length : typeof batches}`);
  batches.forEach((b, r) => {
    if (!(b instanceof JaggedBatch)) throw new EmbshardError('INVALID_ARGUMENT', `batches[${r}] must be a JaggedBatch`);
  });
  const keys = plan.tables.map((t) => (t.dynamic ? dynamicKeys(t, batches) : undefined));
  const ids = batches.map((b, r) => collect(plan, b, r, keys));
  const load = new Load(topo);
  const fw = DTYPE_BYTES[plan.wire.forward], bw = DTYPE_BYTES[plan.wire.backward];
  plan.tables.forEach((t, ti) => measureTable(t, plan.layouts[ti]!, ids.map((x) => x[ti]!), load, W, rpn, nodes, fw, bw, plan.hierarchical && nodes > 1));
  const perRank = Array.from({ length: W }, (_, r) => load.counters(r));
  const totals = { forward: { intra: 0, inter: 0 }, backward: { intra: 0, inter: 0 }, local: 0 };
  for (const c of perRank) {
    totals.forward.intra += c.forward.sentIntra;
    totals.forward.inter += c.forward.sentInter;
    totals.backward.intra += c.backward.sentIntra;
    totals.backward.inter += c.backward.sentInter;
    totals.local += c.forward.local + c.backward.local;
  }
  return { perRank, load, totals };
}

/** Distinct rows per local index (row mod rpn) of a sorted unique list. */
function perResidue(u: Float64Array, rpn: number): Float64Array {
  const c = new Float64Array(rpn);
  for (let i = 0; i < u.length; i++) c[u[i]! % rpn]++;
  return c;
}

/**
 * The rail all-reduce of node sums across nodes (docs/wire-protocol.md): `perNode[n]` = node n's distinct
 * rows, synced as keys k = row − `first` (the row itself, or its index in a node tier). Key k is held by
 * local index k mod rpn; each node's rows go to that holder on their home node ⌊(k mod W) / rpn⌋, and each
 * home sends the global sums of its rows (every node's rows) to the other nodes.
 */
function measureRailAllReduce(load: Load, perNode: readonly Float64Array[], all: Float64Array, first: number, rowGrad: number, rpn: number): void {
  const nodes = perNode.length, W = nodes * rpn;
  // rows per (holder j, home m), at j * nodes + m
  const byHome = (u: Float64Array) => {
    const c = new Float64Array(rpn * nodes);
    for (let i = 0; i < u.length; i++) {
      const k = (u[i]! - first) % W;
      c[(k % rpn) * nodes + Math.floor(k / rpn)]++;
    }
    return c;
  };
  for (let n = 0; n < nodes; n++) {
    const c = byHome(perNode[n]!);
    for (let j = 0; j < rpn; j++) for (let m = 0; m < nodes; m++) if (m !== n) load.msg(SYNC, n * rpn + j, m * rpn + j, c[j * nodes + m]! * rowGrad);
  }
  const h = byHome(all);
  for (let j = 0; j < rpn; j++)
    for (let m = 0; m < nodes; m++) for (let n = 0; n < nodes; n++) if (n !== m) load.msg(SYNC, m * rpn + j, n * rpn + j, h[j * nodes + m]! * rowGrad);
}

/**
 * The gradient sync of a dp table or a replicated tier (docs/wire-protocol.md), given every rank's distinct
 * rows: flat, an all-gather of every rank's rows; hierarchical, each row to the rank of its node with its
 * local index (row mod rpn), the node sums all-reduced rail-aligned across nodes, the global sums to every
 * rank of the node. Returns the number of distinct rows over all ranks.
 */
function measureReplicaSync(load: Load, rows: readonly Float64Array[], rowGrad: number, rpn: number, nodes: number, hier: boolean): number {
  const W = rows.length;
  const all = uniqueOf(concatSorted(rows));
  if (!hier) {
    load.allToOne(SYNC, Float64Array.from(rows, (u) => u.length * rowGrad), true, true);
    return all.length;
  }
  for (let r = 0; r < W; r++) {
    const c = perResidue(rows[r]!, rpn), base = r - (r % rpn);
    for (let j = 0; j < rpn; j++) load.msg(SYNC, r, base + j, c[j]! * rowGrad);
  }
  const perNode = Array.from({ length: nodes }, (_, n) => uniqueOf(concatSorted(rows.slice(n * rpn, (n + 1) * rpn))));
  measureRailAllReduce(load, perNode, all, 0, rowGrad, rpn);
  const cAll = perResidue(all, rpn);
  for (let n = 0; n < nodes; n++)
    for (let j = 0; j < rpn; j++) for (let k = 0; k < rpn; k++) load.msg(SYNC, n * rpn + j, n * rpn + k, cAll[j]! * rowGrad);
  return all.length;
}

function measureTable(t: Table, l: TableLayout, ids: RankTableIds[], load: Load, W: number, rpn: number, nodes: number, fw: number, bw: number, hier: boolean): void {
  const dim = t.dim;
  const rowGrad = ID_BYTES + dim * bw;
  if (l.cluster === 'dp') {
    const U = measureReplicaSync(load, ids.map((x) => uniqueOf(x.all)), rowGrad, rpn, nodes, hier);
    for (let r = 0; r < W; r++) addFullRowHbm(t, r, ids[r]!.all.length, U, load);
    return;
  }
  const R = l.tiers.replicated, Nn = l.tiers.node, te = R + Nn;
  if (R > 0) {
    const U = measureReplicaSync(load, ids.map((x) => uniqueOf(x.all, 0, lowerBound(x.all, R))), rowGrad, rpn, nodes, hier);
    for (let r = 0; r < W; r++) addFullRowHbm(t, r, lowerBound(ids[r]!.all, R), U, load);
  }
  if (Nn > 0) {
    const nodeUniq: Float64Array[][] = Array.from({ length: nodes }, () => []);
    for (let r = 0; r < W; r++) {
      const a = ids[r]!.all;
      const u = uniqueOf(a, lowerBound(a, R), lowerBound(a, te));
      nodeUniq[Math.floor(r / rpn)]!.push(u);
      const cnt = new Float64Array(rpn);
      for (let i = 0; i < u.length; i++) cnt[(u[i]! - R) % rpn]++;
      const base = Math.floor(r / rpn) * rpn;
      for (let j = 0; j < rpn; j++) {
        if (cnt[j] === 0) continue;
        const d = base + j;
        load.msg(FWD_IN, r, d, cnt[j]! * ID_BYTES);
        load.msg(FWD_OUT, d, r, cnt[j]! * dim * fw);
        load.msg(BWD, r, d, cnt[j]! * dim * bw);
        addFullRowHbm(t, d, cnt[j]!, 0, load);
      }
    }
    // node replicas: the holders of local slot j all-reduce their nodes' row sums rail-aligned
    const perNode = Array.from({ length: nodes }, (_, n) => uniqueOf(concatSorted(nodeUniq[n]!)));
    const all = uniqueOf(concatSorted(perNode));
    if (nodes > 1) measureRailAllReduce(load, perNode, all, R, rowGrad, rpn);
    const cntAll = new Float64Array(rpn);
    for (let i = 0; i < all.length; i++) cntAll[(all[i]! - R) % rpn]++;
    for (let r = 0; r < W; r++) addFullRowHbm(t, r, 0, cntAll[r % rpn]!, load);
  }
  if (l.groups.length === 0) return;

  const G = l.groups.length;
  const holders = l.groups.map(groupHolders);
  const pooled = t.pooling !== 'none';
  const nodeOf = (r: number) => Math.floor(r / rpn);
  /** the rank of node m with r's local index (the rail-aligned peer) */
  const hop = (m: number, r: number) => m * rpn + (r % rpn);
  /** per node: the columns of the table its shards cover (the width of a node-reduced rb vector) */
  const nodeCols = hier && l.cluster === 'rb' ? nodeColumns(l, rpn, nodes) : new Float64Array(nodes);
  // global distinct rows per group (backward updates) and lookups per shard
  const allUniq = uniqueOf(concatSorted(ids.map((x) => uniqueOf(x.all, lowerBound(x.all, te)))));
  const lookups = new Float64Array(G);
  for (let r = 0; r < W; r++) {
    const x = ids[r]!;
    const B = x.batchSize;
    if (l.cluster === 'rb') {
      const wb = x.weighted ? WEIGHT_BYTES : 0;
      for (const a of x.features) {
        let i = lowerBound(a, te);
        for (let g = 0; g < G; g++) {
          const end = l.groups[g]!.b;
          const s = i;
          while (i < a.length && a[i]! < end) i++;
          const n = i - s;
          lookups[g] += n;
          const h = holders[g]!;
          const inBytes = B * LENGTH_BYTES + n * (ID_BYTES + wb);
          const rowsOut = pooled ? B : n;
          const viaNodes = new Set<number>();
          for (let k = 0; k < h.ranks.length; k++) {
            const d = h.ranks[k]!, c = h.cols[k]!;
            if (hier && pooled && nodeOf(d) !== nodeOf(r)) {
              // hierarchical: the request crosses once per node to the rank with r's local index there, which
              // hands it to the holders; the partial sums meet on that rank, which also fans the gradient out
              const a = hop(nodeOf(d), r);
              viaNodes.add(nodeOf(d));
              load.msg(FWD_IN, a, d, inBytes);
              load.msg(FWD_OUT, d, a, B * c * fw);
              load.msg(BWD, a, d, B * c * bw);
            } else {
              load.msg(FWD_IN, r, d, inBytes);
              load.msg(FWD_OUT, d, r, rowsOut * c * fw);
              load.msg(BWD, r, d, rowsOut * c * bw);
            }
          }
          for (const m of viaNodes) load.msg(FWD_IN, r, hop(m, r), inBytes);
        }
        // hierarchical: one reduced vector per other node holding the table crosses, rail-aligned, each way
        if (hier && pooled)
          for (let m = 0; m < nodes; m++) {
            if (m === nodeOf(r) || nodeCols[m] === 0) continue;
            const a = hop(m, r);
            load.msg(FWD_OUT, a, r, B * nodeCols[m]! * fw);
            load.msg(BWD, r, a, B * nodeCols[m]! * bw);
          }
      }
    } else {
      const a = x.all;
      let i = lowerBound(a, te);
      for (let g = 0; g < G; g++) {
        const end = l.groups[g]!.b;
        let u = 0, prev = NaN;
        while (i < a.length && a[i]! < end) {
          if (a[i] !== prev) {
            u++;
            prev = a[i]!;
          }
          i++;
        }
        if (u === 0) continue;
        const h = holders[g]!;
        if (!hier) lookups[g] += u;
        // hierarchical: ids for other nodes go to the rail-aligned rank of this node (once per local index),
        // which sends the node's distinct ids across (below); rows and gradients return the same way
        const viaHop = new Float64Array(rpn);
        for (let k = 0; k < h.ranks.length; k++) {
          const d = h.ranks[k]!, c = h.cols[k]!;
          if (hier && nodeOf(d) !== nodeOf(r)) {
            viaHop[d % rpn] += c;
            continue;
          }
          if (hier) lookups[g] += u;
          load.msg(FWD_IN, r, d, u * ID_BYTES);
          load.msg(FWD_OUT, d, r, u * c * fw);
          load.msg(BWD, r, d, u * c * bw);
        }
        for (let j = 0; j < rpn; j++) {
          if (viaHop[j] === 0) continue;
          const a = nodeOf(r) * rpn + j;
          load.msg(FWD_IN, r, a, u * ID_BYTES);
          load.msg(FWD_OUT, a, r, u * viaHop[j]! * fw);
          load.msg(BWD, r, a, u * viaHop[j]! * bw);
        }
      }
    }
  }
  if (hier && l.cluster === 'ub')
    for (let m = 0; m < nodes; m++) {
      // the node's distinct ids per row group, sent once to each holder on another node by its rail peer
      const nodeAll = uniqueOf(concatSorted(ids.slice(m * rpn, (m + 1) * rpn).map((x) => uniqueOf(x.all, lowerBound(x.all, te)))));
      let i = 0;
      for (let g = 0; g < G; g++) {
        const e = lowerBound(nodeAll, l.groups[g]!.b, i);
        const U = e - i;
        i = e;
        if (U === 0) continue;
        const h = holders[g]!;
        for (let k = 0; k < h.ranks.length; k++) {
          const d = h.ranks[k]!, c = h.cols[k]!;
          if (nodeOf(d) === m) continue;
          const a = m * rpn + (d % rpn);
          lookups[g] += U;
          load.msg(FWD_IN, a, d, U * ID_BYTES);
          load.msg(FWD_OUT, d, a, U * c * fw);
          load.msg(BWD, a, d, U * c * bw);
        }
      }
    }
  let i = 0;
  for (let g = 0; g < G; g++) {
    const { a, b, shards } = l.groups[g]!;
    i = lowerBound(allUniq, a, i);
    const e = lowerBound(allUniq, b, i);
    addShardHbm(t, shards, lookups[g]!, e - i, load);
    i = e;
  }
}

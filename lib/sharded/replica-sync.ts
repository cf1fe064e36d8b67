// replica-sync.ts — what keeps replicas identical in the backward: the gradients of dp tables and of
// replicated hot tiers (flat protocol: all-gathered from every rank, every rank then sums them in rank
// order; hierarchical protocol: summed per row inside the node, the node sums exchanged rail-aligned
// across nodes and summed in node order, the result all-gathered inside the node), and the node tiers'
// node-summed gradients exchanged with the holder of the same rows on every other node
// (docs/wire-protocol.md: dp tables, hot-row tiers, Messages). Each exchange is a count exchange
// (uncounted metadata) and one message of ids and gradient rows.
import type { ProcessGroup, TrafficCounters } from './group.js';
import { concat, concatWire, wireBytes } from './arrays.js';
import { exchangeOps, wireArray, type Wire, type WireArray } from './exchange-ops.js';
import { fuse, PartReader } from './fused.js';
import type { LocalLayout, TableRt } from './local-layout.js';
import type { CommArray } from './binding.js';
import type { ScratchPool } from './scratch.js';

/** Rows and their fp32 gradients, per plan table index. */
export type RowGrads = Map<number, { ids: BigInt64Array; grads: Float32Array }>;

/** Rows and their gradients in the wire dtype. */
interface WireRows {
  ids: BigInt64Array;
  wire: WireArray;
}

function takeWire(reader: PartReader, wire: Wire, n: number): WireArray {
  return wire === 'fp32' ? reader.take(Float32Array, n) : reader.take(Uint16Array, n);
}

/** `n` rows of width `dim`, rounded to the wire dtype. */
function toWire(f: Float32Array, n: number, dim: number, bw: Wire): WireArray {
  const w = wireArray(bw, n * dim);
  exchangeOps().pack(f, dim, null, 0, n, 0, dim, bw, w, 0);
  return w;
}

/** Lists of rows concatenated, gradients back in fp32 (into `scratch` when given). */
function fromWire(lists: readonly WireRows[], dim: number, bw: Wire, scratch?: ScratchPool): { ids: BigInt64Array; grads: Float32Array } {
  const ids = concat(lists.map((l) => l.ids), BigInt64Array);
  const grads = scratch ? scratch.f32(ids.length * dim) : new Float32Array(ids.length * dim);
  let at = 0;
  for (const l of lists) {
    exchangeOps().unpack(l.wire, 0, bw, l.ids.length, dim, grads, dim, null, at, 0, false);
    at += l.ids.length;
  }
  return { ids, grads };
}

/** Each distinct row's gradient sum, in input order; rows ordered by (row mod m, row) with their count per residue. */
function sumByRow(ids: BigInt64Array, grads: Float32Array, dim: number, m: number): { ids: BigInt64Array; sums: Float32Array; perResidue: Float64Array } {
  const K = exchangeOps();
  const uq = K.unique(ids, m);
  const sums = new Float32Array(uq.values.length * dim);
  K.gradUnique(grads, dim, 0, dim, uq.inverse, new Int32Array(ids.length).fill(1), null, null, false, null, sums);
  return { ids: uq.values, sums, perResidue: uq.counts };
}

/**
 * One exchange of per-table row lists among the ranks `peer` admits (a symmetric relation; a rank may be
 * its own peer): `send(d)` gives the lists for rank d, one per entry of `dims` (null: none). First the
 * counts (uncounted metadata: one per table to each peer), then one message per peer: every table's ids,
 * then every table's gradient rows. Returns, per source rank, its lists (empty for non-peers).
 */
async function exchangeRows(g: ProcessGroup, bw: Wire, dims: readonly number[], peer: (d: number) => boolean, send: (d: number) => readonly (WireRows | null)[], counters: TrafficCounters): Promise<WireRows[][]> {
  const W = g.size, T = dims.length;
  const meta: Float64Array[] = [], parts: CommArray[][] = [], mC: number[] = [];
  for (let d = 0; d < W; d++) {
    if (!peer(d)) {
      parts.push([]), mC.push(0);
      continue;
    }
    const m = new Float64Array(T), ip: BigInt64Array[] = [], gp: WireArray[] = [];
    send(d).forEach((l, k) => {
      if (!l || l.ids.length === 0) return;
      m[k] = l.ids.length;
      ip.push(l.ids), gp.push(l.wire);
    });
    meta.push(m), parts.push([concat(ip, BigInt64Array), concatWire(gp, bw)]), mC.push(T);
  }
  const mIn = await g.allToAllV(concat(meta, Float64Array), mC, { uncounted: true, recvCounts: mC });
  const nIds: number[] = [], nGr: number[] = [];
  for (let p = 0, mo = 0; p < W; mo += mIn.counts[p]!, p++) {
    let a = 0, b = 0;
    if (mIn.counts[p]! > 0)
      dims.forEach((dim, k) => {
        a += mIn.data[mo + k]!;
        b += mIn.data[mo + k]! * dim;
      });
    nIds.push(a), nGr.push(b);
  }
  const msg = fuse(parts);
  const inb = await g.allToAllV(msg.bytes, msg.counts, { recvCounts: nIds.map((n, p) => n * 8 + nGr[p]! * wireBytes(bw)), counters });
  const reader = new PartReader(inb.data);
  const out: WireRows[][] = [];
  for (let p = 0, mo = 0; p < W; mo += mIn.counts[p]!, p++) {
    const ids = reader.take(BigInt64Array, nIds[p]!), gr = takeWire(reader, bw, nGr[p]!);
    const lists: WireRows[] = [];
    let io = 0, go = 0;
    dims.forEach((dim, k) => {
      const n = mIn.counts[p]! > 0 ? mIn.data[mo + k]! : 0;
      lists.push({ ids: ids.subarray(io, io + n), wire: gr.subarray(go, go + n * dim) as WireArray });
      io += n;
      go += n * dim;
    });
    out.push(lists);
  }
  g.release(mIn.data, inb.data);
  return out;
}

/**
 * dp tables and replicated tiers: `local` holds this rank's distinct rows of each such table and their
 * gradient sums; returns, per table, every rank's rows and gradients (rank order, rounded to the wire dtype
 * as they travelled). With `scratch`, the wire copies and the returned gradients are its views (valid
 * until the phase ends).
 */
export async function syncReplicated(L: LocalLayout, g: ProcessGroup, bw: Wire, local: { table: TableRt; ids: BigInt64Array; grads: Float32Array }[], counters: TrafficCounters, scratch?: ScratchPool): Promise<RowGrads> {
  const K = exchangeOps();
  const W = L.W;
  const out: RowGrads = new Map();
  if (local.length === 0) return out;
  const cnt = local.map((x) => x.ids.length);
  const wires = local.map((x) => {
    const wv = scratch ? scratch.wire(bw, x.grads.length) : wireArray(bw, x.grads.length);
    K.pack(x.grads, x.table.table.dim, null, 0, x.ids.length, 0, x.table.table.dim, bw, wv, 0);
    return wv;
  });
  const c = await g.allGather(Float64Array.from(cnt), { uncounted: true, recvCounts: new Array(W).fill(cnt.length) });
  const nIds: number[] = [], nGr: number[] = [];
  for (let p = 0; p < W; p++) {
    let a = 0, b = 0;
    local.forEach((x, k) => {
      const n = c.data[p * cnt.length + k]!;
      a += n;
      b += n * x.table.table.dim;
    });
    nIds.push(a), nGr.push(b);
  }
  // one all-gather carrying every rank's ids and gradient rows together
  const mine = fuse([[concat(local.map((x) => x.ids), BigInt64Array), concatWire(wires, bw)]]);
  const both = await g.allGather(mine.bytes, { recvCounts: nIds.map((n, p) => n * 8 + nGr[p]! * wireBytes(bw)), counters });
  // per table, every rank's rows in rank order, each rank's part written straight to its place
  const reader = new PartReader(both.data);
  const rowsOf = local.map((_, k) => {
    let n = 0;
    for (let p = 0; p < W; p++) n += c.data[p * cnt.length + k]!;
    return n;
  });
  const all = local.map((x, k) => {
    const n = rowsOf[k]! * x.table.table.dim;
    return { ids: new BigInt64Array(rowsOf[k]!), grads: scratch ? scratch.f32(n) : new Float32Array(n), at: 0 };
  });
  for (let p = 0; p < W; p++) {
    const ids = reader.take(BigInt64Array, nIds[p]!), gr = takeWire(reader, bw, nGr[p]!);
    let io = 0, go = 0;
    local.forEach((x, k) => {
      const n = c.data[p * cnt.length + k]!, dim = x.table.table.dim, a = all[k]!;
      a.ids.set(ids.subarray(io, io + n), a.at);
      K.unpack(gr, go, bw, n, dim, a.grads, dim, null, a.at, 0, false);
      a.at += n;
      io += n;
      go += n * dim;
    });
  }
  g.release(both.data, c.data);
  local.forEach((x, k) => out.set(x.table.index, { ids: all[k]!.ids, grads: all[k]!.grads }));
  return out;
}

/**
 * dp tables and replicated tiers under the hierarchical protocol (several nodes). `local` as for
 * `syncReplicated`. Row `i` of a table belongs to local index `i mod ranksPerNode`:
 *  1. every rank sends its rows to the rank of its node with their local index;
 *  2. that rank sums them per row, local ranks in order (the node sum);
 *  3. exchanges the node sums with the rank of the same local index on every other node (rail-aligned);
 *  4. sums every node's sums per row, nodes in order (the global sum; the same on every node);
 *  5. and sends the global sums to every rank of its node.
 * Every value is rounded to the wire dtype each time it travels, its holder's own copy included, so every
 * replica applies the same sums. Returns, per table, every distinct row once with its global sum.
 */
export async function syncReplicatedHier(L: LocalLayout, g: ProcessGroup, bw: Wire, local: { table: TableRt; ids: BigInt64Array; grads: Float32Array }[], counters: TrafficCounters, scratch?: ScratchPool): Promise<RowGrads> {
  const rpn = L.rpn, node = L.nodeOf(L.rank), slot = L.rank % rpn, nodes = L.W / rpn;
  const out: RowGrads = new Map();
  if (local.length === 0) return out;
  const dims = local.map((x) => x.table.table.dim);
  const inNode = (d: number) => L.nodeOf(d) === node;
  // 1. this rank's rows, by local index of their holder
  const mine = local.map((x, k) => {
    const s = sumByRow(x.ids, x.grads, dims[k]!, rpn);
    const wire = toWire(s.sums, s.ids.length, dims[k]!, bw);
    const start = [0];
    for (let j = 0; j < rpn; j++) start.push(start[j]! + s.perResidue[j]!);
    return { ids: s.ids, wire, start };
  });
  const atHolder = await exchangeRows(g, bw, dims, inNode, (d) => mine.map((m, k) => {
    const a = m.start[d % rpn]!, b = m.start[(d % rpn) + 1]!;
    return { ids: m.ids.subarray(a, b), wire: m.wire.subarray(a * dims[k]!, b * dims[k]!) as WireArray };
  }), counters);
  // 2. the node sums of this rank's rows
  const reduce = (lists: (k: number) => WireRows[]): WireRows[] => dims.map((dim, k) => {
    const x = fromWire(lists(k), dim, bw);
    const s = sumByRow(x.ids, x.grads, dim, 1);
    return { ids: s.ids, wire: toWire(s.sums, s.ids.length, dim, bw) };
  });
  const nodeSum = reduce((k) => Array.from({ length: rpn }, (_, q) => atHolder[node * rpn + q]![k]!));
  // 3. rail-aligned across nodes
  const rail = await exchangeRows(g, bw, dims, (d) => d % rpn === slot && !inNode(d), () => nodeSum, counters);
  // 4. the global sums, nodes in order
  const globalSum = reduce((k) => Array.from({ length: nodes }, (_, m) => (m === node ? nodeSum[k]! : rail[m * rpn + slot]![k]!)));
  // 5. to every rank of the node
  const all = await exchangeRows(g, bw, dims, inNode, () => globalSum, counters);
  local.forEach((x, k) => out.set(x.table.index, fromWire(Array.from({ length: rpn }, (_, q) => all[node * rpn + q]![k]!), dims[k]!, bw, scratch)));
  return out;
}

/**
 * Node tiers: `parts` holds, per table, the rows this rank's node asked this rank for and their gradients
 * (source order). Sums them per row (rounded to the wire dtype, so every node's replica sums identical
 * inputs), exchanges the sums with the same holder on every other node, and returns per table every
 * node's list in node order, for the rows this rank holds.
 */
export async function syncNodeTiers(L: LocalLayout, g: ProcessGroup, bw: Wire, parts: Map<number, { ids: BigInt64Array[]; grads: Float32Array[] }>, counters: TrafficCounters): Promise<RowGrads> {
  const W = L.W, rpn = L.rpn, r = L.rank;
  const out: RowGrads = new Map();
  const nodeTables = L.tables.filter((rt) => rt.N > 0);
  if (nodeTables.length === 0) return out;
  const dims = nodeTables.map((rt) => rt.table.dim);
  const sums: (WireRows | null)[] = nodeTables.map((rt, k) => {
    const np = parts.get(rt.index);
    if (!np) return null;
    const s = sumByRow(concat(np.ids, BigInt64Array), concat(np.grads, Float32Array), dims[k]!, 1);
    return { ids: s.ids, wire: toWire(s.sums, s.ids.length, dims[k]!, bw) };
  });
  const nodes = W / rpn, myNode = L.nodeOf(r);
  // with the holder of the same rows (same local index) on every other node
  const fromPeer = nodes > 1 ? await exchangeRows(g, bw, dims, (d) => d % rpn === r % rpn && L.nodeOf(d) !== myNode, () => sums, counters) : [];
  // per table: every node's list in node order (this node's own sums included)
  nodeTables.forEach((rt, k) => {
    if (L.nodeRowsHeld(rt, r) === 0) return;
    const lists: WireRows[] = [];
    for (let m = 0; m < nodes; m++) {
      const src = m === myNode ? sums[k] : fromPeer[m * rpn + (r % rpn)]![k]!;
      if (src && src.ids.length > 0) lists.push(src);
    }
    out.set(rt.index, fromWire(lists, dims[k]!, bw));
  });
  return out;
}

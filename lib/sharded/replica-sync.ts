// replica-sync.ts — what keeps replicas identical in the backward: the gradients of dp tables and of
// replicated hot tiers (flat protocol: all-gathered from every rank, every rank then sums them in rank
// order; hierarchical protocol: summed per row inside the node, the node sums all-reduced rail-aligned
// across nodes (each row summed at its home node, nodes in order, and the sums shared), the result
// all-gathered inside the node), and the node tiers' node-summed gradients all-reduced the same way with
// the holders of the same rows on the other nodes
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

/** One table's rows summed per row, ordered by (row mod m, row), with the first row of each residue; rounded to the wire dtype. */
interface SummedRows extends WireRows {
  start: number[];
}

/** Each distinct row's gradient sum (its rows in input order, from 0), as SummedRows. */
function sumByRow(ids: BigInt64Array, grads: Float32Array, dim: number, bw: Wire, m: number): SummedRows {
  const K = exchangeOps();
  const uq = K.unique(ids, m);
  const sums = new Float32Array(uq.values.length * dim);
  K.gradUnique(grads, dim, 0, dim, uq.inverse, new Int32Array(ids.length).fill(1), null, null, false, null, sums);
  return { ids: uq.values, wire: toWire(sums, uq.values.length, dim, bw), start: residueStarts(uq.counts) };
}

/** Lists of one table's rows (sources in order) summed per row. */
function reduceRows(lists: readonly WireRows[], dim: number, bw: Wire, m: number): SummedRows {
  const x = fromWire(lists, dim, bw);
  return sumByRow(x.ids, x.grads, dim, bw, m);
}

function residueStarts(perResidue: Float64Array): number[] {
  const start = [0];
  for (let j = 0; j < perResidue.length; j++) start.push(start[j]! + perResidue[j]!);
  return start;
}

/** Rows grouped by the node they are summed on (railAllReduce): home[m] = the first row of node m, home[nodes] = all. */
interface ByHome extends WireRows {
  home: number[];
}

function sliceRows(x: WireRows, dim: number, a: number, b: number): WireRows {
  return { ids: x.ids.subarray(a, b), wire: x.wire.subarray(a * dim, b * dim) as WireArray };
}

/**
 * The rail all-reduce of node sums across nodes (docs/wire-protocol.md): `nodeSum` holds per table this
 * rank's node sums grouped by home node, `home[m]` the first row homed on node m (null: none). 1. each
 * node's sums to the rail peer on their home node; 2. the home sums every node's sums per row, nodes in
 * order, rounded to the wire dtype (the global sum); 3. every home's global sums to the rail peers on the
 * other nodes. Returns per table the global sum of every row any node touched, homes in order, rows
 * ascending within a home: the same values on every node.
 */
async function railAllReduce(L: LocalLayout, g: ProcessGroup, bw: Wire, dims: readonly number[], nodeSum: readonly (ByHome | null)[], counters: TrafficCounters): Promise<WireRows[]> {
  const rpn = L.rpn, nodes = L.W / rpn, node = L.nodeOf(L.rank), slot = L.rank % rpn;
  const rail = (d: number) => d % rpn === slot && L.nodeOf(d) !== node;
  const share = (k: number, m: number): WireRows | null => {
    const s = nodeSum[k];
    return s ? sliceRows(s, dims[k]!, s.home[m]!, s.home[m + 1]!) : null;
  };
  const toHome = await exchangeRows(g, bw, dims, rail, (d) => dims.map((_, k) => share(k, L.nodeOf(d))), counters);
  const homeSum = dims.map((dim, k) => {
    const lists: WireRows[] = [];
    for (let m = 0; m < nodes; m++) {
      const x = m === node ? share(k, m) : toHome[m * rpn + slot]![k]!;
      if (x && x.ids.length > 0) lists.push(x);
    }
    return reduceRows(lists, dim, bw, 1);
  });
  const fromHome = await exchangeRows(g, bw, dims, rail, () => homeSum, counters);
  return dims.map((_, k) => {
    const lists = Array.from({ length: nodes }, (_, m) => (m === node ? homeSum[k]! : fromHome[m * rpn + slot]![k]!));
    return { ids: concat(lists.map((x) => x.ids), BigInt64Array), wire: concatWire(lists.map((x) => x.wire), bw) };
  });
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
 *  3. sends each node sum to the rank of the same local index on the row's home node (rail-aligned),
 *     which sums every node's sums per row, nodes in order (the global sum);
 *  4. the homes send the global sums to the ranks of the same local index on the other nodes (railAllReduce);
 *  5. and every holder sends the global sums to every rank of its node.
 * Every value is rounded to the wire dtype each time it travels, its holder's own copy included, so every
 * replica applies the same sums. Returns, per table, every distinct row once with its global sum.
 */
export async function syncReplicatedHier(L: LocalLayout, g: ProcessGroup, bw: Wire, local: { table: TableRt; ids: BigInt64Array; grads: Float32Array }[], counters: TrafficCounters, scratch?: ScratchPool): Promise<RowGrads> {
  const rpn = L.rpn, node = L.nodeOf(L.rank);
  const out: RowGrads = new Map();
  if (local.length === 0) return out;
  const dims = local.map((x) => x.table.table.dim);
  const inNode = (d: number) => L.nodeOf(d) === node;
  // 1. this rank's rows, by local index of their holder
  const mine = local.map((x, k) => sumByRow(x.ids, x.grads, dims[k]!, bw, rpn));
  const atHolder = await exchangeRows(g, bw, dims, inNode, (d) => mine.map((m, k) => sliceRows(m, dims[k]!, m.start[d % rpn]!, m.start[(d % rpn) + 1]!)), counters);
  // 2. the node sums of this rank's rows, by home node: row x's is ⌊(x mod W) / rpn⌋
  const nodeSum = dims.map((dim, k): ByHome => {
    const s = reduceRows(Array.from({ length: rpn }, (_, q) => atHolder[node * rpn + q]![k]!), dim, bw, L.W);
    return { ...s, home: Array.from({ length: L.W / rpn + 1 }, (_, m) => s.start[m * rpn]!) };
  });
  // 3.–4. the global sums, reduced at each row's home node and shared rail-aligned
  const globalSum = await railAllReduce(L, g, bw, dims, nodeSum, counters);
  // 5. to every rank of the node
  const all = await exchangeRows(g, bw, dims, inNode, () => globalSum, counters);
  local.forEach((x, k) => out.set(x.table.index, fromWire(Array.from({ length: rpn }, (_, q) => all[node * rpn + q]![k]!), dims[k]!, bw, scratch)));
  return out;
}

/**
 * Node tiers: `parts` holds, per table, the rows this rank's node asked this rank for and their gradients
 * (source order). Sums them per row (the node sums, rounded to the wire dtype), all-reduces them with the
 * holders of the same rows on the other nodes (railAllReduce), and returns per table the global sum of
 * every row any node touched, for the rows this rank holds.
 */
export async function syncNodeTiers(L: LocalLayout, g: ProcessGroup, bw: Wire, parts: Map<number, { ids: BigInt64Array[]; grads: Float32Array[] }>, counters: TrafficCounters): Promise<RowGrads> {
  const W = L.W, rpn = L.rpn, r = L.rank;
  const out: RowGrads = new Map();
  const nodeTables = L.tables.filter((rt) => rt.N > 0);
  if (nodeTables.length === 0) return out;
  const dims = nodeTables.map((rt) => rt.table.dim);
  // ids are the holder's own tier slots: slot h (tier row h × rpn + local index) is summed on node h mod nodes
  const sums: (ByHome | null)[] = nodeTables.map((rt, k) => {
    const np = parts.get(rt.index);
    if (!np) return null;
    const s = sumByRow(concat(np.ids, BigInt64Array), concat(np.grads, Float32Array), dims[k]!, bw, W / rpn);
    return { ...s, home: s.start };
  });
  // with the holders of the same rows (same local index) on the other nodes: each row's global sum
  const global: (WireRows | null)[] = W / rpn > 1 ? await railAllReduce(L, g, bw, dims, sums, counters) : sums;
  nodeTables.forEach((rt, k) => {
    const x = global[k];
    if (L.nodeRowsHeld(rt, r) === 0 || !x || x.ids.length === 0) return;
    out.set(rt.index, fromWire([x], dims[k]!, bw));
  });
  return out;
}

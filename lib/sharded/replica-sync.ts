// replica-sync.ts — what keeps replicas identical in the backward: the gradients of dp tables and of
// replicated hot tiers all-gathered from every rank (every rank then sums them in rank order), and the
// node tiers' node-summed gradients exchanged with the holder of the same rows on every other node
// (docs/wire-protocol.md: dp tables, hot-row tiers, Messages). Each sync is a count exchange (uncounted
// metadata) and one message of ids and gradient rows.
import type { ProcessGroup, TrafficCounters } from './group.js';
import { concat, concatWire, wireBytes } from './arrays.js';
import { exchangeOps, wireArray, type Wire, type WireArray } from './exchange-ops.js';
import { fuse, PartReader } from './fused.js';
import type { LocalLayout, TableRt } from './local-layout.js';
import type { CommArray } from './binding.js';
import type { ScratchPool } from './scratch.js';

/** Rows and their fp32 gradients, per plan table index. */
export type RowGrads = Map<number, { ids: BigInt64Array; grads: Float32Array }>;

function takeWire(reader: PartReader, wire: Wire, n: number): WireArray {
  return wire === 'fp32' ? reader.take(Float32Array, n) : reader.take(Uint16Array, n);
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
 * Node tiers: `parts` holds, per table, the rows this rank's node asked this rank for and their gradients
 * (source order). Sums them per row (rounded to the wire dtype, so every node's replica sums identical
 * inputs), exchanges the sums with the same holder on every other node, and returns per table every
 * node's list in node order, for the rows this rank holds.
 */
export async function syncNodeTiers(L: LocalLayout, g: ProcessGroup, bw: Wire, parts: Map<number, { ids: BigInt64Array[]; grads: Float32Array[] }>, counters: TrafficCounters): Promise<RowGrads> {
  const K = exchangeOps();
  const W = L.W, rpn = L.rpn, r = L.rank;
  const out: RowGrads = new Map();
  const nodeTables = L.tables.filter((rt) => rt.N > 0);
  if (nodeTables.length === 0) return out;
  const sums = new Map<number, { ids: BigInt64Array; wire: WireArray }>();
  for (const rt of nodeTables) {
    const dim = rt.table.dim;
    const np = parts.get(rt.index);
    if (!np) continue;
    const allIds = concat(np.ids, BigInt64Array), allG = concat(np.grads, Float32Array);
    const uq = K.unique(allIds, 1);
    const sum = new Float32Array(uq.values.length * dim);
    K.gradUnique(allG, dim, 0, dim, uq.inverse, new Int32Array(allIds.length).fill(1), null, null, false, null, sum);
    const wv = wireArray(bw, sum.length);
    K.pack(sum, dim, null, 0, uq.values.length, 0, dim, bw, wv, 0);
    sums.set(rt.index, { ids: uq.values, wire: wv });
  }
  const nodes = W / rpn, myNode = L.nodeOf(r);
  const peers = (d: number) => d % rpn === r % rpn && L.nodeOf(d) !== myNode;
  // per peer on another node: the per-table counts (metadata), then one message of every table's ids followed by its gradient rows
  const fromPeer: Map<number, { ids: BigInt64Array; wire: WireArray }>[] = Array.from({ length: W }, () => new Map());
  if (nodes > 1) {
    const syncParts: CommArray[][] = [], metaParts: Float64Array[] = [];
    const mC: number[] = [];
    for (let d = 0; d < W; d++) {
      if (!peers(d)) {
        syncParts.push([]), mC.push(0);
        continue;
      }
      const m: number[] = [];
      const ip: BigInt64Array[] = [], gp: WireArray[] = [];
      for (const rt of nodeTables) {
        const s = sums.get(rt.index);
        m.push(s ? s.ids.length : 0);
        if (s) ip.push(s.ids), gp.push(s.wire);
      }
      metaParts.push(Float64Array.from(m));
      syncParts.push([concat(ip, BigInt64Array), concatWire(gp, bw)]);
      mC.push(m.length);
    }
    const mIn = await g.allToAllV(concat(metaParts, Float64Array), mC, { uncounted: true, recvCounts: mC });
    const eI: number[] = [], eG: number[] = [];
    for (let d = 0, mo = 0; d < W; mo += mIn.counts[d]!, d++) {
      let a = 0, b = 0;
      if (mIn.counts[d]! > 0)
        nodeTables.forEach((rt, k) => {
          const n = mIn.data[mo + k]!;
          a += n;
          b += n * rt.table.dim;
        });
      eI.push(a), eG.push(b);
    }
    const sync = fuse(syncParts);
    const syncIn = await g.allToAllV(sync.bytes, sync.counts, { recvCounts: eI.map((n, d) => n * 8 + eG[d]! * wireBytes(bw)), counters });
    const reader = new PartReader(syncIn.data);
    for (let d = 0, mo = 0; d < W; mo += mIn.counts[d]!, d++) {
      const ids = reader.take(BigInt64Array, eI[d]!), gr = takeWire(reader, bw, eG[d]!);
      if (mIn.counts[d]! === 0) continue;
      let io = 0, go = 0;
      nodeTables.forEach((rt, k) => {
        const n = mIn.data[mo + k]!, dim = rt.table.dim;
        fromPeer[d]!.set(rt.index, { ids: ids.subarray(io, io + n), wire: gr.subarray(go, go + n * dim) as WireArray });
        io += n;
        go += n * dim;
      });
    }
    g.release(mIn.data, syncIn.data);
  }
  // per table: every node's list in node order (this node's own sums included)
  for (const rt of nodeTables) {
    if (L.nodeRowsHeld(rt, r) === 0) continue;
    const dim = rt.table.dim;
    const ids: BigInt64Array[] = [], gr: Float32Array[] = [];
    for (let m = 0; m < nodes; m++) {
      const src = m === myNode ? sums.get(rt.index) : fromPeer[m * rpn + (r % rpn)]!.get(rt.index);
      if (!src || src.ids.length === 0) continue;
      const f = new Float32Array(src.ids.length * dim);
      K.unpack(src.wire, 0, bw, src.ids.length, dim, f, dim, null, 0, 0, false);
      ids.push(src.ids);
      gr.push(f);
    }
    out.set(rt.index, { ids: concat(ids, BigInt64Array), grads: concat(gr, Float32Array) });
  }
  return out;
}

// host-exchange.ts — the sharded runtime's host path, for every rank whose exchanges do not stay in device
// memory (device-exchange.ts says why): messages are packed, exchanged and unpacked in host memory by the
// kernels of exchange-ops.ts, slot by slot of the step's schedules (schedule.ts), as docs/wire-protocol.md
// lays them out.
//   forward (outputsOnHost): from the engine call on — the owner's outputs to their sources, this rank's
//     outputs added up (rb partial sums), placed (sequence rows) and pooled (ub and node-tier rows); under
//     the hierarchical protocol the relays reduce the partial sums of other nodes' requesters and pass on.
//   backward (gradientsOnHost): up to the owner's update — the gradients to the relays and the owners,
//     unpacked into the owner batch's gradients, and the syncs of dp tables, replicated and node tiers
//     (replica-sync.ts), collectives in the device path's order.
import type { NativeBatch, NativeEngine, NativeForwardResult } from '../binding.js';
import type { JaggedBatch } from '../batch.js';
import type { Gradients } from '../collection.js';
import { exchangeOps } from './exchange-ops.js';
import type { Received } from './input-exchange.js';
import type { TableRt } from './local-layout.js';
import { inverseOf, unionIndex } from './relay.js';
import { syncNodeTiers, syncReplicated, syncReplicatedHier, type RowGrads } from './replica-sync.js';
import { part, type UniqT } from './routing.js';
import type { ScratchPool } from './scratch.js';
import type { HostOutputs, MeanColumns, StepArgs } from './step-args.js';

export interface HostStepArgs extends StepArgs {
  scratch: ScratchPool;
}

export interface HostForwardArgs extends HostStepArgs {
  engine: NativeEngine;
  /** the owner batch (the engine's call) and each source's first id in each local feature */
  owner: NativeBatch;
  idOff: readonly (readonly number[])[];
  /** called with the engine's outputs before they are read (dynamic shards write new rows' defaults) */
  looked?: (out: NativeForwardResult) => Promise<void>;
  /** the pooled output's mean columns: each divided by its bags' lengths once everything is summed */
  means: readonly MeanColumns[];
  out: HostOutputs;
}

/** The forward from the engine call on, in host memory: one engine forward, the outputs exchanged, this rank's outputs assembled into `a.out`. */
export async function outputsOnHost(a: HostForwardArgs): Promise<void> {
  const K = exchangeOps(), S = a.scratch;
  const { L, group: g, B, segs, ub, node, Boff, own, req, rsend, rrecv, unions, wire: fw } = a;
  const W = L.W, rpn = L.rpn, P = L.pooledDim;
  const { pooled, seqOut } = a.out;
  const engineOut = L.localFeatures.some((f) => f.kind !== 'idle' && f.kind !== 'upd' && f.kind !== 'nodeupd') ? await a.engine.forward(a.owner) : null;
  if (engineOut && a.looked) await a.looked(engineOut);
  // outputs back to every source, slot by slot of the owner schedule
  const outBuf = S.wire(fw, own.total);
  for (let p = 0; p < W; p++)
    for (const sl of own.slots[p]!) {
      const f = L.localFeatures[sl.feature]!, cols = sl.c1 - sl.c0;
      if (f.pooling !== 'none') K.pack(engineOut!.pooled, L.localPooledDim, null, Boff[sl.src]!, sl.rows, f.col, f.col + cols, fw, outBuf, sl.at);
      else K.pack(engineOut!.sequences[sl.feature]!, cols, null, a.idOff[sl.feature]![sl.src]!, sl.rows, 0, cols, fw, outBuf, sl.at);
    }
  const back = await g.allToAllV(outBuf, own.sizes, { recvCounts: req.sizes, counters: a.counters });
  // this rank's own lookups (dp tables, replicated tiers)
  if (engineOut) {
    L.localFeatures.forEach((lf, li) => {
      if (lf.kind !== 'loc') return;
      const rt = L.tables[lf.t]!, k = rt.features.indexOf(lf.f!), dim = rt.table.dim;
      if (lf.pooling !== 'none') {
        const blk = S.f32(B * dim);
        K.pack(engineOut.pooled, L.localPooledDim, null, 0, B, lf.col, lf.col + dim, 'fp32', blk, 0);
        K.unpack(blk, 0, 'fp32', B, dim, pooled, P, null, 0, rt.pooledCol[k]!, true);
      } else {
        const p0 = part(segs.get(lf.f!)!, 0, B);
        K.unpack(engineOut.sequences[li]!, 0, 'fp32', p0.n, dim, seqOut.get(lf.f!)!, dim, p0.pos, 0, 0, false);
      }
    });
    // copied out (packed for the owners, or into this rank's own outputs): the engine's buffers go back
    // to the addon's pool for the next forward
    a.engine.releaseOutputs([engineOut.pooled, ...engineOut.sequences.filter((x): x is Float32Array => x !== null)]);
  }
  const nodeRows = new Map<number, Float32Array>();
  for (const [t, u] of node) nodeRows.set(t, S.f32(u.uq.values.length * L.tables[t]!.table.dim));
  const ubRows = ub.map((groups, t) => groups.map((u) => S.f32(u.uq.values.length * L.tables[t]!.table.dim)));
  // hierarchical: as a relay, the partial sums of requesters on other nodes (reduced here, in owner
  // order) and the rows of the ub row groups this rank relays
  const reduced = new Map<number, Float32Array>();
  const unionRows = unions.map((u) => S.f32(u.uq.values.length * L.tables[u.rs.t]!.table.dim));
  for (let d = 0; d < W; d++)
    for (const sl of req.slots[d]!) {
      const s = sl.seg, rt = L.tables[s.t]!, dim = rt.table.dim, cols = sl.c1 - sl.c0;
      if (sl.src !== L.rank) {
        let red = reduced.get(sl.src);
        if (!red) reduced.set(sl.src, (red = S.f32(a.bags[sl.src]! * P)));
        if (s.kind === 'rb') K.unpack(back.data, sl.at, fw, sl.rows, cols, red, P, null, 0, rt.pooledCol[rt.features.indexOf(s.f)]! + sl.c0, true);
      } else if (s.kind === 'node') K.unpack(back.data, sl.at, fw, sl.rows, dim, nodeRows.get(s.t)!, dim, null, node.get(s.t)!.starts[d % rpn]!, 0, false);
      else if (s.kind === 'ub') {
        const dst = L.relaysTo(d) ? unionRows[unionIndex(unions, s.t, s.g)]! : ubRows[s.t]![s.g]!;
        K.unpack(back.data, sl.at, fw, sl.rows, cols, dst, dim, null, 0, sl.c0, false);
      } else if (rt.pooling !== 'none') K.unpack(back.data, sl.at, fw, sl.rows, cols, pooled, P, null, 0, rt.pooledCol[rt.features.indexOf(s.f)]! + sl.c0, true);
      else K.unpack(back.data, sl.at, fw, sl.rows, cols, seqOut.get(s.f)!, dim, part(segs.get(s.f)!, 2 + s.g, B).pos, 0, sl.c0, false);
    }
  g.release(back.data);
  // hierarchical: relays pass on the node-reduced rb vectors and the relayed ub rows (relay slots)
  if (L.hier) {
    const relayBuf = S.wire(fw, rsend.total);
    for (let q = 0; q < W; q++)
      for (const sl of rsend.slots[q]!) {
        const s = sl.seg, rt = L.tables[s.t]!;
        if (s.kind === 'rb') {
          const col = rt.pooledCol[rt.features.indexOf(s.f)]!;
          K.pack(reduced.get(q) ?? S.f32(sl.rows * P), P, null, 0, sl.rows, col + sl.c0, col + sl.c1, fw, relayBuf, sl.at);
        } else if (s.kind === 'ub') {
          const k = unionIndex(unions, s.t, s.g), u = unions[k]!;
          K.pack(unionRows[k]!, rt.table.dim, inverseOf(u, q), 0, sl.rows, sl.c0, sl.c1, fw, relayBuf, sl.at);
        }
      }
    const passed = await g.allToAllV(relayBuf, rsend.sizes, { recvCounts: rrecv.sizes, counters: a.counters });
    for (let d = 0; d < W; d++)
      for (const sl of rrecv.slots[d]!) {
        const s = sl.seg, rt = L.tables[s.t]!, cols = sl.c1 - sl.c0;
        if (s.kind === 'rb') K.unpack(passed.data, sl.at, fw, sl.rows, cols, pooled, P, null, 0, rt.pooledCol[rt.features.indexOf(s.f)]! + sl.c0, true);
        else if (s.kind === 'ub') K.unpack(passed.data, sl.at, fw, sl.rows, cols, ubRows[s.t]![s.g]!, rt.table.dim, null, 0, sl.c0, false);
      }
    g.release(passed.data);
  }
  // ub and node-tier rows pooled (or placed) into this rank's outputs
  const poolFrom = (rows: Float32Array, u: UniqT, rt: TableRt, s: number) => {
    rt.features.forEach((f, k) => {
      const p = part(segs.get(f)!, s, B);
      const inv = u.uq.inverse.subarray(u.featOff[k]!, u.featOff[k + 1]!);
      if (rt.pooling !== 'none') K.poolUnique(rows, rt.table.dim, inv, p.lengths, p.weights, pooled, P, rt.pooledCol[k]!, null);
      else K.poolUnique(rows, rt.table.dim, inv, p.lengths, null, seqOut.get(f)!, rt.table.dim, 0, p.pos);
    });
  };
  for (const [t, u] of node) poolFrom(nodeRows.get(t)!, u, L.tables[t]!, 1);
  ub.forEach((groups, t) => groups.forEach((u, gi) => poolFrom(ubRows[t]![gi]!, u, L.tables[t]!, 2 + gi)));
  for (const m of a.means) K.divideBags(pooled, P, m.col, m.dim, m.lengths);
}

export interface HostBackwardArgs extends HostStepArgs {
  /** the forward's batch (its bags' full lengths, for mean pooling) and this rank's gradients of it */
  batch: JaggedBatch;
  grads: Gradients;
  /** the pooled output's rb mean columns: their gradients go out divided by the bags' lengths */
  rbMeans: readonly MeanColumns[];
  /** what every source asked this rank for (its node-tier ids), and each local feature's ids in the owner batch */
  recv: readonly Received[];
  idOff: readonly (readonly number[])[];
  featIds: readonly number[];
  /** dp tables and replicated tiers: this rank's distinct rows of each */
  replicated: readonly { table: TableRt; rows: UniqT }[];
}

/** What the owner's update reads, in host memory. */
export interface HostGradients {
  /** the owner batch's pooled gradient [Btot × localPooledDim] */
  pooled: Float32Array;
  /** per local feature: its ids' gradient rows where they arrived (sequence and ub features), else null */
  sequences: (Float32Array | null)[];
  /** the synced rows of every dp table and replicated tier, and of every node tier, by plan table */
  replicated: RowGrads;
  node: RowGrads;
}

/** The backward up to the owner's update, in host memory. */
export async function gradientsOnHost(a: HostBackwardArgs): Promise<HostGradients> {
  const K = exchangeOps(), S = a.scratch;
  const { L, group: g, B, wire: bw } = a;
  const W = L.W, rpn = L.rpn, P = L.pooledDim;
  const G = a.grads.pooled ?? new Float32Array(0);
  const seqG = (f: string) => a.grads.sequences![f]!;
  // rb pooled gradients go out pre-divided by the full bag length for mean pooling
  let Gs = G;
  for (const m of a.rbMeans) {
    if (Gs === G) Gs = S.copyOf(G);
    K.divideBags(Gs, P, m.col, m.dim, m.lengths);
  }
  // each distinct row's gradient sum over the ids of slot part s, in id order
  const gradOver = (u: UniqT, rt: TableRt, s: number): Float32Array => {
    const dim = rt.table.dim;
    const out = S.f32(u.uq.values.length * dim);
    rt.features.forEach((f, k) => {
      const p = part(a.segs.get(f)!, s, B);
      const inv = u.uq.inverse.subarray(u.featOff[k]!, u.featOff[k + 1]!);
      if (rt.pooling !== 'none') K.gradUnique(G, P, rt.pooledCol[k]!, dim, inv, p.lengths, p.weights, a.batch.feature(f).lengths, rt.pooling === 'mean', null, out);
      else K.gradUnique(seqG(f), dim, 0, dim, inv, p.lengths, null, null, false, p.pos, out);
    });
    return out;
  };
  const nodeGrad = new Map<number, Float32Array>();
  for (const [t, u] of a.node) nodeGrad.set(t, gradOver(u, L.tables[t]!, 1));
  const ubGrad = a.ub.map((groups, t) => groups.map((u, gi) => gradOver(u, L.tables[t]!, 2 + gi)));
  // 1. hierarchical: gradients to the relays first (the relay slots reversed): rb bag gradients once per
  // other node, ub row gradients to the node's relay, which sums them per distinct row in source order
  const relayed = new Map<number, Float32Array>();
  const unionGrad = a.unions.map((u) => S.f32(u.uq.values.length * L.tables[u.rs.t]!.table.dim));
  if (L.hier) {
    const toRelays = S.wire(bw, a.rrecv.total);
    for (let d = 0; d < W; d++)
      for (const sl of a.rrecv.slots[d]!) {
        const s = sl.seg, rt = L.tables[s.t]!;
        if (s.kind === 'rb') {
          const col = rt.pooledCol[rt.features.indexOf(s.f)]!;
          K.pack(Gs, P, null, 0, sl.rows, col + sl.c0, col + sl.c1, bw, toRelays, sl.at);
        } else if (s.kind === 'ub') K.pack(ubGrad[s.t]![s.g]!, rt.table.dim, null, 0, sl.rows, sl.c0, sl.c1, bw, toRelays, sl.at);
      }
    const atRelay = await g.allToAllV(toRelays, a.rrecv.sizes, { recvCounts: a.rsend.sizes, counters: a.counters });
    for (let q = 0; q < W; q++)
      for (const sl of a.rsend.slots[q]!) {
        const s = sl.seg, rt = L.tables[s.t]!, cols = sl.c1 - sl.c0;
        if (s.kind === 'rb') {
          let gq = relayed.get(q);
          if (!gq) relayed.set(q, (gq = S.f32(a.bags[q]! * P)));
          K.unpack(atRelay.data, sl.at, bw, sl.rows, cols, gq, P, null, 0, rt.pooledCol[rt.features.indexOf(s.f)]! + sl.c0, false);
        } else if (s.kind === 'ub') {
          const k = unionIndex(a.unions, s.t, s.g), u = a.unions[k]!;
          K.unpack(atRelay.data, sl.at, bw, sl.rows, cols, unionGrad[k]!, rt.table.dim, inverseOf(u, q), 0, sl.c0, true);
        }
      }
    g.release(atRelay.data);
  }
  // 2. gradients to the owners, slot by slot of the requester schedule (the forward output's layout)
  const sendBuf = S.wire(bw, a.req.total);
  for (let d = 0; d < W; d++)
    for (const sl of a.req.slots[d]!) {
      const s = sl.seg, rt = L.tables[s.t]!, dim = rt.table.dim;
      if (sl.src !== L.rank) {
        // a requester this rank relays for: its bag gradients, sliced to the owner's shard
        if (s.kind === 'rb') {
          const col = rt.pooledCol[rt.features.indexOf(s.f)]!;
          K.pack(relayed.get(sl.src)!, P, null, 0, sl.rows, col + sl.c0, col + sl.c1, bw, sendBuf, sl.at);
        }
      } else if (s.kind === 'node') K.pack(nodeGrad.get(s.t)!, dim, null, a.node.get(s.t)!.starts[d % rpn]!, sl.rows, 0, dim, bw, sendBuf, sl.at);
      else if (s.kind === 'ub') {
        const src = L.relaysTo(d) ? unionGrad[unionIndex(a.unions, s.t, s.g)]! : ubGrad[s.t]![s.g]!;
        K.pack(src, dim, null, 0, sl.rows, sl.c0, sl.c1, bw, sendBuf, sl.at);
      } else if (rt.pooling !== 'none') {
        const col = rt.pooledCol[rt.features.indexOf(s.f)]!;
        K.pack(Gs, P, null, 0, sl.rows, col + sl.c0, col + sl.c1, bw, sendBuf, sl.at);
      } else K.pack(seqG(s.f), dim, part(a.segs.get(s.f)!, 2 + s.g, B).pos, 0, sl.rows, sl.c0, sl.c1, bw, sendBuf, sl.at);
    }
  const gin = await g.allToAllV(sendBuf, a.req.sizes, { recvCounts: a.own.sizes, counters: a.counters });
  // 3. dp tables and replicated tiers: this rank's per-row gradient sums, all-gathered (flat) or summed
  // within the node, then across nodes rail-aligned (hierarchical) (replica-sync.ts)
  const replicated = await (L.hier ? syncReplicatedHier : syncReplicated)(L, g, bw, a.replicated.map((x) => ({ table: x.table, ids: x.rows.uq.values, grads: gradOver(x.rows, x.table, 0) })), a.counters, S);
  // 4. the received gradients, slot by slot of the owner schedule: the owner batch's pooled and sequence
  // gradients; node tiers' rows summed per row (source order), then synced across nodes
  const pooled = S.f32(a.Btot * L.localPooledDim);
  const sequences: (Float32Array | null)[] = L.localFeatures.map(() => null);
  const nodeParts = new Map<number, { ids: BigInt64Array[]; grads: Float32Array[] }>();
  for (let p = 0; p < W; p++)
    for (const sl of a.own.slots[p]!) {
      const s = sl.seg, lfi = sl.feature, lf = L.localFeatures[lfi]!;
      if (s.kind === 'node') {
        const dim = L.tables[s.t]!.table.dim;
        const gr = S.f32(sl.rows * dim);
        K.unpack(gin.data, sl.at, bw, sl.rows, dim, gr, dim, null, 0, 0, false);
        let np = nodeParts.get(s.t);
        if (!np) nodeParts.set(s.t, (np = { ids: [], grads: [] }));
        np.ids.push(a.recv[sl.src]!.entries[sl.entry]!.ids);
        np.grads.push(gr);
      } else if (lf.pooling !== 'none') K.unpack(gin.data, sl.at, bw, sl.rows, lf.dim, pooled, L.localPooledDim, null, a.Boff[sl.src]!, lf.col, false);
      else {
        if (!sequences[lfi]) sequences[lfi] = S.f32(a.featIds[lfi]! * lf.dim);
        K.unpack(gin.data, sl.at, bw, sl.rows, lf.dim, sequences[lfi]!, lf.dim, null, a.idOff[lfi]![sl.src]!, 0, false);
      }
    }
  g.release(gin.data);
  const node = await syncNodeTiers(L, g, bw, nodeParts, a.counters);
  return { pooled, sequences, replicated, node };
}

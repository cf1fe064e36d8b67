// input-exchange.ts — the second stage of a sharded forward: every rank sends each owner, in the canonical
// segment order (LocalLayout.segments), the per-segment id counts (uncounted metadata) and then one
// message carrying the ids, the rb bags' lengths and the weights (docs/wire-protocol.md, Messages); and
// reads what every source asked it for. The counts tell each side the size of everything that follows, so
// no payload exchange needs a count phase. Under the hierarchical protocol the relays' gather step
// (relay.ts) comes first, and a relay sends a ub holder on another node its node's distinct ids.
import { concat } from './arrays.js';
import { exchangeOps } from './exchange-ops.js';
import { fuse, PartReader } from './fused.js';
import type { ProcessGroup, TrafficCounters } from './group.js';
import type { LocalLayout, Segment } from './local-layout.js';
import { gatherRelayIds, unionOf, type RelayUnion } from './relay.js';
import { part, type Routed } from './routing.js';

/** What one source asked this rank for. */
export interface Received {
  B: number;
  hasW: boolean;
  /** per canonical segment: ids, lengths (rb), weights (rb) */
  entries: { seg: Segment; ids: BigInt64Array; lengths: Int32Array | null; weights: Float32Array | null }[];
}

export interface InputResult {
  /** per source rank, what it asked this rank for */
  recv: Received[];
  /** hierarchical: the ub row groups this rank relays, with its node's distinct ids (empty under the flat protocol) */
  unions: RelayUnion[];
}

/** Sends this rank's routed ids to their owners (through the relays where the protocol says so). */
export async function exchangeInput(L: LocalLayout, g: ProcessGroup, routed: Routed, B: number, weighted: boolean, counters: TrafficCounters): Promise<InputResult> {
  const K = exchangeOps();
  const W = L.W, r = L.rank, rpn = L.rpn;
  const { segs, ub, node } = routed;
  // 1. hierarchical: the node's distinct ids of every ub row group gather on its relay
  const unions = L.hier ? await gatherRelayIds(L, g, ub, counters) : [];
  // 2. input messages, one per destination, in canonical segment order: the segment counts (metadata),
  // then one message carrying the ids, the rb bags' lengths and the weights
  const meta: Float64Array[] = [], input: [BigInt64Array, Int32Array, Float32Array][] = [];
  const metaCounts: number[] = [];
  for (let d = 0; d < W; d++) {
    const m: number[] = [B, weighted ? 1 : 0];
    const ip: BigInt64Array[] = [], lp: Int32Array[] = [], wp: Float32Array[] = [];
    for (const s of L.segments(r, d)) {
      if (s.kind === 'node') {
        const u = node.get(s.t)!, j = d % rpn;
        const ids = K.divideIds(u.uq.values.subarray(u.starts[j]!, u.starts[j + 1]!), rpn);
        ip.push(ids);
        m.push(ids.length);
      } else if (s.kind === 'rb') {
        const p = part(segs.get(s.f)!, 2 + s.g, B);
        lp.push(p.lengths);
        ip.push(p.ids);
        if (p.weights) wp.push(p.weights);
        m.push(p.n);
      } else {
        const u = L.relaysTo(d) ? unionOf(unions, s.t, s.g).uq.values : ub[s.t]![s.g]!.uq.values;
        ip.push(u);
        m.push(u.length);
      }
    }
    const mm = Float64Array.from(m);
    meta.push(mm);
    input.push([concat(ip, BigInt64Array), concat(lp, Int32Array), concat(wp, Float32Array)]);
    metaCounts.push(mm.length);
  }
  const expMeta = Array.from({ length: W }, (_, p) => 2 + L.segments(p, r).length);
  const metaIn = await g.allToAllV(concat(meta, Float64Array), metaCounts, { uncounted: true, recvCounts: expMeta });
  // the segment counts say what every source sends next, so the payload exchanges skip their count phase
  const expIds: number[] = [], expLen: number[] = [], expW: number[] = [];
  {
    let mo = 0;
    for (let p = 0; p < W; p++) {
      const Bp = metaIn.data[mo]!, hasW = metaIn.data[mo + 1] === 1;
      let ni = 0, nl = 0, nw = 0, k = mo + 2;
      for (const s of L.segments(p, r)) {
        const n = metaIn.data[k++]!;
        ni += n;
        if (s.kind === 'rb') {
          nl += Bp;
          if (hasW) nw += n;
        }
      }
      expIds.push(ni), expLen.push(nl), expW.push(nw);
      mo += metaIn.counts[p]!;
    }
  }
  const sent = fuse(input);
  const inBytes = expIds.map((n, p) => n * 8 + expLen[p]! * 4 + expW[p]! * 4);
  const inputIn = await g.allToAllV(sent.bytes, sent.counts, { recvCounts: inBytes, counters });
  // 3. parse what every source sent this rank
  const recv: Received[] = [];
  {
    const reader = new PartReader(inputIn.data);
    let mo = 0;
    for (let p = 0; p < W; p++) {
      const Bp = metaIn.data[mo]!, hasW = metaIn.data[mo + 1] === 1;
      const idsP = reader.take(BigInt64Array, expIds[p]!), lenP = reader.take(Int32Array, expLen[p]!), wP = reader.take(Float32Array, expW[p]!);
      let k = mo + 2, io = 0, lo = 0, wo = 0;
      const entries: Received['entries'] = [];
      for (const s of L.segments(p, r)) {
        const n = metaIn.data[k++]!;
        const ids = idsP.subarray(io, io + n);
        io += n;
        let lengths: Int32Array | null = null, weights: Float32Array | null = null;
        if (s.kind === 'rb') {
          lengths = lenP.subarray(lo, lo + Bp);
          lo += Bp;
          if (hasW) {
            weights = wP.subarray(wo, wo + n);
            wo += n;
          }
        }
        entries.push({ seg: s, ids, lengths, weights });
      }
      mo += metaIn.counts[p]!;
      recv.push({ B: Bp, hasW, entries });
    }
  }
  // the parts were copied out: the received buffers can be reused now
  g.release(metaIn.data, inputIn.data);
  return { recv, unions };
}

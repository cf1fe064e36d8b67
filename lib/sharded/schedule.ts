// schedule.ts — the exchange schedule of one step: for every peer, the slots of the output message
// (forward) and of the gradient message (backward, the same layout in the other direction): which
// segment and column shard, how many rows, and where in the phase's buffer. One schedule is built per
// step from each side — as the requester (what this rank asked every owner for) and as the owner (what
// every source asked this rank for) — and every pack and unpack of both phases walks it, so the
// per-(peer, segment, shard) order and offsets are computed once (docs/wire-protocol.md, Messages).
// Under the hierarchical protocol the owner sends the rb partial sums of a requester on another node to
// its node-mate with the requester's local index (the relay), and a second exchange, the relay schedule,
// carries what relays pass on: node-reduced rb vectors across nodes, ub rows to the node's requesters
// (and, in backward, the same slots in the other direction).
import type { LocalLayout, RelaySeg, Segment } from './local-layout.js';

export interface Slot {
  seg: Segment;
  /** column range of the slot: a shard's (rb / ub) or the full width (node tier) */
  c0: number;
  c1: number;
  /** rows of values: bags (pooled rb), ids (sequence rb) or unique rows (ub, node tier) */
  rows: number;
  /** offset of the slot's first value in the phase's whole buffer (elements) */
  at: number;
  /** owner side: the local engine feature that serves the slot, and the source's request entry it answers; requester side: -1 */
  feature: number;
  entry: number;
  /** the requester whose bags or ids the slot answers (this rank, or one a relay serves) */
  src: number;
}

export interface Schedule {
  /** slots per peer, in message order */
  slots: Slot[][];
  /** values per peer (the message sizes) */
  sizes: number[];
  total: number;
}

function finish(slots: Slot[][]): Schedule {
  const sizes: number[] = [];
  let at = 0;
  for (const peer of slots) {
    let n = 0;
    for (const s of peer) {
      s.at = at + n;
      n += s.rows * (s.c1 - s.c0);
    }
    sizes.push(n);
    at += n;
  }
  return { slots, sizes, total: at };
}

/**
 * This rank as the requester (and, hierarchical, as a relay): for every owner d, the segments it asked d
 * for (L.segments(rank, d), but not those relayed) with `rowsOf(seg, d)` rows each, one slot per shard of
 * the segment's row group on d; then, in source order with them, the rb partial sums d sends it for
 * requesters p on other nodes with its local index (`bagsOf(p)` rows each).
 */
export function requesterSchedule(L: LocalLayout, rowsOf: (s: Segment, d: number) => number, bagsOf: (p: number) => number): Schedule {
  const slots: Slot[][] = [];
  const r = L.rank;
  for (let d = 0; d < L.W; d++) {
    const peer: Slot[] = [];
    for (let p = 0; p < L.W; p++) {
      if (p === r) {
        for (const s of L.segments(r, d)) {
          if (L.viaRelay(s, r, d)) continue;
          const rows = rowsOf(s, d);
          if (s.kind === 'node') peer.push({ seg: s, c0: 0, c1: L.tables[s.t]!.table.dim, rows, at: 0, feature: -1, entry: -1, src: r });
          else for (const sh of L.shardsOn(s.t, s.g, d)) peer.push({ seg: s, c0: sh.c0, c1: sh.c1, rows, at: 0, feature: -1, entry: -1, src: r });
        }
      } else if (L.hier && L.nodeOf(d) === L.nodeOf(r) && L.nodeOf(p) !== L.nodeOf(r) && p % L.rpn === r % L.rpn) {
        for (const s of L.segments(p, d))
          if (s.kind === 'rb' && L.viaRelay(s, p, d)) for (const sh of L.shardsOn(s.t, s.g, d)) peer.push({ seg: s, c0: sh.c0, c1: sh.c1, rows: bagsOf(p), at: 0, feature: -1, entry: -1, src: p });
      }
    }
    slots.push(peer);
  }
  return finish(slots);
}

/** What one source sent this rank: its batch size and, per segment, the ids it asked for. */
export interface SourceRequest {
  B: number;
  entries: { seg: Segment; ids: { length: number } }[];
}

/**
 * This rank as the owner: for every source p, the segments p asked for, one slot per shard held here, sent
 * to p — or, for rb partial sums that go through a relay (hierarchical, p on another node), to this node's
 * rank with p's local index; every destination's slots in source order.
 */
export function ownerSchedule(L: LocalLayout, recv: readonly SourceRequest[]): Schedule {
  const slots: Slot[][] = Array.from({ length: L.W }, () => []);
  const d = L.rank;
  recv.forEach((req, p) => {
    const relay = L.nodeOf(d) * L.rpn + (p % L.rpn);
    req.entries.forEach((en, entry) => {
      const s = en.seg, rt = L.tables[s.t]!;
      if (s.kind === 'node') {
        slots[p]!.push({ seg: s, c0: 0, c1: rt.table.dim, rows: en.ids.length, at: 0, feature: L.featureOf(s, 0), entry, src: p });
        return;
      }
      const rows = s.kind === 'rb' && rt.pooling !== 'none' ? req.B : en.ids.length;
      const to = L.viaRelay(s, p, d) ? relay : p;
      for (const sh of L.shardsOn(s.t, s.g, d)) slots[to]!.push({ seg: s, c0: sh.c0, c1: sh.c1, rows, at: 0, feature: L.featureOf(s, sh.c0), entry, src: p });
    });
  });
  return finish(slots);
}

/**
 * The relay slots from rank a to rank q (hierarchical protocol; none under the flat one): to a requester q
 * on another node with a's local index, per rb pooled table with shards on a's node, per feature and per
 * column range those shards cover, the node-reduced vector of q's `bagsOf(q)` bags; to a requester q on
 * a's node, per row group a relays (L.relaySegs), per shard it relays, the rows of q's `idsOf(q, rs)`
 * distinct ids.
 */
function relaySlots(L: LocalLayout, a: number, q: number, bagsOf: (q: number) => number, idsOf: (q: number, rs: RelaySeg) => number): Slot[] {
  const out: Slot[] = [];
  if (!L.hier) return out;
  if (L.nodeOf(q) !== L.nodeOf(a)) {
    if (q % L.rpn !== a % L.rpn) return out;
    for (const rt of L.tables)
      for (const [c0, c1] of L.nodeCols(rt.index, L.nodeOf(a)))
        for (const f of rt.features) out.push({ seg: { kind: 'rb', t: rt.index, f, g: -1 }, c0, c1, rows: bagsOf(q), at: 0, feature: -1, entry: -1, src: q });
    return out;
  }
  for (const rs of L.relaySegs(a)) {
    const rows = idsOf(q, rs);
    for (const sh of rs.shards) out.push({ seg: { kind: 'ub', t: rs.t, g: rs.g }, c0: sh.c0, c1: sh.c1, rows, at: 0, feature: -1, entry: -1, src: q });
  }
  return out;
}

/** This rank as a relay: what it passes on to every peer (forward; the gradients it receives in backward). */
export function relaySendSchedule(L: LocalLayout, bagsOf: (q: number) => number, idsOf: (q: number, rs: RelaySeg) => number): Schedule {
  return finish(Array.from({ length: L.W }, (_, q) => relaySlots(L, L.rank, q, bagsOf, idsOf)));
}

/** This rank as a requester: what every relay passes on to it (forward; the gradients it sends them in backward). */
export function relayRecvSchedule(L: LocalLayout, bags: number, idsOf: (rs: RelaySeg) => number): Schedule {
  return finish(Array.from({ length: L.W }, (_, a) => relaySlots(L, a, L.rank, () => bags, (_q, rs) => idsOf(rs))));
}

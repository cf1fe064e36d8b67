// schedule.ts — the exchange schedule of one step: for every peer, the slots of the output message
// (forward) and of the gradient message (backward, the same layout in the other direction): which
// segment and column shard, how many rows, and where in the phase's buffer. One schedule is built per
// step from each side — as the requester (what this rank asked every owner for) and as the owner (what
// every source asked this rank for) — and every pack and unpack of both phases walks it, so the
// per-(peer, segment, shard) order and offsets are computed once (docs/wire-protocol.md, Messages).
import type { LocalLayout, Segment } from './local-layout.js';

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
 * This rank as the requester: for every owner d, the segments it asked d for (L.segments(rank, d)) with
 * `rowsOf(seg, d)` rows each, one slot per shard of the segment's row group on d.
 */
export function requesterSchedule(L: LocalLayout, rowsOf: (s: Segment, d: number) => number): Schedule {
  const slots: Slot[][] = [];
  for (let d = 0; d < L.W; d++) {
    const peer: Slot[] = [];
    for (const s of L.segments(L.rank, d)) {
      const rows = rowsOf(s, d);
      if (s.kind === 'node') peer.push({ seg: s, c0: 0, c1: L.tables[s.t]!.table.dim, rows, at: 0, feature: -1, entry: -1 });
      else for (const sh of L.shardsOn(s.t, s.g, d)) peer.push({ seg: s, c0: sh.c0, c1: sh.c1, rows, at: 0, feature: -1, entry: -1 });
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

/** This rank as the owner: for every source p, the segments p asked for, one slot per shard held here. */
export function ownerSchedule(L: LocalLayout, recv: readonly SourceRequest[]): Schedule {
  const slots: Slot[][] = [];
  for (const req of recv) {
    const peer: Slot[] = [];
    req.entries.forEach((en, entry) => {
      const s = en.seg, rt = L.tables[s.t]!;
      if (s.kind === 'node') {
        peer.push({ seg: s, c0: 0, c1: rt.table.dim, rows: en.ids.length, at: 0, feature: L.featureOf(s, 0), entry });
        return;
      }
      const rows = s.kind === 'rb' && rt.pooling !== 'none' ? req.B : en.ids.length;
      for (const sh of L.shardsOn(s.t, s.g, L.rank)) peer.push({ seg: s, c0: sh.c0, c1: sh.c1, rows, at: 0, feature: L.featureOf(s, sh.c0), entry });
    });
    slots.push(peer);
  }
  return finish(slots);
}

// input-exchange.ts — the second stage of a sharded forward: every rank sends each owner, in the canonical
// segment order (LocalLayout.segments), the per-segment id counts (uncounted metadata) and then one
// message carrying the ids, the rb bags' lengths and the weights (docs/wire-protocol.md, Messages); and
// reads what every source asked it for. The counts tell each side the size of everything that follows, so
// no payload exchange needs a count phase. Under the hierarchical protocol the relays' gather step
// (relay.ts) comes first, and a relay sends a ub holder on another node its node's distinct ids.
import { EmbshardError } from '../errors.js';
import { concat } from './arrays.js';
import { exchangeOps } from './exchange-ops.js';
import { fuse, PartReader } from './fused.js';
import type { ProcessGroup, TrafficCounters } from './group.js';
import type { LocalLayout, Segment } from './local-layout.js';
import { gatherRelayIds, unionOf, type RelayUnion } from './relay.js';
import { part } from './routing.js';
import { agreeOnStatus, statusOf, type RoutedOrRejected } from './step-status.js';

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
export async function exchangeInput(L: LocalLayout, g: ProcessGroup, x: RoutedOrRejected, B: number, weighted: boolean, counters: TrafficCounters): Promise<InputResult> {
  const K = exchangeOps();
  const W = L.W, r = L.rank, rpn = L.rpn;
  // 1. hierarchical: the node's distinct ids of every ub row group gather on its relay (its counts carry
  // every rank's status to every rank)
  const unions = L.hier ? await gatherRelayIds(L, g, x, counters) : [];
  // the metadata exchange: from every source p, its batch size, whether it has weights, then one count per
  // segment it sends this rank (segments, then relayed)
  const exchangeMeta = (meta: Float64Array[]) =>
    g.allToAllV(concat(meta, Float64Array), meta.map((m) => m.length), {
      uncounted: true,
      recvCounts: Array.from({ length: W }, (_, p) => 2 + L.segments(p, r).length + L.relayedInput(p, r).length),
    });
  if (x instanceof EmbshardError) {
    // flat protocol: the status rides in the metadata as a negative batch size, each destination's counts zero
    const meta = Array.from({ length: W }, (_, d) => {
      const m = new Float64Array(2 + L.segments(r, d).length + L.relayedInput(r, d).length);
      m[0] = -statusOf(x);
      return m;
    });
    g.release((await exchangeMeta(meta)).data);
    throw x;
  }
  const { segs, ub, node } = x;
  // 2. input messages, one per destination: the segment counts (metadata: every segment of L.segments,
  // then those the destination relays), then one message carrying the ids, the rb bags' lengths and the
  // weights of L.sendList (hierarchical: pooled rb segments for another node go to the rail peer there)
  const partsOf = (s: Segment, d: number): { ids: BigInt64Array; lengths: Int32Array | null; weights: Float32Array | null } => {
    if (s.kind === 'node') {
      const u = node.get(s.t)!, j = d % rpn;
      return { ids: K.divideIds(u.uq.values.subarray(u.starts[j]!, u.starts[j + 1]!), rpn), lengths: null, weights: null };
    }
    if (s.kind === 'rb') {
      const p = part(segs.get(s.f)!, 2 + s.g, B);
      return { ids: p.ids, lengths: p.lengths, weights: p.weights };
    }
    return { ids: L.relaysTo(d) ? unionOf(unions, s.t, s.g).uq.values : ub[s.t]![s.g]!.uq.values, lengths: null, weights: null };
  };
  const meta: Float64Array[] = [], input: [BigInt64Array, Int32Array, Float32Array][] = [];
  for (let d = 0; d < W; d++) {
    const m: number[] = [B, weighted ? 1 : 0];
    for (const s of [...L.segments(r, d), ...L.relayedInput(r, d)]) m.push(s.kind === 'rb' ? part(segs.get(s.f)!, 2 + s.g, B).n : partsOf(s, d).ids.length);
    meta.push(Float64Array.from(m));
    input.push(pack(L.sendList(r, d).map((s) => partsOf(s, d))));
  }
  const metaIn = await exchangeMeta(meta);
  // per source: batch size, weights, and the id count of every segment it named (segments, then relayed)
  const info: { B: number; hasW: boolean; count: Map<Segment, number>; relayed: Map<Segment, number> }[] = [];
  {
    let mo = 0;
    for (let p = 0; p < W; p++) {
      const d = metaIn.data;
      let k = mo + 2;
      const count = new Map<Segment, number>(), relayed = new Map<Segment, number>();
      for (const s of L.segments(p, r)) count.set(s, d[k++]!);
      for (const s of L.relayedInput(p, r)) relayed.set(s, d[k++]!);
      info.push({ B: d[mo]!, hasW: d[mo + 1] === 1, count, relayed });
      mo += metaIn.counts[p]!;
    }
  }
  g.release(metaIn.data);
  agreeOnStatus(x, (p) => (info[p]!.B < 0 ? -info[p]!.B : 0), W);
  const countIn = (p: number, s: Segment) => info[p]!.count.get(s) ?? info[p]!.relayed.get(s)!;
  // the segment counts say what every source sends next, so the payload exchanges skip their count phase
  const sent = fuse(input);
  const inputIn = await g.allToAllV(sent.bytes, sent.counts, { recvCounts: Array.from({ length: W }, (_, p) => bytesOf(L.sendList(p, r), info[p]!, (s) => countIn(p, s))), counters });
  // 3. parse what every source sent this rank
  const reader = new PartReader(inputIn.data);
  const direct = Array.from({ length: W }, (_, p) => unpackParts(reader, L.sendList(p, r), info[p]!, (s) => countIn(p, s)));
  g.release(inputIn.data);
  // 4. hierarchical: as a relay, hand every remote requester's relayed rb parts to the holders on this node
  const forwarded: Map<Segment, Part>[] = Array.from({ length: W }, () => new Map());
  if (L.hier) {
    const base = L.nodeOf(r) * rpn;
    const out = Array.from({ length: W }, (_, d) => {
      if (L.nodeOf(d) !== L.nodeOf(r)) return pack([]);
      const parts: Part[] = [];
      for (let p = 0; p < W; p++) {
        const rel = L.relayedInput(p, r);
        rel.forEach((s, k) => {
          if (s.kind === 'rb' && L.tables[s.t]!.groups[s.g]!.holders.includes(d)) parts.push(direct[p]![L.sendList(p, r).length - rel.length + k]!);
        });
      }
      return pack(parts);
    });
    // what this rank, as a holder, gets from each relay of its node: the relayed segments of remote requesters
    const viaFrom = (a: number) => {
      const list: [number, Segment][] = [];
      if (L.nodeOf(a) !== L.nodeOf(r)) return list;
      for (let p = 0; p < W; p++) if (L.nodeOf(p) !== L.nodeOf(r) && p % rpn === a % rpn) for (const s of L.segments(p, r)) if (L.viaRelay(s, p, r)) list.push([p, s]);
      return list;
    };
    const fw = fuse(out);
    const expect = Array.from({ length: W }, (_, a) => viaFrom(a).reduce((n, [p, s]) => n + partBytes(s, info[p]!, info[p]!.count.get(s)!), 0));
    const relIn = await g.allToAllV(fw.bytes, fw.counts, { recvCounts: expect, counters });
    const rd = new PartReader(relIn.data);
    for (let a = base; a < base + rpn; a++) {
      const list = viaFrom(a);
      const parts = unpackParts(rd, list.map(([, s]) => s), null, (s, k) => info[list[k]![0]]!.count.get(s)!, (k) => info[list[k]![0]]!);
      list.forEach(([p, s], k) => forwarded[p]!.set(s, parts[k]!));
    }
    g.release(relIn.data);
  }
  const recv: Received[] = info.map((x, p) => {
    const byDirect = new Map<Segment, Part>();
    L.sendList(p, r).forEach((s, k) => byDirect.set(s, direct[p]![k]!));
    return { B: x.B, hasW: x.hasW, entries: L.segments(p, r).map((s) => ({ seg: s, ...(L.viaRelay(s, p, r) ? forwarded[p]!.get(s)! : byDirect.get(s)!) })) };
  });
  return { recv, unions };
}

interface Part {
  ids: BigInt64Array;
  lengths: Int32Array | null;
  weights: Float32Array | null;
}
interface SourceInfo {
  B: number;
  hasW: boolean;
}

/** One message from parts: all ids, then the rb bags' lengths, then the weights. */
function pack(parts: readonly Part[]): [BigInt64Array, Int32Array, Float32Array] {
  return [concat(parts.map((x) => x.ids), BigInt64Array), concat(parts.flatMap((x) => (x.lengths ? [x.lengths] : [])), Int32Array), concat(parts.flatMap((x) => (x.weights ? [x.weights] : [])), Float32Array)];
}

/** Bytes of one segment's part: ids, and for rb the bag lengths and the weights. */
function partBytes(s: Segment, src: SourceInfo, n: number): number {
  return n * 8 + (s.kind === 'rb' ? src.B * 4 + (src.hasW ? n * 4 : 0) : 0);
}

function bytesOf(list: readonly Segment[], src: SourceInfo, count: (s: Segment) => number): number {
  return list.reduce((n, s) => n + partBytes(s, src, count(s)), 0);
}

/** Reads one message of `list`'s parts (pack's layout); `srcOf(k)` gives the requester of part k when a message mixes requesters. */
function unpackParts(reader: PartReader, list: readonly Segment[], src: SourceInfo | null, count: (s: Segment, k: number) => number, srcOf?: (k: number) => SourceInfo): Part[] {
  const info = (k: number) => src ?? srcOf!(k);
  let ni = 0, nl = 0, nw = 0;
  list.forEach((s, k) => {
    const n = count(s, k);
    ni += n;
    if (s.kind === 'rb') {
      nl += info(k).B;
      if (info(k).hasW) nw += n;
    }
  });
  const ids = reader.take(BigInt64Array, ni), len = reader.take(Int32Array, nl), w = reader.take(Float32Array, nw);
  let io = 0, lo = 0, wo = 0;
  return list.map((s, k) => {
    const n = count(s, k), x = info(k);
    const part: Part = { ids: ids.subarray(io, io + n), lengths: null, weights: null };
    io += n;
    if (s.kind === 'rb') {
      part.lengths = len.subarray(lo, lo + x.B);
      lo += x.B;
      if (x.hasW) {
        part.weights = w.subarray(wo, wo + n);
        wo += n;
      }
    }
    return part;
  });
}

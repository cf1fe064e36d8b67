// relay.ts — the node-level step of the hierarchical protocol for ub tables: every rank sends its distinct
// ids of each row group that a node-mate relays (the group has holders on other nodes with that
// node-mate's local index) to that node-mate, which deduplicates them over its node; the node's distinct
// ids are what crosses to the holders (input-exchange.ts), their rows come back to the relay once and are
// handed to each requester (schedule.ts, relay slots), and in backward the relay sums its node's gradients
// per distinct row before they cross (docs/wire-protocol.md, hierarchical protocol).
import { concat } from './arrays.js';
import { exchangeOps, type Uniq } from './exchange-ops.js';
import { fuse, PartReader } from './fused.js';
import type { ProcessGroup, TrafficCounters } from './group.js';
import type { LocalLayout, RelaySeg } from './local-layout.js';
import { EmbshardError } from '../errors.js';
import { agreeOnStatus, statusOf, type RoutedOrRejected } from './step-status.js';

/** One row group this rank relays: its node's distinct ids, and where each node-mate's ids sit in them. */
export interface RelayUnion {
  rs: RelaySeg;
  /** distinct ids of the node (ascending) and, for the concatenation of the node-mates' ids in rank order, each one's index in them */
  uq: Uniq;
  /** per rank of the group (0 for ranks of other nodes): offset and count of its ids in the concatenation */
  off: number[];
  count: number[];
}

/** The index of row group (t, g) among the row groups this rank relays. */
export function unionIndex(unions: readonly RelayUnion[], t: number, g: number): number {
  const k = unions.findIndex((x) => x.rs.t === t && x.rs.g === g);
  if (k < 0) throw new Error(`internal: this rank relays no row group ${g} of table ${t}`);
  return k;
}

/** The relay union of row group (t, g), which this rank relays. */
export function unionOf(unions: readonly RelayUnion[], t: number, g: number): RelayUnion {
  return unions[unionIndex(unions, t, g)]!;
}

/** Where requester q's ids of a relayed row group sit among the node's distinct ids. */
export function inverseOf(u: RelayUnion, q: number): Int32Array {
  return u.uq.inverse.subarray(u.off[q]!, u.off[q]! + u.count[q]!);
}

/**
 * The gather step: this rank's distinct ub ids to the node-mates that relay them; returns the row groups
 * this rank relays. Its counts, the step's first exchange under the hierarchical protocol, start with
 * this rank's status (step-status.ts statusOf) for every rank: a rejected batch ends the step there.
 */
export async function gatherRelayIds(L: LocalLayout, g: ProcessGroup, x: RoutedOrRejected, counters: TrafficCounters): Promise<RelayUnion[]> {
  const W = L.W, base = L.nodeOf(L.rank) * L.rpn;
  const mine = L.relaySegs(L.rank);
  const status = statusOf(x);
  const meta: Float64Array[] = [], parts: BigInt64Array[][] = [];
  for (let a = 0; a < W; a++) {
    const segs = L.nodeOf(a) === L.nodeOf(L.rank) ? L.relaySegs(a) : [];
    const ids = x instanceof EmbshardError ? segs.map(() => new BigInt64Array(0)) : segs.map((rs) => x.ub[rs.t]![rs.g]!.uq.values);
    meta.push(Float64Array.from([status, ...ids.map((v) => v.length)]));
    parts.push([concat(ids, BigInt64Array)]);
  }
  const inNode = (q: number) => q >= base && q < base + L.rpn;
  const metaIn = await g.allToAllV(concat(meta, Float64Array), meta.map((m) => m.length), {
    uncounted: true,
    recvCounts: Array.from({ length: W }, (_, q) => 1 + (inNode(q) ? mine.length : 0)),
  });
  // source q's counts start at offset(q): every earlier source sent 1 value, and node-mates their counts
  const offset = (q: number) => q + Math.max(0, Math.min(q, base + L.rpn) - base) * mine.length;
  const statuses = Array.from({ length: W }, (_, q) => metaIn.data[offset(q)]!);
  const perSrc = Array.from({ length: W }, (_, q) => (inNode(q) ? Array.from(metaIn.data.subarray(offset(q) + 1, offset(q) + 1 + mine.length)) : []));
  g.release(metaIn.data);
  agreeOnStatus(x, (q) => statuses[q]!, W);
  const sent = fuse(parts);
  const got = await g.allToAllV(sent.bytes, sent.counts, { recvCounts: perSrc.map((c) => c.reduce((a, b) => a + b, 0) * 8), counters });
  const reader = new PartReader(got.data);
  const byQ = perSrc.map((c) => c.map((n) => reader.take(BigInt64Array, n)));
  g.release(got.data);
  return mine.map((rs, k) => {
    const off: number[] = [], count: number[] = [], ids: BigInt64Array[] = [];
    let n = 0;
    for (let q = 0; q < W; q++) {
      const x = byQ[q]![k] ?? new BigInt64Array(0);
      off.push(n);
      count.push(x.length);
      ids.push(x);
      n += x.length;
    }
    return { rs, uq: exchangeOps().unique(concat(ids, BigInt64Array), 1), off, count };
  });
}

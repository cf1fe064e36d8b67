// routing.ts — the first stage of a sharded forward, on the requester: every feature's ids split by the
// row ranges of its table (replicated tier, node tier, each row group; one stable native pass; a dynamic
// table's raw ids by the range of their hash, core/id_hash.h), and the
// distinct ids of each ub row group and node tier (all the table's features together), which is what
// travels for them (docs/wire-protocol.md).
import type { JaggedBatch } from '../batch.js';
import { concat } from './arrays.js';
import { exchangeOps, type Segmented, type Uniq } from './exchange-ops.js';
import type { LocalLayout, TableRt } from './local-layout.js';

export interface SegView {
  seg: Segmented;
  starts: number[];
}
export interface Part {
  ids: BigInt64Array;
  pos: Int32Array;
  weights: Float32Array | null;
  lengths: Int32Array;
  n: number;
}
export interface UniqT {
  uq: Uniq;
  /** offset of each feature's ids in the concatenation */
  featOff: number[];
  /** per residue (node tier holders): start in values */
  starts: number[];
}
/** One range (s) of a routed feature: its ids (relative to the range start), positions, weights, bag lengths. */
export function part(v: SegView, s: number, B: number): Part {
  const a = v.starts[s]!, n = v.seg.counts[s]!;
  return {
    ids: v.seg.ids.subarray(a, a + n),
    pos: v.seg.pos.subarray(a, a + n),
    weights: v.seg.weights ? v.seg.weights.subarray(a, a + n) : null,
    lengths: v.seg.lengths.subarray(s * B, (s + 1) * B),
    n,
  };
}

/** The distinct ids of range s of every feature of table rt, grouped by residue mod m (m = ranks per node for node tiers). */
export function uniqOver(segs: Map<string, SegView>, rt: TableRt, s: number, m: number, B: number): UniqT {
  const parts = rt.features.map((f) => part(segs.get(f)!, s, B).ids);
  const featOff = [0];
  for (const p of parts) featOff.push(featOff[featOff.length - 1]! + p.length);
  const uq = exchangeOps().unique(concat(parts, BigInt64Array), m);
  const starts = [0];
  for (let j = 0; j < m; j++) starts.push(starts[j]! + uq.counts[j]!);
  return { uq, featOff, starts };
}

export interface Routed {
  /** per feature: its ids by range (ranges: replicated tier, node tier, row groups) */
  segs: Map<string, SegView>;
  /** ub[t][g]: the distinct ids of ub table t in row group g (empty for other tables) */
  ub: UniqT[][];
  /** per table with a node tier: its distinct tier ids, by holder (residue mod ranks per node) */
  node: Map<number, UniqT>;
}

export function route(L: LocalLayout, batch: JaggedBatch): Routed {
  const K = exchangeOps();
  const B = batch.batchSize;
  const segs = new Map<string, SegView>();
  for (const rt of L.tables)
    for (const f of rt.features) {
      const fv = batch.feature(f);
      // a dynamic table's raw ids go to the row group of their hash and travel as they are
      const seg = K.segment(fv.ids, fv.lengths, fv.weights ?? null, rt.bounds, `feature '${f}' (table '${rt.table.name}', ${rt.table.rows} rows)`, rt.hashCapacity);
      const starts = [0];
      for (let s = 0; s < seg.counts.length; s++) starts.push(starts[s]! + seg.counts[s]!);
      segs.set(f, { seg, starts });
    }
  const ub = L.tables.map((rt) => (rt.cluster === 'ub' ? rt.groups.map((_, gi) => uniqOver(segs, rt, 2 + gi, 1, B)) : []));
  const node = new Map<number, UniqT>();
  for (const rt of L.tables) if (rt.N > 0) node.set(rt.index, uniqOver(segs, rt, 1, L.rpn, B));
  return { segs, ub, node };
}

// routing.ts — the first stage of a sharded forward, on the requester: every feature's ids split by the
// row ranges of its table (replicated tier, node tier, each row group; a stable native pass; a dynamic
// table's raw ids by the range of their hash, core/id_hash.h), and the
// distinct ids of each ub row group and node tier (all the table's features together), which is what
// travels for them (docs/wire-protocol.md). One native call routes a whole batch (exchange-ops.ts
// routeStep), into one set of arrays that every feature's and every request's views share.
import type { JaggedBatch } from '../batch.js';
import { EmbshardError } from '../errors.js';
import { concat } from './arrays.js';
import { exchangeOps, type RoutePlan, type StepRoutes, type Uniq } from './exchange-ops.js';
import type { LocalLayout, TableRt } from './local-layout.js';

/** A routed feature: the step's arrays and the slot of its first range in them. */
export interface SegView {
  r: StepRoutes;
  at: number;
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
  const r = v.r, k = v.at + s;
  const a = r.begin[k]!, n = r.counts[k]!;
  return {
    ids: r.ids.subarray(a, a + n),
    pos: r.pos.subarray(a, a + n),
    weights: r.weights ? r.weights.subarray(a, a + n) : null,
    lengths: r.lengths.subarray(k * B, (k + 1) * B),
    n,
  };
}

/** UniqT of distinct ids `uq` of range s of table rt's features (their ids concatenated in feature order). */
function uniqT(uq: Uniq, segs: Map<string, SegView>, rt: TableRt, s: number): UniqT {
  const featOff = [0];
  for (const f of rt.features) {
    const v = segs.get(f)!;
    featOff.push(featOff[featOff.length - 1]! + v.r.counts[v.at + s]!);
  }
  const starts = [0];
  for (let j = 0; j < uq.counts.length; j++) starts.push(starts[j]! + uq.counts[j]!);
  return { uq, featOff, starts };
}

/** The distinct ids of range s of every feature of table rt, grouped by residue mod m (m = ranks per node for node tiers). */
export function uniqOver(segs: Map<string, SegView>, rt: TableRt, s: number, m: number, B: number): UniqT {
  const parts = rt.features.map((f) => part(segs.get(f)!, s, B).ids);
  return uniqT(exchangeOps().unique(concat(parts, BigInt64Array), m), segs, rt, s);
}

export interface Routed {
  /** per feature: its ids by range (ranges: replicated tier, node tier, row groups) */
  segs: Map<string, SegView>;
  /** ub[t][g]: the distinct ids of ub table t in row group g (empty for other tables) */
  ub: UniqT[][];
  /** per table with a node tier: its distinct tier ids, by holder (residue mod ranks per node) */
  node: Map<number, UniqT>;
}

/** A layout's routing plan: the native one, the routed features in order, each one's first range slot, each request's first count. */
interface Plan {
  native: RoutePlan;
  features: string[];
  slotAt: number[];
  countAt: number[];
}
const plans = new WeakMap<LocalLayout, Plan>();

// requests of distinct ids: every ub table's row groups (m = 1), then every node tier (m = ranks per node)
function routePlan(L: LocalLayout): Plan {
  let p = plans.get(L);
  if (p) return p;
  const bounds: number[] = [], tables: number[] = [], uniq: number[] = [], what: string[] = [], features: string[] = [], slotAt: number[] = [], countAt: number[] = [];
  let slot = 0, count = 0;
  L.tables.forEach((rt, t) => {
    tables.push(bounds.length, rt.bounds.length - 1, rt.hashCapacity, rt.features.length);
    bounds.push(...rt.bounds);
    for (const f of rt.features) {
      features.push(f);
      what.push(`feature '${f}' (table '${rt.table.name}', ${rt.table.rows} rows)`);
      slotAt.push(slot);
      slot += rt.bounds.length - 1;
    }
    if (rt.cluster === 'ub') rt.groups.forEach((_, gi) => (uniq.push(t, 2 + gi, 1), countAt.push(count), (count += 1)));
  });
  L.tables.forEach((rt, t) => {
    if (rt.N > 0) uniq.push(t, 1, L.rpn), countAt.push(count), (count += L.rpn);
  });
  p = { native: { bounds: Float64Array.from(bounds), tables: Float64Array.from(tables), uniq: Float64Array.from(uniq), what }, features, slotAt, countAt };
  plans.set(L, p);
  return p;
}

/** Request u's distinct ids: views of the step's arrays. */
function requested(r: StepRoutes, P: Plan, u: number, m: number): Uniq {
  const c = P.countAt[u]!;
  return {
    values: r.values.subarray(r.valuesAt[u]!, r.valuesAt[u + 1]!),
    inverse: r.inverse.subarray(r.inverseAt[u]!, r.inverseAt[u + 1]!),
    counts: r.uniqCounts.subarray(c, c + m),
  };
}

/** Each routed feature's index in the batch (MISSING_FEATURE as batch.feature()); the batch's lengths checked after the first, as there. */
function featureIndices(batch: JaggedBatch, features: string[]): Int32Array {
  const index = new Map(batch.features.map((f, i) => [f, i]));
  const at = new Int32Array(features.length);
  features.forEach((f, k) => {
    const i = index.get(f);
    if (i === undefined) throw new EmbshardError('MISSING_FEATURE', `the batch has no feature '${f}'`);
    at[k] = i;
    if (k === 0) void batch.offsets; // NEGATIVE_LENGTH / LENGTH_MISMATCH naming the feature and sample
  });
  return at;
}

export function route(L: LocalLayout, batch: JaggedBatch): Routed {
  const P = routePlan(L);
  const B = batch.batchSize;
  const at = featureIndices(batch, P.features);
  const r = exchangeOps().routeStep(batch.ids, batch.lengths, batch.weights ?? null, B, batch.offsets, at, P.native);
  const segs = new Map<string, SegView>();
  P.features.forEach((f, k) => segs.set(f, { r, at: P.slotAt[k]! }));
  let u = 0;
  const ub = L.tables.map((rt) => (rt.cluster === 'ub' ? rt.groups.map((_, gi) => uniqT(requested(r, P, u++, 1), segs, rt, 2 + gi)) : []));
  const node = new Map<number, UniqT>();
  for (const rt of L.tables) if (rt.N > 0) node.set(rt.index, uniqT(requested(r, P, u++, L.rpn), segs, rt, 1));
  return { segs, ub, node };
}

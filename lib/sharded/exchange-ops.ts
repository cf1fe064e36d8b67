// exchange-ops.ts — typed access to the sharded runtime's native per-id work around its exchanges (native/shard/exchange_ops.h via
// native/addon/shard_ops.cc). Synchronous: each is one linear pass over a step's ids.
import type { IdArray } from '../binding.js';
import { loadAddon } from '../native.js';

export type Wire = 'fp32' | 'fp16' | 'bf16';
export type WireArray = Float32Array | Uint16Array;

export interface Segmented {
  /** ids relative to their range start, range-major, stable */
  ids: BigInt64Array;
  /** original index (within the feature) of every id */
  pos: Int32Array;
  weights: Float32Array | null;
  /** [S × B] bag lengths per range */
  lengths: Int32Array;
  counts: Float64Array;
}

export interface Uniq {
  /** distinct ids ordered by (id mod m, id) */
  values: BigInt64Array;
  inverse: Int32Array;
  /** distinct ids per residue [m] */
  counts: Float64Array;
}

/** A layout's routing plan (routing.ts routePlan): what routeStep needs besides the batch. */
export interface RoutePlan {
  /** every table's range bounds, one table after another */
  bounds: Float64Array;
  /** [T × 4] per table: where its bounds start, its ranges S, its hashCapacity, its features (in routing order) */
  tables: Float64Array;
  /** [U × 3] per request of distinct ids: table, range, m (as `unique`) */
  uniq: Float64Array;
  /** each routed feature's description in error messages */
  what: string[];
}

/** One step's routing (routeStep): every routed feature segmented, one after another in the same arrays, and the requested distinct ids. */
export interface StepRoutes {
  /** as Segmented, feature after feature: ids, pos, weights [Σ ids]; lengths [ranges × B]; counts [ranges] */
  ids: BigInt64Array;
  pos: Int32Array;
  weights: Float32Array | null;
  lengths: Int32Array;
  counts: Float64Array;
  /** where each range starts in ids [ranges] */
  begin: Float64Array;
  /** as Uniq, request after request: values [valuesAt[u], valuesAt[u + 1]), inverse [inverseAt[u], inverseAt[u + 1]), counts m each */
  values: BigInt64Array;
  inverse: Int32Array;
  uniqCounts: Float64Array;
  valuesAt: Float64Array;
  inverseAt: Float64Array;
}

export interface ExchangeOps {
  /** hashCapacity > 0: a dynamic table's raw ids, placed by hash_row(id, hashCapacity) and output unchanged */
  segment(ids: IdArray, lengths: Int32Array, weights: Float32Array | null, bounds: Float64Array, what: string, hashCapacity?: number): Segmented;
  unique(ids: BigInt64Array, m: number): Uniq;
  /**
   * A batch's routing in one call: the plan's features (featureAt: their indices in the batch, table after
   * table) each segmented as `segment` does, then the distinct ids of the plan's requests as `unique` does.
   */
  routeStep(ids: IdArray, lengths: Int32Array, weights: Float32Array | null, B: number, offsets: Float64Array, featureAt: Int32Array, plan: RoutePlan): StepRoutes;
  divideIds(src: BigInt64Array, m: number): BigInt64Array;
  pack(src: Float32Array, stride: number, idx: Int32Array | null, r0: number, nRows: number, c0: number, c1: number, wire: Wire, dst: WireArray, dstOffset: number): void;
  unpack(src: WireArray, srcOffset: number, wire: Wire, nRows: number, cols: number, dst: Float32Array, stride: number, idx: Int32Array | null, r0: number, col: number, add: boolean): void;
  poolUnique(rows: Float32Array, dim: number, inverse: Int32Array, lengths: Int32Array, weights: Float32Array | null, dst: Float32Array, stride: number, col: number, seqPos: Int32Array | null): void;
  gradUnique(grad: Float32Array, stride: number, col: number, dim: number, inverse: Int32Array, lengths: Int32Array, weights: Float32Array | null, fullLen: Int32Array | null, mean: boolean, seqPos: Int32Array | null, out: Float32Array): void;
  divideBags(m: Float32Array, stride: number, col: number, dim: number, lengths: Int32Array): void;
  /** gradUnique's terms for the device reduction: per id, the gradient row it reads (from rowAt) and its scale (from scaleAt); returns the ids */
  gradTerms(lengths: Int32Array, weights: Float32Array | null, fullLen: Int32Array | null, mean: boolean, seqPos: Int32Array | null, row: Int32Array, rowAt: number, scale: Float32Array, scaleAt: number): number;
  /** each distinct row's ids ascending: start (U + 1 values from startAt) into order (inverse.length values from orderAt) */
  groupRows(inverse: Int32Array, U: number, start: Int32Array, startAt: number, order: Int32Array, orderAt: number): void;
  /** out[at] = 0, then each bag's end: the prefix sums of `lengths` (lengths.length + 1 values) */
  bagOffsets(lengths: Int32Array, out: Int32Array, at: number): void;
  /** a dynamic table's raw ids as distinct row-space keys (lib/plan/dynamic-keys.ts) */
  hashKeys(ids: BigInt64Array, capacity: number): Float64Array;
  /** whether every value is finite (no NaN or ±Inf) */
  allFinite(a: Float32Array): boolean;
  /** a zeroed Float32Array in a buffer of the addon's output pool (a forward's outputs; back with the addon's releaseBuffers) */
  outputArray(n: number): Float32Array;
  /** the init values of rows r0 + j·rowStride (j < nRows) × cols [c0, c1) of a table, as a single collection sets them */
  initSlice(kind: 'uniform' | 'normal' | 'constant', a: number, b: number, seed: number, table: number, dim: number, r0: number, nRows: number, c0: number, c1: number, out: Float32Array, rowStride?: number): void;
  /** out[j] = first + j */
  rowIds(first: number, out: BigInt64Array): void;
}

let cached: ExchangeOps | undefined;
export function exchangeOps(): ExchangeOps {
  return (cached ??= (loadAddon() as unknown as { shard: ExchangeOps }).shard);
}

export function wireArray(wire: Wire, n: number): WireArray {
  return wire === 'fp32' ? new Float32Array(n) : new Uint16Array(n);
}

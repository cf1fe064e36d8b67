// batch.ts — JaggedBatch, the one batch format (KeyedJaggedTensor-like) used by every API: F features ×
// B samples, lengths feature-major [F*B], ids the concatenation of all bags in that order, optional per-id
// weights. Construction checks types and sizes in O(1); the lengths (none negative, their sum the number of
// ids) and the weights (finite) are checked by whatever consumes the batch: natively (in one pass, off the
// event loop, with the id ranges), the lengths also on the first use of `offsets` / `feature()` here.
import { EmbshardError } from './errors.js';
import type { IdArray, NativeBatch } from './binding.js';

export interface JaggedBatchInit {
  features: readonly string[];
  batchSize: number;
  /** Int32Array [features.length × batchSize], feature-major */
  lengths: Int32Array;
  /** BigInt64Array | Int32Array | Uint32Array [Σ lengths] */
  ids: IdArray;
  /** Float32Array [Σ lengths], optional per-id weights */
  weights?: Float32Array | undefined;
}

const INT64_MIN = -(1n << 63n), INT64_MAX = (1n << 63n) - 1n;

/** Whether an id given as a number or a bigint fits an int64 exactly: a safe integer, or a bigint within int64. */
export function isId(v: number | bigint): boolean {
  return typeof v === 'bigint' ? v >= INT64_MIN && v <= INT64_MAX : Number.isSafeInteger(v);
}

/** One id given as a number or a bigint, as a bigint (INVALID_ARGUMENT unless isId: a wider one would wrap). */
export function idOf(v: number | bigint): bigint {
  if (!isId(v)) throw new EmbshardError('INVALID_ARGUMENT', `id ${String(v)} is not an integer that fits 64 bits exactly (a number past 2^53 must be given as a bigint)`);
  return BigInt(v);
}

function isIdArray(a: unknown): a is IdArray {
  return a instanceof BigInt64Array || a instanceof Int32Array || a instanceof Uint32Array;
}

export class JaggedBatch {
  readonly features: readonly string[];
  readonly batchSize: number;
  readonly lengths: Int32Array;
  readonly ids: IdArray;
  readonly weights: Float32Array | undefined;
  private _offsets: Float64Array | undefined;

  private constructor(init: JaggedBatchInit) {
    this.features = Object.freeze([...init.features]);
    this.batchSize = init.batchSize;
    this.lengths = init.lengths;
    this.ids = init.ids;
    this.weights = init.weights;
  }

  /** Builds a batch from per-bag lengths. Throws EmbshardError on wrong types or sizes. */
  static fromLengths(init: JaggedBatchInit): JaggedBatch {
    if (typeof init !== 'object' || init === null) throw new EmbshardError('INVALID_ARGUMENT', 'fromLengths({ features, batchSize, lengths, ids, weights? }) takes an object');
    const { features, batchSize, lengths, ids, weights } = init;
    if (!Array.isArray(features) || !Array.from(features).every((f) => typeof f === 'string' && f.length > 0))
      throw new EmbshardError('INVALID_ARGUMENT', 'features must be an array of non-empty strings');
    if (new Set(features).size !== features.length)
      throw new EmbshardError('DUPLICATE_FEATURE', `a feature is listed twice in [${features.join(', ')}]`);
    if (!Number.isSafeInteger(batchSize) || batchSize <= 0)
      throw new EmbshardError('INVALID_SIZE', `batchSize must be a positive integer (got ${batchSize})`);
    if (!(lengths instanceof Int32Array))
      throw new EmbshardError('INVALID_ARGUMENT', 'lengths must be an Int32Array (feature-major [F × B])');
    if (lengths.length !== features.length * batchSize)
      throw new EmbshardError(
        'LENGTH_MISMATCH',
        `lengths has ${lengths.length} entries; expected features × batchSize = ${features.length} × ${batchSize}`,
      );
    if (!isIdArray(ids))
      throw new EmbshardError('UNSUPPORTED_DTYPE', 'ids must be a BigInt64Array, Int32Array or Uint32Array');
    if (weights !== undefined) {
      if (!(weights instanceof Float32Array)) throw new EmbshardError('INVALID_ARGUMENT', 'weights must be a Float32Array');
      if (weights.length !== ids.length)
        throw new EmbshardError('LENGTH_MISMATCH', `weights has ${weights.length} entries but there are ${ids.length} ids`);
    }
    return new JaggedBatch({ features, batchSize, lengths, ids, weights });
  }

  /**
   * Convenience for small batches and tests: bags[f][b] is the list of ids of feature f, sample b
   * (optionally with weights in the same shape). Not for hot paths.
   */
  static fromBags(features: readonly string[], bags: readonly (readonly (number | bigint)[])[][], weights?: readonly (readonly number[])[][]): JaggedBatch {
    if (!Array.isArray(features)) throw new EmbshardError('INVALID_ARGUMENT', 'fromBags(features, bags): features must be an array of feature names');
    if (!Array.isArray(bags)) throw new EmbshardError('INVALID_ARGUMENT', 'fromBags(features, bags): bags must be an array (per feature, per sample, the ids)');
    if (bags.length !== features.length)
      throw new EmbshardError('LENGTH_MISMATCH', `fromBags(features, bags): ${features.length} features but bags for ${bags.length}`);
    const B = bags[0]?.length ?? 0;
    const lengths = new Int32Array(features.length * B);
    const all: bigint[] = [];
    const w: number[] = [];
    for (let f = 0; f < features.length; f++) {
      if (bags[f]?.length !== B) throw new EmbshardError('LENGTH_MISMATCH', `feature ${features[f]} has a different batch size`);
      for (let b = 0; b < B; b++) {
        const bag = bags[f]![b]!;
        if (!Array.isArray(bag)) throw new EmbshardError('INVALID_ARGUMENT', `bags[${f}][${b}] must be an array of ids`);
        if (weights && weights[f]?.[b]?.length !== bag.length)
          throw new EmbshardError('LENGTH_MISMATCH', `weights[${f}][${b}] must hold one weight per id of bags[${f}][${b}] (${bag.length})`);
        lengths[f * B + b] = bag.length;
        for (let k = 0; k < bag.length; k++) {
          const id = bag[k]!;
          if (isId(id)) all.push(BigInt(id));
          else throw new EmbshardError('INVALID_ARGUMENT', `bags[${f}][${b}][${k}] is ${String(id)}: ids must be integers (bigints within int64)`);
          if (weights) {
            const x = weights[f]![b]![k];
            if (typeof x !== 'number') throw new EmbshardError('INVALID_ARGUMENT', `weights[${f}][${b}][${k}] is ${String(x)}: weights must be numbers`);
            w.push(x);
          }
        }
      }
    }
    return JaggedBatch.fromLengths({
      features,
      batchSize: B,
      lengths,
      ids: BigInt64Array.from(all),
      weights: weights ? Float32Array.from(w) : undefined,
    });
  }

  get numIds(): number {
    return this.ids.length;
  }

  /**
   * Start of every bag in `ids` ([F*B + 1]); computed once, lazily, with the lengths' checks: a negative
   * length is NEGATIVE_LENGTH, lengths that do not sum to the number of ids LENGTH_MISMATCH.
   */
  get offsets(): Float64Array {
    if (!this._offsets) {
      const L = this.lengths, B = this.batchSize;
      const o = new Float64Array(L.length + 1);
      for (let i = 0; i < L.length; i++) {
        const n = L[i]!;
        if (n < 0)
          throw new EmbshardError('NEGATIVE_LENGTH', `lengths[${i}] = ${n} is negative (feature '${this.features[Math.floor(i / B)]}', sample ${i % B})`);
        o[i + 1] = o[i]! + n;
      }
      if (o[L.length] !== this.ids.length)
        throw new EmbshardError('LENGTH_MISMATCH', `lengths sum to ${o[L.length]} but the batch has ${this.ids.length} ids`);
      this._offsets = o;
    }
    return this._offsets;
  }

  /** The slice of one feature: its B lengths and its ids (and weights), as views (no copies); the lengths checked as for `offsets`. */
  feature(name: string): { lengths: Int32Array; ids: IdArray; weights: Float32Array | undefined } {
    const f = this.features.indexOf(name);
    if (f < 0) throw new EmbshardError('MISSING_FEATURE', `the batch has no feature '${name}'`);
    const B = this.batchSize;
    const o = this.offsets;
    const s = o[f * B]!, e = o[(f + 1) * B]!;
    return {
      lengths: this.lengths.subarray(f * B, (f + 1) * B),
      ids: this.ids.subarray(s, e) as IdArray,
      weights: this.weights?.subarray(s, e),
    };
  }

  /** The plain object the native layer reads (no copies). */
  toNative(): NativeBatch {
    return { batchSize: this.batchSize, features: [...this.features], lengths: this.lengths, ids: this.ids, weights: this.weights };
  }
}

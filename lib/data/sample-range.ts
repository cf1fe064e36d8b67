// sample-range.ts — samples [start, end) of a source's stream, by sample index (the position of a sample
// in the order the source yields it, malformed input already skipped), and the held-out split built on it:
// the last fraction of a finite source is kept for evaluation and never trained on. Batches inside the
// range pass through untouched; only the (at most two) batches cut by a boundary are sliced (take.ts: one
// copy per bag and per row).
import { EmbshardError } from '../errors.js';
import type { Batch, BatchSource } from './types.js';
import { SourceView } from './source-view.js';
import { takeBatch, takeSparse } from './take.js';

/** Samples [a, e) of a batch as a new batch (copies; weights and planted scores carried along). */
export function sliceBatch(b: Batch, a: number, e: number): Batch {
  const B = b.size, n = e - a;
  if (!Number.isSafeInteger(a) || !Number.isSafeInteger(e) || a < 0 || e > B || n <= 0)
    throw new EmbshardError('INVALID_ARGUMENT', `sliceBatch: [${a}, ${e}) is not a non-empty range of a batch of ${B}`);
  if (a === 0 && e === B) return b;
  const idx = new Int32Array(n);
  for (let k = 0; k < n; k++) idx[k] = a + k;
  return takeBatch(b, idx, takeSparse(b.sparse, idx));
}

/** The samples [start, end) of `inner`, as a BatchSource (each pass reads `inner` from its start). */
export class SampleRangeSource extends SourceView {
  constructor(
    inner: BatchSource,
    readonly start: number,
    readonly end: number,
  ) {
    super(inner);
    if (!Number.isSafeInteger(start) || start < 0) throw new EmbshardError('INVALID_ARGUMENT', `start must be a non-negative integer (got ${String(start)})`);
    if (!(end === Infinity || Number.isSafeInteger(end)) || end <= start)
      throw new EmbshardError('INVALID_ARGUMENT', `end must be an integer > start (${start}) or Infinity (got ${String(end)})`);
  }

  override get endless(): boolean {
    return this.end === Infinity && this.inner.endless === true;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Batch> {
    let pos = 0;
    for await (const b of this.inner) {
      const lo = pos, hi = pos + b.size;
      pos = hi;
      if (hi <= this.start) continue;
      if (lo >= this.end) break;
      yield sliceBatch(b, Math.max(this.start, lo) - lo, Math.min(this.end, hi) - lo);
      if (hi >= this.end) break;
    }
  }
}

/** Samples one pass of `source` yields (reads it once when it cannot say). */
export async function countSamples(source: BatchSource & { numSamples?: number }): Promise<number> {
  if (typeof source !== 'object' || source === null || typeof (source as Partial<AsyncIterable<unknown>>)[Symbol.asyncIterator] !== 'function')
    throw new EmbshardError('INVALID_ARGUMENT', 'countSamples: source must be a BatchSource (an async iterable of batches)');
  if (typeof source.numSamples === 'number') return source.numSamples;
  // counting would never end (and, iterating in microtasks, would starve the event loop)
  if (source.endless === true) throw new EmbshardError('INVALID_ARGUMENT', 'countSamples: the source never ends (synthetic data: give it numBatches)');
  let n = 0;
  for await (const b of source) n += b.size;
  return n;
}

export interface HeldOutSplit {
  /** Samples [0, evalStart): the training share. */
  train: SampleRangeSource;
  /** Samples [evalStart, total): held out. */
  eval: SampleRangeSource;
  total: number;
  evalStart: number;
}

/**
 * ⌈f × n⌉ for the fraction f as written (its shortest decimal form, String(f)) and a safe integer n ≥ 0,
 * in integers: Math.ceil(f * n) is one too many where the rounded product lands just above an integer
 * (0.07 × 100 = 7.000000000000001).
 */
function ceilTimes(f: number, n: number): number {
  const m = /^(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(f));
  if (!m) return Math.ceil(f * n);
  const frac = m[2] ?? '', scale = frac.length - Number(m[3] ?? 0); // f = digits / 10^scale
  let num = BigInt(m[1]! + frac) * BigInt(n), den = 1n;
  if (scale >= 0) den = 10n ** BigInt(scale);
  else num *= 10n ** BigInt(-scale);
  return Number((num + den - 1n) / den);
}

/**
 * Splits a finite source: the last ⌈fraction × N⌉ samples are held out for evaluation, the rest are the
 * training share. N is counted with one pass when the source does not know it.
 */
export async function heldOutSplit(source: BatchSource & { numSamples?: number }, fraction: number): Promise<HeldOutSplit> {
  if (typeof fraction !== 'number' || !(fraction > 0 && fraction < 1))
    throw new EmbshardError('INVALID_ARGUMENT', `the held-out fraction must be in (0, 1) (got ${String(fraction)})`);
  const total = await countSamples(source);
  const held = ceilTimes(fraction, total);
  if (held >= total || total < 2)
    throw new EmbshardError('INVALID_SIZE', `a held-out fraction of ${fraction} of ${total} samples leaves nothing to train on`);
  const evalStart = total - held;
  return { train: new SampleRangeSource(source, 0, evalStart), eval: new SampleRangeSource(source, evalStart, total), total, evalStart };
}

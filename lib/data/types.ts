// types.ts — the training batch every data source yields (dense features + jagged sparse ids + labels),
// the BatchSource interface all sources implement, and the O(1)/O(B) shape checks shared by them.
import { EmbshardError } from '../errors.js';
import { JaggedBatch } from '../batch.js';

/** One training batch: B samples, each with numDense dense features, one bag of ids per feature, a label. */
export interface Batch {
  /** Float32Array [size × numDense], sample-major. */
  dense: Float32Array;
  /** The sparse ids, feature-major (see lib/batch.ts). sparse.batchSize === size. */
  sparse: JaggedBatch;
  /** Float32Array [size], 0 or 1. */
  labels: Float32Array;
  /** B, the number of samples. */
  size: number;
  /**
   * Synthetic data only: the planted model's click probability of each sample (Float32Array [size]).
   * It is the Bayes-optimal score, so auc(planted, labels) is the best AUC any model can reach.
   */
  planted?: Float32Array | undefined;
}

/** What malformed input a reading source met (TSV lines, bad records). */
export interface DataIssue {
  /** The file it came from, when the source reads several. */
  file?: string | undefined;
  /** 1-based line (TSV) or record number within that file. */
  line: number;
  reason: string;
  message: string;
}

export interface DataReport {
  /** Lines / records read, blank and malformed ones included. */
  lines: number;
  /** Samples that made it into batches. */
  samples: number;
  /** Lines skipped as malformed. */
  malformed: number;
  /** Count of malformed lines per reason. */
  byReason: Record<string, number>;
  /** The first `maxIssues` malformed lines, in file order. */
  issues: DataIssue[];
}

/**
 * A re-iterable stream of batches. Every call of [Symbol.asyncIterator]() starts again from the first
 * batch (one epoch), so `for await (const b of source)` can run once per epoch.
 */
export interface BatchSource extends AsyncIterable<Batch> {
  /** Sparse feature names, in the order the batches carry them. */
  readonly features: readonly string[];
  /** Dense features per sample. */
  readonly numDense: number;
  /** Samples per batch (the last batch of a finite source may be smaller). */
  readonly batchSize: number;
  /** Rows of the table each feature's ids index (ids are in [0, rows)), when the source knows them. */
  readonly tableRows?: readonly number[] | undefined;
  /** Batches per epoch when known in advance. */
  readonly numBatches?: number | undefined;
  /** True for a source that never ends (synthetic data without numBatches): counting its samples is refused. */
  readonly endless?: boolean | undefined;
  /** The malformed-input report of the last (or current) pass, for sources that parse files. */
  report?(): DataReport | undefined;
  /** Releases files / workers. Iteration that ends or breaks releases its own resources already. */
  close?(): Promise<void>;
}

/** Validates a positive integer option, naming the field on failure. */
export function positiveInt(name: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0)
    throw new EmbshardError('INVALID_SIZE', `${name} must be a positive integer (got ${String(v)})`);
  return v;
}

/** The most samples one batch may hold (2^24): larger batch sizes are INVALID_SIZE before anything is allocated. */
export const MAX_BATCH_SIZE = 1 << 24;

/** Validates a batch size: an integer in [1, MAX_BATCH_SIZE], naming the field on failure. */
export function batchSizeOf(name: string, v: unknown): number {
  const n = positiveInt(name, v);
  if (n > MAX_BATCH_SIZE) throw new EmbshardError('INVALID_SIZE', `${name} must be at most ${MAX_BATCH_SIZE} samples (got ${n})`);
  return n;
}

/** Validates a non-negative integer option, naming the field on failure. */
export function nonNegativeInt(name: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)
    throw new EmbshardError('INVALID_ARGUMENT', `${name} must be a non-negative integer (got ${String(v)})`);
  return v;
}

/** Validates a list option (an array; `undefined` passes through), naming the field on failure. */
export function listOption<T>(name: string, v: readonly T[] | undefined): T[] | undefined {
  if (v === undefined) return undefined;
  if (!Array.isArray(v)) throw new EmbshardError('INVALID_ARGUMENT', `${name} must be an array (got ${v === null ? 'null' : typeof v})`);
  return [...(v as readonly T[])];
}

/** A list of feature names (`undefined` passes through): non-empty strings, none twice; naming the field on failure. */
export function featureNamesOption(name: string, v: readonly string[] | undefined): string[] | undefined {
  const names = listOption(name, v);
  names?.forEach((n, i) => {
    if (typeof n !== 'string' || n.length === 0) throw new EmbshardError('INVALID_ARGUMENT', `${name}[${i}] must be a non-empty string`);
  });
  if (names && new Set(names).size !== names.length) throw new EmbshardError('DUPLICATE_FEATURE', `${name} lists a name twice`);
  return names;
}

/** Validates an optional boolean option, naming the field on failure; `undefined` gives the default. */
export function boolOption(name: string, v: unknown, dflt: boolean): boolean {
  if (v === undefined) return dflt;
  if (typeof v !== 'boolean') throw new EmbshardError('INVALID_ARGUMENT', `${name} must be true or false (got ${JSON.stringify(v) ?? String(v)})`);
  return v;
}

/** Checks a Batch's shapes in O(features + 1): sizes agree, dense is [size × numDense]. */
export function checkBatch(b: Batch, numDense: number): void {
  if (!(b.dense instanceof Float32Array)) throw new EmbshardError('INVALID_ARGUMENT', 'batch.dense must be a Float32Array');
  if (!(b.labels instanceof Float32Array)) throw new EmbshardError('INVALID_ARGUMENT', 'batch.labels must be a Float32Array');
  if (!(b.sparse instanceof JaggedBatch)) throw new EmbshardError('INVALID_ARGUMENT', 'batch.sparse must be a JaggedBatch');
  if (b.sparse.batchSize !== b.size)
    throw new EmbshardError('LENGTH_MISMATCH', `batch.sparse.batchSize ${b.sparse.batchSize} differs from batch.size ${b.size}`);
  if (b.labels.length !== b.size)
    throw new EmbshardError('LENGTH_MISMATCH', `batch.labels has ${b.labels.length} entries; expected size ${b.size}`);
  if (b.dense.length !== b.size * numDense)
    throw new EmbshardError('LENGTH_MISMATCH', `batch.dense has ${b.dense.length} entries; expected size × numDense = ${b.size} × ${numDense}`);
  if (b.planted !== undefined && (!(b.planted instanceof Float32Array) || b.planted.length !== b.size))
    throw new EmbshardError('LENGTH_MISMATCH', `batch.planted must be a Float32Array of size ${b.size}`);
}

/** A fresh, empty report. */
export function emptyReport(): DataReport {
  return { lines: 0, samples: 0, malformed: 0, byReason: {}, issues: [] };
}

// binding.ts — hand-written types of what the native addon exports (node-llama-cpp's AddonTypes style).
// Each native part adds its own interface here; lib/ code never touches the addon untyped.
import type { NativeDeviceArray } from './device-array.js';

export type DType = 'fp32' | 'fp16' | 'bf16';
export type Pooling = 'sum' | 'mean' | 'none';
export type OptimizerType = 'sgd' | 'adagrad' | 'rowwise_adagrad' | 'adam';
export type IdArray = BigInt64Array | Int32Array | Uint32Array;

export interface NativeInit {
  kind: 'uniform' | 'normal' | 'constant';
  a: number; // uniform low | normal mean | constant value
  b: number; // uniform high | normal std
}

export interface NativeTableConfig {
  name: string;
  rows: number;
  dim: number;
  dtype: DType;
  idPolicy: 'error' | 'modulo';
  init: NativeInit;
}

export interface NativeFeatureConfig {
  name: string;
  table: number;
  pooling: Pooling;
}

export interface NativeOptimizerConfig {
  type: OptimizerType;
  lr: number;
  eps: number;
  beta1: number;
  beta2: number;
  weightDecay: number;
  stochasticRounding: boolean;
  nonFinite: 'error' | 'skip';
}

export interface NativeCollectionConfig {
  tables: NativeTableConfig[];
  features: NativeFeatureConfig[];
  optimizer: NativeOptimizerConfig;
  seed: number;
  /** false: leave tables zeroed (a checkpoint load fills them). */
  initialize: boolean;
}

export interface NativeBatch {
  batchSize: number;
  features: string[];
  lengths: Int32Array;
  ids: IdArray;
  weights?: Float32Array | undefined;
}

/** The engine's prepared batch of one forward (validated, ids resolved where the engine needs it). */
export type NativePreparedBatch = { readonly __brand: 'NativePreparedBatch' };

export interface NativeForwardResult {
  /** [B × pooledDim] */
  pooled: Float32Array;
  /** Per collection feature (declared order): [Σlen × dim] for pooling 'none', null otherwise. */
  sequences: (Float32Array | null)[];
  /** Handed to the backward of the same batch, which then skips validating it again. */
  prepared: NativePreparedBatch;
}

export interface NativeBackwardResult {
  skipped: boolean;
  uniqueRows: number;
}

export interface NativeEngine {
  readonly device: string;
  readonly pooledDim: number;
  readonly weightBytes: number;
  readonly stateBytes: number;
  step: number;
  setLearningRate(lr: number): void;
  forward(batch: NativeBatch): Promise<NativeForwardResult>;
  forwardSync(batch: NativeBatch): NativeForwardResult;
  /**
   * `prepared`: the handle of this batch's forward; used once, and only when `batch` holds the very
   * arrays that forward read (otherwise the batch is validated again).
   */
  backward(batch: NativeBatch, pooledGrad: Float32Array | null, seqGrads: (Float32Array | null)[], prepared?: NativePreparedBatch): Promise<NativeBackwardResult>;
  backwardSync(batch: NativeBatch, pooledGrad: Float32Array | null, seqGrads: (Float32Array | null)[], prepared?: NativePreparedBatch): NativeBackwardResult;
  /**
   * Engines on a GPU: the forward's outputs written into device arrays on the engine's device (`pooled`
   * [B × pooledDim], `seq` the sequence features' values back to back in feature order); the result's
   * `pooled` and `sequences` entries are null. BACKEND_UNAVAILABLE on an engine that keeps its outputs in
   * host memory.
   */
  forwardDevice(batch: NativeBatch, pooled: NativeDeviceArray, seq: NativeDeviceArray): Promise<NativeForwardResult>;
  /** The backward with the gradients in device arrays (laid out as forwardDevice's outputs). */
  backwardDevice(batch: NativeBatch, pooledGrad: NativeDeviceArray, seqGrad: NativeDeviceArray, prepared?: NativePreparedBatch): Promise<NativeBackwardResult>;
  /** Table-local row ids; out / values are [n × dim] (rows) or [n × statePerRow] (state). */
  readRows(table: number, ids: BigInt64Array, out: Float32Array): void;
  writeRows(table: number, ids: BigInt64Array, values: Float32Array): void;
  readState(table: number, ids: BigInt64Array, out: Float32Array): void;
  writeState(table: number, ids: BigInt64Array, values: Float32Array): void;
  savePayload(path: string): Promise<{ bytes: number; crc32c: number }>;
  loadPayload(path: string, bytes: number, crc32c: number): Promise<void>;
  /** CUDA engines: device time of the last forward / backward kernels (staging excluded); null on CPU. */
  kernelTimes(): { forwardMs: number; backwardMs: number } | null;
  /** CPU engines: the host phases of the last backward in ms, in order; null elsewhere or before one. */
  backwardPhases(): Record<string, number> | null;
  /** detaches each output array this engine's addon made and recycles its memory; returns how many */
  releaseOutputs(arrays: Float32Array[]): number;
  /** Collections with disk-backed tables: stage a batch's rows ahead of its step; write dirty rows back. */
  prefetch(batch: NativeBatch): Promise<void>;
  flush(): Promise<void>;
  /** per table: counters of a disk-backed table, null for a memory table; null when no table is on disk */
  storageStats(): (NativeDiskStats | null)[] | null;
  dispose(): void;
}

/** A disk-backed table's counters since it was made (rows: distinct rows of a batch). */
export interface NativeDiskStats {
  /** rows of forward batches found in the cache */
  hits: number;
  /** rows of forward batches read from the file */
  misses: number;
  /** rows that left the cache for another */
  evictions: number;
  /** dirty rows written back (on eviction or flush) */
  writebacks: number;
  /** rows read ahead by prefetch() */
  prefetched: number;
  bytesRead: number;
  bytesWritten: number;
  /** rows the cache holds */
  slots: number;
  /** bytes of one row's record in the table file */
  recordBytes: number;
}

export interface GatherProbeResult {
  /** bytes of rows gathered per second (random rows summed in bags, every byte used; best loop variant) */
  gatherBytesPerSec: number;
  /** sequential read bandwidth of the same buffer */
  seqBytesPerSec: number;
  /** read + write bytes per second updating the distinct gathered rows in ascending order (best variant) */
  updateBytesPerSec: number;
  /** how many distinct rows that update pass touched */
  updateRows: number;
  threads: number;
}

/**
 * The Arrow reader's per-element work (native/addon/arrow_ops.cc), synchronous; every typed array is
 * read and written in place. `offsets` are a list column's Int32 value offsets.
 */
export interface NativeArrowOps {
  /** lengths[at + b] = offsets[b + 1] − offsets[b] for b < B, wrapped to int32; 0 past the offsets' end. */
  bagLengths(offsets: Int32Array, B: number, lengths: Int32Array, at: number): void;
  /** out [B + 1]: the offsets with each null slot an empty bag (validity bit bitOffset + b; null: all valid). */
  validBagOffsets(offsets: Int32Array, bitmap: Uint8Array | null, bitOffset: number, B: number, out: Int32Array): void;
  /** Copies the valid bags' values to `ids` at `out`'s offsets; false when one would land outside `ids`. */
  copyValidBags(offsets: Int32Array, out: Int32Array, values: IdArray, ids: IdArray): boolean;
  /** dst[start + k · stride] = src[k] as Float32 for k < n (NaN past src's end). */
  toFloat32(src: ArrayBufferView, n: number, dst: Float32Array, start: number, stride: number): void;
  /** dst[at + k] = src[k]. */
  widenIds(src: Int32Array | Uint32Array, dst: BigInt64Array, at: number): void;
  /** INVALID_ARGUMENT naming the column and row when offsets[0 … B] run backwards. */
  checkOffsets(name: string, offsets: Int32Array, B: number): void;
  /** INVALID_ARGUMENT naming the column, row (firstRow + i / D) and value of the first non-finite value. */
  checkDenseFinite(name: string, dense: Float32Array, D: number, firstRow: number): void;
  /** ids checked against [0, rows) (ID_OUT_OF_RANGE naming the column and id) into dst[at …) as Int32; returns ids.length. */
  idsToRows(name: string, ids: IdArray, rows: number, dst: Int32Array, at: number): number;
}

export interface Addon {
  readonly variant: 'cpu' | 'cuda';
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  setErrorClass(ctor: new (code: any, message: string) => Error): void;
  /** storage: per table, null (memory) or a disk-backed table's file and cache (lib/storage/config.ts) */
  Engine: new (config: NativeCollectionConfig, device: string, storage?: ({ file: string; cacheBytes: number; policy: 'lru' | 'lfu' } | null)[]) => NativeEngine;
  /** Random row-gather and sequential-read bandwidth probe over a buffer of `bufferBytes`. */
  probeMemory(bufferBytes: number, rowBytes: number, gathers: number, seed: number): Promise<GatherProbeResult>;
  threads(): number;
  setThreads(n: number): void;
  arrow: NativeArrowOps;
}

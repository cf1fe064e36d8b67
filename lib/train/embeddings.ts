// embeddings.ts — what the Trainer needs from an embedding module (EmbeddingCollection, or lib/sharded's
// ShardedEmbeddingCollection, which has the same surface), and a helper that builds an EmbeddingCollection
// with one table per feature of a data source.
import { EmbeddingCollection } from '../collection.js';
import { stateWidth, type CollectionConfig, type OptimizerConfig, type TableConfig } from '../config.js';
import { storageWithin, type StorageBudget } from '../storage/budget.js';
import type { JaggedBatch } from '../batch.js';
import type { DeviceArray } from '../device-array.js';
import type { DType } from '../binding.js';
import type { Batch } from '../data/types.js';
import { EmbshardError } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';

/**
 * What a forward pass hands the dense model: [batchSize × pooledDim], features in pooledFeatures order, in
 * host memory (forward) or in the memory of the module's GPU (forwardOnDevice).
 */
export interface EmbeddingOutput {
  pooled: Float32Array | DeviceArray;
}

/** The surface the Trainer uses, shared by EmbeddingCollection and ShardedEmbeddingCollection. */
export interface EmbeddingModule {
  /** Width of `pooled` per sample (Σ dims of the pooled features). */
  readonly pooledDim: number;
  readonly pooledFeatures: readonly string[];
  readonly learningRate: number;
  setLearningRate(lr: number): void;
  step: number;
  /** `admit: false` (evaluation, prediction): dynamic tables admit no new ids. */
  /** `reject`: end the call with this error (a sharded module: on every rank; see ForwardOptions). */
  forward(batch: JaggedBatch, options?: { admit?: boolean; reject?: EmbshardError }): Promise<{ pooled: Float32Array }>;
  /**
   * The forward with its output in the memory of the module's GPU (`device`), for a dense model on that
   * GPU; optional (EmbeddingCollection on 'cuda:N'). The backward of such an output takes device gradients.
   */
  forwardOnDevice?(batch: JaggedBatch, options?: { reject?: EmbshardError }): Promise<{ pooled: DeviceArray }>;
  /**
   * Whether a training forward changes the tables (Herald moves rows and cache slots): a step the Trainer
   * rejects before it starts is then ended in the forward, not in the backward; optional (absent: false).
   */
  readonly forwardMovesRows?: boolean;
  /** Whether forwardOnDevice works for this module; optional (absent: it does not). */
  readonly outputsOnDevice?: boolean;
  /** 'cpu' or 'cuda:N': where forwardOnDevice keeps its output; optional. */
  readonly device?: string;
  /** `reject`: end the step with this error, nothing changed (a sharded module: on every rank; see BackwardOptions). */
  backward(out: EmbeddingOutput, grads: { pooled?: Float32Array | DeviceArray }, options?: { reject?: EmbshardError }): Promise<{ skipped: boolean }>;
  save(dir: string, extra?: Record<string, unknown>): Promise<void>;
  /**
   * Starts the table-independent work of the next forward (a sharded collection's id exchange); optional.
   * Resolves once that work's collectives are done (it never rejects: a failure surfaces in the forward).
   */
  prepare?(batch: JaggedBatch): Promise<void>;
  /**
   * Drops the prepared batch, so that the next forward may take another (every rank alike: the Trainer
   * calls it after a step that failed on every rank); optional, for modules whose prepare binds the next
   * forward to its batch.
   */
  discardPrepared?(): void;
  /**
   * Herald scheduling: this rank's share of a global training batch (the samples its allocator assigned,
   * dense data and labels following them); optional. Steps then take the global batch on every rank.
   */
  localize?(batch: Batch): Batch;
  /** Recycles an output the trainer is done with (its arrays become empty); optional. */
  release?(out: EmbeddingOutput): Promise<number>;
  dispose?(): void;
}

export interface TablesForOptions {
  dim: number;
  optimizer?: OptimizerConfig;
  seed?: number;
  dtype?: DType;
  device?: string;
  /** Initial values uniform in ±initScale (default 1/√rows, DLRM's choice). */
  initScale?: number;
  /** Disk-backed tables under one RAM budget (lib/storage/budget.ts); default: every table in memory. */
  storage?: StorageBudget;
  /** Every table dynamic (rows: 'dynamic', keyed by the raw ids) holding this many rows. */
  dynamicCapacity?: number;
}

const TABLES_FOR_FIELDS = fieldsOf<TablesForOptions>({ dim: true, optimizer: true, seed: true, dtype: true, device: true, initScale: true, storage: true, dynamicCapacity: true });

/** The config of one table per feature, named after it, with `rows[f]` rows: the DLRM layout for Criteo-like data. */
export function tablesFor(features: readonly string[], rows: readonly number[], o: TablesForOptions): CollectionConfig {
  rejectUnknownFields(o, TABLES_FOR_FIELDS);
  if (!Array.isArray(features) || features.some((f) => typeof f !== 'string')) throw new EmbshardError('INVALID_ARGUMENT', 'features must be an array of feature names');
  if (!Array.isArray(rows)) throw new EmbshardError('INVALID_ARGUMENT', 'rows must be an array of table sizes, one per feature');
  if (features.length !== rows.length)
    throw new EmbshardError('LENGTH_MISMATCH', `${features.length} features but ${rows.length} table sizes`);
  const optimizer = o.optimizer ?? { type: 'adagrad', lr: 0.01 };
  const dtype = o.dtype ?? 'fp32';
  const rowBytes = o.dim * (dtype === 'fp32' ? 4 : 2) + 4 * stateWidth(optimizer.type, o.dim);
  const storage = o.storage ? storageWithin(features, rows, rows.map(() => rowBytes), o.storage) : undefined;
  const tables: TableConfig[] = features.map((name, f) => {
    const n = rows[f]!;
    const scale = o.initScale ?? 1 / Math.sqrt(n);
    const size = o.dynamicCapacity === undefined ? { rows: n } : { rows: 'dynamic' as const, capacity: o.dynamicCapacity };
    return { name, ...size, dim: o.dim, dtype, init: { type: 'uniform', low: -scale, high: scale }, ...(storage ? { storage: storage[f] } : {}) };
  });
  return {
    tables,
    optimizer,
    seed: o.seed ?? 0,
    ...(o.device ? { device: o.device } : {}),
  };
}

/** One table per feature (tablesFor) in an EmbeddingCollection. */
export function embeddingsFor(features: readonly string[], rows: readonly number[], o: TablesForOptions): EmbeddingCollection {
  return new EmbeddingCollection(tablesFor(features, rows, o));
}

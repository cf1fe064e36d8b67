// collection.ts — EmbeddingCollection: a set of embedding tables in one fused storage on one device,
// with fused forward, backward + optimizer update, row access and checkpoints. Async calls run off the
// event loop and are queued per collection (never interleaved); sync twins exist for pipelines.
import { join } from 'node:path';
import { resolveBackend } from './backends.js';
import { EmbshardError } from './errors.js';
import { JaggedBatch } from './batch.js';
import { PAYLOAD_FILE, readManifest, writeCheckpointDir, type Manifest } from './checkpoint.js';
import { CallQueue } from './call-queue.js';
import { rejectUnknownFields } from './fields.js';
import { resolveConfig, stateWidth, toNativeConfig, type CollectionConfig, type ResolvedConfig, type ResolvedTable } from './config.js';
import type { NativeBatch, NativeEngine, NativeForwardResult } from './binding.js';

export interface SequenceOutput {
  /** [Σ lengths × dim] */
  values: Float32Array;
  /** [batchSize] ids per sample (a view of the batch's lengths) */
  lengths: Int32Array;
}

export interface ForwardOutput {
  /** [batchSize × pooledDim], features in `pooledFeatures` order */
  pooled: Float32Array;
  /** one entry per sequence feature (pooling 'none') */
  sequences: Record<string, SequenceOutput>;
  /** the batch this output was computed from (backward needs it) */
  batch: JaggedBatch;
}

export interface Gradients {
  /** [batchSize × pooledDim] */
  pooled?: Float32Array;
  /** per sequence feature: [Σ lengths × dim] */
  sequences?: Record<string, Float32Array>;
}

export interface BackwardResult {
  /** true when the gradients held NaN/Inf and nonFinite is 'skip': nothing changed */
  skipped: boolean;
  /** distinct rows updated */
  uniqueRows: number;
}

export interface FeatureInfo {
  name: string;
  table: string;
  pooling: 'sum' | 'mean' | 'none';
  dim: number;
  /** column offset in `pooled` (-1 for sequence features) */
  offset: number;
}

export type Ids = BigInt64Array | Int32Array | Uint32Array | readonly (number | bigint)[];

function toBigIds(ids: Ids): BigInt64Array {
  if (ids instanceof BigInt64Array) return ids;
  const out = new BigInt64Array(ids.length);
  for (let i = 0; i < ids.length; i++) {
    const v = ids[i]!;
    if (typeof v === 'number' && !Number.isInteger(v)) throw new EmbshardError('INVALID_ARGUMENT', `id ${v} is not an integer`);
    out[i] = BigInt(v);
  }
  return out;
}

export class EmbeddingCollection {
  readonly config: ResolvedConfig;
  readonly device: string;
  /** every feature in declared order (tables in order, each table's features in order) */
  readonly featureInfo: readonly FeatureInfo[];
  /** pooled features in output column order */
  readonly pooledFeatures: readonly string[];
  readonly sequenceFeatures: readonly string[];
  readonly pooledDim: number;

  private engine: NativeEngine | undefined;
  private readonly calls = new CallQueue();
  private readonly tableIndex = new Map<string, number>();

  constructor(config: CollectionConfig);
  /** @internal used by load(): an engine with zeroed tables */
  constructor(config: CollectionConfig, internal: { initialize: boolean });
  constructor(config: CollectionConfig, internal?: { initialize: boolean }) {
    this.config = resolveConfig(config);
    this.device = this.config.device;
    const native = toNativeConfig(this.config, internal?.initialize ?? true);
    const addon = resolveBackend(this.device);
    this.engine = new addon.Engine(native, this.device);
    let offset = 0;
    this.featureInfo = native.features.map((f) => {
      const t = this.config.tables[f.table]!;
      const info: FeatureInfo = { name: f.name, table: t.name, pooling: f.pooling, dim: t.dim, offset: f.pooling === 'none' ? -1 : offset };
      if (f.pooling !== 'none') offset += t.dim;
      return info;
    });
    this.pooledDim = offset;
    this.pooledFeatures = this.featureInfo.filter((f) => f.pooling !== 'none').map((f) => f.name);
    this.sequenceFeatures = this.featureInfo.filter((f) => f.pooling === 'none').map((f) => f.name);
    this.config.tables.forEach((t, i) => this.tableIndex.set(t.name, i));
  }

  get tables(): readonly ResolvedTable[] {
    return this.config.tables;
  }

  get disposed(): boolean {
    return this.engine === undefined;
  }

  /** Optimizer steps applied so far (Adam's t). */
  get step(): number {
    return this.live().step;
  }
  set step(t: number) {
    this.live().step = t;
  }

  get learningRate(): number {
    return this.config.optimizer.lr;
  }
  /** Changes the optimizer's learning rate for the following steps (schedules). */
  setLearningRate(lr: number): void {
    this.live().setLearningRate(lr);
    this.config.optimizer.lr = lr;
  }

  /** Bytes of table storage and of optimizer state on the device. */
  get memory(): { weightBytes: number; stateBytes: number } {
    const e = this.live();
    return { weightBytes: e.weightBytes, stateBytes: e.stateBytes };
  }

  /** Looks up every feature of the batch; resolves when done, off the event loop. */
  forward(batch: JaggedBatch): Promise<ForwardOutput> {
    return this.rejecting(() => {
      const nb = this.nativeBatch(batch);
      return this.enqueue(async () => this.wrapForward(batch, await this.live().forward(nb)));
    });
  }

  forwardSync(batch: JaggedBatch): ForwardOutput {
    return this.wrapForward(batch, this.live().forwardSync(this.nativeBatch(batch)));
  }

  /**
   * Hands a forward output's arrays back for reuse once no call still needs them (it waits for the calls
   * queued before it). The arrays are detached: afterwards they have length 0 and the output must not
   * be used again. Optional — unreleased outputs are recycled when garbage-collected — but a loop that
   * releases its outputs reuses the same few buffers instead of faulting in fresh memory every step.
   * Resolves to the number of arrays released.
   */
  release(out: ForwardOutput): Promise<number> {
    return this.rejecting(() => {
      if (!out || !(out.pooled instanceof Float32Array))
        throw new EmbshardError('INVALID_ARGUMENT', 'release(out) needs the output of forward()');
      const arrays = [out.pooled, ...Object.values(out.sequences ?? {}).map((s) => s.values)];
      return this.enqueue(async () => this.live().releaseOutputs(arrays));
    });
  }

  /**
   * Applies the gradients of a forward output: sums every contribution per row (fixed order), then one
   * optimizer update per row. On any error nothing changes.
   */
  backward(out: ForwardOutput, grads: Gradients): Promise<BackwardResult> {
    return this.rejecting(() => {
      const [nb, pooled, seq] = this.backwardArgs(out, grads);
      return this.enqueue(() => this.live().backward(nb, pooled, seq));
    });
  }

  backwardSync(out: ForwardOutput, grads: Gradients): BackwardResult {
    const [nb, pooled, seq] = this.backwardArgs(out, grads);
    return this.live().backwardSync(nb, pooled, seq);
  }

  /** Rows of a table in fp32: [ids.length × dim]. Waits for a running step. */
  readRows(table: string, ids: Ids): Float32Array {
    const t = this.table(table);
    const big = toBigIds(ids);
    const out = new Float32Array(big.length * this.config.tables[t]!.dim);
    this.live().readRows(t, big, out);
    return out;
  }

  /** Overwrites rows (values [ids.length × dim], rounded to the table dtype). Duplicate ids: last wins. */
  writeRows(table: string, ids: Ids, values: Float32Array): void {
    const t = this.table(table);
    this.live().writeRows(t, toBigIds(ids), values);
  }

  /** Floats of optimizer state per row of a table. */
  stateWidth(table: string): number {
    return stateWidth(this.config.optimizer.type, this.config.tables[this.table(table)]!.dim);
  }

  /** Optimizer state of rows: [ids.length × stateWidth] (adam: m then v). */
  readState(table: string, ids: Ids): Float32Array {
    const t = this.table(table);
    const big = toBigIds(ids);
    const out = new Float32Array(big.length * this.stateWidth(table));
    this.live().readState(t, big, out);
    return out;
  }

  writeState(table: string, ids: Ids, values: Float32Array): void {
    this.live().writeState(this.table(table), toBigIds(ids), values);
  }

  /** CUDA: device time of the last forward / backward kernels, staging excluded (null on the CPU). */
  kernelTimes(): { forwardMs: number; backwardMs: number } | null {
    return this.live().kernelTimes();
  }

  /** Writes a checkpoint (tables, optimizer state, step) atomically to `dir`. */
  save(dir: string, extra?: Record<string, unknown>): Promise<void> {
    return this.enqueue(() =>
      writeCheckpointDir(dir, async (tmp) => {
        const engine = this.live();
        const payload = await engine.savePayload(join(tmp, PAYLOAD_FILE));
        const manifest: Manifest = {
          format: 'embshard.checkpoint',
          version: 1,
          config: this.config,
          step: engine.step,
          payload: { file: PAYLOAD_FILE, ...payload },
          ...(extra ? { extra } : {}),
        };
        return manifest;
      }),
    );
  }

  /** Loads a checkpoint written by save(); verifies sizes and checksums. `device` overrides the saved one. */
  static async load(dir: string, options: { device?: string } = {}): Promise<EmbeddingCollection> {
    rejectUnknownFields(options, ['device'], 'options');
    const m = await readManifest(dir);
    let ec: EmbeddingCollection;
    try {
      ec = new EmbeddingCollection({ ...m.config, device: options.device ?? m.config.device }, { initialize: false });
    } catch (e) {
      if (e instanceof EmbshardError && (e.code === 'BACKEND_UNAVAILABLE' || e.code === 'ALLOC_FAILED')) throw e;
      throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}': its config is invalid: ${(e as Error).message}`);
    }
    try {
      await ec.live().loadPayload(join(dir, m.payload.file), m.payload.bytes, m.payload.crc32c);
      ec.step = m.step;
    } catch (e) {
      ec.dispose();
      throw e;
    }
    return ec;
  }

  /** Frees native memory now; any later use raises EmbshardError DISPOSED. */
  dispose(): void {
    const e = this.engine;
    this.engine = undefined;
    e?.dispose();
  }

  // ---- internals ----

  private live(): NativeEngine {
    if (!this.engine) throw new EmbshardError('DISPOSED', 'this EmbeddingCollection has been disposed');
    return this.engine;
  }

  private table(name: string): number {
    const t = this.tableIndex.get(name);
    if (t === undefined) throw new EmbshardError('UNKNOWN_TABLE', `no table named '${name}'`);
    return t;
  }

  /** Async APIs report argument errors as rejections, never as synchronous throws. */
  private rejecting<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return fn();
    } catch (e) {
      return Promise.reject(e);
    }
  }

  private enqueue<T>(op: () => Promise<T>): Promise<T> {
    return this.calls.run(() => {
      this.live();
      return op();
    });
  }

  private nativeBatch(batch: JaggedBatch): NativeBatch {
    if (!(batch instanceof JaggedBatch)) throw new EmbshardError('INVALID_ARGUMENT', 'expected a JaggedBatch (JaggedBatch.fromLengths)');
    this.live();
    return batch.toNative();
  }

  private wrapForward(batch: JaggedBatch, r: NativeForwardResult): ForwardOutput {
    const sequences: Record<string, SequenceOutput> = {};
    this.featureInfo.forEach((f, i) => {
      if (f.pooling === 'none') sequences[f.name] = { values: r.sequences[i]!, lengths: batch.feature(f.name).lengths };
    });
    return { pooled: r.pooled, sequences, batch };
  }

  private backwardArgs(out: ForwardOutput, grads: Gradients): [NativeBatch, Float32Array | null, (Float32Array | null)[]] {
    if (!out || !(out.batch instanceof JaggedBatch))
      throw new EmbshardError('INVALID_ARGUMENT', 'backward(out, grads) needs the output of forward()');
    if (typeof grads !== 'object' || grads === null) throw new EmbshardError('GRAD_SIZE_MISMATCH', 'gradients must be an object');
    const seq = this.featureInfo.map((f) => (f.pooling === 'none' ? grads.sequences?.[f.name] ?? null : null));
    for (const name of Object.keys(grads.sequences ?? {}))
      if (!this.sequenceFeatures.includes(name))
        throw new EmbshardError('UNKNOWN_FEATURE', `'${name}' is not a sequence feature of this collection`);
    return [this.nativeBatch(out.batch), grads.pooled ?? null, seq];
  }
}

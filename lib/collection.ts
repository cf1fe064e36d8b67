// collection.ts — EmbeddingCollection: a set of embedding tables in one fused storage on one device,
// with fused forward, backward + optimizer update, row access and checkpoints. Async calls run off the
// event loop and are queued per collection (never interleaved); sync twins exist for pipelines; the
// synchronous row writes refuse to land ahead of a queued forward, backward or save. Loads see one save
// whole while other processes save to the folder (readConsistent). A forward output remembers its
// engine-side prepared batch; its backward reuses that and then hands the output's memory back to the
// engine, so a plain forward → backward loop reuses the same buffers.
// Dynamic tables (rows: 'dynamic') go through lib/storage/dynamic.ts: their raw ids become slots of the
// engine table before the engine sees the batch. On a GPU, forwardOnDevice keeps the outputs in device
// memory (DeviceArrays, reused step after step) and backward takes device gradients, so a dense model on
// the same GPU is fed with no host copy.
import { join } from 'node:path';
import { resolveBackend } from './backends.js';
import { EmbshardError } from './errors.js';
import { idOf, JaggedBatch } from './batch.js';
import { PAYLOAD_FILE, readConsistent, readManifest, writeCheckpointDir, type Manifest } from './checkpoint.js';
import { EngineOwner } from './engine-owner.js';
import { rejectUnknownFields } from './fields.js';
import { configOf, resolveConfig, stateWidth, toNativeConfig, type CollectionConfig, type ResolvedConfig } from './config.js';
import type { NativeBatch, NativeEngine, NativeForwardResult, NativePreparedBatch } from './binding.js';
import { makeStorageDirs, nativeStorage, withStoragePath } from './storage/config.js';
import { diskStats, type DiskTableStats } from './storage/stats.js';
import { DeviceArray } from './device-array.js';
import { DeviceOutputs, deviceGradients, type DeviceForwardOutput, type DeviceGradients } from './device-outputs.js';

export type { DeviceForwardOutput, DeviceGradients } from './device-outputs.js';
import { DynamicTables, type DynamicStep, type DynamicTableStats, type FeatureOutput } from './storage/dynamic.js';
import { withSpillPath } from './storage/dynamic-config.js';

export interface SequenceOutput {
  /** [Σ lengths × dim] */
  values: Float32Array;
  /** [batchSize] ids per sample (a view of the batch's lengths) */
  lengths: Int32Array;
}

/**
 * A forward's result. `backward(out, …)` consumes it: once the update is done, `pooled` and every
 * sequence's `values` are detached (length 0) and their memory is reused by the next forward. Copy what
 * you need before backward, or pass `{ keepOutput: true }` to backward and `release(out)` later. It goes
 * through one backward (a second one is INVALID_ARGUMENT; a refused backward leaves it usable).
 */
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

export interface BackwardOptions {
  /**
   * Keep the output's arrays readable after backward (default false: they are detached and their memory
   * reused by the next forward). A kept output's memory comes back on `release(out)` or when it is
   * garbage-collected.
   */
  keepOutput?: boolean;
  /**
   * Ends the step with this error instead of applying the gradients: nothing changes and the output stays
   * usable. On a sharded collection it is a rank's way out of a step whose own part failed (its dense
   * model's loss is NaN, its batch's labels are out of range): the rank still joins the backward's first
   * collective, and every other rank's backward then rejects too, naming the code, instead of waiting on
   * it. The gradients are not read.
   */
  reject?: EmbshardError;
}

/** The backward options, checked: no unknown field, keepOutput a boolean, reject an EmbshardError. */
export function checkBackwardOptions(options: unknown): BackwardOptions {
  if (typeof options !== 'object' || options === null) throw new EmbshardError('INVALID_ARGUMENT', 'backward options must be an object');
  for (const key of Object.keys(options))
    if (key !== 'keepOutput' && key !== 'reject') throw new EmbshardError('INVALID_CONFIG', `backward options: unknown field '${key}'`);
  const o = options as BackwardOptions;
  if (o.keepOutput !== undefined && typeof o.keepOutput !== 'boolean') throw new EmbshardError('INVALID_ARGUMENT', 'backward options.keepOutput must be a boolean');
  if (o.reject !== undefined && !(o.reject instanceof EmbshardError))
    throw new EmbshardError('INVALID_ARGUMENT', 'backward options.reject must be an EmbshardError (the error that ends the step)');
  return o;
}

export interface ForwardOptions {
  /**
   * Dynamic tables: admit new ids (and evict rows to make room) — default true, the training forward.
   * false (evaluation, prediction): ids without a row read zero and nothing changes.
   */
  admit?: boolean;
  /**
   * Ends the call with this error instead of looking the batch up: nothing changes. On a sharded
   * collection the rank still takes part in the forward's first exchange, carrying the error's code, and
   * every rank's forward rejects (a batch this rank's caller found unusable, e.g. a held-out batch whose
   * dense features are NaN); not with a batch given to prepare(), whose ids have already gone out.
   */
  reject?: EmbshardError;
}

/** The forward options, checked: no unknown field, admit a boolean, reject an EmbshardError. */
export function checkForwardOptions(options: unknown): ForwardOptions {
  rejectUnknownFields(options as object, ['admit', 'reject'], 'forward options', 'INVALID_ARGUMENT'); // also: an object at all
  const o = options as ForwardOptions;
  if (o.admit !== undefined && typeof o.admit !== 'boolean') throw new EmbshardError('INVALID_ARGUMENT', 'forward options.admit must be a boolean');
  if (o.reject !== undefined && !(o.reject instanceof EmbshardError))
    throw new EmbshardError('INVALID_ARGUMENT', 'forward options.reject must be an EmbshardError (the error that ends the call)');
  return o;
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

/** Outputs handed back by release(): no backward may apply them (their memory may already hold a later forward's). */
const released = new WeakSet<ForwardOutput | DeviceForwardOutput>();

function toBigIds(ids: Ids): BigInt64Array {
  if (ids instanceof BigInt64Array) return ids;
  const out = new BigInt64Array(ids.length);
  for (let i = 0; i < ids.length; i++) out[i] = idOf(ids[i]!);
  return out;
}

export class EmbeddingCollection extends EngineOwner {
  readonly config: ResolvedConfig;
  readonly device: string;
  /** every feature in declared order (tables in order, each table's features in order) */
  readonly featureInfo: readonly FeatureInfo[];
  /** pooled features in output column order */
  readonly pooledFeatures: readonly string[];
  readonly sequenceFeatures: readonly string[];
  readonly pooledDim: number;

  private readonly tableIndex = new Map<string, number>();
  /** what forward() left for the backward of each output it returned: the native batch and its prepared handle */
  private readonly pending = new WeakMap<ForwardOutput | DeviceForwardOutput, { batch: JaggedBatch; native: NativeBatch; prepared: NativePreparedBatch; dynamic?: DynamicStep }>();
  /** outputs of this collection's forward that a backward has applied (kept ones included): a second backward is refused */
  private readonly applied = new WeakSet<ForwardOutput | DeviceForwardOutput>();
  /** Whether forwardOnDevice works here: a collection on a GPU with no dynamic tables. */
  get outputsOnDevice(): boolean {
    return this.device.startsWith('cuda:') && !this.dynamic;
  }
  /** the device arrays of forwardOnDevice outputs, reused (GPU collections, made on first use) */
  private deviceOutputs: DeviceOutputs | undefined;
  /** the dynamic tables (rows: 'dynamic'), when there are any */
  private readonly dynamic: DynamicTables | undefined;
  /** whether any table is disk-backed (storage.kind 'disk'): prefetch on prepare(), flush before save() */
  private readonly hasDiskTables: boolean;
  /** forward, backward and save calls of this collection queued or running (enqueueOnTables) */
  private tableCalls = 0;

  constructor(config: CollectionConfig);
  /** @internal used by load(): an engine with zeroed tables */
  constructor(config: CollectionConfig, internal: { initialize: boolean });
  constructor(config: CollectionConfig, internal?: { initialize: boolean }) {
    super('EmbeddingCollection');
    this.config = resolveConfig(config);
    this.device = this.config.device;
    const native = toNativeConfig(this.config, internal?.initialize ?? true);
    const addon = resolveBackend(this.device);
    makeStorageDirs(this.config.tables);
    this.hasDiskTables = this.config.tables.some((t) => t.storage.kind === 'disk');
    const engine = (this.engine = new addon.Engine(native, this.device, nativeStorage(this.config.tables)));
    try {
      this.dynamic = DynamicTables.of(this.config, addon);
      this.dynamic?.resetSinks(engine, this.config.tables.flatMap((t, i) => (t.dynamic ? [i] : [])));
    } catch (e) {
      // a spill file that cannot be taken: the engine (and the locks on its disk tables' files) goes now
      engine.dispose();
      this.engine = undefined;
      throw e;
    }
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


  /** Looks up every feature of the batch; resolves when done, off the event loop. */
  forward(batch: JaggedBatch, options: ForwardOptions = {}): Promise<ForwardOutput> {
    return this.rejecting(() => {
      if (checkForwardOptions(options).reject) throw options.reject; // the caller ends the call: nothing changes
      const nb = this.nativeBatch(batch);
      const dyn = this.dynamic;
      if (!dyn) return this.enqueueOnTables(async () => this.wrapForward(batch, nb, await this.live().forward(nb)));
      return this.enqueueOnTables(async () => {
        const engine = this.live();
        const step = options.admit === false ? dyn.lookupBatch(batch) : await dyn.translate(batch, engine);
        const r = await engine.forward(step.native);
        await dyn.addDefaults(step, batch, (f) => this.featureOutput(f, r), r.pooled, this.pooledDim);
        return this.wrapForward(batch, step.native, r, step);
      });
    });
  }

  forwardSync(batch: JaggedBatch): ForwardOutput {
    const nb = this.nativeBatch(batch);
    if (this.dynamic) {
      const step = this.dynamic.lookupBatch(batch);
      const r = this.live().forwardSync(step.native);
      this.dynamic.addDefaultsSync(step, batch, (f) => this.featureOutput(f, r), r.pooled, this.pooledDim);
      return this.wrapForward(batch, step.native, r, step);
    }
    return this.wrapForward(batch, nb, this.live().forwardSync(nb));
  }

  /**
   * The forward with its outputs kept in the memory of the collection's GPU (device 'cuda:N'): the same
   * values as forward(), in DeviceArrays a dense model on that GPU reads directly. BACKEND_UNAVAILABLE on
   * the CPU; INVALID_ARGUMENT with dynamic tables (their missing rows are filled on the host).
   */
  forwardOnDevice(batch: JaggedBatch, options: Pick<ForwardOptions, 'reject'> = {}): Promise<DeviceForwardOutput> {
    return this.rejecting(() => {
      if (checkForwardOptions(options).reject) throw options.reject;
      this.deviceOutputsCheck('forwardOnDevice');
      const nb = this.nativeBatch(batch);
      const pool = (this.deviceOutputs ??= new DeviceOutputs(this.device));
      const pooled = pool.take(batch.batchSize * this.pooledDim), sequences = pool.take(this.sequenceLength(batch));
      return this.enqueueOnTables(async () => {
        try {
          const r = await this.live().forwardDevice(nb, pooled.native, sequences.native);
          const out: DeviceForwardOutput = { pooled, sequences, batch };
          this.pending.set(out, { batch, native: nb, prepared: r.prepared });
          return out;
        } catch (e) {
          pool.give(pooled, sequences);
          throw e;
        }
      });
    });
  }

  /** Frees native memory and closes dynamic tables' spill files now; any later use raises DISPOSED. */
  override dispose(): void {
    super.dispose();
    this.dynamic?.dispose();
    this.deviceOutputs?.dispose();
  }

  /** Per dynamic table (rows: 'dynamic'): hits, misses, admissions, evictions and rows held. */
  stats(): Record<string, DynamicTableStats> {
    this.live();
    return this.dynamic?.stats() ?? {};
  }

  /** The raw ids a dynamic table holds rows for (in slot order). */
  heldIds(table: string): BigInt64Array {
    const t = this.table(table);
    if (!this.dynamic?.has(t)) throw new EmbshardError('INVALID_ARGUMENT', `table '${table}' is not dynamic`);
    return this.dynamic.heldIds(t);
  }

  /**
   * Hands a forward output's arrays back for reuse once no call still needs them (it waits for the calls
   * queued before it). The arrays are detached: afterwards they have length 0 and the output must not
   * be used again (a backward of it is INVALID_ARGUMENT and changes nothing). backward() does this by
   * itself; release() is for outputs that never go through backward (evaluation) or were kept
   * (`keepOutput`). Optional — unreleased outputs are recycled when
   * garbage-collected — but such a loop that releases its outputs reuses the same few buffers instead of
   * faulting in fresh memory every step. Resolves to the number of arrays released.
   */
  release(out: ForwardOutput | DeviceForwardOutput): Promise<number> {
    return this.rejecting(() => {
      if (out && out.pooled instanceof DeviceArray) {
        const d = out as DeviceForwardOutput;
        return this.enqueue(async () => {
          this.live();
          released.add(d);
          // an output a backward already consumed gave its arrays back then (a later forward may hold them now)
          if (!this.pending.delete(d)) return 0;
          this.deviceOutputs?.give(d.pooled, d.sequences);
          return 2;
        });
      }
      if (!out || !(out.pooled instanceof Float32Array))
        throw new EmbshardError('INVALID_ARGUMENT', 'release(out) needs the output of forward()');
      const arrays = [out.pooled, ...Object.values(out.sequences ?? {}).map((s) => s.values)];
      return this.enqueue(async () => {
        const engine = this.live();
        released.add(out);
        this.pending.delete(out);
        return engine.releaseOutputs(arrays);
      });
    });
  }

  /**
   * Applies the gradients of a forward output: sums every contribution per row (fixed order), then one
   * optimizer update per row. On any error nothing changes (and the output stays readable). When it
   * succeeds, the output of this collection's forward is consumed: its arrays are detached and their
   * memory reused (see ForwardOutput; `{ keepOutput: true }` keeps them).
   */
  backward(out: ForwardOutput | DeviceForwardOutput, grads: Gradients | DeviceGradients, options: BackwardOptions = {}): Promise<BackwardResult> {
    return this.rejecting(() => {
      const a = this.backwardArgs(out, grads, options);
      return this.enqueueOnTables(async () => {
        const engine = this.live();
        this.checkFresh(a.dynamic); // a forward queued before this backward may have evicted rows
        this.checkApplied(out); // a backward queued before this one may have applied the same output
        const r = a.device
          ? await engine.backwardDevice(a.native, a.device.pooled.native, a.device.sequences.native, a.prepared)
          : await engine.backward(a.native, a.pooled, a.seq, a.prepared);
        if (a.dynamic) this.dynamic!.resetSinks(engine, a.dynamic.sinks);
        this.consumed(engine, out, a.own, a.consume);
        return r;
      });
    });
  }

  backwardSync(out: ForwardOutput, grads: Gradients, options: BackwardOptions = {}): BackwardResult {
    const a = this.backwardArgs(out, grads, options);
    if (a.device) throw new EmbshardError('INVALID_ARGUMENT', 'backwardSync takes host gradients; device gradients go through backward()');
    const engine = this.live();
    const r = engine.backwardSync(a.native, a.pooled, a.seq, a.prepared);
    if (a.dynamic) this.dynamic!.resetSinks(engine, a.dynamic.sinks);
    this.consumed(engine, out, a.own, a.consume);
    return r;
  }

  /**
   * Rows of a table in fp32: [ids.length × dim]. Waits for a running step. A dynamic table takes raw ids;
   * an id without a row reads the table's default (zero, or its hashed init row).
   */
  readRows(table: string, ids: Ids): Float32Array {
    const t = this.table(table);
    const big = this.rowIds(t, ids, false);
    const out = new Float32Array(big.length * this.config.tables[t]!.dim);
    this.live().readRows(t, big, out);
    if (this.dynamic?.has(t)) this.dynamic.fillDefaults(t, toBigIds(ids), big, out);
    return out;
  }

  /**
   * Overwrites rows (values [ids.length × dim], rounded to the table dtype). Duplicate ids: last wins.
   * A dynamic table's ids must have rows (ID_OUT_OF_RANGE otherwise). Synchronous, so it acts at once:
   * INVALID_ARGUMENT, nothing written, while a forward, backward or save of this collection is queued or
   * running — the write would land ahead of calls made before it (a save called before it would hold it,
   * a forward would read it). Await them first. (A queued release, prefetch or flush does not hold it back.)
   */
  writeRows(table: string, ids: Ids, values: Float32Array): void {
    const t = this.table(table);
    this.checkIdle('writeRows');
    this.live().writeRows(t, this.rowIds(t, ids, true), values);
  }

  /** Floats of optimizer state per row of a table. */
  stateWidth(table: string): number {
    return stateWidth(this.config.optimizer.type, this.config.tables[this.table(table)]!.dim);
  }

  /** Optimizer state of rows: [ids.length × stateWidth] (adam: m then v). */
  readState(table: string, ids: Ids): Float32Array {
    const t = this.table(table);
    const big = this.rowIds(t, ids, false);
    const out = new Float32Array(big.length * this.stateWidth(table));
    this.live().readState(t, big, out);
    return out;
  }

  /** Overwrites optimizer state of rows ([ids.length × stateWidth]); refused while a forward, backward or save is queued or running, as writeRows. */
  writeState(table: string, ids: Ids, values: Float32Array): void {
    const t = this.table(table);
    this.checkIdle('writeState');
    this.live().writeState(t, this.rowIds(t, ids, true), values);
  }

  /**
   * Disk-backed tables: reads the batch's rows into the cache ahead of its step (off the event loop,
   * queued like every call; the rows of a forward awaiting its backward stay cached). Best effort: rows
   * that find no room are read by their step.
   */
  prefetch(batch: JaggedBatch): Promise<void> {
    return this.rejecting(() => {
      const nb = this.nativeBatch(batch);
      return this.enqueue(() => this.live().prefetch(nb));
    });
  }

  /**
   * The Trainer's hook for the next step's batch: with disk-backed tables, its rows are prefetched while
   * this step's dense model runs. Never rejects (a failure surfaces in that batch's forward).
   */
  prepare(batch: JaggedBatch): Promise<void> {
    if (!this.hasDiskTables) return Promise.resolve();
    return this.prefetch(batch).catch(() => undefined);
  }

  /** Disk-backed tables: writes every dirty cached row back to its table file and syncs it. */
  flush(): Promise<void> {
    return this.enqueue(() => this.live().flush());
  }

  /** Disk-backed tables' cache counters by table name (memory tables are absent). */
  storageStats(): Record<string, DiskTableStats> {
    return diskStats(this.config.tables, this.live().storageStats());
  }

  /**
   * Writes a checkpoint (tables, optimizer state, step) atomically to `dir`. @internal `more` writes further
   * files into the folder before its manifest and returns fields added to `extra` (a sharded collection's
   * dynamic shards).
   */
  save(dir: string, extra?: Record<string, unknown>, more?: (tmp: string) => Promise<Record<string, unknown>>): Promise<void> {
    return this.enqueueOnTables(() =>
      writeCheckpointDir(dir, async (tmp) => {
        const engine = this.live();
        if (this.hasDiskTables) await engine.flush();
        const payload = await engine.savePayload(join(tmp, PAYLOAD_FILE));
        const dynamic = await this.dynamic?.save(tmp);
        const added = await more?.(tmp);
        if (added) extra = { ...extra, ...added };
        const manifest: Manifest = {
          format: 'embshard.checkpoint',
          version: 1,
          config: this.config,
          step: engine.step,
          payload: { file: PAYLOAD_FILE, ...payload },
          ...(dynamic ? { dynamic } : {}),
          ...(extra ? { extra } : {}),
        };
        return manifest;
      }),
    );
  }

  /**
   * Loads a checkpoint written by save(); verifies sizes and checksums. `device` overrides the saved one;
   * `storagePath` puts the files of disk-backed tables in that folder instead of the saved one, and
   * `spillPath` the spill files of dynamic tables (the saved collection may still hold its own). While
   * other processes save to `dir`, it loads one save whole: a load that a save's swap overtook is let go
   * and read again (readConsistent).
   */
  static async load(dir: string, options: { device?: string; storagePath?: string; spillPath?: string } = {}): Promise<EmbeddingCollection> {
    rejectUnknownFields(options, ['device', 'storagePath', 'spillPath'], 'options');
    return readConsistent(dir, (folder) => EmbeddingCollection.loadFolder(folder, options), (ec) => ec.dispose());
  }

  /**
   * @internal load()'s one read: the collection of the checkpoint in folder `dir` as it stands (a folder
   * checkpointDir found), not read again when a save replaces it — for a caller that reads again the
   * whole checkpoint it is part of (Trainer.load).
   */
  static async loadFolder(dir: string, options: { device?: string; storagePath?: string; spillPath?: string }): Promise<EmbeddingCollection> {
    const m = await readManifest(dir);
    let ec: EmbeddingCollection;
    try {
      let tables = options.storagePath === undefined ? m.config.tables : withStoragePath(m.config.tables, options.storagePath);
      if (options.spillPath !== undefined) tables = withSpillPath(tables, options.spillPath);
      ec = new EmbeddingCollection({ ...configOf({ ...m.config, tables }), device: options.device ?? m.config.device }, { initialize: false });
    } catch (e) {
      if (e instanceof EmbshardError && (e.code === 'BACKEND_UNAVAILABLE' || e.code === 'ALLOC_FAILED' || e.code === 'IO_ERROR')) throw e;
      throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}': its config is invalid: ${(e as Error).message}`);
    }
    try {
      await ec.live().loadPayload(join(dir, m.payload.file), m.payload.bytes, m.payload.crc32c);
      await ec.dynamic?.load(dir, m.dynamic);
      ec.step = m.step;
    } catch (e) {
      ec.dispose();
      throw e;
    }
    return ec;
  }

  // ---- internals ----

  /**
   * Queues a call that reads or changes the tables' values (forward, backward, save), counted while it is
   * queued or running: writeRows / writeState refuse to act ahead of it. (release, prefetch and flush
   * leave the values as they are, so a write ahead of them changes nothing they do.)
   */
  private enqueueOnTables<T>(op: () => Promise<T>): Promise<T> {
    const result = this.enqueue(op);
    this.tableCalls++;
    const settled = (): void => {
      this.tableCalls--;
    };
    void result.then(settled, settled);
    return result;
  }

  /** INVALID_ARGUMENT while a forward, backward or save of this collection is queued or running: a synchronous write would land ahead of it. */
  private checkIdle(what: string): void {
    if (this.tableCalls > 0)
      throw new EmbshardError(
        'INVALID_ARGUMENT',
        `${what}: ${this.tableCalls} forward / backward / save call(s) of this collection are still queued or running, and a synchronous write would land ahead of them; await them first`,
      );
  }

  private table(name: string): number {
    const t = this.tableIndex.get(name);
    if (t === undefined) throw new EmbshardError('UNKNOWN_TABLE', `no table named '${name}'`);
    return t;
  }

  /** The engine's row ids of `ids` in table t: a dynamic table's raw ids become slots (`held`: all must have one). */
  private rowIds(t: number, ids: Ids, held: boolean): BigInt64Array {
    const big = toBigIds(ids);
    if (!this.dynamic?.has(t)) return big;
    return held ? this.dynamic.heldSlots(t, big) : this.dynamic.slots(t, big);
  }

  private nativeBatch(batch: JaggedBatch): NativeBatch {
    if (!(batch instanceof JaggedBatch)) throw new EmbshardError('INVALID_ARGUMENT', 'expected a JaggedBatch (JaggedBatch.fromLengths)');
    this.live();
    return batch.toNative();
  }

  /** Where feature `name`'s outputs are in forward result `r` (a hashed default adds into them). */
  private featureOutput(name: string, r: NativeForwardResult): FeatureOutput {
    const i = this.featureInfo.findIndex((f) => f.name === name);
    const f = this.featureInfo[i]!;
    return { mean: f.pooling === 'mean', column: f.offset, sequence: r.sequences[i] ?? null };
  }

  private wrapForward(batch: JaggedBatch, native: NativeBatch, r: NativeForwardResult, dynamic?: DynamicStep): ForwardOutput {
    const sequences: Record<string, SequenceOutput> = {};
    this.featureInfo.forEach((f, i) => {
      if (f.pooling === 'none') sequences[f.name] = { values: r.sequences[i]!, lengths: batch.feature(f.name).lengths };
    });
    const out: ForwardOutput = { pooled: r.pooled, sequences, batch };
    this.pending.set(out, { batch, native, prepared: r.prepared, ...(dynamic ? { dynamic } : {}) });
    return out;
  }

  private backwardArgs(out: ForwardOutput | DeviceForwardOutput, grads: Gradients | DeviceGradients, options: BackwardOptions) {
    if (!out || !(out.batch instanceof JaggedBatch))
      throw new EmbshardError('INVALID_ARGUMENT', 'backward(out, grads) needs the output of forward()');
    if (checkBackwardOptions(options).reject) throw options.reject; // the caller ends the step: nothing changes
    this.checkApplied(out);
    if (typeof grads !== 'object' || grads === null) throw new EmbshardError('GRAD_SIZE_MISMATCH', 'gradients must be an object');
    // device gradients (checked there), or host arrays per sequence feature
    const device = this.deviceGradients(out.batch, grads);
    const host = grads as Gradients;
    const given = (name: string) => (host.sequences && Object.hasOwn(host.sequences, name) ? host.sequences[name] : undefined);
    const seq = device ? [] : this.featureInfo.map((f) => (f.pooling === 'none' ? given(f.name) ?? null : null));
    if (!device)
      for (const name of Object.keys(host.sequences ?? {}))
        if (!this.sequenceFeatures.includes(name))
          throw new EmbshardError('UNKNOWN_FEATURE', `'${name}' is not a sequence feature of this collection`);
    // the output exactly as this collection's forward returned it (same batch): reuse its prepared batch
    const p = this.pending.get(out);
    const own = p !== undefined && p.batch === out.batch;
    if (this.dynamic) {
      // slots are only meaningful for the map state the forward saw
      if (!own || !p.dynamic)
        throw new EmbshardError('INVALID_ARGUMENT', 'a collection with dynamic tables needs the output of its own forward() in backward()');
      this.checkFresh(p.dynamic);
    }
    return {
      device,
      dynamic: own ? p.dynamic : undefined,
      native: own ? p.native : this.nativeBatch(out.batch),
      prepared: own ? p.prepared : undefined,
      pooled: device ? null : host.pooled ?? null,
      seq,
      own,
      consume: own && options.keepOutput !== true,
    };
  }

  /**
   * An output of this collection's forward goes through one backward, as a sharded collection's does, and
   * none after release().
   */
  private checkApplied(out: ForwardOutput | DeviceForwardOutput): void {
    if (this.applied.has(out)) throw new EmbshardError('INVALID_ARGUMENT', 'this forward output has already been through backward()');
    if (released.has(out)) throw new EmbshardError('INVALID_ARGUMENT', 'this forward output has been released; run forward() again');
  }

  /** A forward's slots are meaningful only while no later forward evicted rows (checked again when the backward runs). */
  private checkFresh(step: DynamicStep | undefined): void {
    if (step && step.version !== this.dynamic!.version())
      throw new EmbshardError('INVALID_ARGUMENT', 'stale forward output: dynamic tables evicted rows since its forward; run forward() again');
  }

  /** After a successful backward: the output (this collection's own) has been applied; unless kept, its memory goes back to the engine. */
  private consumed(engine: NativeEngine, out: ForwardOutput | DeviceForwardOutput, own: boolean, release: boolean): void {
    if (own) this.applied.add(out);
    if (!release) return;
    this.pending.delete(out);
    if (out.pooled instanceof DeviceArray) this.deviceOutputs?.give(out.pooled, (out as DeviceForwardOutput).sequences);
    else engine.releaseOutputs([out.pooled, ...Object.values((out as ForwardOutput).sequences).map((s) => s.values)]);
  }

  /** BACKEND_UNAVAILABLE unless this collection can keep outputs on its GPU (INVALID_ARGUMENT: dynamic tables). */
  private deviceOutputsCheck(what: string): void {
    if (!this.device.startsWith('cuda:'))
      throw new EmbshardError('BACKEND_UNAVAILABLE', `${what}: the collection is on ${this.device}; device outputs and gradients need device 'cuda:N'`);
    if (this.dynamic)
      throw new EmbshardError('INVALID_ARGUMENT', `${what}: a collection with dynamic tables fills their missing rows on the host; use forward() and host gradients`);
  }

  /** A backward's device gradients, checked (lib/device-outputs.ts); undefined for host gradients. */
  private deviceGradients(batch: JaggedBatch, grads: Gradients | DeviceGradients): { pooled: DeviceArray; sequences: DeviceArray } | undefined {
    const g = grads as DeviceGradients;
    if (!(g.pooled instanceof DeviceArray) && !(g.sequences instanceof DeviceArray)) return undefined;
    this.deviceOutputsCheck('backward with device gradients');
    const pool = (this.deviceOutputs ??= new DeviceOutputs(this.device));
    return deviceGradients(grads, { pooled: batch.batchSize * this.pooledDim, sequences: this.sequenceLength(batch) }, this.device, pool);
  }

  /** Values of the batch's sequence outputs, all sequence features together. */
  private sequenceLength(batch: JaggedBatch): number {
    let n = 0;
    for (const f of this.featureInfo) if (f.pooling === 'none') n += batch.feature(f.name).ids.length * f.dim;
    return n;
  }
}

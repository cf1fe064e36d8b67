// dynamic.ts — the dynamic tables of one collection (rows: 'dynamic'): each keeps a native id map
// (native/storage/dynamic_map.h) from raw 64-bit ids to the slots of an engine table of capacity + 1 rows.
// Before a forward the batch's ids of those tables are translated into slots (admitting and evicting by
// the map's rules) and the rows it admitted get their init values and zero optimizer state; the engine
// then runs unchanged on the slot batch. Slot `capacity` is the sink: ids not held read it (zero) and the
// gradient it gathers is dropped by zeroing it again after the backward. With `admission.default: 'hashed'`
// the init rows of those ids are then added into the forward's outputs natively (addDefaults,
// native/storage/dynamic_default.h): each reads the row it would be admitted with, and still gets no update. With `spill`, the rows a
// translation evicted (values and optimizer state as stored) are read from the engine and appended to the
// table's spill file (native/storage/dynamic_spill.h) before the admitted rows overwrite their slots, and
// an admitted id found in the spill file gets its row and state back instead of its init: the table then
// trains as one whose capacity holds every id. Checkpoints keep each map (ids, counts, last uses,
// candidates, stats) beside the engine payload, and a compact, checksummed copy of each spill file's live
// records, which load() verifies and copies into the loaded table's own spill file.
import { join } from 'node:path';
import type { JaggedBatch } from '../batch.js';
import type { Addon, IdArray, NativeBatch, NativeEngine } from '../binding.js';
import { isFileEntry, readVerified, writeFileDurable, type DynamicPayload } from '../checkpoint.js';
import { nativeInit, stateWidth, type ResolvedConfig } from '../config.js';
import { EmbshardError } from '../errors.js';

/** Counters of one dynamic table since it was created (kept by checkpoints). */
export interface DynamicTableStats {
  /** id occurrences that found their row */
  hits: number;
  /** id occurrences whose id had no row when the step began */
  misses: number;
  /** ids given a row */
  admissions: number;
  /** rows taken from an id to make room */
  evictions: number;
  /** rows held now (≤ capacity) */
  rows: number;
  /** candidate ids whose sightings are being counted (admission.minCount > 1) */
  candidates: number;
  /** rows in the spill file now (tables with `spill` only) */
  spilled?: number;
}

interface NativeDynamicSpec {
  capacity: number;
  minCount: number;
  candidates: number;
  eviction: 'lru' | 'lfu';
  dim: number;
  init: { kind: string; a: number; b: number };
  dtype: string;
  default: 'zero' | 'hashed';
  seed: number;
  table: number;
  stateWidth: number;
  spillPath?: string;
  spillField?: string;
}

interface Translated {
  slots: BigInt64Array;
  values: Float32Array;
  state: Float32Array;
  sinkIds: number;
  evictedSlots: BigInt64Array;
  evictedIds: BigInt64Array;
}

/** The addon's DynamicMap (native/addon/dynamic_map_wrap.cc). */
interface NativeDynamicMap {
  translate(ids: IdArray, lengths: Int32Array, batchSize: number, mine: Uint8Array, out: BigInt64Array): Promise<Translated>;
  spill(ids: BigInt64Array, values: Float32Array, state: Float32Array): Promise<void>;
  lookup(ids: IdArray): BigInt64Array;
  heldIds(): BigInt64Array;
  stats(): DynamicTableStats;
  serialize(): Uint8Array;
  deserialize(bytes: Uint8Array): void;
  /** hashed default: adds the init rows of the positions whose slot is the sink into a forward's outputs */
  addDefaults(...args: DefaultsArgs): Promise<void>;
  addDefaultsSync(...args: DefaultsArgs): void;
  /** hashed default: rows read by id (`out`, from `slots`) of ids without a row get their init row */
  fillDefaults(ids: BigInt64Array, slots: BigInt64Array, out: Float32Array): void;
  /** the spill file's live records into a checkpoint file (fsynced) */
  saveSpill(path: string): Promise<{ bytes: number; records: number; crc32c: number }>;
  /** the spill file's records replaced by a checkpoint's copy (verified first: CHECKPOINT_CORRUPT) */
  loadSpill(path: string, bytes: number, crc32c: number): Promise<void>;
  /** closes the spill file (waits for a running call) */
  close(): void;
}

/** ids, slots, lengths, batchSize, columns [F], mean [F], sequences [F], weights, pooled, pooledDim */
type DefaultsArgs = [IdArray, BigInt64Array, Int32Array, number, Int32Array, Uint8Array, (Float32Array | null)[], Float32Array | null, Float32Array, number];

/** Where one feature's forward outputs are: its first pooled column, or (pooling 'none') its sequence values. */
export interface FeatureOutput {
  mean: boolean;
  /** first column in the pooled output; -1 for a sequence feature */
  column: number;
  sequence: Float32Array | null;
}

interface DynamicAddon {
  DynamicMap: new (spec: NativeDynamicSpec) => NativeDynamicMap;
  widenIds(ids: IdArray, out: BigInt64Array): void;
}

/** What a translated forward leaves for its backward. */
export interface DynamicStep {
  /** the engine batch: the dynamic tables' ids replaced by slots */
  native: NativeBatch;
  /** tables whose sink was read (zeroed again after the backward) */
  sinks: number[];
  /** the maps' evictions when it was translated: a backward after further evictions is refused */
  version: number;
}

interface Entry {
  table: number;
  name: string;
  capacity: number;
  dim: number;
  stateWidth: number;
  spill: boolean;
  hashed: boolean;
  map: NativeDynamicMap;
}

export class DynamicTables {
  private readonly entries: Entry[];
  private readonly byTable = new Map<number, Entry>();
  private readonly addon: DynamicAddon;
  /** every feature of the collection → its table index */
  private readonly tableOf: Map<string, number>;

  private constructor(config: ResolvedConfig, addon: Addon, initStreams?: readonly number[]) {
    this.addon = addon as unknown as DynamicAddon;
    this.tableOf = new Map(config.tables.flatMap((t, i) => t.features.map((f) => [f, i] as const)));
    this.entries = [];
    try {
      this.makeEntries(config, initStreams);
    } catch (e) {
      // a spill file that cannot be made: those already made are closed (their locks released) at once
      this.dispose();
      throw e;
    }
  }

  private makeEntries(config: ResolvedConfig, initStreams?: readonly number[]): void {
    config.tables.forEach((t, i) => {
      const d = t.dynamic;
      if (!d) return;
      const spec: NativeDynamicSpec = {
        capacity: d.capacity, minCount: d.minCount, candidates: d.minCount > 1 ? d.candidates : 0, eviction: d.eviction,
        dim: t.dim, init: nativeInit(t.init, t.rows), dtype: t.dtype, default: d.default, seed: config.seed, table: initStreams?.[i] ?? i, stateWidth: stateWidth(config.optimizer.type, t.dim),
        ...(d.spill ? { spillPath: join(d.spill.path, `spill-${i}.bin`), spillField: `tables[${i}].spill.path` } : {}),
      };
      const e: Entry = { table: i, name: t.name, capacity: d.capacity, dim: t.dim, stateWidth: spec.stateWidth, spill: !!d.spill, hashed: d.default === 'hashed', map: new this.addon.DynamicMap(spec) };
      this.entries.push(e);
      this.byTable.set(i, e);
    });
  }

  /**
   * The dynamic tables of `config`, or undefined when it has none. `initStreams[i]`: the init stream of
   * table i when it is a shard of another collection's table (the sharded runtime: the whole table's index,
   * so an admitted id starts with the values one collection gives it); default i.
   */
  static of(config: ResolvedConfig, addon: Addon, initStreams?: readonly number[]): DynamicTables | undefined {
    return config.tables.some((t) => t.dynamic) ? new DynamicTables(config, addon, initStreams) : undefined;
  }

  has(table: number): boolean {
    return this.byTable.has(table);
  }

  /** Evictions so far over all maps: slots of a translated batch stay valid while this is unchanged. */
  version(): number {
    return this.entries.reduce((s, e) => s + e.map.stats().evictions, 0);
  }

  /**
   * Translates a batch for a training forward: admits and evicts by the maps' rules, initialises the
   * admitted rows in `engine`. The batch's features are checked first (nothing changes on a bad batch).
   */
  async translate(batch: JaggedBatch, engine: NativeEngine): Promise<DynamicStep> {
    this.checkFeatures(batch);
    const out = this.widen(batch.ids);
    const sinks: number[] = [];
    // the maps are independent and write disjoint positions of `out`: translated concurrently. A map whose
    // translation failed (a spill record that fails its checksum) changed nothing; the others did, so their
    // evicted rows are still spilled and their admitted rows written before the error is raised
    const done = await Promise.allSettled(
      this.entries.map((e) => e.map.translate(batch.ids, batch.lengths, batch.batchSize, Uint8Array.from(batch.features, (f) => (this.tableOf.get(f) === e.table ? 1 : 0)), out)),
    );
    let failed: unknown;
    for (const [k, e] of this.entries.entries()) {
      const d = done[k]!;
      if (d.status === 'rejected') {
        failed ??= d.reason;
        continue;
      }
      const r = d.value;
      const n = r.evictedSlots.length;
      if (e.spill && n > 0) {
        // the evicted rows, as stored, go to the spill file before the admitted rows take their slots; a
        // failed append (IO_ERROR) loses them, but the admitted rows are still written before it is raised
        const values = new Float32Array(n * e.dim), state = new Float32Array(n * e.stateWidth);
        engine.readRows(e.table, r.evictedSlots, values);
        if (e.stateWidth > 0) engine.readState(e.table, r.evictedSlots, state);
        await e.map.spill(r.evictedIds, values, state).catch((err: unknown) => void (failed ??= err));
      }
      if (r.slots.length > 0) {
        engine.writeRows(e.table, r.slots, r.values);
        if (e.stateWidth > 0) engine.writeState(e.table, r.slots, r.state);
      }
      if (r.sinkIds > 0) sinks.push(e.table);
    }
    if (failed !== undefined) throw failed;
    return { native: this.nativeOf(batch, out), sinks, version: this.version() };
  }

  /** A batch for a forward that admits nothing (evaluation): ids not held read zero. */
  lookupBatch(batch: JaggedBatch): DynamicStep {
    this.checkFeatures(batch);
    const out = this.widen(batch.ids);
    const sinks: number[] = [];
    const o = batch.offsets;
    const B = batch.batchSize;
    batch.features.forEach((f, k) => {
      const e = this.byTable.get(this.tableOf.get(f)!);
      if (!e) return;
      const s = o[k * B]!, end = o[(k + 1) * B]!;
      out.set(e.map.lookup(batch.ids.subarray(s, end) as IdArray), s);
      if (!sinks.includes(e.table)) sinks.push(e.table);
    });
    return { native: this.nativeOf(batch, out), sinks, version: this.version() };
  }

  /**
   * Tables with a hashed default: adds the init rows of the ids that read the sink into a forward's
   * outputs (`pooled` [B × pooledDim]; `output(feature)` says where each feature's outputs are).
   */
  async addDefaults(step: DynamicStep, batch: JaggedBatch, output: (feature: string) => FeatureOutput, pooled: Float32Array, pooledDim: number): Promise<void> {
    for (const e of this.entries) if (e.hashed && step.sinks.includes(e.table)) await e.map.addDefaults(...this.defaultsArgs(e, step, batch, output, pooled, pooledDim));
  }

  /** addDefaults, on the calling thread (forwardSync). */
  addDefaultsSync(step: DynamicStep, batch: JaggedBatch, output: (feature: string) => FeatureOutput, pooled: Float32Array, pooledDim: number): void {
    for (const e of this.entries) if (e.hashed && step.sinks.includes(e.table)) e.map.addDefaultsSync(...this.defaultsArgs(e, step, batch, output, pooled, pooledDim));
  }

  /** Rows read from table `t` by raw `ids` at `slots` into `out`: ids without a row get their default. */
  fillDefaults(t: number, ids: BigInt64Array, slots: BigInt64Array, out: Float32Array): void {
    const e = this.byTable.get(t)!;
    if (e.hashed) e.map.fillDefaults(ids, slots, out);
  }

  /** Zeroes the sink rows (and state) a backward may have updated. */
  resetSinks(engine: NativeEngine, tables: readonly number[]): void {
    for (const t of tables) {
      const e = this.byTable.get(t)!;
      const sink = BigInt64Array.of(BigInt(e.capacity));
      engine.writeRows(t, sink, new Float32Array(e.dim));
      if (e.stateWidth > 0) engine.writeState(t, sink, new Float32Array(e.stateWidth));
    }
  }

  /** Slots of raw ids in table `t` (the sink for ids not held). */
  slots(t: number, ids: BigInt64Array): BigInt64Array {
    return this.byTable.get(t)!.map.lookup(ids);
  }

  /** Slots of ids that must be held (writes): ID_OUT_OF_RANGE naming the first id that is not. */
  heldSlots(t: number, ids: BigInt64Array): BigInt64Array {
    const e = this.byTable.get(t)!;
    const slots = e.map.lookup(ids);
    const at = slots.indexOf(BigInt(e.capacity));
    if (at >= 0) throw new EmbshardError('ID_OUT_OF_RANGE', `ids[${at}] = ${ids[at]} has no row in dynamic table '${e.name}' (not admitted, or evicted)`);
    return slots;
  }

  heldIds(t: number): BigInt64Array {
    return this.byTable.get(t)!.map.heldIds();
  }

  stats(): Record<string, DynamicTableStats> {
    return Object.fromEntries(this.entries.map((e) => [e.name, e.map.stats()]));
  }

  /** Closes the spill files (their locks are released; the files stay as scratch). */
  dispose(): void {
    for (const e of this.entries) e.map.close();
  }

  /**
   * Writes each map into checkpoint folder `dir` (durably), and the live records of each spill file as a
   * compact copy beside it; returns the manifest entries.
   */
  async save(dir: string): Promise<DynamicPayload[]> {
    const out: DynamicPayload[] = [];
    for (const e of this.entries) {
      const bytes = e.map.serialize();
      const file = `dynamic-${e.table}.bin`;
      await writeFileDurable(join(dir, file), bytes);
      const p: DynamicPayload = { table: e.name, file, bytes: bytes.length, crc32c: embeddedCrc(bytes) };
      if (e.spill) {
        const spillFile = `spill-${e.table}.bin`;
        p.spill = { file: spillFile, ...(await e.map.saveSpill(join(dir, spillFile))) };
      }
      out.push(p);
    }
    return out;
  }

  /** Reads the maps a checkpoint saved (CHECKPOINT_CORRUPT when one is missing, truncated or altered). */
  async load(dir: string, saved: readonly DynamicPayload[] | undefined): Promise<void> {
    for (const e of this.entries) {
      const p = saved?.find((s) => s.table === e.name);
      if (!isFileEntry(p))
        throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}': the manifest lists no map for dynamic table '${e.name}'`);
      try {
        e.map.deserialize(await readVerified(dir, p.file, p.bytes, p.crc32c, embeddedCrc));
      } catch (err) {
        throw err instanceof EmbshardError ? mapFileError(err, dir, p.file, e.name) : err;
      }
      if (!e.spill) continue;
      const sp = p.spill;
      if (!isFileEntry(sp))
        throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}': the manifest lists no spill copy for dynamic table '${e.name}'`);
      await e.map.loadSpill(join(dir, sp.file), sp.bytes, sp.crc32c);
    }
  }

  // ---- internals ----

  private checkFeatures(batch: JaggedBatch): void {
    for (const f of batch.features)
      if (!this.tableOf.has(f)) throw new EmbshardError('UNKNOWN_FEATURE', `batch feature '${f}' is not a feature of this collection`);
    if (batch.features.length !== this.tableOf.size)
      for (const f of this.tableOf.keys())
        if (!batch.features.includes(f)) throw new EmbshardError('MISSING_FEATURE', `the batch has no feature '${f}'`);
  }

  private defaultsArgs(e: Entry, step: DynamicStep, batch: JaggedBatch, output: (feature: string) => FeatureOutput, pooled: Float32Array, pooledDim: number): DefaultsArgs {
    const mine = batch.features.map((f) => (this.tableOf.get(f) === e.table ? output(f) : undefined));
    return [
      batch.ids, step.native.ids as BigInt64Array, batch.lengths, batch.batchSize,
      Int32Array.from(mine, (o) => (o ? o.column : -2)), Uint8Array.from(mine, (o) => (o?.mean ? 1 : 0)), mine.map((o) => o?.sequence ?? null),
      batch.weights ?? null, pooled, pooledDim,
    ];
  }

  /** The batch's ids as 64-bit values in a fresh array (the engine batch is rebuilt in it). */
  private widen(ids: IdArray): BigInt64Array {
    const out = new BigInt64Array(ids.length);
    if (ids instanceof BigInt64Array) out.set(ids);
    else this.addon.widenIds(ids, out);
    return out;
  }

  private nativeOf(batch: JaggedBatch, ids: BigInt64Array): NativeBatch {
    return { batchSize: batch.batchSize, features: [...batch.features], lengths: batch.lengths, ids, weights: batch.weights };
  }
}

/**
 * `err`, raised reading the map of dynamic table `table` from file `file` of checkpoint `dir`, as the error
 * that names all three (`checkpoint '<dir>': <file> (table '<table>'): …`), its code kept: the map checks
 * its own bytes, and its messages name none of them.
 */
function mapFileError(err: EmbshardError, dir: string, file: string, table: string): EmbshardError {
  const where = `checkpoint '${dir}': ${file}`;
  const what = err.message.startsWith(`${where} `) ? err.message.slice(where.length + 1) : err.message;
  return new EmbshardError(err.code, `${where} (table '${table}'): ${what}`, err.details);
}

/** The CRC-32C a serialized map ends with (little-endian), which covers the bytes before it. */
function embeddedCrc(bytes: Uint8Array): number {
  return bytes.length < 4 ? -1 : new DataView(bytes.buffer, bytes.byteOffset + bytes.length - 4, 4).getUint32(0, true);
}

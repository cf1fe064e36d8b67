// dynamic-shards.ts — the row shards of dynamic tables (rows: 'dynamic', raw 64-bit ids) that one rank of a
// sharded collection holds. A dynamic table is sharded by id hash: routing sends every raw id to the row
// group [a, b) that its virtual row hash_row(id, capacity) falls in (native/core/id_hash.h), and the shard
// there keeps its own id map of b − a slots (admission, eviction and stats of its ids only). The maps are
// lib/storage/dynamic.ts's, over the rank's engine: before the owner's engine call the owner batch's raw
// ids become slots (admitting, evicting, initialising admitted rows with the values one collection gives
// the id: the whole table's init stream), then forward and backward run unchanged on the slots; the sink
// slot b − a is zeroed again after each backward.
import { JaggedBatch } from '../batch.js';
import type { Addon, NativeBatch, NativeEngine, NativeForwardResult } from '../binding.js';
import { nativeInit, type InitConfig, type ResolvedConfig, type ResolvedTable } from '../config.js';
import { DynamicTables, type DynamicStep, type DynamicTableStats } from '../storage/dynamic.js';
import { exchangeOps } from './exchange-ops.js';
import type { LocalLayout } from './local-layout.js';

/** One dynamic row shard: which table, which row group, on which rank, and its map's counters. */
export interface DynamicShardStats extends DynamicTableStats {
  table: string;
  /** row group index in the plan's layout of the table */
  group: number;
  /** the group's row range [a, b): the shard owns the ids whose hash_row falls here and holds up to b − a rows */
  range: [number, number];
  rank: number;
}

/** The raw ids one dynamic row shard holds rows for (in slot order). */
export interface HeldShard {
  group: number;
  range: [number, number];
  rank: number;
  ids: BigInt64Array;
}

/** The init config that gives exactly `nativeInit(init, rows)` whatever rows it is resolved against. */
function explicitInit(init: InitConfig, rows: number): InitConfig {
  const n = nativeInit(init, rows);
  return n.kind === 'uniform' ? { type: 'uniform', low: n.a, high: n.b } : n.kind === 'normal' ? { type: 'normal', mean: n.a, std: n.b } : { type: 'constant', value: n.a };
}

export class DynamicShards {
  /** local table index → its shard's place in the plan */
  private readonly shards = new Map<number, { t: number; group: number; rows: [number, number] }>();

  private constructor(
    private readonly layout: LocalLayout,
    private readonly config: ResolvedConfig,
    private readonly maps: DynamicTables,
    /** whether the shards spill evicted rows (ShardedConfig.spill) */
    readonly spills: boolean,
  ) {
    layout.localTables.forEach((lt, i) => {
      if (!lt.dynamic) return;
      const group = layout.tables[lt.t]!.groups.findIndex((g) => g.a === lt.r0);
      this.shards.set(i, { t: lt.t, group, rows: [lt.r0, lt.r0 + lt.rows] });
    });
  }

  /** The dynamic shards of this rank's engine (its local tables), or undefined when it holds none. */
  static of(layout: LocalLayout, config: ResolvedConfig, addon: Addon, spillDir?: string): DynamicShards | undefined {
    if (!layout.localTables.some((lt) => lt.dynamic)) return undefined;
    // the rank's engine as one collection config: each dynamic shard a dynamic table of its own rows
    // (candidates: its share), with the whole table's init; the other local tables only map features
    const tables = layout.localTables.map((lt, i): ResolvedTable => {
      const t = config.tables[lt.t]!, d = t.dynamic;
      const features = layout.localFeatures.filter((f) => f.table === i).map((f) => f.name);
      return {
        name: lt.name, rows: lt.rows, dim: lt.c1 - lt.c0, pooling: 'sum', features, dtype: t.dtype, idPolicy: 'error',
        init: explicitInit(t.init, t.rows), storage: { kind: 'memory' },
        ...(lt.dynamic && d ? { dynamic: { capacity: lt.rows, minCount: d.minCount, candidates: Math.max(1, Math.ceil((d.candidates * lt.rows) / t.rows)), eviction: d.eviction, default: d.default, ...(spillDir !== undefined ? { spill: { path: spillDir } } : {}) } } : {}),
      };
    });
    const local: ResolvedConfig = { tables, optimizer: config.optimizer, device: config.device, seed: config.seed };
    const maps = DynamicTables.of(local, addon, layout.localTables.map((lt) => lt.t))!;
    return new DynamicShards(layout, config, maps, spillDir !== undefined);
  }

  /** Local table indexes of the dynamic shards. */
  get tables(): number[] {
    return [...this.shards.keys()];
  }

  private view(owner: NativeBatch): JaggedBatch {
    return JaggedBatch.fromLengths({ features: owner.features, batchSize: owner.batchSize, lengths: owner.lengths, ids: owner.ids, ...(owner.weights ? { weights: owner.weights } : {}) });
  }

  /** The owner batch with its dynamic shards' raw ids as slots, admitting by each shard's rules (training). */
  translate(owner: NativeBatch, engine: NativeEngine): Promise<DynamicStep> {
    return this.maps.translate(this.view(owner), engine);
  }

  /** The same without admitting (evaluation): ids a shard does not hold read its sink. */
  lookup(owner: NativeBatch): DynamicStep {
    return this.maps.lookupBatch(this.view(owner));
  }

  /**
   * Shards of tables with admission.default 'hashed': the init rows of the owner batch's ids without a row
   * (`owner`: the batch of raw ids the step translated) added into the engine's outputs, as partial sums
   * (the requester divides mean bags by their whole length) or as the unique rows a ub shard returns.
   */
  addDefaults(step: DynamicStep, owner: NativeBatch, out: NativeForwardResult): Promise<void> {
    const L = this.layout;
    const at = new Map(L.localFeatures.map((f, i) => [f.name, i]));
    return this.maps.addDefaults(step, this.view(owner), (name) => {
      const i = at.get(name)!, f = L.localFeatures[i]!;
      return { mean: false, column: f.pooling !== 'none' ? f.col : -1, sequence: f.pooling === 'none' ? out.sequences[i] ?? null : null };
    }, out.pooled, L.localPooledDim);
  }

  /**
   * Rows read by id from the shard in local table li, for a table with a hashed default: the ids that this
   * shard owns by hash but holds no row for (`slots`: every id's slot, `slots(li, ids)`), at their positions
   * `at` in `ids`, with their init rows [at.length × dim]. Undefined for tables whose ids without a row read zero.
   */
  defaultRows(li: number, ids: BigInt64Array, slots: BigInt64Array): { at: Int32Array; rows: Float32Array } | undefined {
    const s = this.shards.get(li)!, d = this.config.tables[s.t]!.dynamic!;
    if (d.default !== 'hashed') return undefined;
    const keys = exchangeOps().hashKeys(ids, d.capacity);
    const sink = BigInt(s.rows[1] - s.rows[0]);
    const at: number[] = [];
    for (let k = 0; k < ids.length; k++) if (keys[k]! >= s.rows[0] && keys[k]! < s.rows[1] && slots[k] === sink) at.push(k);
    const mine = BigInt64Array.from(at, (k) => ids[k]!);
    const rows = new Float32Array(at.length * this.config.tables[s.t]!.dim);
    this.maps.fillDefaults(li, mine, BigInt64Array.from(at, () => sink), rows);
    return { at: Int32Array.from(at), rows };
  }

  resetSinks(engine: NativeEngine, tables: readonly number[] = this.tables): void {
    this.maps.resetSinks(engine, tables);
  }

  /** Slots of raw ids in local table li; `rows` of the shard (its sink) for ids it does not hold. */
  slots(li: number, ids: BigInt64Array): BigInt64Array {
    return this.maps.slots(li, ids);
  }

  /** Counters of every dynamic shard this rank holds, in local table order. */
  stats(): DynamicShardStats[] {
    const byName = this.maps.stats();
    return this.tables.map((li) => {
      const s = this.shards.get(li)!;
      return { table: this.config.tables[s.t]!.name, group: s.group, range: s.rows, rank: this.layout.rank, ...byName[this.layout.localTables[li]!.name]! };
    });
  }

  /** The held ids of table t's shards on this rank. */
  heldIds(t: number): HeldShard[] {
    return this.tables.filter((li) => this.shards.get(li)!.t === t).map((li) => {
      const s = this.shards.get(li)!;
      return { group: s.group, range: s.rows, rank: this.layout.rank, ids: this.maps.heldIds(li) };
    });
  }

  /** The maps themselves (checkpoints). */
  get tablesOfRank(): DynamicTables {
    return this.maps;
  }

  dispose(): void {
    this.maps.dispose();
  }
}

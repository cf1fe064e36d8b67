// row-remap.ts — the plan's hot-id remaps (lib/plan/remap.ts) on a rank of the sharded runtime: a batch's
// ids become rows before routing (one native pass per feature, native/shard/id_remap.h), and the ids of
// row access (readRows / writeRows, checkpoints) become rows the same way, so the tiers hold the measured
// hot ids while every user-facing id stays the user's.
import type { IdArray } from '../binding.js';
import { JaggedBatch } from '../batch.js';
import { loadAddon } from '../native.js';
import { remapOf, type IdRemap } from '../plan/remap.js';
import type { ShardPlan } from '../plan/shard-plan.js';

interface NativeIdRemap {
  apply(ids: IdArray, out: BigInt64Array, what: string): void;
  invert(ids: IdArray, out: BigInt64Array, what: string): void;
}
interface PlacementAddon {
  placement: { IdRemap: new (rows: number, from: BigInt64Array, to: BigInt64Array) => NativeIdRemap };
}

export class RowRemaps {
  private readonly plan: ShardPlan;
  /** per table: its remap (null when ids are rows) */
  readonly remaps: readonly (IdRemap | null)[];
  private readonly native: readonly NativeIdRemap[];
  /** some table has a remap */
  readonly active: boolean;

  constructor(plan: ShardPlan) {
    this.plan = plan;
    const ctor = (loadAddon() as unknown as PlacementAddon).placement.IdRemap;
    this.remaps = plan.tables.map((t) => remapOf(t) ?? null);
    this.native = plan.tables.map((t, i) => {
      const r = this.remaps[i];
      return new ctor(t.rows, r ? BigInt64Array.from(r.from, BigInt) : new BigInt64Array(0), r ? BigInt64Array.from(r.to, BigInt) : new BigInt64Array(0));
    });
    this.active = this.remaps.some((r) => r !== null);
  }

  /** Rows of table t for the (range-checked) ids. */
  toRows(t: number, ids: BigInt64Array): BigInt64Array {
    if (!this.remaps[t]) return ids;
    const out = new BigInt64Array(ids.length);
    this.native[t]!.apply(ids, out, `table '${this.plan.tables[t]!.name}'`);
    return out;
  }

  /** The batch with every id replaced by its row (the batch itself when no table is remapped). */
  rowsOf(batch: JaggedBatch): JaggedBatch {
    if (!this.active) return batch;
    const out = new BigInt64Array(batch.ids.length);
    const base = batch.ids.byteOffset / batch.ids.BYTES_PER_ELEMENT;
    this.plan.tables.forEach((t, ti) => {
      for (const f of t.features) {
        if (!batch.features.includes(f)) continue;
        const ids = batch.feature(f).ids;
        const at = ids.byteOffset / ids.BYTES_PER_ELEMENT - base;
        this.native[ti]!.apply(ids, out.subarray(at, at + ids.length), `feature '${f}' (table '${t.name}', ${t.rows} rows)`);
      }
    });
    return JaggedBatch.fromLengths({ features: batch.features, batchSize: batch.batchSize, lengths: batch.lengths, ids: out, weights: batch.weights });
  }
}

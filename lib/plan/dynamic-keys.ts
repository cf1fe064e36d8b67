// dynamic-keys.ts — a dynamic table's raw 64-bit ids as row-space keys for measureTraffic: the native
// hash that places them on every rank (native/core/id_hash.h) gives each id its virtual row v in
// [0, capacity), and the key v + k / 2^22 (k: the id's rank among the distinct ids of v, over every rank's
// batch) keeps ids distinct exactly when they are. Row ranges of the plan then hold exactly the ids their
// shards own, so the traffic count runs on keys as on rows.
import type { JaggedBatch } from '../batch.js';
import type { IdArray } from '../binding.js';
import { loadAddon } from '../native.js';
import type { Table } from './types.js';

interface KeyOps {
  shard: { hashKeys(ids: BigInt64Array, capacity: number): Float64Array };
  widenIds(ids: IdArray, out: BigInt64Array): void;
}

/** Per rank, per feature of dynamic table t: its ids' keys (undefined when the batch lacks the feature). */
export function dynamicKeys(t: Table, batches: readonly JaggedBatch[]): (Float64Array | undefined)[][] {
  const K = loadAddon() as unknown as KeyOps;
  const parts = batches.map((b) => t.features.map((f) => (b.features.includes(f) ? b.feature(f).ids : undefined)));
  let n = 0;
  for (const r of parts) for (const p of r) n += p?.length ?? 0;
  const all = new BigInt64Array(n);
  let o = 0;
  for (const r of parts)
    for (const p of r) {
      if (!p) continue;
      if (p instanceof BigInt64Array) all.set(p, o);
      else K.widenIds(p, all.subarray(o, o + p.length));
      o += p.length;
    }
  const keys = K.shard.hashKeys(all, t.rows);
  o = 0;
  return parts.map((r) =>
    r.map((p) => {
      if (!p) return undefined;
      const k = keys.subarray(o, o + p.length);
      o += p.length;
      return k;
    }),
  );
}

// storage/shards.ts — disk-backed shards of a ShardedEmbeddingCollection: under a rank's RAM budget
// (`storage` of the sharded config), the rank's row / column shards follow the budget rule of
// budget.ts (small ones stay in memory); replicated copies (data-parallel tables, hot-row tiers) always
// stay in memory. Files are `<path>/rank<r>-<local table>.embtable`.
import { join } from 'node:path';
import type { OptimizerType } from '../binding.js';
import { stateWidth } from '../config.js';
import { storageWithin, type StorageBudget } from './budget.js';
import { makeStorageDirs, resolveStorage, type NativeStorage } from './config.js';

export interface ShardTable {
  name: string;
  rows: number;
  dim: number;
  dtype: 'fp32' | 'fp16' | 'bf16';
  /** 'shard' (a row / column slice this rank owns) may go to disk; anything else stays in memory */
  part: string;
}

/** The native storage argument of a rank's engine, or undefined when no shard goes to disk. */
export function shardStorage(tables: readonly ShardTable[], budget: StorageBudget | undefined, rank: number, optimizer: OptimizerType): NativeStorage[] | undefined {
  if (budget === undefined) return undefined;
  const shards = tables.filter((t) => t.part === 'shard');
  const bytesPerRow = shards.map((t) => t.dim * (t.dtype === 'fp32' ? 4 : 2) + 4 * stateWidth(optimizer, t.dim));
  const split = storageWithin(shards.map((t) => t.name), shards.map((t) => t.rows), bytesPerRow, budget);
  const byName = new Map(shards.map((t, i) => [t.name, resolveStorage(split[i], `storage (shard '${t.name}')`)]));
  makeStorageDirs([...byName].map(([name, storage]) => ({ name, storage })));
  const out = tables.map((t): NativeStorage => {
    const s = byName.get(t.name);
    return s?.kind === 'disk' ? { file: join(s.path, `rank${rank}-${encodeURIComponent(t.name)}.embtable`), cacheBytes: s.cacheBytes, policy: s.policy } : null;
  });
  return out.some((s) => s !== null) ? out : undefined;
}

// storage/budget.ts — one RAM budget shared by a collection's tables (`embshard train --storage
// disk:<dir> --cache-bytes N`): tables smaller than an even share of what is left stay in memory (they
// are counted against the budget), the others go to disk with caches in proportion to their bytes.
import { EmbshardError } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import type { CachePolicy, StorageConfig } from './config.js';
import { SLOT_META_BYTES } from './constants.js';

export interface StorageBudget {
  /** folder of the table files */
  path: string;
  /** RAM for all tables together: in-memory tables plus the caches of disk-backed ones */
  cacheBytes: number;
  policy?: CachePolicy;
}

const BUDGET_FIELDS = fieldsOf<StorageBudget>({ path: true, cacheBytes: true, policy: true });

/**
 * Per table: its storage under the budget. `bytesPerRow[t]`: row + optimizer state bytes; `names[t]` names
 * the table in errors. INVALID_CONFIG when the budget leaves a disk-backed table's cache less than one row.
 */
export function storageWithin(names: readonly string[], rows: readonly number[], bytesPerRow: readonly number[], b: StorageBudget): StorageConfig[] {
  rejectUnknownFields(b, BUDGET_FIELDS, 'storage');
  if (!Number.isSafeInteger(b.cacheBytes) || b.cacheBytes < 1) throw new EmbshardError('INVALID_CONFIG', 'storage.cacheBytes must be a positive integer');
  const bytes = rows.map((r, t) => r * (bytesPerRow[t]! + SLOT_META_BYTES));
  const order = bytes.map((_, t) => t).sort((x, y) => bytes[x]! - bytes[y]!);
  const out: StorageConfig[] = rows.map(() => ({ kind: 'memory' }));
  let left = b.cacheBytes;
  let k = 0;
  for (; k < order.length; k++) {
    const t = order[k]!;
    if (bytes[t]! > left / (order.length - k)) break;
    left -= bytes[t]!;
  }
  const big = order.slice(k);
  const total = big.reduce((s, t) => s + bytes[t]!, 0);
  for (const t of big) {
    const cacheBytes = Math.floor((left * bytes[t]!) / total), slot = bytesPerRow[t]! + SLOT_META_BYTES;
    if (cacheBytes < slot)
      throw new EmbshardError(
        'INVALID_CONFIG',
        `storage.cacheBytes (${b.cacheBytes}) leaves table '${names[t]}' a cache of ${cacheBytes} bytes, less than one row (${slot} bytes): ` +
          `${b.cacheBytes - left} bytes hold the tables kept in memory and ${big.length} table(s) share the rest by size`,
      );
    out[t] = { kind: 'disk', path: b.path, cacheBytes, ...(b.policy ? { policy: b.policy } : {}) };
  }
  return out;
}

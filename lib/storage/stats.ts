// storage/stats.ts — a disk-backed table's cache counters as the collection reports them.
import type { NativeDiskStats } from '../binding.js';

export interface DiskTableStats extends NativeDiskStats {
  /** hits / (hits + misses); 0 before any forward */
  hitRate: number;
}

/** Counters by table name from the engine's per-table list (null entries: memory tables). */
export function diskStats(tables: readonly { name: string }[], raw: (NativeDiskStats | null)[] | null): Record<string, DiskTableStats> {
  const out: Record<string, DiskTableStats> = {};
  raw?.forEach((s, i) => {
    if (!s) return;
    const seen = s.hits + s.misses;
    out[tables[i]!.name] = { ...s, hitRate: seen === 0 ? 0 : s.hits / seen };
  });
  return out;
}

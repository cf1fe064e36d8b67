// cache-baseline.ts — exact transmission counts of embedding caches WITHOUT embedding scheduling, the baseline
// Herald's reductions are quoted against (a parameter-server cache at staleness bound 0, as HET's): every rank
// keeps an LRU cache (`cacheRows` per table) of rows it does not own (owners play the parameter server), the
// samples are placed as given (random placement in the benchmark), and per step every rank
//   - reads each of its distinct rows: locally when it owns it or its cache holds a valid copy, else it pulls
//     the row from its owner (one transmission) into its cache (LRU; evicted copies are clean, nothing moves);
//   - after the update pushes its gradient of every row it read and does not own to the owner (one
//     transmission), which applies the update;
//   - a cached copy stays valid only when no other rank read (and so updated) the row this step.
// Counted for comparison only (no kernels run); the scheduler that trains is scheduler.ts.
import type { JaggedBatch } from '../batch.js';
import { EmbshardError } from '../errors.js';
import { RowOwners, type HeraldTable } from './owners.js';

export interface BaselineCounts {
  /** rows pulled from their owners (cache misses and stale copies) */
  pulls: number;
  /** gradient rows pushed to their owners */
  pushes: number;
  /** transmissions: pulls + pushes */
  rows: number;
  bytes: number;
  /** (rank, distinct row) reads */
  reads: number;
  /** of `reads`: served locally (owned, or a valid cached copy) */
  hits: number;
}

export class CacheBaseline {
  readonly owners: RowOwners;
  /** per (rank, table): cached key → valid, in LRU order (first = least recently used) */
  private readonly caches: Map<number, boolean>[];
  /** key → the ranks whose caches hold it */
  private readonly cachedBy = new Map<number, Set<number>>();
  private readonly featureTable = new Map<string, number>();

  constructor(
    readonly tables: readonly HeraldTable[],
    readonly world: number,
    cacheRows: number,
  ) {
    this.owners = new RowOwners(tables, world, cacheRows);
    this.caches = Array.from({ length: world * tables.length }, () => new Map());
    tables.forEach((t, i) => t.features.forEach((f) => this.featureTable.set(f, i)));
  }

  /** One step of a global batch whose samples `samples[w]` (global indices) rank w trains. */
  step(batch: JaggedBatch, samples: readonly Int32Array[]): BaselineCounts {
    if (samples.length !== this.world) throw new EmbshardError('LENGTH_MISMATCH', `samples: one list per rank (${this.world}) expected, got ${samples.length}`);
    const O = this.owners, T = this.tables.length;
    const c: BaselineCounts = { pulls: 0, pushes: 0, rows: 0, bytes: 0, reads: 0, hits: 0 };
    // every rank's distinct keys, and the ranks reading each key
    const readersOf = new Map<number, number[]>();
    const mine: number[][] = Array.from({ length: this.world }, () => []);
    for (let w = 0; w < this.world; w++) {
      const seen = new Set<number>();
      for (const [f, t] of this.featureTable) {
        batch.feature(f); // MISSING_FEATURE when the batch lacks it
        const off = batch.offsets, F = batch.features.indexOf(f), G = batch.batchSize, rows = this.tables[t]!.rows;
        for (const i of samples[w]!) {
          const b = F * G + i;
          for (let e = off[b]!; e < off[b + 1]!; e++) {
            const id = Number(batch.ids[e]!);
            if (!(id >= 0 && id < rows)) throw new EmbshardError('ID_OUT_OF_RANGE', `feature '${f}': id ${id} is outside [0, ${rows})`);
            const key = O.rowBase[t]! + id;
            if (seen.has(key)) continue;
            seen.add(key);
            mine[w]!.push(key);
            const r = readersOf.get(key);
            if (r) r.push(w);
            else readersOf.set(key, [w]);
          }
        }
      }
    }
    // reads: local, a valid cached copy, or a pull into the cache
    for (let w = 0; w < this.world; w++)
      for (const key of mine[w]!) {
        const t = O.tableOf(key), row = key - O.rowBase[t]!, dim = this.tables[t]!.dim;
        c.reads++;
        if (O.ownerOf(t, row) === w) {
          c.hits++;
          continue;
        }
        c.pushes++;
        c.bytes += 4 * dim;
        const cache = this.caches[w * T + t]!;
        const cap = O.slots[t]!;
        if (cache.get(key) === true) {
          c.hits++;
          cache.delete(key);
          cache.set(key, true);
          continue;
        }
        c.pulls++;
        c.bytes += 4 * dim;
        if (cap === 0) continue;
        if (!cache.delete(key) && cache.size >= cap) {
          const lru = cache.keys().next().value!;
          cache.delete(lru);
          this.cachedBy.get(lru)!.delete(w);
        }
        cache.set(key, true);
        const by = this.cachedBy.get(key);
        if (by) by.add(w);
        else this.cachedBy.set(key, new Set([w]));
      }
    // copies read (and so updated) by another rank this step go stale
    for (const [key, readers] of readersOf) {
      const by = this.cachedBy.get(key);
      if (!by) continue;
      const t = O.tableOf(key);
      for (const v of by) if (readers.some((u) => u !== v)) this.caches[v * T + t]!.set(key, false);
    }
    c.rows = c.pulls + c.pushes;
    return c;
  }
}

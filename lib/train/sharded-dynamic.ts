// sharded-dynamic.ts — one line of numbers about a model's dynamic tables (rows: 'dynamic'): rows held,
// admissions, evictions, hits and misses summed over every table — and, for a sharded collection, over
// every row shard of every rank (a collective sum: each rank counts the ids routed to its shards).
import { EmbeddingCollection } from '../collection.js';
import { ShardedEmbeddingCollection } from '../sharded/sharded.js';

export interface DynamicTotals {
  tables: number;
  /** row shards (a sharded collection) or tables (one collection) */
  maps: number;
  rows: number;
  admissions: number;
  evictions: number;
  hits: number;
  misses: number;
}

/**
 * The totals of `emb`'s dynamic tables, or undefined when it has none (or is another kind of module). For
 * a sharded collection a collective: every rank calls it, and every rank gets the sums.
 */
export async function dynamicTotals(emb: unknown): Promise<DynamicTotals | undefined> {
  let tables: number, list: { rows: number; admissions: number; evictions: number; hits: number; misses: number }[];
  if (emb instanceof ShardedEmbeddingCollection) {
    tables = emb.plan.tables.filter((t) => t.dynamic).length;
    list = emb.stats();
  } else if (emb instanceof EmbeddingCollection) {
    list = Object.values(emb.stats());
    tables = list.length;
  } else return undefined;
  if (tables === 0) return undefined;
  const v = Float64Array.of(list.length, ...(['rows', 'admissions', 'evictions', 'hits', 'misses'] as const).map((k) => list.reduce((n, s) => n + s[k], 0)));
  if (emb instanceof ShardedEmbeddingCollection) await emb.group.allReduce(v, 'sum');
  return { tables, maps: v[0]!, rows: v[1]!, admissions: v[2]!, evictions: v[3]!, hits: v[4]!, misses: v[5]! };
}

/** The summary line of `embshard train`. */
export function dynamicLine(d: DynamicTotals): string {
  const seen = d.hits + d.misses;
  return `dynamic tables: ${d.tables} in ${d.maps} id map(s), ${d.rows.toLocaleString()} rows held, ${d.admissions.toLocaleString()} admissions, ` +
    `${d.evictions.toLocaleString()} evictions, ${((100 * d.hits) / Math.max(seen, 1)).toFixed(1)}% of ids found their row`;
}

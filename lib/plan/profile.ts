// profile.ts — profileAccess: measures each table's access statistics from sample batches — the K most
// frequent ids (counted exactly by the addon, native/shard/id_count.h, off the event loop), their counts,
// and a Zipf exponent fitted on the frequency ranks — as a hot-id remap (`hotIds`: those ids become rows
// 0 … K−1, remap.ts) and access statistics in row space (the hot rows' counts — small ones smoothed to the
// fitted law — then a Zipf tail, in row order when the ids were frequency-ordered, shuffled otherwise).
// It also reports how far the ids already were frequency-ordered (`hotPrefixShare`).
import type { JaggedBatch } from '../batch.js';
import { EmbshardError } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import type { IdArray } from '../binding.js';
import { loadAddon } from '../native.js';
import { AccessModel } from './access.js';
import { normalizeTables } from './tables.js';
import type { AccessStats, Table, TableSpec } from './types.js';

export interface TableProfile {
  table: string;
  /** access statistics in row space (after the remap): put in the table spec's `access` */
  access: AccessStats;
  /** the most frequent ids (hit at least minHits times, at most topK), hottest first (ties: lower id first): the table spec's `hotIds` */
  hotIds: number[];
  /** Zipf exponent fitted on the frequency ranks */
  zipf: number;
  /** whether the ids outside `hotIds` were still frequency-ordered (then the tail keeps the Zipf order by row) */
  tail: 'ordered' | 'shuffled';
  lookups: number;
  distinct: number;
  /** share of the lookups that hit `hotIds` */
  hotMass: number;
  /** share of the hot ids that are < their number (1 when the ids were already frequency-ordered) */
  hotPrefixShare: number;
}

export interface ProfileOptions {
  /** at most this many hot ids per table, the most frequent first (default 262144) */
  topK?: number;
  /** an id is hot only when the samples hit it at least this often (default 2: once is the tail's noise) */
  minHits?: number;
  /** fit the exponent on ranks with at least this many hits (default 5) */
  minCount?: number;
  /**
   * hot ids hit fewer times than this are ranked by their counts but planned from the fitted Zipf law (same
   * total mass): small counts are a staircase of sampling noise the planner's search trips on (default 20)
   */
  smoothBelow?: number;
}

interface PlacementAddon {
  placement: { countTop(parts: { ids: IdArray; what: string }[], rows: number, k: number, minCount: number): Promise<{ ids: BigInt64Array; counts: Float64Array; total: number; distinct: number; tailLow: number }> };
}

/** Least-squares slope of log(count) on log(rank + 1.5) over well-populated ranks (the sampler's p_i ∝ ≈ (i + 1.5)^−α). */
function fitZipf(counts: Float64Array, minCount: number): number {
  let n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (let i = 0; i < counts.length; i++) {
    if (counts[i]! < minCount) continue;
    const x = Math.log(i + 1.5), y = Math.log(counts[i]!);
    n++;
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  if (n < 3) return 0;
  const slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  return Math.max(0, Math.min(10, -slope));
}

const PROFILE_FIELDS = fieldsOf<ProfileOptions>({ topK: true, minHits: true, minCount: true, smoothBelow: true });

/** counts[i] for the ranks i whose count is below `below`: the fitted law p_i ∝ (i + 1.5)^−α from the last count above, scaled to the same sum. */
function smoothCounts(counts: Float64Array, alpha: number, below: number): number[] {
  const out = Array.from(counts);
  const j = out.findIndex((x) => x < below);
  if (j <= 0) return out;
  let measured = 0, shape = 0;
  for (let i = j; i < out.length; i++) (measured += out[i]!), (shape += Math.pow((j + 0.5) / (i + 1.5), alpha));
  for (let i = j; i < out.length; i++) out[i] = (Math.pow((j + 0.5) / (i + 1.5), alpha) * measured) / shape;
  return out;
}

/** Access statistics and hot ids of every table from sample batches (e.g. one per rank, or several steps). */
export async function profileAccess(batches: readonly JaggedBatch[], tablesIn: readonly TableSpec[] | readonly Table[], opts: ProfileOptions = {}): Promise<TableProfile[]> {
  rejectUnknownFields(opts, PROFILE_FIELDS);
  const tables = normalizeTables(tablesIn);
  if (!Array.isArray(batches) || batches.length === 0) throw new EmbshardError('INVALID_ARGUMENT', 'batches must be a non-empty array of JaggedBatch');
  const K = opts.topK ?? 262_144, minHits = opts.minHits ?? 2, minCount = opts.minCount ?? 5, smoothBelow = opts.smoothBelow ?? 20;
  if (!Number.isSafeInteger(K) || K < 0) throw new EmbshardError('INVALID_CONFIG', `topK: must be a non-negative integer (got ${String(K)})`);
  if (!Number.isSafeInteger(minHits) || minHits < 1) throw new EmbshardError('INVALID_CONFIG', `minHits: must be a positive integer (got ${String(minHits)})`);
  if (typeof minCount !== 'number' || !(minCount >= 1)) throw new EmbshardError('INVALID_CONFIG', `minCount: must be a number ≥ 1 (got ${String(minCount)})`);
  if (typeof smoothBelow !== 'number' || !(smoothBelow >= 0)) throw new EmbshardError('INVALID_CONFIG', `smoothBelow: must be a number ≥ 0 (got ${String(smoothBelow)})`);
  const native = (loadAddon() as unknown as PlacementAddon).placement;
  return Promise.all(
    tables.map(async (t) => {
      const parts: { ids: IdArray; what: string }[] = [];
      batches.forEach((b, bi) => {
        for (const f of t.features) if (b.features.includes(f)) parts.push({ ids: b.feature(f).ids, what: `batches[${bi}] feature '${f}' (table '${t.name}')` });
      });
      const c = await native.countTop(parts, t.rows, Math.min(K, t.rows), minHits);
      const hotIds = Array.from(c.ids, Number);
      let hot = 0, prefix = 0;
      hotIds.forEach((id, i) => {
        hot += c.counts[i]!;
        if (id < hotIds.length) prefix++;
      });
      const zipf = fitZipf(c.counts, minCount);
      // the tail (ids outside hotIds, most kept on their rows): frequency-ordered or shuffled, whichever
      // predicts better the share of its lookups in the lowest 1/16 of the rows past K (shuffled: 1/16;
      // ordered: that range's share of the fitted Zipf tail)
      const tailLookups = c.total - hot;
      let tail: 'ordered' | 'shuffled' = 'shuffled';
      if (tailLookups > 0 && c.tailLow > 0) {
        const k = hotIds.length, z = new AccessModel(t.rows, { zipf });
        const ordered = z.mass(k, k + Math.floor((t.rows - k) / 16)) / z.mass(k, t.rows);
        const seen = c.tailLow / tailLookups;
        if (Math.abs(Math.log(seen / ordered)) < Math.abs(Math.log(seen * 16))) tail = 'ordered';
      }
      const access: AccessStats = c.total > 0 ? { zipf, top: { counts: smoothCounts(c.counts, zipf, smoothBelow), total: c.total }, ...(tail === 'shuffled' ? { tail } : {}) } : {};
      return {
        table: t.name, access, hotIds, zipf, tail, lookups: c.total, distinct: c.distinct,
        hotMass: c.total > 0 ? hot / c.total : 0, hotPrefixShare: hotIds.length > 0 ? prefix / hotIds.length : 1,
      };
    }),
  );
}

/** The table specs with `access` and `hotIds` replaced by profiled ones. */
export function withProfiledAccess<T extends TableSpec>(tables: readonly T[], profiles: readonly TableProfile[]): T[] {
  const byName = new Map(profiles.map((p) => [p.table, p]));
  return tables.map((t) => {
    const p = byName.get(t.name);
    return p ? { ...t, access: p.access, hotIds: p.hotIds } : t;
  });
}

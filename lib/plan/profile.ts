// profile.ts — profileAccess: measures each table's access statistics from sample batches — the counts of
// its hottest rows (hot rows are the lowest ids, see types.ts) and a fitted Zipf exponent — and checks that
// assumption: the share of the k most frequent rows that are among the k lowest ids.
import type { JaggedBatch } from '../batch.js';
import { EmbshardError } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { normalizeTables } from './tables.js';
import type { AccessStats, Table, TableSpec } from './types.js';

export interface TableProfile {
  table: string;
  /** stats to put in the table spec's `access` */
  access: AccessStats;
  lookups: number;
  distinct: number;
  /** share of the k most frequent rows whose id is < k (1 when hot rows are the lowest ids) */
  hotPrefixShare: number;
}

export interface ProfileOptions {
  /** how many of the lowest row ids to count exactly (default 1024) */
  topK?: number;
  /** fit the exponent on ranks with at least this many hits (default 5) */
  minCount?: number;
}

/** Least-squares slope of log(count) on log(rank + 1.5) over well-populated head rows (the sampler's p_i ∝ ≈ (i + 1.5)^−α). */
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

const PROFILE_FIELDS = fieldsOf<ProfileOptions>({ topK: true, minCount: true });

/** Access statistics of every table from sample batches (e.g. one per rank, or several steps). */
export function profileAccess(batches: readonly JaggedBatch[], tablesIn: readonly TableSpec[] | readonly Table[], opts: ProfileOptions = {}): TableProfile[] {
  rejectUnknownFields(opts, PROFILE_FIELDS);
  const tables = normalizeTables(tablesIn);
  if (!Array.isArray(batches) || batches.length === 0) throw new EmbshardError('INVALID_ARGUMENT', 'batches must be a non-empty array of JaggedBatch');
  const K = opts.topK ?? 1024, minCount = opts.minCount ?? 5;
  return tables.map((t) => {
    const parts: Float64Array[] = [];
    let n = 0;
    batches.forEach((b, bi) => {
      for (const f of t.features) {
        if (!b.features.includes(f)) continue;
        const ids = b.feature(f).ids;
        const a = new Float64Array(ids.length);
        if (ids instanceof BigInt64Array) for (let i = 0; i < ids.length; i++) a[i] = Number(ids[i]!);
        else a.set(ids);
        for (let i = 0; i < a.length; i++)
          if (!(a[i]! >= 0 && a[i]! < t.rows)) throw new EmbshardError('ID_OUT_OF_RANGE', `batches[${bi}] feature '${f}': id ${a[i]} is outside table '${t.name}' (${t.rows} rows)`);
        parts.push(a);
        n += a.length;
      }
    });
    const all = new Float64Array(n);
    let o = 0;
    for (const p of parts) (all.set(p, o), (o += p.length));
    all.sort();
    const k = Math.min(K, t.rows);
    const counts = new Float64Array(k);
    const runs: number[] = [];
    let distinct = 0;
    for (let i = 0; i < n; ) {
      let j = i;
      while (j < n && all[j] === all[i]) j++;
      distinct++;
      if (all[i]! < k) counts[all[i]!] = j - i;
      runs.push(j - i);
      i = j;
    }
    // the k most frequent rows: how many have id < k (ties at the threshold count in the prefix's favour)
    const sortedRuns = runs.slice().sort((x, y) => y - x);
    const kk = Math.min(k, sortedRuns.length);
    let share = 1;
    if (kk > 0) {
      const thr = sortedRuns[kk - 1]!;
      let above = 0;
      for (const r of sortedRuns) if (r > thr) above++;
      let prefixAbove = 0, prefixAt = 0;
      for (let i = 0; i < k; i++) {
        if (counts[i]! > thr) prefixAbove++;
        else if (counts[i]! === thr && thr > 0) prefixAt++;
      }
      share = Math.min(1, (prefixAbove + Math.min(prefixAt, kk - above)) / kk);
    }
    const access: AccessStats = n > 0 ? { zipf: fitZipf(counts, minCount), top: { counts: Array.from(counts), total: n } } : {};
    return { table: t.name, access, lookups: n, distinct, hotPrefixShare: share };
  });
}

/** The table specs with `access` replaced by profiled statistics. */
export function withProfiledAccess<T extends TableSpec>(tables: readonly T[], profiles: readonly TableProfile[]): T[] {
  const byName = new Map(profiles.map((p) => [p.table, p]));
  return tables.map((t) => {
    const p = byName.get(t.name);
    return p ? { ...t, access: p.access } : t;
  });
}

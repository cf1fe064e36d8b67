// remap.ts — the hot-row id remap of a table: its profiled hot ids (hottest first) become the dense rows
// [0, K), so the hot-row tiers (rows from 0) hold exactly them whatever their ids. The map is a bijection
// of [0, rows) that moves as few ids as it can: hot id i → row i; the cold ids found in [0, K) (ascending)
// take, in order, the rows left by the hot ids ≥ K (ascending); every other id keeps its row. This file
// defines it once (the moved pairs); the runtime applies those pairs natively (native/shard/id_remap.h),
// measureTraffic here. docs/placement.md describes it.
import { EmbshardError, type ErrorCode } from '../errors.js';
import { shown } from '../shown.js';
import type { Table } from './types.js';

export class IdRemap {
  readonly rows: number;
  /** the hot ids, hottest first: hot[i] is stored at row i */
  readonly hot: readonly number[];
  /** the moved ids and the rows they move to (every id not listed keeps its row) */
  readonly from: Float64Array;
  readonly to: Float64Array;
  private fwd: Map<number, number> | undefined;

  /** Validates `hot` (distinct integers in [0, rows)); errors name `path`. */
  constructor(rows: number, hot: readonly number[], path = 'hotIds', code: ErrorCode = 'INVALID_CONFIG') {
    if (!Array.isArray(hot)) throw new EmbshardError(code, `${path}: must be an array of row ids`, { path });
    if (hot.length > rows) throw new EmbshardError(code, `${path}: lists ${hot.length} ids but the table has ${rows} rows`, { path });
    const seen = new Set<number>();
    hot.forEach((id, i) => {
      if (!Number.isSafeInteger(id) || id < 0 || id >= rows) throw new EmbshardError(code, `${path}[${i}]: must be an integer in [0, ${rows}) (got ${shown(id)})`, { path: `${path}[${i}]` });
      if (seen.has(id)) throw new EmbshardError(code, `${path}[${i}]: id ${id} is listed twice`, { path: `${path}[${i}]` });
      seen.add(id);
    });
    this.rows = rows;
    this.hot = Object.freeze([...hot]);
    const K = hot.length;
    const from: number[] = [], to: number[] = [];
    const left: number[] = []; // rows ≥ K that hot ids leave
    hot.forEach((id, i) => {
      if (id !== i) (from.push(id), to.push(i));
      if (id >= K) left.push(id);
    });
    left.sort((a, b) => a - b);
    let j = 0;
    for (let c = 0; c < K; c++) if (!seen.has(c)) (from.push(c), to.push(left[j++]!));
    this.from = Float64Array.from(from);
    this.to = Float64Array.from(to);
  }

  /** Row of every id in `ids` (in place); ids outside [0, rows) are left as they are. */
  applyInPlace(ids: Float64Array): void {
    if (this.from.length === 0) return;
    const m = (this.fwd ??= new Map(Array.from(this.from, (f, i) => [f, this.to[i]!])));
    for (let i = 0; i < ids.length; i++) {
      const r = m.get(ids[i]!);
      if (r !== undefined) ids[i] = r;
    }
  }
}

const remaps = new WeakMap<object, IdRemap | null>();

/** The (cached) remap of a table, or undefined when it has no hot ids. */
export function remapOf(t: Table): IdRemap | undefined {
  let r = remaps.get(t);
  if (r === undefined) {
    r = t.hotIds && t.hotIds.length > 0 ? new IdRemap(t.rows, t.hotIds) : null;
    remaps.set(t, r);
  }
  return r ?? undefined;
}

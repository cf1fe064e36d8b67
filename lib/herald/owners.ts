// owners.ts — who owns which rows in Herald scheduling: every table is split into W contiguous row ranges,
// range p on rank p (rows ⌊rows·p/W⌋ … ⌊rows·(p+1)/W⌋ − 1), and a row is named by one global key,
// rowBase[table] + row, so rows of all tables share one key space. A rank's engine holds its own range
// (engine ids 0 … owned − 1) followed by its cache slots for the table (engine ids owned … owned + slots − 1).
import { EmbshardError } from '../errors.js';

/** A table as the scheduler sees it. */
export interface HeraldTable {
  name: string;
  rows: number;
  dim: number;
  /** floats of optimizer state per row (moved with the row) */
  stateWidth: number;
  /** features that look up this table, in batch order */
  features: readonly string[];
}

export class RowOwners {
  readonly T: number;
  /** key of row 0 of each table */
  readonly rowBase: Float64Array;
  /** cache slots per rank for each table: min(cacheRows, rows) */
  readonly slots: Int32Array;

  constructor(
    readonly tables: readonly HeraldTable[],
    readonly W: number,
    cacheRows: number,
  ) {
    if (!Number.isSafeInteger(W) || W < 1) throw new EmbshardError('INVALID_ARGUMENT', `world size must be a positive integer (got ${W})`);
    if (!Number.isSafeInteger(cacheRows) || cacheRows < 0)
      throw new EmbshardError('INVALID_CONFIG', `cacheRows must be a non-negative integer (got ${String(cacheRows)})`);
    this.T = tables.length;
    this.rowBase = new Float64Array(this.T + 1);
    this.slots = new Int32Array(this.T);
    tables.forEach((t, i) => {
      this.rowBase[i + 1] = this.rowBase[i]! + t.rows;
      this.slots[i] = Math.min(cacheRows, t.rows);
    });
  }

  /** First row of rank p's range of table t. */
  lo(t: number, p: number): number {
    return Math.floor((this.tables[t]!.rows * p) / this.W);
  }

  /** Rows of table t that rank p owns. */
  owned(t: number, p: number): number {
    return this.lo(t, p + 1) - this.lo(t, p);
  }

  /** The rank owning row `row` of table t (the largest p with lo(t, p) ≤ row). */
  ownerOf(t: number, row: number): number {
    const rows = this.tables[t]!.rows;
    let p = Math.ceil(((row + 1) * this.W) / rows) - 1;
    // guard the float division at range edges
    while (p > 0 && this.lo(t, p) > row) p--;
    while (p < this.W - 1 && this.lo(t, p + 1) <= row) p++;
    return p;
  }

  /** The table a global key belongs to. */
  tableOf(key: number): number {
    const b = this.rowBase;
    let t = 0;
    while (t + 1 < this.T && b[t + 1]! <= key) t++;
    return t;
  }
}

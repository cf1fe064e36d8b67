// dynamic-oracle.ts — a naive model of a dynamic table, written from the rules in docs/storage.md
// ("Dynamic tables"): JS Maps from raw id to (count, last use) for held rows and for candidates, linear
// scans for the coldest row and the oldest candidate; and the init of an admitted row as a pure function
// of the id (BigInt SplitMix64, as the docs state). Rows live in the test/embedding Oracle's tables: every
// admission gets a fresh oracle row, row 0 is the sink (zero, reset after each backward). With `spill`, an
// evicted id keeps its oracle row (values and state untouched) and takes it back when it is admitted again.
import { roundTo } from '../embedding/oracle.js';

const M64 = (1n << 64n) - 1n;

/** SplitMix64's finaliser (core/rng.h mix64) on 64-bit unsigned bigints. */
export function mix64(z: bigint): bigint {
  z = (z + 0x9e3779b97f4a7c15n) & M64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M64;
  return z ^ (z >> 31n);
}

/** Uniform init of element `elem` of table `table`: low + (high - low) · u, u from the top 24 hash bits. */
export function initUniform(low: number, high: number, seed: number, table: number, elem: bigint): number {
  const f = Math.fround;
  const h = mix64(mix64(mix64(BigInt(seed)) ^ BigInt(table)) ^ (elem & M64));
  const u = Number(h >> 40n) / 16777216;
  const a = f(low), b = f(high);
  return f(a + f(f(b - a) * u));
}

export interface NaiveSpec {
  capacity: number;
  minCount: number;
  candidates: number;
  eviction: 'lru' | 'lfu';
  /** evicted rows are kept and come back on re-admission (instead of a fresh init) */
  spill?: boolean;
}

/** The held ids and candidates of one dynamic table, and its counters. */
export class NaiveDynamicMap {
  readonly held = new Map<bigint, { count: number; last: number; usedStep: number; row: number }>();
  readonly cand = new Map<bigint, { count: number; last: number }>();
  /** spilled ids → their oracle rows */
  readonly spilled = new Map<bigint, number>();
  tick = 0;
  step = 0;
  stats = { hits: 0, misses: 0, admissions: 0, evictions: 0 };
  constructor(readonly spec: NaiveSpec) {}

  /**
   * One training step over the table's id occurrences (in batch order). `newRow(id)` gives the oracle
   * row of an admitted id. Returns each occurrence's oracle row (0 = the sink).
   */
  translate(ids: readonly bigint[], newRow: (id: bigint) => number): number[] {
    this.step++;
    const order: bigint[] = [];
    const occ = new Map<bigint, number>();
    for (const id of ids) {
      this.tick++;
      const h = this.held.get(id);
      if (h) {
        this.stats.hits++;
        h.count++;
        h.last = this.tick;
        h.usedStep = this.step;
        continue;
      }
      this.stats.misses++;
      if (!occ.has(id)) order.push(id);
      occ.set(id, (occ.get(id) ?? 0) + 1);
      if (this.spec.minCount > 1) {
        const c = this.cand.get(id);
        if (c) {
          c.count++;
          c.last = this.tick;
        } else {
          if (this.cand.size >= this.spec.candidates) {
            let oldest: bigint | undefined, at = Infinity;
            for (const [k, v] of this.cand) if (v.last < at) { at = v.last; oldest = k; }
            this.cand.delete(oldest!);
          }
          this.cand.set(id, { count: 1, last: this.tick });
        }
      }
    }
    for (const id of order) {
      const seen = this.spec.minCount > 1 ? this.cand.get(id)?.count ?? 0 : occ.get(id)!;
      if (seen < this.spec.minCount) continue;
      if (this.held.size >= this.spec.capacity) {
        let victim: bigint | undefined;
        let best: [number, number] = [Infinity, Infinity];
        for (const [k, v] of this.held) {
          if (v.usedStep === this.step) continue;
          const key: [number, number] = [this.spec.eviction === 'lfu' ? v.count : 0, v.last];
          if (key[0] < best[0] || (key[0] === best[0] && key[1] < best[1])) { best = key; victim = k; }
        }
        if (victim === undefined) break;
        if (this.spec.spill) this.spilled.set(victim, this.held.get(victim)!.row);
        this.held.delete(victim);
        this.stats.evictions++;
      }
      this.cand.delete(id);
      const back = this.spilled.get(id);
      this.spilled.delete(id);
      this.held.set(id, { count: seen, last: ++this.tick, usedStep: this.step, row: back ?? newRow(id) });
      this.stats.admissions++;
    }
    return ids.map((id) => this.held.get(id)?.row ?? 0);
  }

  /** Oracle rows of ids without touching anything (0 for ids not held). */
  lookup(ids: readonly bigint[]): number[] {
    return ids.map((id) => this.held.get(id)?.row ?? 0);
  }
}

/** Fills oracle row `row` with the init of raw id `id` (uniform low..high), rounded to the dtype. */
export function initRow(w: Float64Array, row: number, dim: number, dtype: 'fp32' | 'fp16' | 'bf16', low: number, high: number, seed: number, table: number, id: bigint): void {
  const u = BigInt.asUintN(64, id);
  for (let c = 0; c < dim; c++) w[row * dim + c] = roundTo(dtype, initUniform(low, high, seed, table, u * BigInt(dim) + BigInt(c)));
}

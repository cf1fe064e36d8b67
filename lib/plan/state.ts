// state.ts — the planner's working state: tables, their layouts, each table's expected Load (cost model),
// the running total, per-rank memory, and trial evaluation of a changed layout without committing it.
import { addExpectedTableLoad, type CostContext } from './cost-model.js';
import { addLayoutMemory, layoutRefusal, type TableLayout } from './layout.js';
import { Load } from './load.js';
import { objective } from './simulator.js';
import type { Table } from './types.js';

export interface Score {
  /** critical-path time of the embedding stage, seconds */
  time: number;
  /** Σ_r (per-rank time)², the tie-breaker */
  spread: number;
}

/** a better than b (strictly lower time, or equal time and a smaller spread). */
export function better(a: Score, b: Score): boolean {
  if (a.time < b.time * (1 - 1e-9)) return true;
  return a.time <= b.time * (1 + 1e-12) && a.spread < b.spread * (1 - 1e-9);
}

export class PlanState {
  readonly tables: readonly Table[];
  readonly ctx: CostContext;
  readonly layouts: (TableLayout | undefined)[];
  readonly contrib: (Load | undefined)[];
  readonly total: Load;
  readonly mem: Float64Array;
  private readonly scratch: Load;
  private readonly times: Float64Array;

  constructor(tables: readonly Table[], ctx: CostContext) {
    this.tables = tables;
    this.ctx = ctx;
    this.layouts = tables.map(() => undefined);
    this.contrib = tables.map(() => undefined);
    this.total = new Load(ctx.topo);
    this.scratch = new Load(ctx.topo);
    this.mem = new Float64Array(ctx.topo.worldSize);
    this.times = new Float64Array(6 * ctx.topo.worldSize);
  }

  get W(): number {
    return this.ctx.topo.worldSize;
  }

  loadOf(ti: number, l: TableLayout): Load {
    const load = new Load(this.ctx.topo);
    addExpectedTableLoad(this.tables[ti]!, l, this.ctx, load);
    return load;
  }

  /** Whether table ti may take layout l (layoutRefusal) and every rank stays within its memory limit then. */
  fits(ti: number, l: TableLayout): boolean {
    if (layoutRefusal(this.tables[ti]!, l)) return false;
    const delta = new Float64Array(this.W);
    addLayoutMemory(this.tables[ti]!, l, this.ctx.topo, delta);
    const old = this.layouts[ti];
    if (old) addLayoutMemory(this.tables[ti]!, old, this.ctx.topo, delta, -1);
    const lim = this.ctx.topo.memoryLimitBytes;
    for (let r = 0; r < this.W; r++) if (delta[r]! > 0 && this.mem[r]! + delta[r]! > lim) return false;
    return true;
  }

  score(): Score & { perRank: Float64Array } {
    return objective(this.total, this.ctx.topo, this.times, this.ctx.hierarchical);
  }

  /** The score if table ti took layout l (with its precomputed load). */
  trial(ti: number, load: Load): Score {
    const s = this.scratch;
    s.data.set(this.total.data);
    const old = this.contrib[ti];
    if (old) s.addLoad(old, -1);
    s.addLoad(load);
    const o = objective(s, this.ctx.topo, this.times, this.ctx.hierarchical);
    return { time: o.time, spread: o.spread };
  }

  set(ti: number, l: TableLayout, load = this.loadOf(ti, l)): void {
    const t = this.tables[ti]!;
    const old = this.layouts[ti];
    if (old) {
      addLayoutMemory(t, old, this.ctx.topo, this.mem, -1);
      this.total.addLoad(this.contrib[ti]!, -1);
    }
    this.layouts[ti] = l;
    this.contrib[ti] = load;
    addLayoutMemory(t, l, this.ctx.topo, this.mem);
    this.total.addLoad(load);
  }

  /** Per-rank time of the current total (what "most loaded" means). */
  perRank(): Float64Array {
    return this.score().perRank;
  }

  complete(): TableLayout[] {
    return this.layouts.map((l, i) => {
      if (!l) throw new Error(`internal: table ${this.tables[i]!.name} has no layout`);
      return l;
    });
  }
}

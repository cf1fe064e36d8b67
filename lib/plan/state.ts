// state.ts — the planner's working state: tables, their layouts, each table's expected Load (cost model),
// the running total, per-rank memory, and trial evaluation of a changed layout without committing it; and
// the few first ranks in an order (the least loaded) picked without sorting every rank.
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

/** Up to this many first ranks are picked by selection; more by sorting them all. */
const SELECT_RANKS = 64;

/**
 * The first k of ranks 0 … W − 1 in the order `cmp` (a total order: ties broken by rank), exactly as sorting
 * them all would give, in O(W · k) for small k: the planner mostly wants a few least-loaded ranks of many.
 */
export function firstRanks(W: number, k: number, cmp: (x: number, y: number) => number): number[] {
  k = Math.min(k, W);
  if (k > SELECT_RANKS) return Array.from({ length: W }, (_, r) => r).sort(cmp).slice(0, k);
  const out: number[] = [];
  for (let r = 0; r < W && k > 0; r++) {
    const full = out.length === k;
    if (full && cmp(r, out[k - 1]!) >= 0) continue;
    let j = full ? k - 1 : out.length;
    for (; j > 0 && cmp(r, out[j - 1]!) < 0; j--) out[j] = out[j - 1]!;
    out[j] = r;
  }
  return out;
}

/** Ranks 0 … W − 1 in the order `cmp` (a total order), the first few by selection, the rest sorted only when asked for. */
export function* ranksInOrder(W: number, cmp: (x: number, y: number) => number): Generator<number> {
  const head = firstRanks(W, 8, cmp);
  yield* head;
  if (head.length === W) return;
  const all = Array.from({ length: W }, (_, r) => r).sort(cmp);
  for (let i = head.length; i < W; i++) yield all[i]!;
}

export class PlanState {
  readonly tables: readonly Table[];
  readonly ctx: CostContext;
  readonly layouts: (TableLayout | undefined)[];
  readonly contrib: (Load | undefined)[];
  readonly total: Load;
  readonly mem: Float64Array;
  /** contrib[ti] was computed by set() itself, so no one else holds it: the next set() of ti may refill it */
  private readonly owned: boolean[];
  private scratchLoad: Load | undefined;
  private readonly delta: Float64Array;
  private readonly times: Float64Array;

  constructor(tables: readonly Table[], ctx: CostContext) {
    this.tables = tables;
    this.ctx = ctx;
    this.layouts = tables.map(() => undefined);
    this.contrib = tables.map(() => undefined);
    this.owned = tables.map(() => false);
    this.total = new Load(ctx.topo);
    this.mem = new Float64Array(ctx.topo.worldSize);
    this.delta = new Float64Array(ctx.topo.worldSize);
    this.times = new Float64Array(6 * ctx.topo.worldSize);
  }

  get W(): number {
    return this.ctx.topo.worldSize;
  }

  /** The expected load of table ti under layout l: a new Load, or `into` cleared and refilled. */
  loadOf(ti: number, l: TableLayout, into?: Load): Load {
    const load = into ?? new Load(this.ctx.topo);
    if (into) into.clear();
    addExpectedTableLoad(this.tables[ti]!, l, this.ctx, load);
    return load;
  }

  /** A Load the state keeps for one-off evaluations (aloneCost, trial): its contents last until the next use. */
  scratch(): Load {
    return (this.scratchLoad ??= new Load(this.ctx.topo));
  }

  /** Whether table ti may take layout l (layoutRefusal) and every rank stays within its memory limit then. */
  fits(ti: number, l: TableLayout): boolean {
    if (layoutRefusal(this.tables[ti]!, l)) return false;
    const delta = this.delta;
    delta.fill(0);
    addLayoutMemory(this.tables[ti]!, l, this.ctx.topo, delta);
    const old = this.layouts[ti];
    if (old) addLayoutMemory(this.tables[ti]!, old, this.ctx.topo, delta, -1);
    const lim = this.ctx.topo.memoryLimitBytes;
    for (let r = 0; r < this.W; r++) if (delta[r]! > 0 && this.mem[r]! + delta[r]! > lim) return false;
    return true;
  }

  score(): Score & { perRank: Float64Array } {
    return this.objective(this.total);
  }

  /** The objective of `load` (the state's stage-time buffer reused). */
  objective(load: Load): Score & { perRank: Float64Array } {
    return objective(load, this.ctx.topo, this.times, this.ctx.hierarchical);
  }

  /** The score if table ti took layout l (with its precomputed load). */
  trial(ti: number, load: Load): Score {
    const s = this.scratch();
    s.data.set(this.total.data);
    const old = this.contrib[ti];
    if (old) s.addLoad(old, -1);
    s.addLoad(load);
    const o = objective(s, this.ctx.topo, this.times, this.ctx.hierarchical);
    return { time: o.time, spread: o.spread };
  }

  /**
   * Table ti takes layout l with its expected `load` (computed here when not given: then into the buffer of
   * the table's previous load when set() computed that one too, so a table placed again and again does not
   * allocate a Load of every rank each time).
   */
  set(ti: number, l: TableLayout, load?: Load): void {
    const t = this.tables[ti]!;
    const old = this.layouts[ti];
    const oldLoad = this.contrib[ti];
    if (old) {
      addLayoutMemory(t, old, this.ctx.topo, this.mem, -1);
      this.total.addLoad(oldLoad!, -1);
    }
    const own = load === undefined;
    this.layouts[ti] = l;
    this.contrib[ti] = load ?? this.loadOf(ti, l, this.owned[ti] ? oldLoad : undefined);
    this.owned[ti] = own;
    addLayoutMemory(t, l, this.ctx.topo, this.mem);
    this.total.addLoad(this.contrib[ti]!);
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

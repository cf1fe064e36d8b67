// local-search.ts — the planner's refinement step: a local search over relocate and swap moves that takes a
// plan the greedy descent can no longer improve and keeps changing it while the predicted time drops.
//
// The greedy descent (planner.ts) only tries moves that unload the most loaded rank, one table at a time, so
// it stops in local minima that need a table to go somewhere a single "unload" move would not send it, or
// two tables to change together (two dp tables that are each cheaper as a table-wise ub table only once the
// other has moved too; two tables whose ranks must be exchanged). Each round of the refinement evaluates,
// in a fixed order:
//   relocate  every table that loads a critical rank (each stage's slowest rank and the rank with the largest
//             per-rank time; the TABLES_PER_RANK most loading on each) to every whole-table placement: dp, and
//             rb or ub on one of the TARGET_RANKS least-loaded ranks; each of its shards on a critical rank to
//             each target rank; its cluster switched rb ↔ ub keeping its shards;
//   swap      a shard on a critical rank exchanged with a shard on one of the SWAP_RANKS least-loaded ranks
//             whose table puts less time there than the first one's table puts on the critical rank;
// and applies the one with the lowest predicted time if that is lower than the plan's by at least MIN_GAIN
// (relative); only when none is, it tries
//   pair      two of the PAIR_TABLES tables loading the critical ranks most, both relocated at once to
//             whole-table placements (dp, rb or ub on the PAIR_RANKS least-loaded ranks).
// Every move keeps every rank within its memory limit. The neighbourhoods are bounded (ranks and tables per
// round), so the number of moves a round tries does not grow with the model or the cluster. Deterministic:
// fixed orders, ties by index.
import { tableWiseLayout } from './baselines.js';
import { addLayoutMemory, cloneLayout, layoutRefusal, NO_TIERS, tierEnd, type TableLayout } from './layout.js';
import { Load } from './load.js';
import { objective, stageTimes, STAGES } from './simulator.js';
import { firstRanks, type PlanState, type Score } from './state.js';

/** least-loaded ranks a table or shard may be relocated to */
const TARGET_RANKS = 8;
/** tables per critical rank whose relocations are tried */
const TABLES_PER_RANK = 8;
/** least-loaded ranks whose shards may be swapped with a shard on a critical rank */
const SWAP_RANKS = 4;
/** tables whose pairs of relocations are tried together, and the ranks those go to */
const PAIR_TABLES = 6;
const PAIR_RANKS = 4;
/** the least relative gain in predicted time a move must bring (many tiny gains cost more search than they give) */
const MIN_GAIN = 1e-5;
/** whole-table loads kept between rounds (each is 24 × worldSize numbers) */
const MAX_CACHED_LOADS = 2048;

/** A new layout for table ti, with its expected load. */
export interface Change {
  ti: number;
  l: TableLayout;
  load: Load;
}

/** The ranks to unload: the one with the largest per-rank time, then each stage's slowest rank. */
export function criticalRanks(st: PlanState, per: Float64Array): number[] {
  const W = st.W;
  const t = stageTimes(st.total, st.ctx.topo, undefined, st.ctx.hierarchical);
  const out: number[] = [];
  let top = 0;
  for (let r = 1; r < W; r++) if (per[r]! > per[top]!) top = r;
  out.push(top);
  const stages = Array.from({ length: STAGES.length }, (_, k) => {
    let m = 0;
    for (let r = 1; r < W; r++) if (t[k * W + r]! > t[k * W + m]!) m = r;
    return { r: m, v: t[k * W + m]! };
  }).sort((a, b) => b.v - a.v);
  for (const { r, v } of stages) if (v > 0 && !out.includes(r)) out.push(r);
  return out;
}

/** Scores and memory checks of one or two tables changed at once, against the state's committed plan. */
class Trials {
  private readonly scratch: Load;
  private readonly times: Float64Array;
  private readonly delta: Float64Array;

  constructor(private readonly st: PlanState) {
    this.scratch = new Load(st.ctx.topo);
    this.times = new Float64Array(STAGES.length * st.W);
    this.delta = new Float64Array(st.W);
  }

  /** Whether every rank stays within its memory limit after the changes (distinct tables, all placed). */
  fits(changes: readonly Change[]): boolean {
    const { st, delta } = this;
    delta.fill(0);
    if (changes.some((c) => layoutRefusal(st.tables[c.ti]!, c.l))) return false;
    for (const c of changes) {
      addLayoutMemory(st.tables[c.ti]!, c.l, st.ctx.topo, delta);
      const old = st.layouts[c.ti];
      if (old) addLayoutMemory(st.tables[c.ti]!, old, st.ctx.topo, delta, -1);
    }
    const lim = st.ctx.topo.memoryLimitBytes;
    for (let r = 0; r < st.W; r++) if (delta[r]! > 0 && st.mem[r]! + delta[r]! > lim) return false;
    return true;
  }

  score(changes: readonly Change[]): Score {
    const { st, scratch } = this;
    const d = scratch.data, t = st.total.data;
    // scratch = total + Σ (new − old), in one pass
    const a = changes[0]!, b = changes[1];
    const na = a.load.data, oa = st.contrib[a.ti]!.data;
    if (!b) for (let i = 0; i < d.length; i++) d[i] = t[i]! + na[i]! - oa[i]!;
    else {
      const nb = b.load.data, ob = st.contrib[b.ti]!.data;
      for (let i = 0; i < d.length; i++) d[i] = t[i]! + na[i]! - oa[i]! + nb[i]! - ob[i]!;
    }
    const o = objective(scratch, st.ctx.topo, this.times, st.ctx.hierarchical);
    return { time: o.time, spread: o.spread };
  }
}

/** Whole-table placements: dp, then rb and ub on each of `ranks`. */
function wholeOptions(st: PlanState, ti: number, ranks: readonly number[]): TableLayout[] {
  const t = st.tables[ti]!;
  const out: TableLayout[] = [{ cluster: 'dp', tiers: NO_TIERS, groups: [] }];
  for (const q of ranks) {
    const l = tableWiseLayout(t, q);
    out.push(l, { ...l, cluster: 'ub' });
  }
  return out;
}

/** The same placement (cluster, tiers, rows and columns on the same ranks): a move that changes nothing. */
export function sameLayout(a: TableLayout, b: TableLayout): boolean {
  if (a.cluster !== b.cluster || a.tiers.replicated !== b.tiers.replicated || a.tiers.node !== b.tiers.node || a.groups.length !== b.groups.length) return false;
  return a.groups.every((g, i) => {
    const h = b.groups[i]!;
    return g.a === h.a && g.b === h.b && g.shards.length === h.shards.length && g.shards.every((s, k) => s.c0 === h.shards[k]!.c0 && s.c1 === h.shards[k]!.c1 && s.rank === h.shards[k]!.rank);
  });
}

/** Where one shard sits: table, row group, index in the group. */
interface ShardRef {
  ti: number;
  gi: number;
  si: number;
}

function withRanks(l: TableLayout, moves: readonly { gi: number; si: number; rank: number }[]): TableLayout {
  const c = cloneLayout(l);
  for (const m of moves) c.groups[m.gi]!.shards[m.si]!.rank = m.rank;
  return c;
}

/** One refinement round's neighbourhood, evaluated; the best strictly better change set, if any. */
class Round {
  private readonly trials: Trials;
  private best: { changes: Change[]; s: Score } | undefined;
  private readonly cur: Score;
  /** expected loads of whole-table placements, by table and placement (valid for the whole search) */
  private readonly loads: Map<string, Load>;
  /** single-shard moves evaluated this round, by shard and target rank */
  private readonly shardMoves = new Map<string, Change>();
  private late = false;

  constructor(private readonly st: PlanState, trials: Trials, loads: Map<string, Load>, private readonly deadline: number) {
    this.trials = trials;
    this.loads = loads;
    this.cur = st.score();
  }

  get result(): Change[] | undefined {
    return this.best?.changes;
  }

  /** The change to layout l of table ti: a whole-table placement's load comes from the search-wide cache. */
  change(ti: number, l: TableLayout): Change {
    const g = l.groups[0];
    const whole = l.cluster === 'dp' || (l.groups.length === 1 && g!.shards.length === 1 && tierEnd(l) === 0);
    if (!whole) return { ti, l, load: this.st.loadOf(ti, l) };
    const key = `${ti}|${l.cluster}|${g ? g.shards[0]!.rank : -1}`;
    let load = this.loads.get(key);
    if (!load) {
      if (this.loads.size >= MAX_CACHED_LOADS) this.loads.clear();
      load = this.st.loadOf(ti, l);
      this.loads.set(key, load);
    }
    return { ti, l, load };
  }

  /** Table ti with one shard moved to rank q (cached for the round: relocations and swaps share it). */
  moved(a: ShardRef, q: number): Change {
    const key = `${a.ti}|${a.gi}|${a.si}|${q}`;
    let c = this.shardMoves.get(key);
    if (!c) {
      c = this.change(a.ti, withRanks(this.st.layouts[a.ti]!, [{ gi: a.gi, si: a.si, rank: q }]));
      this.shardMoves.set(key, c);
    }
    return c;
  }

  /** Whether the deadline has passed (then the round costs no more moves; the best found so far still counts). */
  private over(): boolean {
    return this.late || (this.late = Date.now() >= this.deadline);
  }

  /** Costs the change set `make` gives (made only while the deadline has not passed). */
  consider(make: () => Change[]): void {
    if (this.over()) return;
    const changes = make();
    if (!this.trials.fits(changes)) return;
    const s = this.trials.score(changes);
    if (s.time < (this.best ? this.best.s.time : this.cur.time * (1 - MIN_GAIN))) this.best = { changes, s };
  }

  /** Relocations of one table: whole-table placements, its shards on `from` to each target, rb ↔ ub. */
  relocate(ti: number, from: readonly number[], targets: readonly number[]): void {
    const l = this.st.layouts[ti]!;
    for (const o of wholeOptions(this.st, ti, targets)) if (!sameLayout(o, l)) this.consider(() => [this.change(ti, o)]);
    if (l.cluster === 'dp') return;
    if (l.groups.length === 1 && l.groups[0]!.shards.length === 1 && tierEnd(l) === 0) return; // its shard moves and cluster switch are whole-table placements, tried above
    l.groups.forEach((g, gi) =>
      g.shards.forEach((s, si) => {
        if (!from.includes(s.rank)) return;
        for (const q of targets) if (q !== s.rank) this.consider(() => [this.moved({ ti, gi, si }, q)]);
      }),
    );
    this.consider(() => [this.change(ti, { ...cloneLayout(l), cluster: l.cluster === 'rb' ? 'ub' : 'rb' })]);
  }

  /**
   * Swaps of a shard on rank r with each shard on the `partners` ranks (other tables or the same one) whose
   * table puts less time on its rank than a's table puts on r (a swap with a heavier one only moves the peak).
   */
  swap(a: ShardRef, r: number, onRank: readonly ShardRef[][], partners: readonly number[], times: readonly Float64Array[]): void {
    const ta = times[a.ti]![r]!;
    for (const q of partners) {
      if (q === r) continue;
      for (const b of onRank[q]!) {
        if (times[b.ti]![q]! >= ta) continue;
        if (b.ti === a.ti) this.consider(() => [this.change(a.ti, withRanks(this.st.layouts[a.ti]!, [{ gi: a.gi, si: a.si, rank: q }, { gi: b.gi, si: b.si, rank: r }]))]);
        else this.consider(() => [this.moved(a, q), this.moved(b, r)]);
      }
    }
  }

  /** Both tables of each pair relocated at once to whole-table placements on `ranks`. */
  pairs(tables: readonly number[], ranks: readonly number[]): void {
    if (this.over()) return;
    const opts = tables.map((ti) => wholeOptions(this.st, ti, ranks).filter((o) => !sameLayout(o, this.st.layouts[ti]!)).map((o) => this.change(ti, o)));
    for (let i = 0; i < tables.length; i++)
      for (let j = i + 1; j < tables.length; j++) for (const a of opts[i]!) for (const b of opts[j]!) this.consider(() => [a, b]);
  }
}

/** Per table, its time on each rank summed over stages (its own load alone): which tables load a rank. */
function tableTimes(st: PlanState): Float64Array[] {
  const W = st.W, buf = new Float64Array(STAGES.length * W);
  return st.contrib.map((load) => {
    const per = new Float64Array(W);
    if (!load) return per;
    stageTimes(load, st.ctx.topo, buf, st.ctx.hierarchical);
    for (let k = 0; k < STAGES.length; k++) for (let r = 0; r < W; r++) per[r] += buf[k * W + r]!;
    return per;
  });
}

/**
 * Refines `st` in place with relocate, swap and pair moves (see the header) until none is strictly better,
 * `maxMoves` moves have been applied or the deadline passes; returns the number of moves applied.
 */
export function refine(st: PlanState, maxMoves: number, deadline: number): number {
  const W = st.W;
  const trials = new Trials(st);
  const loads = new Map<string, Load>();
  let moves = 0;
  for (; moves < maxMoves && Date.now() < deadline; moves++) {
    const per = st.score().perRank;
    // the least-loaded ranks: targets, swap partners (a critical rank left out) and pair ranks
    const ascending = firstRanks(W, Math.max(TARGET_RANKS, SWAP_RANKS + 1, PAIR_RANKS), (x, y) => per[x]! - per[y]! || x - y);
    const targets = ascending.slice(0, TARGET_RANKS);
    const critical = criticalRanks(st, per);
    const times = tableTimes(st);
    // the tables loading each critical rank most, in critical-rank order (each table once)
    const chosen: number[] = [];
    for (const r of critical) {
      const top = st.tables
        .map((_, ti) => ti)
        .filter((ti) => times[ti]![r]! > 0)
        .sort((a, b) => times[b]![r]! - times[a]![r]! || a - b)
        .slice(0, TABLES_PER_RANK);
      for (const ti of top) if (!chosen.includes(ti)) chosen.push(ti);
    }
    const onRank: ShardRef[][] = Array.from({ length: W }, () => []);
    st.layouts.forEach((l, ti) => l!.groups.forEach((g, gi) => g.shards.forEach((s, si) => onRank[s.rank]!.push({ ti, gi, si }))));
    const round = new Round(st, trials, loads, deadline);
    for (const ti of chosen) round.relocate(ti, critical, targets);
    for (const r of critical) {
      const partners = ascending.filter((q) => q !== r).slice(0, SWAP_RANKS);
      for (const a of onRank[r]!) if (chosen.includes(a.ti)) round.swap(a, r, onRank, partners, times);
    }
    if (!round.result) round.pairs(chosen.slice(0, PAIR_TABLES), ascending.slice(0, PAIR_RANKS));
    const changes = round.result;
    if (!changes) break;
    for (const c of changes) st.set(c.ti, c.l, c.load);
  }
  return moves;
}

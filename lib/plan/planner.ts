// planner.ts — planShards: EMBark-style search over clusters and 3D shards. From each start (an EMBark-style
// cluster assignment placed table-wise, the same without dp tables, and the best baseline under the cost
// model) a greedy descent repeatedly takes the most loaded rank and tries the moves that could unload it —
// move a shard, split a row group (at half the rows or half the access mass) or a shard's columns, switch a
// table's cluster (rb ↔ ub, → dp, dp → ub), promote hot rows into a replicated or per-node tier — keeping the
// best move that lowers the plan's critical-path time (ties: a smaller Σ per-rank time²), within every rank's
// memory limit, until no move helps. The best result is then refined by the local search of local-search.ts
// (relocate, swap and pair moves), alternating with the greedy descent until neither improves it. Under the
// hierarchical protocol on several nodes that search runs with replica syncs costed as flat all-gathers and
// its result is searched on under the real costs (docs/planner.md). The result is never worse than the best
// baseline under the cost model.
import { EmbshardError } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { accessModel } from './access.js';
import { BASELINES, baselineLayouts, rowBlocks, tableWiseLayout, type BaselineName } from './baselines.js';
import { DTYPES } from '../config.js';
import { MAX_BATCH_SIZE } from '../data/types.js';
import { COL_ALIGN, MIN_SHARD_COLS } from './constants.js';
import { addExpectedTableLoad, type CostContext } from './cost-model.js';
import { cloneLayout, NO_TIERS, tierEnd, type TableLayout } from './layout.js';
import { criticalRanks, refine, sameLayout } from './local-search.js';
import { EFF_BWD, EFF_FWD, Load, metric, RECV_INTER, RECV_INTRA, SENT_INTER, SENT_INTRA } from './load.js';
import { objective } from './simulator.js';
import { ShardPlan } from './shard-plan.js';
import { better, firstRanks, PlanState, ranksInOrder, type Score } from './state.js';
import { heldRowBytes, idsPerSample, normalizeTables, tableBytes } from './tables.js';
import { hierarchicalDefault, normalizeTopology } from './topology.js';
import { shown } from '../shown.js';
import type { PlanTableSpec, Table, Topology, WireDtypes } from './types.js';

/** HugeCTR's MLPerf configs make a table dp below DP_SHARDING_THRESHOLD = 0.008 GiB (one node) / 0.0125 GiB (multi-node). */
export const DP_THRESHOLD_ONE_NODE = 0.008 * 2 ** 30;
export const DP_THRESHOLD_MULTI_NODE = 0.0125 * 2 ** 30;

export interface PlanOptions {
  /** per-rank batch size */
  batchSize: number;
  wire?: Partial<WireDtypes>;
  /** search steps per start: greedy moves, then local-search and greedy moves from the best start with what it left (default 5000) */
  maxIterations?: number;
  /**
   * wall-clock budget of the search in ms, counted from the call (default 8000; Infinity: none). Once it has
   * passed, the greedy descents and local searches stop (checked before each candidate move is costed, so
   * they overrun it by at most one costing, O(worldSize)) and no further start is built. What it does not
   * bound, run whatever the budget: validating the input, the baselines and their costs (the plan is never
   * worse than the best of them; O(tables × worldSize) and more), one start (the best baseline, or the EMBark
   * ones when no baseline fits), the result costed under the real costs (two-phase search) and the plan's
   * validation. So a call takes about timeBudgetMs or that setup, whichever is longer, plus the last costing.
   */
  timeBudgetMs?: number;
  /** allow hot-row tiers (default true) */
  tiers?: boolean;
  /** also start from the best baseline (default true) */
  fromBaselines?: boolean;
  /**
   * the hierarchical rb / ub protocol (node-level reduction / deduplication, rail-aligned across nodes);
   * default: true when the topology has several nodes of more than one rank each; false forces the flat one
   */
  hierarchical?: boolean;
  meta?: Record<string, string>;
}

export interface BaselineReport {
  name: BaselineName;
  /** predicted embedding-stage seconds under the cost model, or null when it does not fit */
  time: number | null;
  reason?: string;
  layouts?: TableLayout[];
}

export interface PlanReport {
  plan: ShardPlan;
  /** predicted embedding-stage seconds of the plan (cost model) */
  time: number;
  baselines: BaselineReport[];
  start: string;
  iterations: number;
  elapsedMs: number;
}

/** Throws PLAN_INFEASIBLE when the tables cannot fit, naming the table and the shortfall in bytes. */
export function checkFeasible(tables: readonly Table[], topo: Topology): void {
  const lim = topo.memoryLimitBytes, W = topo.worldSize;
  for (const t of tables) {
    const rb = heldRowBytes(t, t.dim);
    if (rb > lim) throw new EmbshardError('PLAN_INFEASIBLE', `table '${t.name}': one row needs ${rb} bytes, more than a rank's limit of ${lim} bytes; short by ${rb - lim} bytes`, { table: t.name, shortfallBytes: rb - lim });
  }
  const sorted = tables.slice().sort((a, b) => tableBytes(b) - tableBytes(a));
  const total = sorted.reduce((s, t) => s + tableBytes(t), 0);
  const cap = lim * W;
  if (total <= cap) return;
  let cum = 0;
  for (const t of sorted) {
    cum += tableBytes(t);
    if (cum > cap) {
      const short = total - cap;
      throw new EmbshardError(
        'PLAN_INFEASIBLE',
        `table '${t.name}' cannot be placed: the model needs ${total} bytes (tables + optimizer state) but ${W} ranks × ${Math.floor(lim)} bytes hold ${Math.floor(cap)}; short by ${Math.ceil(short)} bytes`,
        { table: t.name, shortfallBytes: Math.ceil(short) },
      );
    }
  }
}

/** Rows of table t over the ranks in proportion to their free memory (consecutive blocks, rank order): fits whenever the free memory of all ranks together holds the table row by row. */
function rowsByFreeMemory(st: PlanState, t: Table): TableLayout['groups'] | undefined {
  const rb = heldRowBytes(t, t.dim), lim = st.ctx.topo.memoryLimitBytes;
  const cap = Array.from(st.mem, (m) => Math.max(0, Math.floor((lim - m) / rb)));
  const sum = cap.reduce((a, b) => a + b, 0);
  if (sum < t.rows) return undefined;
  const n = cap.map((c) => Math.floor((t.rows * c) / sum));
  for (let r = 0, left = t.rows - n.reduce((a, b) => a + b, 0); left > 0; r = (r + 1) % st.W) if (n[r]! < cap[r]!) (n[r]++, left--);
  const groups: TableLayout['groups'] = [];
  let a = 0;
  n.forEach((k, rank) => {
    if (k > 0) groups.push({ a, b: a + k, shards: [{ c0: 0, c1: t.dim, rank }] });
    a += k;
  });
  return groups;
}

/**
 * EMBark-style start: small tables dp (with `dp`), low-hotness / sequence tables ub, the rest rb; placed
 * table-wise on the least-loaded rank, row-split when a table fits on no single rank (over the 2, 4, … ranks
 * with the most free memory, then over all ranks in proportion to their free memory).
 */
function embarkStart(st: PlanState, dp: boolean): boolean {
  const topo = st.ctx.topo;
  const dpLimit = topo.worldSize > topo.ranksPerNode ? DP_THRESHOLD_MULTI_NODE : DP_THRESHOLD_ONE_NODE;
  const order = st.tables.map((t, i) => ({ i, c: tableBytes(t) * idsPerSample(t) })).sort((a, b) => b.c - a.c);
  for (const { i } of order) {
    const t = st.tables[i]!;
    if (dp && tableBytes(t) <= dpLimit) {
      const l: TableLayout = { cluster: 'dp', tiers: NO_TIERS, groups: [] };
      if (st.fits(i, l)) {
        st.set(i, l);
        continue;
      }
    }
    const cluster = t.pooling === 'none' || idsPerSample(t) <= 1 ? 'ub' : 'rb';
    const per = st.perRank();
    let done = false;
    for (const r of ranksInOrder(st.W, (x, y) => per[x]! - per[y]! || st.mem[x]! - st.mem[y]! || x - y)) {
      const l = { ...tableWiseLayout(t, r), cluster } as TableLayout;
      if (st.fits(i, l)) {
        st.set(i, l);
        done = true;
        break;
      }
    }
    for (let k = 2; !done && k <= st.W; k *= 2) {
      const byFree = firstRanks(st.W, k, (x, y) => st.mem[x]! - st.mem[y]! || x - y);
      const l: TableLayout = { cluster, tiers: NO_TIERS, groups: rowBlocks(0, t.rows, byFree, [0, t.dim]) };
      if (st.fits(i, l)) {
        st.set(i, l);
        done = true;
      }
    }
    if (!done) {
      const groups = rowsByFreeMemory(st, t);
      if (!groups) return false;
      st.set(i, { cluster, tiers: NO_TIERS, groups });
    }
  }
  return true;
}

function sameLayouts(a: readonly (TableLayout | undefined)[], b: readonly (TableLayout | undefined)[]): boolean {
  return a.every((l, i) => l !== undefined && b[i] !== undefined && sameLayout(l, b[i]!));
}

/** Approximate time table ti puts on rank r (for choosing which tables to move). */
function tableTimeOn(st: PlanState, ti: number, r: number): number {
  const L = st.contrib[ti]!, topo = st.ctx.topo;
  let t = (L.get(EFF_FWD, r) + L.get(EFF_BWD, r)) / topo.hbmBandwidth;
  for (let p = 0; p < 4; p++) {
    t += Math.max(L.get(metric(p, SENT_INTRA), r), L.get(metric(p, RECV_INTRA), r)) / topo.intraNodeBandwidth;
    t += Math.max(L.get(metric(p, SENT_INTER), r), L.get(metric(p, RECV_INTER), r)) / topo.interNodeBandwidth;
  }
  return t;
}

/** Row where the access mass of [a, b) is halved (clamped inside the range). */
function massMedian(t: Table, a: number, b: number): number {
  const am = accessModel(t);
  const half = am.mass(a, b) / 2;
  let lo = a + 1, hi = b - 1;
  while (lo < hi) {
    const m = Math.floor((lo + hi) / 2);
    if (am.mass(a, m) < half) lo = m + 1;
    else hi = m;
  }
  return lo;
}

/** New tier layout: tiers (R, N), shards re-tiled to start at R + N. */
function withTiers(l: TableLayout, R: number, N: number): TableLayout | undefined {
  const end = R + N;
  const out = cloneLayout(l);
  out.tiers = { replicated: R, node: N };
  out.groups = out.groups.filter((g) => g.b > end);
  if (out.groups.length === 0) return undefined;
  out.groups[0]!.a = Math.max(out.groups[0]!.a, end);
  return out;
}

function candidates(st: PlanState, rStar: number, per: Float64Array, allowTiers: boolean): { ti: number; l: TableLayout }[] {
  const topo = st.ctx.topo, W = st.W, rpn = topo.ranksPerNode;
  const cmp = (x: number, y: number): number => per[x]! - per[y]! || x - y;
  const Q: number[] = firstRanks(W, 4, cmp).filter((r) => r !== rStar).slice(0, 3);
  const nodeStart = Math.floor(rStar / rpn) * rpn;
  let sameNode: number | undefined;
  for (let r = nodeStart; r < nodeStart + rpn; r++) if (r !== rStar && (sameNode === undefined || cmp(r, sameNode) < 0)) sameNode = r;
  if (sameNode !== undefined && !Q.includes(sameNode)) Q.push(sameNode);
  // tables whose own placement loads rStar: a shard on it, a tier (on every rank), or dp (on every rank)
  const holds = (l: TableLayout) => l.cluster === 'dp' || tierEnd(l) > 0 || l.groups.some((g) => g.shards.some((s) => s.rank === rStar));
  const scored = st.tables
    .map((_, ti) => ({ ti, s: holds(st.layouts[ti]!) ? tableTimeOn(st, ti, rStar) : 0 }))
    .filter((x) => x.s > 0)
    .sort((a, b) => b.s - a.s)
    .slice(0, 6);
  const out: { ti: number; l: TableLayout }[] = [];
  for (const { ti } of scored) {
    const t = st.tables[ti]!;
    const l = st.layouts[ti]!;
    if (l.cluster === 'dp') {
      for (const q of Q.slice(0, 2)) out.push({ ti, l: { ...tableWiseLayout(t, q), cluster: 'ub' } });
      continue;
    }
    const mine: { g: number; s: number; size: number }[] = [];
    l.groups.forEach((g, gi) => g.shards.forEach((s, si) => s.rank === rStar && mine.push({ g: gi, s: si, size: (g.b - g.a) * (s.c1 - s.c0) })));
    mine.sort((a, b) => b.size - a.size);
    for (const { g: gi, s: si } of mine.slice(0, 2)) {
      const g = l.groups[gi]!;
      for (const q of Q) {
        const c = cloneLayout(l);
        c.groups[gi]!.shards[si]!.rank = q;
        out.push({ ti, l: c });
      }
      if (Q.length === 0) continue; // a single rank: no other rank to move a split half to
      if (g.b - g.a >= 2) {
        const cuts = new Set([g.a + Math.floor((g.b - g.a) / 2), massMedian(t, g.a, g.b)]);
        for (const cut of cuts)
          for (const q of [Q[0]!, sameNode ?? Q[0]!].filter((x, k, arr) => arr.indexOf(x) === k)) {
            const c = cloneLayout(l);
            const lo = c.groups[gi]!;
            const hi = { a: cut, b: lo.b, shards: lo.shards.map((s, k) => ({ ...s, rank: k === si ? q : s.rank })) };
            lo.b = cut;
            c.groups.splice(gi + 1, 0, hi);
            out.push({ ti, l: c });
          }
      }
      const s = g.shards[si]!;
      const w = s.c1 - s.c0;
      const half = Math.floor(w / 2 / COL_ALIGN) * COL_ALIGN;
      if (half >= MIN_SHARD_COLS && w - half >= MIN_SHARD_COLS) {
        const c = cloneLayout(l);
        const sh = c.groups[gi]!.shards;
        sh.splice(si + 1, 0, { c0: s.c0 + half, c1: s.c1, rank: Q[0]! });
        sh[si]!.c1 = s.c0 + half;
        out.push({ ti, l: c });
      }
    }
    out.push({ ti, l: { ...cloneLayout(l), cluster: l.cluster === 'rb' ? 'ub' : 'rb' } });
    if (tableBytes(t) <= topo.memoryLimitBytes * 0.05) out.push({ ti, l: { cluster: 'dp', tiers: NO_TIERS, groups: [] } });
    const skewed = (t.access.zipf ?? 0) > 0 || t.access.top !== undefined;
    if (allowTiers && skewed) {
      const { replicated: R, node: N } = l.tiers;
      const grow = (x: number) => (x === 0 ? 256 : x * 4);
      const rest = t.rows - tierEnd(l);
      if (grow(R) - R < rest) {
        const c = withTiers(l, grow(R), N);
        if (c) out.push({ ti, l: c });
      }
      if (topo.worldSize > rpn && grow(N) - N < rest) {
        const c = withTiers(l, R, grow(N));
        if (c) out.push({ ti, l: c });
      }
    }
  }
  return out;
}

/**
 * Greedy improvement of `st` in place; returns the number of moves applied. The deadline is checked before
 * each candidate move is costed (one costs O(worldSize)); the best move found by then is still applied.
 */
function improve(st: PlanState, maxIter: number, deadline: number, allowTiers: boolean): number {
  let cur = st.score();
  let it = 0;
  for (; it < maxIter && Date.now() < deadline; it++) {
    const per = cur.perRank;
    let best: { ti: number; l: TableLayout; load: ReturnType<PlanState['loadOf']>; s: Score } | undefined;
    let late = false;
    for (const rStar of criticalRanks(st, per)) {
      for (const c of candidates(st, rStar, per, allowTiers)) {
        if ((late = Date.now() >= deadline)) break;
        if (!st.fits(c.ti, c.l)) continue;
        const load = st.loadOf(c.ti, c.l);
        const s = st.trial(c.ti, load);
        if (better(s, best ? best.s : cur)) best = { ...c, load, s };
      }
      if (best || late) break;
    }
    if (!best) break;
    st.set(best.ti, best.l, best.load);
    cur = st.score();
  }
  return it;
}

const PLAN_OPTION_FIELDS = fieldsOf<PlanOptions>({
  batchSize: true, wire: true, maxIterations: true, timeBudgetMs: true, tiers: true, fromBaselines: true, hierarchical: true, meta: true,
});

/** Throws INVALID_CONFIG naming `field` unless `ok`. */
function check(ok: boolean, field: string, msg: string, v: unknown): void {
  if (!ok) throw new EmbshardError('INVALID_CONFIG', `${field}: ${msg} (got ${shown(v)})`, { path: field });
}

/** Validates the planner options (every field, before any work) and returns the cost context they give. */
function ctxOf(tables: readonly Table[], topology: Topology, options: PlanOptions): CostContext {
  void tables;
  rejectUnknownFields(options, PLAN_OPTION_FIELDS);
  const B = options.batchSize;
  check(Number.isSafeInteger(B) && B > 0, 'batchSize', 'must be a positive integer', B);
  check(B <= MAX_BATCH_SIZE, 'batchSize', `must be at most ${MAX_BATCH_SIZE} samples per rank, the largest batch embshard runs`, B);
  if (options.maxIterations !== undefined) check(Number.isSafeInteger(options.maxIterations) && options.maxIterations >= 0, 'maxIterations', 'must be a non-negative integer', options.maxIterations);
  if (options.timeBudgetMs !== undefined) check(typeof options.timeBudgetMs === 'number' && options.timeBudgetMs >= 0, 'timeBudgetMs', 'must be a non-negative number of milliseconds (Infinity: no budget)', options.timeBudgetMs);
  for (const k of ['tiers', 'fromBaselines', 'hierarchical'] as const)
    if (options[k] !== undefined) check(typeof options[k] === 'boolean', k, 'must be true or false', options[k]);
  if (options.meta !== undefined) {
    const m = options.meta;
    check(typeof m === 'object' && m !== null && !Array.isArray(m), 'meta', 'must be an object of strings', m);
    for (const [k, v] of Object.entries(options.meta)) check(typeof v === 'string', `meta.${k}`, 'must be a string', v);
  }
  if (options.wire !== undefined) rejectUnknownFields(options.wire, ['forward', 'backward'], 'wire');
  const wire: WireDtypes = { forward: options.wire?.forward ?? 'fp32', backward: options.wire?.backward ?? 'fp32' };
  for (const k of ['forward', 'backward'] as const) check(DTYPES.includes(wire[k]), `wire.${k}`, `must be one of ${DTYPES.join(' | ')}`, wire[k]);
  return { topo: topology, batchSize: B, wire, hierarchical: options.hierarchical ?? hierarchicalDefault(topology) };
}

/** Runs every baseline and reports its predicted time under the cost model. */
export function runBaselines(tablesIn: readonly PlanTableSpec[] | readonly Table[], topologyIn: Topology, options: PlanOptions): BaselineReport[] {
  const tables = normalizeTables(tablesIn);
  const topology = normalizeTopology(topologyIn);
  return baselineRuns(tables, ctxOf(tables, topology, options));
}

function baselineRuns(tables: readonly Table[], ctx: CostContext): BaselineReport[] {
  return BASELINES.map((name) => {
    const r = baselineLayouts(name, tables, ctx);
    if (!r.ok) return { name, time: null, reason: r.reason };
    return { name, time: scoreOf(tables, ctx, r.layouts, r.loads), layouts: r.layouts };
  });
}

/**
 * Whether a table's expected load under layout l depends on how replica syncs are costed (a dp table or a
 * replicated tier): other tables' loads are the same under a context and its flatReplicaSync twin.
 */
function replicaSynced(l: TableLayout): boolean {
  return l.cluster === 'dp' || l.tiers.replicated > 0;
}

/**
 * The predicted time of `layouts` under `ctx`: the tables' loads (`loads[i]` where given, computed under
 * `ctx` or a context that costs table i alike; the others one at a time in one buffer) summed in table order.
 */
function scoreOf(tables: readonly Table[], ctx: CostContext, layouts: readonly TableLayout[], loads?: readonly (Load | undefined)[]): number {
  const total = new Load(ctx.topo);
  let one: Load | undefined;
  layouts.forEach((l, i) => {
    let x = loads?.[i];
    if (!x) {
      x = one ??= new Load(ctx.topo);
      x.clear();
      addExpectedTableLoad(tables[i]!, l, ctx, x);
    }
    total.addLoad(x);
  });
  return objective(total, ctx.topo, undefined, ctx.hierarchical).time;
}

interface SearchLimits {
  maxIter: number;
  deadline: number;
  allowTiers: boolean;
}

interface SearchResult {
  name: string;
  st: PlanState;
  iterations: number;
}

/**
 * The search under one cost context: the greedy descent from every start (the EMBark start with and without
 * dp tables, and the best feasible baseline; the budget split evenly over the starts still to run and the
 * local search), then the local search from the best result, alternating with the greedy descent until
 * neither finds a better plan.
 */
function search(tables: readonly Table[], ctx: CostContext, baseline: BaselineReport | undefined, lim: SearchLimits): SearchResult | undefined {
  const starts: { name: string; st: PlanState }[] = [];
  // the EMBark start, and the same without dp tables (from all-dp, leaving dp pays off only for several
  // tables at once; from no dp, the search makes tables dp one at a time)
  for (const dp of [true, false]) {
    // past the deadline the best baseline is the only start (each start costs O(tables × worldSize) to build)
    if (baseline && Date.now() >= lim.deadline) break;
    const a = new PlanState(tables, ctx);
    if (embarkStart(a, dp) && !starts.some((s) => sameLayouts(s.st.layouts, a.layouts))) starts.push({ name: dp ? 'embark' : 'embark-no-dp', st: a });
  }
  if (baseline) {
    const b = new PlanState(tables, ctx);
    baseline.layouts!.forEach((l, i) => b.set(i, l));
    starts.push({ name: baseline.name, st: b });
  }
  if (starts.length === 0) return undefined;
  let iterations = 0;
  let best: { name: string; st: PlanState; s: Score; left: number } | undefined;
  starts.forEach((s, k) => {
    const now = Date.now();
    const share = now + (lim.deadline - now) / (starts.length - k + 1);
    const g = improve(s.st, lim.maxIter, share, lim.allowTiers);
    iterations += g;
    const sc = s.st.score();
    if (!best || better(sc, best.s)) best = { ...s, s: sc, left: lim.maxIter - g };
  });
  const r = descend(best!.st, best!.name, { ...lim, maxIter: best!.left }, 'refine');
  return { ...r, iterations: iterations + r.iterations };
}

/**
 * The local search from `st` alternating with the greedy descent until neither improves it. `from`:
 * 'refine' starts with the local search (after a greedy descent); 'greedy' with the greedy descent; 'moved'
 * too, but stops there when the greedy descent finds nothing (a plan already refined under other costs).
 */
function descend(st: PlanState, name: string, lim: SearchLimits, from: 'refine' | 'greedy' | 'moved'): SearchResult {
  let iterations = 0;
  let left = lim.maxIter;
  if (from !== 'refine') {
    const g = improve(st, left, lim.deadline, lim.allowTiers);
    left -= g;
    iterations += g;
    if (from === 'moved' && g === 0) return { name, st, iterations };
  }
  while (left > 0) {
    const m = refine(st, left, lim.deadline);
    left -= m;
    iterations += m;
    if (m === 0) break;
    const g = improve(st, left, lim.deadline, lim.allowTiers);
    left -= g;
    iterations += g;
    if (g === 0) break;
  }
  return { name, st, iterations };
}

/**
 * The baselines (as reported: without their layouts) and the ones the search starts from: the fastest under
 * `ctx` (`base`; ties: BASELINES order), and under `flatCtx` when given (the two-phase search) the fastest
 * under those costs too when it is another (ties: the faster under `ctx`). Each baseline's layouts are
 * dropped once it is beaten (at many ranks a row-wise baseline's layouts alone are millions of objects).
 */
function baselineStarts(tables: readonly Table[], ctx: CostContext, flatCtx: CostContext | undefined, run: boolean): { baselines: BaselineReport[]; base: BaselineReport | undefined; froms: (BaselineReport | undefined)[] } {
  const baselines: BaselineReport[] = [];
  let base: BaselineReport | undefined;
  let flatBest: { b: BaselineReport; flat: number } | undefined;
  for (const name of run ? BASELINES : []) {
    const r = baselineLayouts(name, tables, ctx);
    if (!r.ok) {
      baselines.push({ name, time: null, reason: r.reason });
      continue;
    }
    const b: BaselineReport = { name, time: scoreOf(tables, ctx, r.layouts, r.loads), layouts: r.layouts };
    baselines.push({ name, time: b.time });
    if (!base || b.time! < base.time!) base = b;
    // Under the hierarchical protocol on several nodes replicas are cheap to sync, and a search that sees
    // them cheap from its first step keeps dp tables and tiers it would have been better off leaving and
    // stops in a worse basin. There the search runs with the replica syncs costed as the flat protocol's
    // all-gathers, and its result is searched on under the real costs; it runs from the best baseline under
    // either costing (once when they are the same) and the better plan is kept.
    if (flatCtx) {
      const flat = scoreOf(tables, flatCtx, r.layouts, r.loads.map((x, i) => (replicaSynced(r.layouts[i]!) ? undefined : x)));
      if (!flatBest || flat < flatBest.flat || (flat === flatBest.flat && b.time! < flatBest.b.time!)) flatBest = { b, flat };
    }
  }
  const froms = [base];
  if (flatBest && flatBest.b.name !== base?.name) froms.push(flatBest.b);
  return { baselines, base, froms };
}

/** planShards with the search report (baselines, start, iterations, time). */
export function planShardsReport(tablesIn: readonly PlanTableSpec[] | readonly Table[], topologyIn: Topology, options: PlanOptions): PlanReport {
  const t0 = Date.now();
  const tables = normalizeTables(tablesIn);
  const topology = normalizeTopology(topologyIn);
  const ctx = ctxOf(tables, topology, options);
  checkFeasible(tables, topology);
  const deadline = t0 + (options.timeBudgetMs ?? 8000);
  const maxIter = options.maxIterations ?? 5000;
  const allowTiers = options.tiers ?? true;
  const twoPhase = ctx.hierarchical && topology.worldSize > topology.ranksPerNode;
  const flatCtx: CostContext = { ...ctx, flatReplicaSync: true };
  const { baselines, base, froms } = baselineStarts(tables, ctx, twoPhase ? flatCtx : undefined, options.fromBaselines !== false);
  let top: SearchResult | undefined;
  let iterations = 0;
  froms.forEach((from, k) => {
    if (top && Date.now() >= deadline) return;
    const share = Date.now() + (deadline - Date.now()) / (froms.length - k);
    let r: SearchResult | undefined;
    if (!twoPhase) r = search(tables, ctx, from, { maxIter, deadline: share, allowTiers });
    else {
      const flat = search(tables, flatCtx, from, { maxIter, deadline: Date.now() + (share - Date.now()) / 2, allowTiers });
      if (flat) {
        const st = new PlanState(tables, ctx);
        flat.st.layouts.forEach((l, i) => l && st.set(i, l, replicaSynced(l) ? undefined : flat.st.contrib[i]));
        r = descend(st, flat.name, { maxIter: Math.max(0, maxIter - flat.iterations), deadline: share, allowTiers }, 'moved');
        iterations += flat.iterations;
      }
    }
    if (!r) return;
    iterations += r.iterations;
    if (!top || better(r.st.score(), top.st.score())) top = r;
  });
  if (!top) {
    const reasons = baselines.map((b) => `${b.name}: ${b.reason}`).join('; ');
    const total = tables.reduce((s, t) => s + tableBytes(t), 0);
    const short = Math.max(0, total - topology.memoryLimitBytes * topology.worldSize);
    const big = tables.slice().sort((x, y) => tableBytes(y) - tableBytes(x))[0]!;
    throw new EmbshardError('PLAN_INFEASIBLE', `table '${big.name}' and the rest cannot be packed within ${topology.memoryLimitBytes} bytes per rank (short by ${short} bytes overall; ${reasons})`, { table: big.name, shortfallBytes: short });
  }
  // the two-phase search's result may be worse under the real costs than the best baseline it started from:
  // the search then continues from that baseline (so the plan is never worse than it)
  if (twoPhase && base && base.time! < top.st.score().time) {
    const st = new PlanState(tables, ctx);
    base.layouts!.forEach((l, i) => st.set(i, l));
    const r = descend(st, base.name, { maxIter, deadline, allowTiers }, 'greedy');
    iterations += r.iterations;
    top = r;
  }
  const plan = ShardPlan.fromLayouts(topology, options.batchSize, tables, top.st.complete(), ctx.wire, { planner: 'embshard', start: top.name, ...options.meta }, ctx.hierarchical);
  return { plan, time: top.st.score().time, baselines, start: top.name, iterations, elapsedMs: Date.now() - t0 };
}

/** The EMBark-style planner: a validated ShardPlan for `tables` on `topology` (see the header). */
export function planShards(tables: readonly PlanTableSpec[] | readonly Table[], topology: Topology, options: PlanOptions): ShardPlan {
  return planShardsReport(tables, topology, options).plan;
}

/** A baseline as a ShardPlan (INVALID... PLAN_INFEASIBLE when it does not fit). */
export function baselinePlan(name: BaselineName, tablesIn: readonly PlanTableSpec[] | readonly Table[], topologyIn: Topology, options: PlanOptions): ShardPlan {
  const tables = normalizeTables(tablesIn);
  const topology = normalizeTopology(topologyIn);
  const ctx = ctxOf(tables, topology, options);
  if (!BASELINES.includes(name)) throw new EmbshardError('INVALID_CONFIG', `baseline: unknown baseline ${JSON.stringify(name)} (known: ${BASELINES.join(', ')})`, { path: 'baseline' });
  const r = baselineLayouts(name, tables, ctx);
  if (!r.ok) throw new EmbshardError('PLAN_INFEASIBLE', `baseline ${name}: ${r.reason}`);
  return ShardPlan.fromLayouts(topology, options.batchSize, tables, r.layouts, ctx.wire, { planner: name }, ctx.hierarchical);
}

// baselines.ts — the sharding schemes embshard's planner is judged against, all placing every table in the
// rb cluster (pooled or sequence embeddings all-to-all, as TorchRec and HugeCTR do by default):
//   table-wise      whole tables, largest cost first, each on the rank with the least predicted time
//   row-wise        every table split into ⌈rows / W⌉-row blocks over all ranks (TorchRec RW)
//   column-wise     every table split into k = min(W, dim / 16) column blocks, each placed table-wise
//   table-row-wise  each table on one node (round-robin over nodes), row-split over its ranks; a table larger
//                   than a node's memory is row-split over all ranks (HugeCTR generate_plan.py table_row_wise)
//   torchrec        per table the option (dp, tw, cw, rw, twrw) with the smallest max per-rank time alone
//                   (GreedyProposer by depth), placed by a greedy perf partitioner (least-loaded device / host)
import { COL_ALIGN, MIN_SHARD_COLS } from './constants.js';
import type { CostContext } from './cost-model.js';
import { NO_TIERS, type TableLayout } from './layout.js';
import type { Load } from './load.js';
import { firstRanks, PlanState, ranksInOrder } from './state.js';
import { tableBytes } from './tables.js';
import type { Table } from './types.js';

export const BASELINES = ['table-wise', 'row-wise', 'column-wise', 'table-row-wise', 'torchrec'] as const;
export type BaselineName = (typeof BASELINES)[number];

/** A baseline's layouts with each table's expected load under them (the cost model's, for the context it ran in). */
export type BaselineResult = { ok: true; layouts: TableLayout[]; loads: Load[] } | { ok: false; reason: string };

/** Rows [a, b) split into `k` near-equal consecutive blocks on `ranks` (⌈n / k⌉ each, TorchRec's rule). */
export function rowBlocks(a: number, b: number, ranks: readonly number[], cols: [number, number] = [0, 0]): TableLayout['groups'] {
  const n = b - a, k = ranks.length;
  const per = Math.ceil(n / k);
  const groups: TableLayout['groups'] = [];
  for (let i = 0; i < k && a + i * per < b; i++) groups.push({ a: a + i * per, b: Math.min(b, a + (i + 1) * per), shards: [{ c0: cols[0], c1: cols[1], rank: ranks[i]! }] });
  return groups;
}

export function tableWiseLayout(t: Table, rank: number): TableLayout {
  return { cluster: 'rb', tiers: NO_TIERS, groups: [{ a: 0, b: t.rows, shards: [{ c0: 0, c1: t.dim, rank }] }] };
}

export function rowWiseLayout(t: Table, ranks: readonly number[]): TableLayout {
  return { cluster: 'rb', tiers: NO_TIERS, groups: rowBlocks(0, t.rows, ranks, [0, t.dim]) };
}

/** Column blocks: k = largest count ≤ min(W, dim / MIN_SHARD_COLS) that splits dim into COL_ALIGN multiples. */
export function columnBlocks(dim: number, maxK: number): [number, number][] {
  let k = Math.max(1, Math.min(maxK, Math.floor(dim / MIN_SHARD_COLS)));
  while (k > 1 && (dim % k !== 0 || (dim / k) % COL_ALIGN !== 0)) k--;
  const w = dim / k;
  return Array.from({ length: k }, (_, i) => [i * w, (i + 1) * w]);
}

function ranksOfNode(n: number, rpn: number): number[] {
  return Array.from({ length: rpn }, (_, i) => n * rpn + i);
}

/** Sum of a table's stage times alone under a layout: used to order tables, largest first. */
function aloneCost(st: PlanState, ti: number, l: TableLayout): { depth: number; total: number } {
  const o = st.objective(st.loadOf(ti, l, st.scratch()));
  let total = 0;
  for (const v of o.perRank) total += v;
  return { depth: o.time, total };
}

/** Least-loaded rank (by per-rank time) among `candidates` where table ti's layout fits. */
function placeGreedy(st: PlanState, ti: number, make: (rank: number) => TableLayout, candidates?: readonly number[]): boolean {
  const per = st.perRank();
  const cmp = (x: number, y: number): number => per[x]! - per[y]! || st.mem[x]! - st.mem[y]! || x - y;
  for (const r of candidates ? candidates.slice().sort(cmp) : ranksInOrder(st.W, cmp)) {
    const l = make(r);
    if (st.fits(ti, l)) {
      st.set(ti, l);
      return true;
    }
  }
  return false;
}

function tableWise(st: PlanState): BaselineResult {
  const order = st.tables.map((t, i) => ({ i, c: aloneCost(st, i, tableWiseLayout(t, 0)).depth })).sort((a, b) => b.c - a.c);
  for (const { i } of order) if (!placeGreedy(st, i, (r) => tableWiseLayout(st.tables[i]!, r))) return { ok: false, reason: `table '${st.tables[i]!.name}' fits on no single rank` };
  return done(st);
}

function rowWise(st: PlanState): BaselineResult {
  const all = Array.from({ length: st.W }, (_, r) => r);
  for (let i = 0; i < st.tables.length; i++) {
    const l = rowWiseLayout(st.tables[i]!, all);
    if (!st.fits(i, l)) return { ok: false, reason: `row-wise blocks of '${st.tables[i]!.name}' exceed a rank's memory` };
    st.set(i, l);
  }
  return done(st);
}

function columnWise(st: PlanState): BaselineResult {
  const order = st.tables.map((t, i) => ({ i, c: aloneCost(st, i, tableWiseLayout(t, 0)).depth })).sort((a, b) => b.c - a.c);
  for (const { i } of order) {
    const t = st.tables[i]!;
    const blocks = columnBlocks(t.dim, st.W);
    const layout: TableLayout = { cluster: 'rb', tiers: NO_TIERS, groups: [{ a: 0, b: t.rows, shards: [] }] };
    // place one column block at a time on the least-loaded rank, evaluating the table as built so far
    for (const [c0, c1] of blocks) {
      const ok = placeGreedy(st, i, (r) => {
        const l: TableLayout = { ...layout, groups: [{ a: 0, b: t.rows, shards: [...layout.groups[0]!.shards, { c0, c1, rank: r }] }] };
        // a partial layout (columns not yet tiled) is costed as if it were complete: fine for greedy ordering
        return l;
      });
      if (!ok) return { ok: false, reason: `a column block of '${t.name}' fits on no rank` };
      layout.groups[0]!.shards = [...st.layouts[i]!.groups[0]!.shards];
    }
  }
  return done(st);
}

function tableRowWise(st: PlanState): BaselineResult {
  const { ranksPerNode: rpn, worldSize: W, memoryLimitBytes: lim } = st.ctx.topo;
  const nodes = W / rpn;
  const all = Array.from({ length: W }, (_, r) => r);
  let next = 0;
  for (let i = 0; i < st.tables.length; i++) {
    const t = st.tables[i]!;
    if (tableBytes(t) > lim * rpn) {
      const l = rowWiseLayout(t, all);
      if (!st.fits(i, l)) return { ok: false, reason: `'${t.name}' exceeds memory even row-split over all ranks` };
      st.set(i, l);
      continue;
    }
    let placed = false;
    for (let k = 0; k < nodes && !placed; k++) {
      const n = (next + k) % nodes;
      const l = rowWiseLayout(t, ranksOfNode(n, rpn));
      if (st.fits(i, l)) {
        st.set(i, l);
        placed = true;
        next = (n + 1) % nodes;
      }
    }
    if (!placed) return { ok: false, reason: `'${t.name}' fits on no node` };
  }
  return done(st);
}

function torchrec(st: PlanState): BaselineResult {
  const { ranksPerNode: rpn, worldSize: W } = st.ctx.topo;
  const nodes = W / rpn;
  const all = Array.from({ length: W }, (_, r) => r);
  type Opt = { kind: 'dp' | 'tw' | 'cw' | 'rw' | 'twrw'; depth: number; total: number; bytes: number };
  const choices = st.tables.map((t, i) => {
    const opts: Opt[] = [];
    const add = (kind: Opt['kind'], l: TableLayout) => opts.push({ kind, ...aloneCost(st, i, l), bytes: tableBytes(t) });
    add('tw', tableWiseLayout(t, 0));
    add('rw', rowWiseLayout(t, all));
    if (nodes > 1) add('twrw', rowWiseLayout(t, ranksOfNode(0, rpn)));
    const cb = columnBlocks(t.dim, W);
    if (cb.length > 1) add('cw', { cluster: 'rb', tiers: NO_TIERS, groups: [{ a: 0, b: t.rows, shards: cb.map(([c0, c1], k) => ({ c0, c1, rank: k })) }] });
    if (tableBytes(t) <= st.ctx.topo.memoryLimitBytes / 4) add('dp', { cluster: 'dp', tiers: NO_TIERS, groups: [] });
    opts.sort((a, b) => a.depth - b.depth || a.total - b.total);
    return { i, opts };
  });
  // partition: uniform options (rw, dp) first, then the rest by storage, largest first
  const uniform = (k: string) => k === 'rw' || k === 'dp';
  const order = choices.slice().sort((a, b) => Number(uniform(b.opts[0]!.kind)) - Number(uniform(a.opts[0]!.kind)) || b.opts[0]!.bytes - a.opts[0]!.bytes);
  for (const { i, opts } of order) {
    const t = st.tables[i]!;
    let placed = false;
    for (const o of opts) {
      if (o.kind === 'dp') {
        const l: TableLayout = { cluster: 'dp', tiers: NO_TIERS, groups: [] };
        if (st.fits(i, l)) (st.set(i, l), (placed = true));
      } else if (o.kind === 'rw') {
        const l = rowWiseLayout(t, all);
        if (st.fits(i, l)) (st.set(i, l), (placed = true));
      } else if (o.kind === 'tw') {
        placed = placeGreedy(st, i, (r) => tableWiseLayout(t, r));
      } else if (o.kind === 'twrw') {
        const per = st.perRank();
        const load = Array.from({ length: nodes }, (_, n) => ({ n, v: ranksOfNode(n, rpn).reduce((s, r) => s + per[r]!, 0) })).sort((a, b) => a.v - b.v);
        for (const { n } of load) {
          const l = rowWiseLayout(t, ranksOfNode(n, rpn));
          if (st.fits(i, l)) {
            st.set(i, l);
            placed = true;
            break;
          }
        }
      } else {
        const cb = columnBlocks(t.dim, W);
        const per = st.perRank();
        const ranks = firstRanks(W, cb.length, (x, y) => per[x]! - per[y]! || x - y);
        const l: TableLayout = { cluster: 'rb', tiers: NO_TIERS, groups: [{ a: 0, b: t.rows, shards: cb.map(([c0, c1], k) => ({ c0, c1, rank: ranks[k]! })) }] };
        if (st.fits(i, l)) (st.set(i, l), (placed = true));
      }
      if (placed) break;
    }
    if (!placed) return { ok: false, reason: `no sharding option of '${t.name}' fits` };
  }
  return done(st);
}

function done(st: PlanState): BaselineResult {
  return { ok: true, layouts: st.complete(), loads: st.contrib as Load[] };
}

/** Runs one baseline: layouts for every table, or why it cannot fit the memory limits. */
export function baselineLayouts(name: BaselineName, tables: readonly Table[], ctx: CostContext): BaselineResult {
  const st = new PlanState(tables, ctx);
  switch (name) {
    case 'table-wise':
      return tableWise(st);
    case 'row-wise':
      return rowWise(st);
    case 'column-wise':
      return columnWise(st);
    case 'table-row-wise':
      return tableRowWise(st);
    case 'torchrec':
      return torchrec(st);
  }
}

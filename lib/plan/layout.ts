// layout.ts — the compact placement of one table that every planner tool computes on: its cluster, its
// hot-row tiers and its row groups (shards sharing a row range; their column ranges tile [0, dim)), plus
// the memory each rank spends on it.
import { heldRowBytes } from './tables.js';
import type { Cluster, HotTiers, Table, Topology } from './types.js';

export interface ShardCols {
  c0: number;
  c1: number;
  rank: number;
}

/** Shards with the same row range [a, b); their columns tile [0, dim). */
export interface GroupLayout {
  a: number;
  b: number;
  shards: ShardCols[];
}

export interface TableLayout {
  cluster: Cluster;
  tiers: HotTiers;
  /** sorted by row; they tile [tierEnd, rows) (empty for dp) */
  groups: GroupLayout[];
}

export const NO_TIERS: HotTiers = Object.freeze({ replicated: 0, node: 0 });

export function tierEnd(l: TableLayout): number {
  return l.tiers.replicated + l.tiers.node;
}

/** Rows of the node tier held by local rank `local` (row k of the tier lives on local rank k mod rpn). */
export function nodeTierRowsOn(nodeRows: number, rpn: number, local: number): number {
  return local < nodeRows % rpn ? Math.floor(nodeRows / rpn) + 1 : Math.floor(nodeRows / rpn);
}

/** Adds the bytes this table takes on each rank to `mem` (tables + optimizer state + tiers). */
export function addLayoutMemory(t: Table, l: TableLayout, topo: Topology, mem: Float64Array, sign = 1): void {
  const W = topo.worldSize;
  const full = heldRowBytes(t, t.dim);
  if (l.cluster === 'dp') {
    const b = t.rows * full * sign;
    for (let r = 0; r < W; r++) mem[r] += b;
    return;
  }
  const rep = l.tiers.replicated * full * sign;
  if (rep !== 0) for (let r = 0; r < W; r++) mem[r] += rep;
  if (l.tiers.node > 0) {
    const rpn = topo.ranksPerNode;
    for (let r = 0; r < W; r++) mem[r] += nodeTierRowsOn(l.tiers.node, rpn, r % rpn) * full * sign;
  }
  for (const g of l.groups) {
    const n = g.b - g.a;
    for (const s of g.shards) mem[s.rank] += n * heldRowBytes(t, s.c1 - s.c0) * sign;
  }
}

/**
 * Why layout l cannot hold table t, or undefined when it can: a dynamic table (rows placed by id hash,
 * each row shard with its own id map) takes rb / ub row shards of full width only — no dp copy, no hot
 * tiers, no column split. `path` prefixes the named field (a plan's JSON path).
 */
export function layoutRefusal(t: Table, l: TableLayout, path = 'layout'): { field: string; reason: string } | undefined {
  if (!t.dynamic) return undefined;
  if (l.cluster === 'dp') return { field: `${path}.cluster`, reason: `table '${t.name}' is dynamic: each row shard keeps its own id map, so it cannot be replicated (dp); use rb or ub` };
  if (tierEnd(l) > 0) return { field: `${path}.tiers`, reason: `table '${t.name}' is dynamic: its rows are placed by id hash, so it has no hot-row tiers` };
  for (const g of l.groups)
    if (g.shards.length !== 1) return { field: `${path}.shards`, reason: `table '${t.name}' is dynamic: rows [${g.a}, ${g.b}) are split by columns; a dynamic table's row shards are full width` };
  return undefined;
}

export function cloneLayout(l: TableLayout): TableLayout {
  return {
    cluster: l.cluster,
    tiers: { ...l.tiers },
    groups: l.groups.map((g) => ({ a: g.a, b: g.b, shards: g.shards.map((s) => ({ ...s })) })),
  };
}

/** Distinct ranks of a group, ascending, with the total columns each holds (Σ cols of its shards). */
export function groupHolders(g: GroupLayout): { ranks: number[]; cols: number[] } {
  if (g.shards.length === 1) return { ranks: [g.shards[0]!.rank], cols: [g.shards[0]!.c1 - g.shards[0]!.c0] };
  const m = new Map<number, number>();
  for (const s of g.shards) m.set(s.rank, (m.get(s.rank) ?? 0) + (s.c1 - s.c0));
  const ranks = [...m.keys()].sort((x, y) => x - y);
  return { ranks, cols: ranks.map((r) => m.get(r)!) };
}

/** Per node: how many of the table's columns its shards cover, over all row groups (the union of their column ranges). */
export function nodeColumns(l: TableLayout, rpn: number, nodes: number): Float64Array {
  // the shards bucketed by node in one pass (a table's shards sit on few of many nodes)
  const byNode = new Map<number, [number, number][]>();
  for (const g of l.groups)
    for (const s of g.shards) {
      const m = Math.floor(s.rank / rpn);
      let iv = byNode.get(m);
      if (!iv) byNode.set(m, (iv = []));
      iv.push([s.c0, s.c1]);
    }
  const out = new Float64Array(nodes);
  for (const [m, iv] of byNode) out[m] = mergeIntervals(iv).reduce((n, [c0, c1]) => n + c1 - c0, 0);
  return out;
}

/** The column ranges [c0, c1) the shards of a table on node m cover, merged and ascending. */
export function columnUnion(l: TableLayout, m: number, rpn: number): [number, number][] {
  return mergeIntervals(l.groups.flatMap((g) => g.shards.filter((s) => Math.floor(s.rank / rpn) === m).map((s) => [s.c0, s.c1] as [number, number])));
}

/** Intervals [a, b) merged where they overlap or touch, ascending (sorts `iv` in place). */
function mergeIntervals(iv: [number, number][]): [number, number][] {
  iv.sort((x, y) => x[0] - y[0]);
  const out: [number, number][] = [];
  for (const [a, b] of iv) {
    const last = out[out.length - 1];
    if (last && a <= last[1]) last[1] = Math.max(last[1], b);
    else out.push([a, b]);
  }
  return out;
}

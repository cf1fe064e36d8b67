// local-layout.ts — what one rank of a sharded collection holds and in which order messages travel:
// the local tables and features of the rank's engine (dp tables whole, hot tiers, its 3D shards), the
// global output layout (the one a single EmbeddingCollection over the same tables has), and the
// canonical order of the segments a rank r exchanges with a rank d (docs/wire-protocol.md).
import type { ShardPlan } from '../plan/shard-plan.js';
import { columnUnion, type ShardCols } from '../plan/layout.js';
import type { Cluster, Pooling, Table } from '../plan/types.js';

export interface GroupRt {
  a: number;
  b: number;
  /** shards in column order */
  shards: ShardCols[];
  /** distinct ranks holding a shard, ascending */
  holders: number[];
}

export interface TableRt {
  index: number;
  table: Table;
  cluster: Cluster;
  /** replicated / node tier rows */
  R: number;
  N: number;
  groups: GroupRt[];
  /** range bounds for segmentation: dp [0, rows]; rb/ub [0, R, R+N, g0.b, g1.b, ...] */
  bounds: Float64Array;
  /** feature names of the table, in order, and their global pooled column (-1: sequence) */
  features: string[];
  pooledCol: number[];
  pooling: Pooling;
  /** a dynamic table: ids are raw 64-bit values, routed to the row group of their hash (core/id_hash.h); 0 otherwise */
  hashCapacity: number;
}

/** Local engine features; `kind` says which phase fills them. */
export type LocalFeatureKind = 'loc' | 'upd' | 'rb' | 'ub' | 'node' | 'nodeupd' | 'idle';

export interface LocalFeature {
  name: string;
  table: number; // local table index
  pooling: Pooling;
  dim: number;
  kind: LocalFeatureKind;
  /** plan table index */
  t: number;
  /** plan feature (rb, loc) */
  f?: string;
  /** group index and shard (rb, ub) */
  g?: number;
  shard?: ShardCols;
  /** column in the local engine's pooled output, -1 for sequence features */
  col: number;
}

export interface LocalTable {
  name: string;
  rows: number;
  dim: number;
  /** plan table index and the slice of it: rows [r0, r0 + rows) (node tier: every rpn-th row) × cols [c0, c1) */
  t: number;
  part: 'dp' | 'rep' | 'node' | 'shard' | 'idle';
  r0: number;
  c0: number;
  c1: number;
  /** a row shard of a dynamic table: `rows` slots of its own id map (the engine table has one more, the sink) */
  dynamic?: boolean;
}

export type Segment =
  | { kind: 'node'; t: number }
  | { kind: 'rb'; t: number; f: string; g: number }
  | { kind: 'ub'; t: number; g: number };

/** The map key of a (segment, column shard): built from its typed fields, never parsed back. */
function segmentKey(s: Segment, c0: number): string {
  return s.kind === 'rb' ? `rb\u0000${s.t}\u0000${s.f}\u0000${s.g}\u0000${c0}` : s.kind === 'ub' ? `ub\u0000${s.t}\u0000${s.g}\u0000${c0}` : `node\u0000${s.t}`;
}

/** A ub row group whose ids a rank relays across nodes (hierarchical protocol): the holders on other nodes with its local index. */
export interface RelaySeg {
  t: number;
  g: number;
  /** the group's shards on other nodes held by ranks with the relay's local index, in column order */
  shards: ShardCols[];
}

/**
 * `name`, or, when `used` holds it already, `name~2`, `name~3`, … (the first free one), added to `used`.
 * The engine's names are built from the plan's (`<feature>@<table>#r<a>-<b>c<c0>-<c1>`), and names may
 * hold '@' and '#' themselves: table 'p@u' with feature 'f' and table 'u' with feature 'f@p' would both
 * give 'f@p@u#r…'. The engine needs each name once; they are the same for a plan and rank every time
 * (dynamic shards' checkpoints find their maps by them).
 */
function distinct(used: Set<string>, name: string): string {
  let n = name;
  for (let k = 2; used.has(n); k++) n = `${name}~${k}`;
  used.add(n);
  return n;
}

export class LocalLayout {
  readonly W: number;
  readonly rpn: number;
  readonly rank: number;
  /** rb / ub exchanges use the hierarchical protocol (the plan says so and there are several nodes) */
  readonly hier: boolean;
  readonly tables: TableRt[];
  readonly pooledDim: number;
  readonly localTables: LocalTable[] = [];
  readonly localFeatures: LocalFeature[] = [];
  readonly localPooledDim: number;
  /** the local feature serving each (segment, column shard) this rank holds (segmentKey) */
  private readonly byKey = new Map<string, number>();
  /** the engine's table and feature names given so far (each unique: see distinct) */
  private readonly tableNames = new Set<string>();
  private readonly featureNames = new Set<string>();
  private readonly segCache = new Map<string, Segment[]>();
  private readonly relayCache = new Map<string, RelaySeg[]>();

  constructor(readonly plan: ShardPlan, rank: number) {
    this.W = plan.topology.worldSize;
    this.rpn = plan.topology.ranksPerNode;
    this.rank = rank;
    this.hier = plan.hierarchical && this.W / this.rpn > 1;
    let col = 0;
    this.tables = plan.tables.map((table, index) => {
      const l = plan.layouts[index]!;
      const R = l.tiers.replicated, N = l.tiers.node;
      const groups = l.groups.map((g) => ({ a: g.a, b: g.b, shards: g.shards, holders: [...new Set(g.shards.map((s) => s.rank))].sort((x, y) => x - y) }));
      const bounds = l.cluster === 'dp' ? [0, table.rows] : [0, R, R + N, ...groups.map((g) => g.b)];
      const pooledCol = table.features.map(() => {
        if (table.pooling === 'none') return -1;
        const c = col;
        col += table.dim;
        return c;
      });
      return { index, table, cluster: l.cluster, R, N, groups, bounds: Float64Array.from(bounds), features: [...table.features], pooledCol, pooling: table.pooling, hashCapacity: table.dynamic ? table.rows : 0 };
    });
    this.pooledDim = col;
    // local tables and features, in plan order
    const localPool = (p: Pooling): Pooling => (p === 'none' ? 'none' : 'sum');
    for (const rt of this.tables) {
      const t = rt.table;
      const addTable = (lt: LocalTable): number => this.localTables.push({ ...lt, name: distinct(this.tableNames, lt.name) }) - 1;
      if (rt.cluster === 'dp' || rt.R > 0) {
        const part = rt.cluster === 'dp' ? 'dp' : 'rep';
        const rows = rt.cluster === 'dp' ? t.rows : rt.R;
        const lt = addTable({ name: `${t.name}#${part}`, rows, dim: t.dim, t: rt.index, part, r0: 0, c0: 0, c1: t.dim });
        for (const f of rt.features) this.addFeature({ name: `${f}@${part}`, table: lt, pooling: localPool(t.pooling), dim: t.dim, kind: 'loc', t: rt.index, f });
        this.addFeature({ name: `${t.name}#${part}@upd`, table: lt, pooling: 'none', dim: t.dim, kind: 'upd', t: rt.index });
      }
      const held = this.nodeRowsHeld(rt, rank);
      if (held > 0) {
        const lt = addTable({ name: `${t.name}#node`, rows: held, dim: t.dim, t: rt.index, part: 'node', r0: rt.R, c0: 0, c1: t.dim });
        this.addFeature({ name: `${t.name}#node@u`, table: lt, pooling: 'none', dim: t.dim, kind: 'node', t: rt.index }, segmentKey({ kind: 'node', t: rt.index }, 0));
        this.addFeature({ name: `${t.name}#node@upd`, table: lt, pooling: 'none', dim: t.dim, kind: 'nodeupd', t: rt.index });
      }
      rt.groups.forEach((g, gi) => {
        for (const s of g.shards) {
          if (s.rank !== rank) continue;
          const sid = `${t.name}#r${g.a}-${g.b}c${s.c0}-${s.c1}`;
          const lt = addTable({ name: sid, rows: g.b - g.a, dim: s.c1 - s.c0, t: rt.index, part: 'shard', r0: g.a, c0: s.c0, c1: s.c1, ...(t.dynamic ? { dynamic: true } : {}) });
          if (rt.cluster === 'rb')
            for (const f of rt.features)
              this.addFeature({ name: `${f}@${sid}`, table: lt, pooling: localPool(t.pooling), dim: s.c1 - s.c0, kind: 'rb', t: rt.index, f, g: gi, shard: s }, segmentKey({ kind: 'rb', t: rt.index, f, g: gi }, s.c0));
          else this.addFeature({ name: `${sid}@u`, table: lt, pooling: 'none', dim: s.c1 - s.c0, kind: 'ub', t: rt.index, g: gi, shard: s }, segmentKey({ kind: 'ub', t: rt.index, g: gi }, s.c0));
        }
      });
    }
    if (this.localTables.length === 0) {
      // a rank that holds nothing still runs an engine (every collective step calls it): one idle row
      this.localTables.push({ name: distinct(this.tableNames, '#idle'), rows: 1, dim: 1, t: 0, part: 'idle', r0: 0, c0: 0, c1: 1 });
      this.addFeature({ name: '#idle@none', table: 0, pooling: 'none', dim: 1, kind: 'idle', t: 0 });
    }
    let lc = 0;
    for (const lf of this.localFeatures) {
      if (lf.pooling !== 'none') {
        lf.col = lc;
        lc += lf.dim;
      }
    }
    this.localPooledDim = lc;
  }

  private addFeature(f: Omit<LocalFeature, 'col'>, key?: string): void {
    const i = this.localFeatures.push({ ...f, name: distinct(this.featureNames, f.name), col: -1 }) - 1;
    if (key !== undefined) this.byKey.set(key, i);
  }

  /** The local feature serving segment `s` on this rank: the node-tier lookup, or the shard at column c0. */
  featureOf(s: Segment, c0: number): number {
    const i = this.byKey.get(segmentKey(s, c0));
    if (i === undefined) throw new Error(`internal: this rank serves no ${s.kind} segment of table ${s.t} at column ${c0}`);
    return i;
  }

  nodeOf(r: number): number {
    return Math.floor(r / this.rpn);
  }

  /** Node-tier rows held by rank r (tier row k lives on local rank k mod rpn of every node). */
  nodeRowsHeld(rt: TableRt, r: number): number {
    if (rt.N === 0) return 0;
    const j = r % this.rpn;
    return j < rt.N % this.rpn ? Math.floor(rt.N / this.rpn) + 1 : Math.floor(rt.N / this.rpn);
  }

  /** The segments rank r sends rank d in the forward input (and the matching outputs / gradients), in order. */
  segments(r: number, d: number): Segment[] {
    const key = `${r}>${d}`;
    const hit = this.segCache.get(key);
    if (hit) return hit;
    const out: Segment[] = [];
    for (const rt of this.tables) {
      if (rt.cluster === 'dp') continue;
      if (rt.N > 0 && this.nodeOf(r) === this.nodeOf(d) && this.nodeRowsHeld(rt, d) > 0) out.push({ kind: 'node', t: rt.index });
      if (rt.cluster === 'rb') {
        for (const f of rt.features) rt.groups.forEach((g, gi) => g.holders.includes(d) && out.push({ kind: 'rb', t: rt.index, f, g: gi }));
      } else rt.groups.forEach((g, gi) => g.holders.includes(d) && this.reachesDirect(r, d) && out.push({ kind: 'ub', t: rt.index, g: gi }));
    }
    this.segCache.set(key, out);
    return out;
  }

  /**
   * Whether rank r sends its ub ids to a holder d itself: always under the flat protocol; under the
   * hierarchical one only on its own node, or as the rail-aligned relay of its node (same local index),
   * which then sends the node's distinct ids.
   */
  reachesDirect(r: number, d: number): boolean {
    return !this.hier || this.nodeOf(r) === this.nodeOf(d) || r % this.rpn === d % this.rpn;
  }

  /** Whether this rank's ub segment to holder d carries its node's distinct ids as the relay (hierarchical, d on another node) rather than its own. */
  relaysTo(d: number): boolean {
    return this.hier && this.nodeOf(d) !== this.nodeOf(this.rank);
  }

  /** Whether the ids, outputs and gradients of segment s between requester p and owner d go through a relay (hierarchical rb pooled across nodes). */
  viaRelay(s: Segment, p: number, d: number): boolean {
    return this.hier && s.kind === 'rb' && this.tables[s.t]!.pooling !== 'none' && this.nodeOf(p) !== this.nodeOf(d);
  }

  /**
   * Hierarchical rb: the segments requester p sends relay a (its rail peer on another node) for a to hand
   * to the holders on a's node: every pooled rb (feature, row group) with a holder there, in segment order.
   */
  relayedInput(p: number, a: number): Segment[] {
    if (!this.hier || this.nodeOf(p) === this.nodeOf(a) || p % this.rpn !== a % this.rpn) return [];
    const key = `${p}>>${a}`;
    const hit = this.segCache.get(key);
    if (hit) return hit;
    const n = this.nodeOf(a), out: Segment[] = [];
    for (const rt of this.tables)
      if (rt.cluster === 'rb' && rt.pooling !== 'none')
        for (const f of rt.features) rt.groups.forEach((g, gi) => g.holders.some((d) => this.nodeOf(d) === n) && out.push({ kind: 'rb', t: rt.index, f, g: gi }));
    this.segCache.set(key, out);
    return out;
  }

  /** What rank p's input message to rank x carries, in order: its segments for x that do not go through a relay, then those x relays. */
  sendList(p: number, x: number): Segment[] {
    const key = `${p}>+${x}`;
    const hit = this.segCache.get(key);
    if (hit) return hit;
    const out = [...this.segments(p, x).filter((s) => !this.viaRelay(s, p, x)), ...this.relayedInput(p, x)];
    this.segCache.set(key, out);
    return out;
  }

  /** Hierarchical ub: the row groups rank a relays for its node (ids in, rows out, gradients in), in table and group order. */
  relaySegs(a: number): RelaySeg[] {
    const key = `relay${a}`;
    const hit = this.relayCache.get(key);
    if (hit) return hit;
    const out: RelaySeg[] = [];
    if (this.hier)
      for (const rt of this.tables) {
        if (rt.cluster !== 'ub') continue;
        rt.groups.forEach((g, gi) => {
          const shards = g.shards.filter((s) => s.rank % this.rpn === a % this.rpn && this.nodeOf(s.rank) !== this.nodeOf(a));
          if (shards.length > 0) out.push({ t: rt.index, g: gi, shards });
        });
      }
    this.relayCache.set(key, out);
    return out;
  }

  /** Hierarchical rb: the column ranges of table t that node n's shards cover (one node-reduced vector per range). */
  nodeCols(t: number, n: number): [number, number][] {
    const rt = this.tables[t]!;
    if (!this.hier || rt.cluster !== 'rb' || rt.pooling === 'none') return [];
    return columnUnion(this.plan.layouts[t]!, n, this.rpn);
  }

  /** Shards of group g of table t held by rank d, in column order. */
  shardsOn(t: number, g: number, d: number): ShardCols[] {
    return this.tables[t]!.groups[g]!.shards.filter((s) => s.rank === d);
  }
}

// shard-plan.ts — ShardPlan: the versioned plan format (JSON), its validation (EmbshardError INVALID_PLAN
// naming the JSON path), and the lookups the sharded runtime needs (shards of a table, row groups, the
// owner of a (table, row, column) cell, per-rank memory).
import { DTYPES } from '../config.js';
import { MAX_BATCH_SIZE } from '../data/types.js';
import { rejectUnknownFields } from '../fields.js';
import { EmbshardError } from '../errors.js';
import { explainPlan, type ExplainOptions } from './explain.js';
import { addLayoutMemory, layoutRefusal, tierEnd, type GroupLayout, type TableLayout } from './layout.js';
import { normalizeTables } from './tables.js';
import { normalizeTopology } from './topology.js';
import { shown } from '../shown.js';
import { CLUSTERS, type Cluster, type DType, type HotTiers, type Shard, type PlanTableSpec, type Table, type TableSpec, type Topology, type WireDtypes } from './types.js';

export const PLAN_FORMAT = 'embshard.plan';
/**
 * The version written for plans without dynamic tables. Version 2 added tables' `hotIds` (the hot-id
 * remap); version 1 plans still load.
 */
export const PLAN_VERSION = 2;
/** The version written for plans with a dynamic table (rows: 'dynamic', added in version 3). */
export const PLAN_VERSION_DYNAMIC = 3;
/** Every version this build reads. */
export const PLAN_VERSIONS: readonly PlanVersion[] = [1, 2, 3];
export type PlanVersion = 1 | 2 | 3;

/** The lowest version that holds these tables. */
function versionFor(tables: readonly (PlanTableSpec | Table)[]): PlanVersion {
  return tables.some((t) => t.rows === 'dynamic' || ('dynamic' in t && t.dynamic)) ? PLAN_VERSION_DYNAMIC : PLAN_VERSION;
}

export interface ShardJSON {
  rows: [number, number];
  cols: [number, number];
  rank: number;
}

export type TablePlanJSON = PlanTableSpec & {
  cluster: Cluster;
  tiers?: HotTiers;
  shards: ShardJSON[];
};

export interface PlanJSON {
  format: typeof PLAN_FORMAT;
  version: PlanVersion;
  topology: Topology;
  /** per-rank batch size the plan was made for */
  batchSize: number;
  wire: WireDtypes;
  /**
   * rb / ub exchanges and the gradient sync of dp tables and replicated tiers use the hierarchical protocol
   * (node-level reduction and deduplication, rail-aligned across nodes; docs/wire-protocol.md). Absent: false
   * (the flat protocol), so older plans load as flat.
   */
  hierarchical?: boolean;
  tables: TablePlanJSON[];
  /** free-form strings (planner name, model name, ...) */
  meta?: Record<string, string>;
}

/** What `ShardPlan.create` takes: tables (specs or validated) with their placements. */
export interface PlanInit {
  topology: Topology;
  batchSize: number;
  wire?: Partial<WireDtypes>;
  /** the hierarchical protocol for rb / ub and replica syncs (default false: flat; only meaningful with several nodes) */
  hierarchical?: boolean;
  tables: { table: PlanTableSpec | Table; cluster: Cluster; tiers?: HotTiers; shards?: { rows: readonly [number, number]; cols: readonly [number, number]; rank: number }[] }[];
  meta?: Record<string, string>;
}

function bad(path: string, msg: string): never {
  throw new EmbshardError('INVALID_PLAN', `${path}: ${msg}`, { path });
}
function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
function nonNegInt(v: unknown, path: string): number {
  if (!Number.isSafeInteger(v) || (v as number) < 0) bad(path, `must be a non-negative integer (got ${shown(v)})`);
  return v as number;
}
function range(v: unknown, path: string): [number, number] {
  if (!Array.isArray(v) || v.length !== 2) bad(path, 'must be a [start, end) pair of integers');
  const a = nonNegInt(v[0], `${path}[0]`), b = nonNegInt(v[1], `${path}[1]`);
  if (b <= a) bad(path, `is empty or reversed ([${a}, ${b}))`);
  return [a, b];
}

/** Validates the placement of one table and builds its layout. */
function parsePlacement(o: Record<string, unknown>, t: Table, topo: Topology, path: string): TableLayout {
  const cluster = o.cluster;
  if (!CLUSTERS.includes(cluster as Cluster)) bad(`${path}.cluster`, `must be one of ${CLUSTERS.join(' | ')} (got ${shown(cluster)})`);
  let tiers: HotTiers = { replicated: 0, node: 0 };
  if (o.tiers !== undefined) {
    if (!isObject(o.tiers)) bad(`${path}.tiers`, 'must be an object { replicated, node }');
    rejectUnknownFields(o.tiers, ['replicated', 'node'], `${path}.tiers`, 'INVALID_PLAN');
    tiers = { replicated: nonNegInt(o.tiers.replicated ?? 0, `${path}.tiers.replicated`), node: nonNegInt(o.tiers.node ?? 0, `${path}.tiers.node`) };
    if (cluster === 'dp' && tiers.replicated + tiers.node > 0) bad(`${path}.tiers`, 'a dp table is replicated whole; it has no tiers');
    if (tiers.replicated + tiers.node > t.rows) bad(`${path}.tiers`, `replicated + node (${tiers.replicated + tiers.node}) exceeds rows (${t.rows})`);
  }
  const shardsIn = o.shards === undefined ? [] : o.shards;
  if (!Array.isArray(shardsIn)) bad(`${path}.shards`, `must be an array (got ${shown(o.shards)})`);
  const layout: TableLayout = { cluster: cluster as Cluster, tiers, groups: [] };
  if (cluster === 'dp') {
    const refused = layoutRefusal(t, layout, path);
    if (refused) bad(refused.field, refused.reason);
    if (shardsIn.length > 0) bad(`${path}.shards`, 'must be empty for a dp table (every rank holds the whole table)');
    return layout;
  }
  const te = tiers.replicated + tiers.node;
  const byRange = new Map<string, { g: GroupLayout; idx: number[] }>();
  shardsIn.forEach((s, j) => {
    const sp = `${path}.shards[${j}]`;
    if (!isObject(s)) bad(sp, 'must be an object { rows, cols, rank }');
    rejectUnknownFields(s, ['rows', 'cols', 'rank', 'table'], sp, 'INVALID_PLAN');
    if (s.table !== undefined && s.table !== t.name) bad(`${sp}.table`, `names ${shown(s.table)} inside table '${t.name}'`);
    const rows = range(s.rows, `${sp}.rows`);
    const cols = range(s.cols, `${sp}.cols`);
    if (rows[0] < te) bad(`${sp}.rows`, `starts at ${rows[0]}, inside the hot tiers (rows [0, ${te}))`);
    if (rows[1] > t.rows) bad(`${sp}.rows`, `ends at ${rows[1]}, past the table's ${t.rows} rows`);
    if (cols[1] > t.dim) bad(`${sp}.cols`, `ends at ${cols[1]}, past the table's dim ${t.dim}`);
    if (!Number.isSafeInteger(s.rank) || (s.rank as number) < 0 || (s.rank as number) >= topo.worldSize)
      bad(`${sp}.rank`, `must be an integer in [0, ${topo.worldSize}) (got ${shown(s.rank)})`);
    const key = `${rows[0]}:${rows[1]}`;
    let e = byRange.get(key);
    if (!e) byRange.set(key, (e = { g: { a: rows[0], b: rows[1], shards: [] }, idx: [] }));
    e.g.shards.push({ c0: cols[0], c1: cols[1], rank: s.rank as number });
    e.idx.push(j);
  });
  const groups = [...byRange.values()].sort((x, y) => x.g.a - y.g.a);
  let at = te;
  for (const { g, idx } of groups) {
    const sp = `${path}.shards[${idx[0]}].rows`;
    if (g.a < at) bad(sp, `[${g.a}, ${g.b}) overlaps rows already covered up to ${at}`);
    if (g.a > at) bad(`${path}.shards`, `rows [${at}, ${g.a}) of table '${t.name}' are not covered by any shard`);
    const order = g.shards.map((s, k) => ({ s, j: idx[k]! })).sort((x, y) => x.s.c0 - y.s.c0);
    let c = 0;
    for (const { s, j } of order) {
      if (s.c0 < c) bad(`${path}.shards[${j}].cols`, `[${s.c0}, ${s.c1}) overlaps columns already covered up to ${c} in rows [${g.a}, ${g.b})`);
      if (s.c0 > c) bad(`${path}.shards`, `columns [${c}, ${s.c0}) of rows [${g.a}, ${g.b}) of table '${t.name}' are not covered`);
      c = s.c1;
    }
    if (c !== t.dim) bad(`${path}.shards`, `columns [${c}, ${t.dim}) of rows [${g.a}, ${g.b}) of table '${t.name}' are not covered`);
    g.shards = order.map((x) => x.s);
    at = g.b;
    layout.groups.push(g);
  }
  if (at !== t.rows) bad(`${path}.shards`, `rows [${at}, ${t.rows}) of table '${t.name}' are not covered by any shard`);
  const refused = layoutRefusal(t, layout, path);
  if (refused) bad(refused.field, refused.reason);
  return layout;
}

export class ShardPlan {
  readonly topology: Topology;
  readonly batchSize: number;
  readonly wire: WireDtypes;
  /** rb / ub exchanges and replica syncs use the hierarchical protocol (false: flat) */
  readonly hierarchical: boolean;
  readonly tables: readonly Table[];
  readonly layouts: readonly TableLayout[];
  readonly meta: Readonly<Record<string, string>>;
  private readonly index: Map<string, number>;

  private constructor(topology: Topology, batchSize: number, wire: WireDtypes, hierarchical: boolean, tables: Table[], layouts: TableLayout[], meta: Record<string, string>) {
    this.topology = topology;
    this.batchSize = batchSize;
    this.wire = Object.freeze({ ...wire });
    this.hierarchical = hierarchical;
    this.tables = Object.freeze(tables);
    this.layouts = Object.freeze(layouts);
    this.meta = Object.freeze({ ...meta });
    this.index = new Map(tables.map((t, i) => [t.name, i]));
  }

  /** Parses and validates a plan (a JSON string or the parsed object). Throws INVALID_PLAN naming the path. */
  static fromJSON(json: string | unknown): ShardPlan {
    let v: unknown = json;
    if (typeof json === 'string') {
      try {
        v = JSON.parse(json);
      } catch (e) {
        bad('$', `not valid JSON (${(e as Error).message})`);
      }
    }
    if (!isObject(v)) bad('$', 'must be an object');
    if (v.format !== PLAN_FORMAT) bad('$.format', `must be "${PLAN_FORMAT}" (got ${shown(v.format)})`);
    if (!PLAN_VERSIONS.includes(v.version as PlanVersion)) bad('$.version', `unsupported version ${shown(v.version)} (this build reads versions ${PLAN_VERSIONS.join(', ')})`);
    rejectUnknownFields(v, ['format', 'version', 'topology', 'batchSize', 'wire', 'hierarchical', 'tables', 'meta'], '$', 'INVALID_PLAN');
    if (v.hierarchical !== undefined && typeof v.hierarchical !== 'boolean') bad('$.hierarchical', `must be true or false (got ${shown(v.hierarchical)})`);
    const topology = normalizeTopology(v.topology, '$.topology', 'INVALID_PLAN');
    if (!Number.isSafeInteger(v.batchSize) || (v.batchSize as number) <= 0) bad('$.batchSize', `must be a positive integer (got ${shown(v.batchSize)})`);
    if ((v.batchSize as number) > MAX_BATCH_SIZE) bad('$.batchSize', `must be at most ${MAX_BATCH_SIZE} samples per rank, the largest batch embshard runs (got ${shown(v.batchSize)})`);
    let wire: WireDtypes = { forward: 'fp32', backward: 'fp32' };
    if (v.wire !== undefined) {
      if (!isObject(v.wire)) bad('$.wire', 'must be an object { forward, backward }');
      rejectUnknownFields(v.wire, ['forward', 'backward'], '$.wire', 'INVALID_PLAN');
      const f = v.wire.forward ?? 'fp32', b = v.wire.backward ?? 'fp32';
      if (!DTYPES.includes(f as DType)) bad('$.wire.forward', `must be one of ${DTYPES.join(' | ')}`);
      if (!DTYPES.includes(b as DType)) bad('$.wire.backward', `must be one of ${DTYPES.join(' | ')}`);
      wire = { forward: f as DType, backward: b as DType };
    }
    if (!Array.isArray(v.tables) || v.tables.length === 0) bad('$.tables', 'must be a non-empty array');
    const specs = v.tables.map((t, i) => {
      if (!isObject(t)) bad(`$.tables[${i}]`, 'must be an object');
      if (v.version === 1 && t.hotIds !== undefined) bad(`$.tables[${i}].hotIds`, 'needs plan version 2');
      if ((v.version as number) < PLAN_VERSION_DYNAMIC && t.rows === 'dynamic') bad(`$.tables[${i}].rows`, `'dynamic' needs plan version ${PLAN_VERSION_DYNAMIC}`);
      const { cluster: _c, tiers: _t, shards: _s, ...spec } = t;
      return spec;
    });
    const tables = normalizeTables(specs, '$.tables', 'INVALID_PLAN');
    const layouts = tables.map((t, i) => parsePlacement((v.tables as Record<string, unknown>[])[i]!, t, topology, `$.tables[${i}]`));
    let meta: Record<string, string> = {};
    if (v.meta !== undefined) {
      if (!isObject(v.meta)) bad('$.meta', 'must be an object of strings');
      for (const [k, x] of Object.entries(v.meta)) if (typeof x !== 'string') bad(`$.meta.${k}`, 'must be a string');
      meta = v.meta as Record<string, string>;
    }
    return new ShardPlan(topology, v.batchSize as number, wire, v.hierarchical === true, tables, layouts, meta);
  }

  /** Builds a plan from tables and placements; validated exactly like a plan file. */
  static create(init: PlanInit): ShardPlan {
    return ShardPlan.fromJSON({
      format: PLAN_FORMAT,
      version: versionFor(init.tables.map((e) => e.table)),
      topology: init.topology,
      batchSize: init.batchSize,
      wire: { forward: init.wire?.forward ?? 'fp32', backward: init.wire?.backward ?? 'fp32' },
      ...(init.hierarchical ? { hierarchical: true } : {}),
      tables: init.tables.map((e) => ({
        ...tableSpecJSON(e.table),
        cluster: e.cluster,
        ...(e.tiers !== undefined ? { tiers: e.tiers } : {}),
        shards: (e.shards ?? []).map((s) => ({ rows: [s.rows[0], s.rows[1]], cols: [s.cols[0], s.cols[1]], rank: s.rank })),
      })),
      ...(init.meta ? { meta: init.meta } : {}),
    });
  }

  /** Builds a plan from internal layouts (used by the planner and baselines). */
  static fromLayouts(topology: Topology, batchSize: number, tables: readonly Table[], layouts: readonly TableLayout[], wire?: Partial<WireDtypes>, meta?: Record<string, string>, hierarchical = false): ShardPlan {
    return ShardPlan.create({
      topology,
      batchSize,
      hierarchical,
      ...(wire ? { wire } : {}),
      ...(meta ? { meta } : {}),
      tables: tables.map((t, i) => {
        const l = layouts[i]!;
        return {
          table: t,
          cluster: l.cluster,
          tiers: l.tiers,
          shards: l.groups.flatMap((g) => g.shards.map((s) => ({ rows: [g.a, g.b] as [number, number], cols: [s.c0, s.c1] as [number, number], rank: s.rank }))),
        };
      }),
    });
  }

  toJSON(): PlanJSON {
    return {
      format: PLAN_FORMAT,
      version: versionFor(this.tables),
      topology: { ...this.topology },
      batchSize: this.batchSize,
      wire: { ...this.wire },
      ...(this.hierarchical ? { hierarchical: true } : {}),
      tables: this.tables.map((t, i) => {
        const l = this.layouts[i]!;
        const out: TablePlanJSON = { ...tableSpecJSON(t), cluster: l.cluster, shards: [] };
        if (l.tiers.replicated + l.tiers.node > 0) out.tiers = { ...l.tiers };
        out.shards = l.groups.flatMap((g) => g.shards.map((s) => ({ rows: [g.a, g.b] as [number, number], cols: [s.c0, s.c1] as [number, number], rank: s.rank })));
        return out;
      }),
      ...(Object.keys(this.meta).length ? { meta: { ...this.meta } } : {}),
    };
  }

  /** The same placement under the other protocol (true: hierarchical, false: flat). */
  withProtocol(hierarchical: boolean): ShardPlan {
    return ShardPlan.fromJSON({ ...this.toJSON(), hierarchical });
  }

  private idx(table: string): number {
    const i = this.index.get(table);
    if (i === undefined) throw new EmbshardError('UNKNOWN_TABLE', `the plan has no table '${table}'`);
    return i;
  }

  table(name: string): Table {
    return this.tables[this.idx(name)]!;
  }
  layout(name: string): TableLayout {
    return this.layouts[this.idx(name)]!;
  }
  clusterOf(name: string): Cluster {
    return this.layout(name).cluster;
  }
  tiersOf(name: string): HotTiers {
    return this.layout(name).tiers;
  }

  /** The table's 3D shards (empty for dp), ordered by row then column. */
  shardsOf(name: string): Shard[] {
    return this.layout(name).groups.flatMap((g) => g.shards.map((s) => ({ table: name, rows: [g.a, g.b] as const, cols: [s.c0, s.c1] as const, rank: s.rank })));
  }

  /** The row groups of a table: shards sharing a row range. */
  rowGroupsOf(name: string): { rows: readonly [number, number]; shards: Shard[] }[] {
    return this.layout(name).groups.map((g) => ({ rows: [g.a, g.b] as const, shards: g.shards.map((s) => ({ table: name, rows: [g.a, g.b] as const, cols: [s.c0, s.c1] as const, rank: s.rank })) }));
  }

  /** Every rank that stores the value at (row, col): all ranks for dp / replicated rows, one per node for node-tier rows. */
  ownersOf(name: string, row: number, col: number): number[] {
    const t = this.table(name);
    const l = this.layout(name);
    if (!(Number.isSafeInteger(row) && row >= 0 && row < t.rows)) throw new EmbshardError('ID_OUT_OF_RANGE', `row ${row} is outside table '${name}' (${t.rows} rows)`);
    if (!(Number.isSafeInteger(col) && col >= 0 && col < t.dim)) throw new EmbshardError('INVALID_ARGUMENT', `column ${col} is outside table '${name}' (dim ${t.dim})`);
    const W = this.topology.worldSize, rpn = this.topology.ranksPerNode;
    if (l.cluster === 'dp' || row < l.tiers.replicated) return Array.from({ length: W }, (_, r) => r);
    if (row < tierEnd(l)) {
      const local = (row - l.tiers.replicated) % rpn;
      return Array.from({ length: W / rpn }, (_, n) => n * rpn + local);
    }
    const g = findGroup(l.groups, row);
    return g.shards.filter((s) => col >= s.c0 && col < s.c1).map((s) => s.rank);
  }

  /** The rank that `fromRank` reads (row, col) from: itself for dp / replicated rows, its node's holder for node-tier rows. */
  ownerOf(name: string, row: number, col: number, fromRank = 0): number {
    if (!(Number.isSafeInteger(fromRank) && fromRank >= 0 && fromRank < this.topology.worldSize))
      throw new EmbshardError('INVALID_ARGUMENT', `fromRank: must be an integer in [0, ${this.topology.worldSize}) (got ${String(fromRank)})`, { path: 'fromRank' });
    const owners = this.ownersOf(name, row, col);
    if (owners.length === 1) return owners[0]!;
    const l = this.layout(name);
    if (l.cluster === 'dp' || row < l.tiers.replicated) return fromRank;
    const rpn = this.topology.ranksPerNode;
    return Math.floor(fromRank / rpn) * rpn + ((row - l.tiers.replicated) % rpn);
  }

  /** Bytes of tables, optimizer state and hot tiers on each rank. */
  memoryPerRank(): Float64Array {
    const mem = new Float64Array(this.topology.worldSize);
    this.tables.forEach((t, i) => addLayoutMemory(t, this.layouts[i]!, this.topology, mem));
    return mem;
  }

  /** TorchRec-style planner statistics: per-rank and per-table tables from the cost model. */
  explain(opts: ExplainOptions = {}): string {
    return explainPlan(this, opts);
  }
}

function findGroup(groups: readonly GroupLayout[], row: number): GroupLayout {
  let lo = 0, hi = groups.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (groups[mid]!.a <= row) lo = mid;
    else hi = mid - 1;
  }
  return groups[lo]!;
}

/** A table spec as plan JSON writes it (every default explicit). */
function tableSpecJSON(t: PlanTableSpec | Table): PlanTableSpec {
  const common = {
    name: t.name,
    dim: t.dim,
    dtype: t.dtype ?? 'fp32',
    pooling: t.pooling ?? 'sum',
    features: [...(t.features ?? [t.name])],
    optimizer: t.optimizer ?? 'sgd',
    poolingFactors: [...(t.poolingFactors ?? (t.features ?? [t.name]).map(() => 1))],
    weighted: t.weighted ?? false,
  };
  // a dynamic table: its resolved settings (a Table) or the spec's; its access tail is implied ('shuffled')
  const d = 'dynamic' in t && t.dynamic ? { capacity: t.dynamic.capacity, admission: { minCount: t.dynamic.minCount, candidates: t.dynamic.candidates, ...(t.dynamic.default === 'hashed' ? { default: t.dynamic.default } : {}) }, eviction: t.dynamic.eviction } : undefined;
  const out: PlanTableSpec =
    d !== undefined ? { ...common, rows: 'dynamic', ...d }
    : t.rows === 'dynamic' ? { ...common, rows: 'dynamic', capacity: t.capacity, ...(t.admission ? { admission: { ...t.admission } } : {}), ...(t.eviction ? { eviction: t.eviction } : {}) }
    : { ...common, rows: t.rows };
  const dyn = out.rows === 'dynamic';
  if (t.access && (t.access.zipf !== undefined || t.access.top || (t.access.tail && !dyn))) {
    out.access = {};
    if (t.access.tail && !dyn) out.access.tail = t.access.tail;
    if (t.access.zipf !== undefined) out.access.zipf = t.access.zipf;
    if (t.access.top) out.access.top = { counts: [...t.access.top.counts], total: t.access.top.total };
  }
  if (out.rows !== 'dynamic' && 'hotIds' in t && t.hotIds && t.hotIds.length > 0) out.hotIds = [...t.hotIds];
  return out;
}

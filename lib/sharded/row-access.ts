// row-access.ts — rows and optimizer state of a sharded collection addressed by global id (the user's id: a
// plan's hot-id remap turns it into the row first, row-remap.ts), wherever
// they live (dp tables and replicated tiers on every rank, node tiers spread over each node's ranks, 3D
// shards on their owners). Writes need no communication (every rank passes the same values and keeps the
// cells it holds); reads are collectives: each cell comes from exactly one holder and the others add
// zero bits (an integer sum of the fp32 bit patterns, so the values — signed zeros and NaNs included —
// arrive bit for bit). A dynamic table's ids are raw ids: each is held by at most one row shard (the one its
// hash routes to), which reads it; an id no shard holds reads zero. Its rows are written by training and
// load only (writes refuse it).
import { idOf } from '../batch.js';
import { EmbshardError } from '../errors.js';
import { stateWidth } from '../config.js';
import type { NativeEngine } from '../binding.js';
import type { ResolvedConfig } from '../config.js';
import type { ShardPlan } from '../plan/shard-plan.js';
import type { ProcessGroup } from './group.js';
import { exchangeOps } from './exchange-ops.js';
import type { LocalLayout, LocalTable } from './local-layout.js';
import type { RowRemaps } from './row-remap.js';
import type { DynamicShards } from './dynamic-shards.js';

/** What row access needs of a sharded collection. */
export interface ShardedRows {
  readonly plan: ShardPlan;
  readonly group: ProcessGroup;
  readonly config: ResolvedConfig;
  readonly layout: LocalLayout;
  readonly localEngine: NativeEngine;
  readonly remaps: RowRemaps;
  readonly dynamicShards?: DynamicShards | undefined;
}

/** Weights (`rows`: [n × dim]) or optimizer state (`state`: [n × stateWidth]). */
export type CellKind = 'rows' | 'state';

/** Whether this rank is the one copy of `lt` that contributes to a read. */
function contributes(lt: LocalTable, rank: number, rpn: number): boolean {
  if (lt.part === 'idle') return false;
  if (lt.part === 'dp' || lt.part === 'rep') return rank === 0;
  if (lt.part === 'node') return Math.floor(rank / rpn) === 0;
  return true;
}

/** Local state columns of a slice [c0, c1) → their columns in the full state row (rowwise_adagrad: the first column shard's accumulator). */
function stateCols(opt: string, dim: number, c0: number, c1: number): [number, number][] {
  if (opt === 'adagrad') return [[c0, c1]];
  if (opt === 'adam') return [[c0, c1], [dim + c0, dim + c1]];
  if (opt === 'rowwise_adagrad') return c0 === 0 ? [[0, 1]] : [];
  return [];
}

/**
 * Which of `ids` the local table `lt` holds: their positions in `ids` and their local rows (a dynamic
 * shard: also every id's slot, the sink for ids it holds no row for).
 */
function slotsOf(lt: LocalTable, rank: number, rpn: number, ids: BigInt64Array, dyn?: { shards: DynamicShards; li: number }): { at: Int32Array; local: BigInt64Array; slots?: BigInt64Array } {
  if (dyn) {
    // a dynamic shard: the ids its map holds (the sink slot, lt.rows, marks the others)
    const slots = dyn.shards.slots(dyn.li, ids), sink = BigInt(lt.rows);
    const at: number[] = [];
    slots.forEach((v, k) => v !== sink && at.push(k));
    return { at: Int32Array.from(at), local: BigInt64Array.from(at, (k) => slots[k]!), slots };
  }
  const at: number[] = [];
  const local: bigint[] = [];
  const r0 = BigInt(lt.r0), rows = BigInt(lt.rows), step = BigInt(rpn), first = BigInt(rank % rpn);
  for (let k = 0; k < ids.length; k++) {
    const rel = ids[k]! - r0;
    if (rel < 0n) continue;
    let j = rel;
    if (lt.part === 'node') {
      // local row j holds tier row (rank mod rpn) + j·rpn
      if ((rel - first) % step !== 0n || rel < first) continue;
      j = (rel - first) / step;
    }
    if (j >= rows) continue;
    at.push(k);
    local.push(j);
  }
  return { at: Int32Array.from(at), local: BigInt64Array.from(local) };
}

/** Table index of `name`; ids as int64, checked to lie in the table (before anything is read or written). */
export function checkCells(sc: ShardedRows, name: string, ids: ArrayLike<number | bigint> | BigInt64Array): { t: number; ids: BigInt64Array } {
  const t = sc.plan.tables.findIndex((x) => x.name === name);
  if (t < 0) throw new EmbshardError('UNKNOWN_TABLE', `no table named '${name}'`);
  const rows = BigInt(sc.plan.tables[t]!.rows);
  const dynamic = sc.plan.tables[t]!.dynamic !== undefined; // any 64-bit id
  const big = ids instanceof BigInt64Array ? ids : new BigInt64Array(ids.length);
  for (let i = 0; i < ids.length; i++) {
    const b = idOf(ids[i]!);
    if (!dynamic && (b < 0n || b >= rows)) throw new EmbshardError('ID_OUT_OF_RANGE', `id ${b} is out of range for table '${name}' (rows ${rows})`);
    big[i] = b;
  }
  return { t, ids: big };
}

/** Floats per row of `kind` for table t. */
export function cellWidth(sc: ShardedRows, t: number, kind: CellKind): number {
  const dim = sc.plan.tables[t]!.dim;
  return kind === 'rows' ? dim : stateWidth(sc.config.optimizer.type, dim);
}

/**
 * Rows (or state) `ids` of table t as one collection holds them, [ids.length × width] fp32, on every rank.
 * A collective: every rank passes the same ids.
 */
export async function readCells(sc: ShardedRows, t: number, userIds: BigInt64Array, kind: CellKind): Promise<Float32Array> {
  const K = exchangeOps();
  const ids = sc.remaps.toRows(t, userIds);
  const rank = sc.group.rank, rpn = sc.layout.rpn;
  const dim = sc.plan.tables[t]!.dim, opt = sc.config.optimizer.type;
  const width = cellWidth(sc, t, kind);
  const out = new Float32Array(ids.length * width);
  const e = sc.localEngine;
  sc.layout.localTables.forEach((lt, li) => {
    if (lt.t !== t || !contributes(lt, rank, rpn)) return;
    const { at, local, slots } = slotsOf(lt, rank, rpn, ids, lt.dynamic ? { shards: sc.dynamicShards!, li } : undefined);
    const m = at.length, cols = lt.c1 - lt.c0;
    if (kind === 'rows' && slots) {
      // ids without a row that this shard owns by hash read its default (a hashed default's init row)
      const d = sc.dynamicShards!.defaultRows(li, ids, slots);
      if (d && d.at.length > 0) K.unpack(d.rows, 0, 'fp32', d.at.length, cols, out, width, d.at, 0, lt.c0, false);
    }
    if (m === 0) return;
    if (kind === 'rows') {
      const vals = new Float32Array(m * cols);
      e.readRows(li, local, vals);
      K.unpack(vals, 0, 'fp32', m, cols, out, width, at, 0, lt.c0, false);
      return;
    }
    const lsw = stateWidth(opt, cols);
    if (lsw === 0) return;
    const st = new Float32Array(m * lsw);
    e.readState(li, local, st);
    let c = 0;
    for (const [a, b] of stateCols(opt, dim, lt.c0, lt.c1)) {
      const block = new Float32Array(m * (b - a));
      K.pack(st, lsw, null, 0, m, c, c + (b - a), 'fp32', block, 0);
      K.unpack(block, 0, 'fp32', m, b - a, out, width, at, 0, a, false);
      c += b - a;
    }
  });
  if (width > 0 && ids.length > 0) await sc.group.allReduce(new Int32Array(out.buffer), 'sum');
  return out;
}

/**
 * Overwrites rows (or state) `ids` of table t with `values` [ids.length × width] (rounded to the table's
 * dtype) in every copy this rank holds. Every rank passes the same arguments; no communication.
 */
export function writeCells(sc: ShardedRows, t: number, userIds: BigInt64Array, values: Float32Array, kind: CellKind): void {
  const K = exchangeOps();
  const ids = sc.remaps.toRows(t, userIds);
  const rank = sc.group.rank, rpn = sc.layout.rpn;
  const dim = sc.plan.tables[t]!.dim, opt = sc.config.optimizer.type;
  const width = cellWidth(sc, t, kind);
  if (sc.plan.tables[t]!.dynamic)
    throw new EmbshardError('INVALID_ARGUMENT', `table '${sc.plan.tables[t]!.name}' is dynamic: its shards' rows are written by training and load(), not by id`);
  if (!(values instanceof Float32Array) || values.length !== ids.length * width)
    throw new EmbshardError('LENGTH_MISMATCH', `values must be a Float32Array of ids.length × ${width} = ${ids.length * width} floats`);
  const e = sc.localEngine;
  sc.layout.localTables.forEach((lt, li) => {
    if (lt.t !== t || lt.part === 'idle') return;
    const { at, local } = slotsOf(lt, rank, rpn, ids);
    const m = at.length, cols = lt.c1 - lt.c0;
    if (m === 0) return;
    if (kind === 'rows') {
      const vals = new Float32Array(m * cols);
      K.pack(values, width, at, 0, m, lt.c0, lt.c1, 'fp32', vals, 0);
      e.writeRows(li, local, vals);
      return;
    }
    const lsw = stateWidth(opt, cols);
    if (lsw === 0) return;
    const st = new Float32Array(m * lsw);
    let c = 0;
    // rowwise_adagrad: every column shard keeps the row's one accumulator (a checkpoint load then restores
    // the other column shards' own, when the plan splits the table alike: column-state-checkpoint.ts)
    const spans = opt === 'rowwise_adagrad' ? [[0, 1] as [number, number]] : stateCols(opt, dim, lt.c0, lt.c1);
    for (const [a, b] of spans) {
      const block = new Float32Array(m * (b - a));
      K.pack(values, width, at, 0, m, a, b, 'fp32', block, 0);
      K.unpack(block, 0, 'fp32', m, b - a, st, lsw, null, 0, c, false);
      c += b - a;
    }
    e.writeState(li, local, st);
  });
}

/** Every row id of table t, 0 … rows − 1. */
export function allRows(sc: ShardedRows, t: number): BigInt64Array {
  return BigInt64Array.from({ length: sc.plan.tables[t]!.rows }, (_, j) => BigInt(j));
}

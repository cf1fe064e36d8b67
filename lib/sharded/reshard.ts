// reshard.ts — whole tables out of a sharded collection, and checkpoints that reshard. A sharded save
// gathers every table and its optimizer state (each cell from exactly one holder) and rank 0 writes an
// ordinary EmbeddingCollection checkpoint (atomic, checksummed: lib/checkpoint.ts); a load under any plan
// and world size — or EmbeddingCollection.load on one rank — reads that checkpoint and keeps its slices.
// Limits: a gather holds a whole table per rank; rowwise_adagrad state of column-split tables is per
// shard (the first column shard's is saved).
import { EmbshardError } from '../errors.js';
import { EmbeddingCollection } from '../collection.js';
import { stateWidth } from '../config.js';
import type { ShardPlan } from '../plan/shard-plan.js';
import type { ProcessGroup } from './group.js';
import { kernels } from './kernels.js';
import { ShardedEmbeddingCollection, type ShardedConfig } from './sharded.js';
import type { LocalTable } from './local-layout.js';

/** Global rows held by a local table, in local row order. */
function globalRows(lt: LocalTable, rank: number, rpn: number): BigInt64Array {
  if (lt.part === 'node') return BigInt64Array.from({ length: lt.rows }, (_, j) => BigInt(lt.r0 + (rank % rpn) + j * rpn));
  return BigInt64Array.from({ length: lt.rows }, (_, j) => BigInt(lt.r0 + j));
}

/** Whether this rank is the one copy of `lt` that contributes to a gather. */
function contributes(lt: LocalTable, rank: number, rpn: number): boolean {
  if (lt.part === 'idle') return false;
  if (lt.part === 'dp' || lt.part === 'rep') return rank === 0;
  if (lt.part === 'node') return Math.floor(rank / rpn) === 0;
  return true;
}

/** Local state columns of a slice [c0, c1) → their columns in the full state row. */
function stateCols(opt: string, dim: number, c0: number, c1: number): [number, number][] {
  if (opt === 'adagrad') return [[c0, c1]];
  if (opt === 'adam') return [[c0, c1], [dim + c0, dim + c1]];
  if (opt === 'rowwise_adagrad') return c0 === 0 ? [[0, 1]] : [];
  return [];
}

/**
 * Every table's weights and optimizer state as one collection would hold them: [rows × dim] and
 * [rows × stateWidth] fp32, on every rank. A collective.
 */
export async function gatherTable(sc: ShardedEmbeddingCollection, name: string): Promise<{ weights: Float32Array; state: Float32Array }> {
  const t = sc.plan.tables.findIndex((x) => x.name === name);
  if (t < 0) throw new EmbshardError('UNKNOWN_TABLE', `no table named '${name}'`);
  const K = kernels();
  const rank = sc.group.rank, rpn = sc.layout.rpn;
  const tab = sc.plan.tables[t]!, dim = tab.dim, opt = sc.config.optimizer.type, sw = stateWidth(opt, dim);
  const weights = new Float32Array(tab.rows * dim);
  const state = new Float32Array(tab.rows * sw);
  const e = sc.localEngine;
  sc.layout.localTables.forEach((lt, li) => {
    if (lt.t !== t || !contributes(lt, rank, rpn) || lt.rows === 0) return;
    const rows = globalRows(lt, rank, rpn);
    const cols = lt.c1 - lt.c0;
    const local = BigInt64Array.from({ length: lt.rows }, (_, j) => BigInt(j));
    const idx = Int32Array.from(rows, (x) => Number(x));
    const vals = new Float32Array(lt.rows * cols);
    e.readRows(li, local, vals);
    K.unpack(vals, 0, 'fp32', lt.rows, cols, weights, dim, idx, 0, lt.c0, false);
    const lsw = stateWidth(opt, cols);
    if (lsw > 0) {
      const st = new Float32Array(lt.rows * lsw);
      e.readState(li, local, st);
      let at = 0;
      for (const [a, b] of stateCols(opt, dim, lt.c0, lt.c1)) {
        const block = new Float32Array(lt.rows * (b - a));
        K.pack(st, lsw, null, 0, lt.rows, at, at + (b - a), 'fp32', block, 0);
        K.unpack(block, 0, 'fp32', lt.rows, b - a, state, sw, idx, 0, a, false);
        at += b - a;
      }
    }
  });
  // exactly one rank holds each cell, so a sum is a gather
  await sc.group.allReduce(weights);
  if (sw > 0) await sc.group.allReduce(state);
  return { weights, state };
}

/** Copies whole tables (and state) into the slices this rank holds. */
function scatterInto(sc: ShardedEmbeddingCollection, t: number, weights: Float32Array, state: Float32Array): void {
  const K = kernels();
  const rank = sc.group.rank, rpn = sc.layout.rpn;
  const dim = sc.plan.tables[t]!.dim, opt = sc.config.optimizer.type, sw = stateWidth(opt, dim);
  const e = sc.localEngine;
  sc.layout.localTables.forEach((lt, li) => {
    if (lt.t !== t || lt.rows === 0 || lt.part === 'idle') return;
    const idx = Int32Array.from(globalRows(lt, rank, rpn), (x) => Number(x));
    const local = BigInt64Array.from({ length: lt.rows }, (_, j) => BigInt(j));
    const cols = lt.c1 - lt.c0;
    const vals = new Float32Array(lt.rows * cols);
    K.pack(weights, dim, idx, 0, lt.rows, lt.c0, lt.c1, 'fp32', vals, 0);
    e.writeRows(li, local, vals);
    const lsw = stateWidth(opt, cols);
    if (lsw > 0) {
      const st = new Float32Array(lt.rows * lsw);
      let at = 0;
      const spans = opt === 'rowwise_adagrad' ? [[0, 1] as [number, number]] : stateCols(opt, dim, lt.c0, lt.c1);
      for (const [a, b] of spans) {
        const block = new Float32Array(lt.rows * (b - a));
        K.pack(state, sw, idx, 0, lt.rows, a, b, 'fp32', block, 0);
        K.unpack(block, 0, 'fp32', lt.rows, b - a, st, lsw, null, 0, at, false);
        at += b - a;
      }
      e.writeState(li, local, st);
    }
  });
}

/**
 * Saves a sharded collection as one EmbeddingCollection checkpoint at `dir` (written by rank 0,
 * atomically; every rank waits for it). A collective.
 */
export async function saveSharded(sc: ShardedEmbeddingCollection, dir: string): Promise<void> {
  const gathered: { weights: Float32Array; state: Float32Array }[] = [];
  for (const t of sc.plan.tables) gathered.push(await gatherTable(sc, t.name));
  let failure: unknown;
  if (sc.group.rank === 0) {
    let ec: EmbeddingCollection | undefined;
    try {
      ec = new EmbeddingCollection(sc.config, { initialize: false });
      sc.plan.tables.forEach((t, i) => {
        const ids = BigInt64Array.from({ length: t.rows }, (_, j) => BigInt(j));
        ec!.writeRows(t.name, ids, gathered[i]!.weights);
        if (ec!.stateWidth(t.name) > 0) ec!.writeState(t.name, ids, gathered[i]!.state);
      });
      ec.step = sc.step;
      await ec.save(dir, { sharded: { worldSize: sc.plan.topology.worldSize } });
    } catch (e) {
      failure = e;
    } finally {
      ec?.dispose();
    }
  }
  const ok = new Int32Array([failure ? 0 : 1]);
  await sc.group.allReduce(ok, 'min');
  if (failure) throw failure;
  if (ok[0] !== 1) throw new EmbshardError('IO_ERROR', `saving the sharded checkpoint '${dir}' failed on rank 0`);
}

/**
 * Loads a checkpoint written by saveSharded or EmbeddingCollection.save under `plan` (any world size):
 * every rank reads it (verified: sizes, CRC-32C) and keeps its slices. Tables must match the plan's.
 */
export async function loadSharded(dir: string, plan: ShardPlan, group: ProcessGroup, config: ShardedConfig = {}): Promise<ShardedEmbeddingCollection> {
  const ec = await EmbeddingCollection.load(dir, { device: 'cpu' });
  try {
    const cfg = ec.config;
    for (const t of plan.tables) {
      const c = cfg.tables.find((x) => x.name === t.name);
      if (!c || c.rows !== t.rows || c.dim !== t.dim || c.dtype !== t.dtype || c.pooling !== t.pooling || c.features.join() !== t.features.join())
        throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}': table '${t.name}' does not match the plan (rows, dim, dtype, pooling, features)`);
    }
    if (cfg.tables.length !== plan.tables.length) throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}' has ${cfg.tables.length} tables; the plan has ${plan.tables.length}`);
    const merged: ShardedConfig = { ...config, optimizer: config.optimizer ?? cfg.optimizer, seed: config.seed ?? cfg.seed };
    const sc = new ShardedEmbeddingCollection(plan, group, merged, { initialize: false });
    plan.tables.forEach((t, i) => {
      const ids = BigInt64Array.from({ length: t.rows }, (_, j) => BigInt(j));
      const w = ec.readRows(t.name, ids);
      const s = ec.stateWidth(t.name) > 0 ? ec.readState(t.name, ids) : new Float32Array(0);
      scatterInto(sc, i, w, s);
    });
    sc.step = ec.step;
    return sc;
  } finally {
    ec.dispose();
  }
}

// reshard.ts — whole tables out of a sharded collection, and checkpoints that reshard. A sharded save
// gathers every table and its optimizer state (each cell from exactly one holder) and rank 0 writes an
// ordinary EmbeddingCollection checkpoint (atomic, checksummed: lib/checkpoint.ts); a load under any plan
// and world size — or EmbeddingCollection.load on one rank — reads that checkpoint and keeps its slices,
// the ranks agreeing on the outcome (a load that fails on one rank fails on all).
// The checkpoint holds rows by the user's ids (a plan's hot-id remap is undone on the way out) and the plan
// it was trained under, hot-id remap included (savedPlan). Dynamic tables (rows: 'dynamic') stay empty in
// that collection: their row shards are stored beside it and load into the same row shards only
// (dynamic-checkpoint.ts; EmbeddingCollection.load of such a checkpoint gets them empty). rowwise_adagrad
// tables split by columns keep one accumulator per column shard: the collection holds the first column
// shard's, the others are stored beside it and restored into the same column splits only
// (column-state-checkpoint.ts; elsewhere every column shard starts from the first one's). Limits: a gather
// holds a whole table per rank.
import { EmbshardError } from '../errors.js';
import { EmbeddingCollection } from '../collection.js';
import { checkpointDir, readManifest, type Manifest } from '../checkpoint.js';
import { configOf, stateWidth } from '../config.js';
import { ShardPlan } from '../plan/shard-plan.js';
import type { ProcessGroup } from './group.js';
import { agreeOnLoad, agreeOnWrite } from './step-status.js';
import { allRows, readCells, writeCells } from './row-access.js';
import { ShardedEmbeddingCollection, type ShardedConfig } from './sharded.js';
import { checkDynamicGroups, gatherDynamic, loadDynamic, writeDynamic, type SavedShard } from './dynamic-checkpoint.js';
import { gatherColumnState, loadColumnState, writeColumnState } from './column-state-checkpoint.js';

/**
 * Every table's weights and optimizer state as one collection would hold them: [rows × dim] and
 * [rows × stateWidth] fp32, on every rank. A collective.
 */
export async function gatherTable(sc: ShardedEmbeddingCollection, name: string): Promise<{ weights: Float32Array; state: Float32Array }> {
  const t = sc.plan.tables.findIndex((x) => x.name === name);
  if (t < 0) throw new EmbshardError('UNKNOWN_TABLE', `no table named '${name}'`);
  const ids = allRows(sc, t);
  const weights = await readCells(sc, t, ids, 'rows');
  const state = await readCells(sc, t, ids, 'state');
  return { weights, state };
}

/**
 * Saves a sharded collection as one EmbeddingCollection checkpoint at `dir` (written by rank 0,
 * atomically; every rank waits for it). A collective.
 */
export async function saveSharded(sc: ShardedEmbeddingCollection, dir: string, extra?: Record<string, unknown>): Promise<void> {
  const gathered: ({ weights: Float32Array; state: Float32Array } | undefined)[] = [];
  for (const t of sc.plan.tables) gathered.push(t.dynamic ? undefined : await gatherTable(sc, t.name));
  const shards = await gatherDynamic(sc);
  const columns = await gatherColumnState(sc);
  let failure: unknown;
  if (sc.group.rank === 0) {
    let ec: EmbeddingCollection | undefined;
    try {
      ec = new EmbeddingCollection(configOf(sc.config), { initialize: false });
      sc.plan.tables.forEach((t, i) => {
        const g = gathered[i];
        if (!g) return; // a dynamic table: its shards go beside the collection
        const ids = BigInt64Array.from({ length: t.rows }, (_, j) => BigInt(j));
        ec!.writeRows(t.name, ids, g.weights);
        if (ec!.stateWidth(t.name) > 0) ec!.writeState(t.name, ids, g.state);
      });
      ec.step = sc.step;
      const more = shards || columns
        ? async (tmp: string) => ({
          ...(shards ? { dynamicShards: await writeDynamic(tmp, sc.plan, shards) } : {}),
          ...(columns ? { columnState: await writeColumnState(tmp, sc.plan, columns) } : {}),
        })
        : undefined;
      await ec.save(dir, { ...extra, sharded: { worldSize: sc.plan.topology.worldSize, plan: sc.plan.toJSON() } }, more);
    } catch (e) {
      failure = e;
    } finally {
      ec?.dispose();
    }
  }
  await agreeOnWrite(sc.group, failure, () => new EmbshardError('IO_ERROR', `saving the sharded checkpoint '${dir}' failed on rank 0`));
}

/**
 * Loads a checkpoint written by saveSharded or EmbeddingCollection.save under `plan` (any world size):
 * every rank reads it (verified: sizes, CRC-32C) and keeps its slices. Tables must match the plan's.
 * A collective: the manifest's checks against the plan fail alike on every rank; past them a rank reads
 * its own dynamic shards, so the ranks agree on the outcome (one uncounted all-reduce) and a load that
 * failed on one rank fails on every rank, with that rank's code.
 */
export async function loadSharded(dir: string, plan: ShardPlan, group: ProcessGroup, config: ShardedConfig = {}): Promise<ShardedEmbeddingCollection> {
  dir = await checkpointDir(dir);
  const m = await readManifest(dir);
  if (plan.tables.some((t) => t.dynamic)) checkDynamicGroups(plan, planOf(m), dir);
  return agreeOnLoad(group, dir, () => loadLocal(dir, m, plan, group, config));
}

/** This rank's part of loadSharded: the checkpoint read, checked against the plan, and its slices kept. */
async function loadLocal(dir: string, m: Manifest, plan: ShardPlan, group: ProcessGroup, config: ShardedConfig): Promise<ShardedEmbeddingCollection> {
  const ec = await EmbeddingCollection.load(dir, { device: 'cpu' });
  try {
    const cfg = ec.config;
    for (const t of plan.tables) {
      const c = cfg.tables.find((x) => x.name === t.name);
      if (!c || c.rows !== t.rows || !c.dynamic !== !t.dynamic || c.dim !== t.dim || c.dtype !== t.dtype || c.pooling !== t.pooling || c.features.join() !== t.features.join())
        throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}': table '${t.name}' does not match the plan (rows, dim, dtype, pooling, features)`);
    }
    if (cfg.tables.length !== plan.tables.length) throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}' has ${cfg.tables.length} tables; the plan has ${plan.tables.length}`);
    const merged: ShardedConfig = { ...config, optimizer: config.optimizer ?? cfg.optimizer, seed: config.seed ?? cfg.seed };
    // another optimizer starts from fresh state, which only a stateless one (sgd) leaves to it
    if (merged.optimizer!.type !== cfg.optimizer.type && stateWidth(cfg.optimizer.type, 1) > 0)
      throw new EmbshardError('INVALID_CONFIG', `checkpoint '${dir}' holds ${cfg.optimizer.type} optimizer state; config.optimizer.type is ${merged.optimizer!.type}`);
    const sc = new ShardedEmbeddingCollection(plan, group, merged, { initialize: false });
    try {
      plan.tables.forEach((t, i) => {
        if (t.dynamic) return; // its shards: loadDynamic below
        const ids = allRows(sc, i);
        writeCells(sc, i, ids, ec.readRows(t.name, ids), 'rows');
        if (ec.stateWidth(t.name) > 0) writeCells(sc, i, ids, ec.readState(t.name, ids), 'state');
      });
      await loadDynamic(sc, dir, m.extra?.dynamicShards as SavedShard[] | undefined);
      await loadColumnState(sc, dir, cfg.optimizer.type, planOf(m), m.extra?.columnState);
    } catch (e) {
      sc.dispose();
      throw e;
    }
    sc.step = ec.step;
    return sc;
  } finally {
    ec.dispose();
  }
}

/** The plan a sharded checkpoint was saved under (its hot-id remap included), or undefined for a checkpoint of one collection. */
export async function savedPlan(dir: string): Promise<ShardPlan | undefined> {
  return planOf(await readManifest(await checkpointDir(dir)));
}

function planOf(m: Manifest): ShardPlan | undefined {
  const sharded = m.extra?.sharded as { plan?: unknown } | undefined;
  return sharded?.plan === undefined ? undefined : ShardPlan.fromJSON(sharded.plan);
}

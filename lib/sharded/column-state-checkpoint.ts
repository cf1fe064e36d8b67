// column-state-checkpoint.ts — the row accumulators of rowwise_adagrad tables split by columns in a sharded
// collection's checkpoint. Each column shard of such a table keeps its own accumulator per row (as
// column-wise sharding does); the ordinary checkpoint (reshard.ts) holds one per row, the first column
// shard's. A sharded save stores, beside it, the accumulators of every other column shard, gathered to
// rank 0: `cstate-<table>-<group>-<c0>.acc` (fp32, one per row of the row group; CRC-32 in the manifest),
// listed under `extra.columnState`. A load restores them only into a plan that splits the table into the
// same row groups and column ranges (and remaps the same hot ids), whichever ranks hold them; into another
// plan, or as one EmbeddingCollection, the files are ignored and every column shard starts from the first
// one's accumulator. A checkpoint without the entry (an older one) loads that way too. A listed file that
// is missing, truncated or altered fails the load with CHECKPOINT_CORRUPT naming it.
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { isFileEntry, readVerified, writeFileDurable } from '../checkpoint.js';
import { EmbshardError } from '../errors.js';
import type { ShardPlan } from '../plan/shard-plan.js';
import type { ShardedEmbeddingCollection } from './sharded.js';

/** One column shard's accumulators in a checkpoint's manifest. */
export interface SavedColumnState {
  table: string;
  group: number;
  rows: [number, number];
  cols: [number, number];
  file: string;
  bytes: number;
  crc32: number;
}

interface ColumnShard {
  t: number;
  group: number;
  a: number;
  b: number;
  c0: number;
  c1: number;
  rank: number;
}

/** Column shards of `plan` whose accumulators the ordinary checkpoint does not hold (all but the first of a row group). */
function extraShards(plan: ShardPlan, optimizer: string): ColumnShard[] {
  if (optimizer !== 'rowwise_adagrad') return [];
  const out: ColumnShard[] = [];
  plan.tables.forEach((t, i) => {
    if (t.dynamic) return; // a dynamic shard's state is stored whole (dynamic-checkpoint.ts)
    plan.layouts[i]!.groups.forEach((g, gi) => {
      for (const s of g.shards) if (s.c0 !== 0) out.push({ t: i, group: gi, a: g.a, b: g.b, c0: s.c0, c1: s.c1, rank: s.rank });
    });
  });
  return out;
}

/** This rank's local table holding column shard `s` (its rows [a, b) × cols [c0, c1)), or −1. */
function localOf(sc: ShardedEmbeddingCollection, s: ColumnShard): number {
  return sc.layout.localTables.findIndex((lt) => lt.part === 'shard' && lt.t === s.t && lt.r0 === s.a && lt.rows === s.b - s.a && lt.c0 === s.c0 && lt.c1 === s.c1);
}

/**
 * Every column shard's accumulators but the first's, on every rank (undefined when there are none). A
 * collective: each shard's holder fills its part, the others add zero bits (one uncounted all-reduce of
 * the fp32 bit patterns, so the values arrive bit for bit).
 */
export async function gatherColumnState(sc: ShardedEmbeddingCollection): Promise<{ shard: ColumnShard; acc: Float32Array }[] | undefined> {
  const shards = extraShards(sc.plan, sc.config.optimizer.type);
  if (shards.length === 0) return undefined;
  const total = shards.reduce((n, s) => n + s.b - s.a, 0);
  const buf = new Float32Array(total);
  let o = 0;
  for (const s of shards) {
    const n = s.b - s.a;
    const li = s.rank === sc.group.rank ? localOf(sc, s) : -1;
    if (li >= 0) sc.localEngine.readState(li, BigInt64Array.from({ length: n }, (_, j) => BigInt(j)), buf.subarray(o, o + n));
    o += n;
  }
  await sc.group.allReduce(new Int32Array(buf.buffer), 'sum', { uncounted: true });
  o = 0;
  return shards.map((s) => {
    const acc = buf.slice(o, o + s.b - s.a);
    o += s.b - s.a;
    return { shard: s, acc };
  });
}

/** Writes gathered accumulators into checkpoint folder `tmp`; returns their manifest entries. */
export async function writeColumnState(tmp: string, plan: ShardPlan, gathered: readonly { shard: ColumnShard; acc: Float32Array }[]): Promise<SavedColumnState[]> {
  const out: SavedColumnState[] = [];
  for (const { shard: s, acc } of gathered) {
    const file = `cstate-${s.t}-${s.group}-${s.c0}.acc`;
    const bytes = new Uint8Array(acc.buffer, acc.byteOffset, acc.byteLength);
    await writeFileDurable(join(tmp, file), bytes);
    out.push({ table: plan.tables[s.t]!.name, group: s.group, rows: [s.a, s.b], cols: [s.c0, s.c1], file, bytes: bytes.length, crc32: crc32(bytes) });
  }
  return out;
}

/** Table i of `p` as its row groups, column ranges and hot ids place its rows (ranks left out). */
function splitOf(p: ShardPlan, i: number): string {
  const t = p.toJSON().tables[i]!;
  return JSON.stringify({ ...t, cluster: undefined, shards: t.shards.map((s) => [s.rows, s.cols]) });
}

/**
 * Restores this rank's column shards' own accumulators from checkpoint `dir` into `sc` (just loaded from
 * the ordinary checkpoint, optimizer `savedOptimizer`, under `saved`, the plan it was saved under). Only
 * tables that `saved` split alike; nothing when the manifest lists no column state (an older checkpoint).
 * Every listed file it needs is read and verified before any is written.
 */
export async function loadColumnState(sc: ShardedEmbeddingCollection, dir: string, savedOptimizer: string, saved: ShardPlan | undefined, entries: unknown): Promise<void> {
  if (entries === undefined || !saved || savedOptimizer !== 'rowwise_adagrad') return;
  if (!Array.isArray(entries)) throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}': the manifest's columnState is not a list`);
  const mine = extraShards(sc.plan, sc.config.optimizer.type).filter((s) => s.rank === sc.group.rank);
  const writes: { li: number; acc: Float32Array }[] = [];
  for (const s of mine) {
    const name = sc.plan.tables[s.t]!.name;
    const si = saved.tables.findIndex((x) => x.name === name);
    if (si < 0 || splitOf(saved, si) !== splitOf(sc.plan, s.t)) continue; // another split: the first column shard's, as loaded
    const e = (entries as SavedColumnState[]).find((x) => x?.table === name && x.rows?.[0] === s.a && x.rows?.[1] === s.b && x.cols?.[0] === s.c0 && x.cols?.[1] === s.c1);
    if (!e || !isFileEntry(e, 'crc32'))
      throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}': the manifest lists no accumulators of rows [${s.a}, ${s.b}) × cols [${s.c0}, ${s.c1}) of table '${name}'`);
    const data = await readVerified(dir, e.file, e.bytes, e.crc32, crc32);
    if (data.length !== (s.b - s.a) * 4)
      throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}': ${e.file} does not hold ${s.b - s.a} accumulators`);
    const li = localOf(sc, s);
    if (li >= 0) writes.push({ li, acc: new Float32Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.length)) });
  }
  for (const { li, acc } of writes) sc.localEngine.writeState(li, BigInt64Array.from({ length: acc.length }, (_, j) => BigInt(j)), acc);
}

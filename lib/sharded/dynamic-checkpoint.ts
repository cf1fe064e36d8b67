// dynamic-checkpoint.ts — the dynamic row shards in a sharded collection's checkpoint. A sharded save
// writes one EmbeddingCollection checkpoint (reshard.ts); its dynamic tables stay empty there and every
// row shard of them is stored beside it, gathered to rank 0: `dshard-<table>-<group>.map` (the shard's id
// map as lib/storage/dynamic.ts serialises it, with its own CRC-32C) and `dshard-<table>-<group>.rows`
// (fp32 values then optimizer state of its slots 0 … b − a − 1; CRC-32 in the manifest), listed under
// `extra.dynamicShards`; with `spill`, also `dshard-<table>-<group>.spill`, the compact copy of the
// shard's spill file (its CRC-32C and record count in the manifest, verified on load). Spill is the loading
// collection's setting: a shard saved without spill loads into a spilling one with an empty spill file;
// spilled rows into a collection without spill are refused (INVALID_CONFIG naming spill), not dropped.
// A rank whose shards cannot be read for a save fails it on every rank (agreed before the gather). A
// load needs the same row groups for every dynamic table (any ranks may hold them, at any world size): a
// shard's ids are those whose hash falls in its range, so another split would have to move ids between
// maps — refused with INVALID_PLAN naming the table.
import { promises as fs } from 'node:fs';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { stateWidth } from '../config.js';
import { isFileEntry, readVerified, writeFileDurable, type DynamicPayload } from '../checkpoint.js';
import { EmbshardError } from '../errors.js';
import type { ShardPlan } from '../plan/shard-plan.js';
import type { DynamicShards } from './dynamic-shards.js';
import { LocalLayout } from './local-layout.js';
import { agreeOnCall } from './step-status.js';
import type { ShardedEmbeddingCollection } from './sharded.js';

/** One dynamic row shard in a checkpoint's manifest. */
export interface SavedShard {
  table: string;
  group: number;
  range: [number, number];
  /** crc32c: the CRC-32C the map's bytes end with */
  map: { file: string; bytes: number; crc32c: number };
  rows: { file: string; bytes: number; crc32: number };
  /** a spilling shard: the copy of its spill file's live records */
  spill?: SpillCopy;
}

interface SpillCopy {
  file: string;
  bytes: number;
  crc32c: number;
  records: number;
}

interface ShardBytes {
  table: string;
  group: number;
  range: [number, number];
  map: Uint8Array;
  mapCrc: number;
  cells: Uint8Array;
  /** a spilling shard's spill copy (empty bytes otherwise) */
  spill: { bytes: Uint8Array; crc32c: number; records: number } | undefined;
}

const fileOf = (table: number, group: number, kind: 'map' | 'rows' | 'spill') => `dshard-${table}-${group}.${kind}`;

/** This rank's dynamic shards: map bytes (through the maps' own checkpoint writer) and slot rows + state. */
async function localShards(sc: ShardedEmbeddingCollection): Promise<ShardBytes[]> {
  const dyn = sc.dynamicShards;
  if (!dyn) return [];
  const scratch = mkdtempSync(join(tmpdir(), 'embshard-dshard-'));
  try {
    const saved = await dyn.tablesOfRank.save(scratch);
    const e = sc.localEngine;
    return await Promise.all(
      dyn.tables.map(async (li) => {
        const lt = sc.layout.localTables[li]!, st = dyn.stats().find((x) => x.range[0] === lt.r0 && x.table === sc.plan.tables[lt.t]!.name)!;
        const slots = BigInt64Array.from({ length: lt.rows }, (_, j) => BigInt(j));
        const sw = stateWidth(sc.config.optimizer.type, lt.dim);
        const cells = new Float32Array(lt.rows * (lt.dim + sw));
        e.readRows(li, slots, cells.subarray(0, lt.rows * lt.dim));
        if (sw > 0) e.readState(li, slots, cells.subarray(lt.rows * lt.dim));
        const p = saved.find((x) => x.table === lt.name)!;
        const spill = p.spill ? { bytes: new Uint8Array(await fs.readFile(join(scratch, p.spill.file))), crc32c: p.spill.crc32c, records: p.spill.records } : undefined;
        return { table: st.table, group: st.group, range: st.range, map: new Uint8Array(await fs.readFile(join(scratch, p.file))), mapCrc: p.crc32c, cells: new Uint8Array(cells.buffer), spill };
      }),
    );
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/**
 * Every rank's dynamic shards on rank 0 (undefined elsewhere, and when there are none). A collective:
 * the shards' sizes, then their bytes, all-gathered (uncounted: not step traffic).
 */
export async function gatherDynamic(sc: ShardedEmbeddingCollection): Promise<ShardBytes[] | undefined> {
  if (!sc.plan.tables.some((t) => t.dynamic)) return undefined;
  const g = sc.group, W = g.size;
  // a rank whose shards cannot be read (an altered spill record, no scratch folder) fails the save on
  // every rank: the ranks agree first (one uncounted all-reduce), so none is left waiting in the gather
  let mine: ShardBytes[] = [], failure: EmbshardError | undefined;
  try {
    mine = await localShards(sc);
  } catch (e) {
    failure = e instanceof EmbshardError ? e : new EmbshardError('IO_ERROR', `reading this rank's dynamic shards for the checkpoint failed: ${String((e as Error)?.message ?? e)}`);
  }
  await agreeOnCall(g, failure, 'dynamic shards', 'save');
  // per shard: map bytes, cell bytes, map CRC, spill bytes (-1: the shard does not spill), spill CRC, spill records
  const sizes = await g.allGather(
    Float64Array.from(mine.flatMap((s) => [s.map.length, s.cells.length, s.mapCrc, s.spill ? s.spill.bytes.length : -1, s.spill?.crc32c ?? 0, s.spill?.records ?? 0])),
    { uncounted: true },
  );
  const blob = new Uint8Array(mine.reduce((n, s) => n + s.map.length + s.cells.length + (s.spill?.bytes.length ?? 0), 0));
  let o = 0;
  for (const s of mine) {
    blob.set(s.map, o);
    blob.set(s.cells, o + s.map.length);
    o += s.map.length + s.cells.length;
    if (s.spill) {
      blob.set(s.spill.bytes, o);
      o += s.spill.bytes.length;
    }
  }
  const all = await g.allGather(blob, { uncounted: true });
  if (g.rank !== 0) return undefined;
  const out: ShardBytes[] = [];
  let so = 0, bo = 0;
  for (let r = 0; r < W; r++) {
    // rank r's dynamic shards, in its local table order (its layout under the plan)
    const L = new LocalLayout(sc.plan, r);
    for (const lt of L.localTables) {
      if (!lt.dynamic) continue;
      const m = sizes.data[so++]!, c = sizes.data[so++]!, mapCrc = sizes.data[so++]!;
      const sp = sizes.data[so++]!, spCrc = sizes.data[so++]!, spRecords = sizes.data[so++]!;
      const group = L.tables[lt.t]!.groups.findIndex((x) => x.a === lt.r0);
      const spill = sp >= 0 ? { bytes: all.data.slice(bo + m + c, bo + m + c + sp), crc32c: spCrc, records: spRecords } : undefined;
      out.push({ table: sc.plan.tables[lt.t]!.name, group, range: [lt.r0, lt.r0 + lt.rows], map: all.data.slice(bo, bo + m), mapCrc, cells: all.data.slice(bo + m, bo + m + c), spill });
      bo += m + c + Math.max(sp, 0);
    }
  }
  return out;
}

/** Writes gathered shards into checkpoint folder `tmp`; returns their manifest entries. */
export async function writeDynamic(tmp: string, plan: ShardPlan, shards: readonly ShardBytes[]): Promise<SavedShard[]> {
  const out: SavedShard[] = [];
  for (const s of shards) {
    const t = plan.tables.findIndex((x) => x.name === s.table);
    const map = fileOf(t, s.group, 'map'), rows = fileOf(t, s.group, 'rows');
    await writeFileDurable(join(tmp, map), s.map);
    await writeFileDurable(join(tmp, rows), s.cells);
    let spill: SpillCopy | undefined;
    if (s.spill) {
      spill = { file: fileOf(t, s.group, 'spill'), bytes: s.spill.bytes.length, crc32c: s.spill.crc32c, records: s.spill.records };
      await writeFileDurable(join(tmp, spill.file), s.spill.bytes);
    }
    out.push({ table: s.table, group: s.group, range: s.range, map: { file: map, bytes: s.map.length, crc32c: s.mapCrc }, rows: { file: rows, bytes: s.cells.length, crc32: crc32(s.cells) }, ...(spill ? { spill } : {}) });
  }
  return out;
}

/**
 * Before a load: every dynamic table of `plan` must have the row groups `saved` (the saved plan) gave it.
 * INVALID_PLAN naming the table otherwise.
 */
export function checkDynamicGroups(plan: ShardPlan, saved: ShardPlan | undefined, dir: string): void {
  plan.tables.forEach((t, i) => {
    if (!t.dynamic) return;
    const si = saved?.tables.findIndex((x) => x.name === t.name) ?? -1;
    if (!saved || si < 0 || !saved.tables[si]!.dynamic)
      throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}' holds no shards of dynamic table '${t.name}' (not saved by a sharded collection)`);
    const ranges = (p: ShardPlan, k: number) => p.layouts[k]!.groups.map((g) => `[${g.a}, ${g.b})`).join(' ');
    if (ranges(plan, i) !== ranges(saved, si))
      throw new EmbshardError('INVALID_PLAN', `dynamic table '${t.name}': the checkpoint's row shards are ${ranges(saved, si)} but the plan's are ${ranges(plan, i)}; a dynamic table loads only into the same row shards (its ids are placed by hash)`, { table: t.name });
  });
}

/** Reads this rank's dynamic shards from checkpoint `dir` into `sc` (CHECKPOINT_CORRUPT when missing, truncated or altered). */
export async function loadDynamic(sc: ShardedEmbeddingCollection, dir: string, saved: readonly SavedShard[] | undefined): Promise<void> {
  const dyn = sc.dynamicShards;
  if (!dyn) return;
  const maps: DynamicPayload[] = [];
  const e = sc.localEngine;
  for (const li of dyn.tables) {
    const lt = sc.layout.localTables[li]!, name = sc.plan.tables[lt.t]!.name;
    const s = saved?.find((x) => x.table === name && x.range[0] === lt.r0 && x.range[1] === lt.r0 + lt.rows);
    if (!s || !isFileEntry(s.map) || !isFileEntry(s.rows, 'crc32'))
      throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}': the manifest lists no shard [${lt.r0}, ${lt.r0 + lt.rows}) of dynamic table '${name}'`);
    const cells = await readVerified(dir, s.rows.file, s.rows.bytes, s.rows.crc32, crc32);
    const sw = stateWidth(sc.config.optimizer.type, lt.dim);
    if (cells.length !== lt.rows * (lt.dim + sw) * 4)
      throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}': ${s.rows.file} does not hold ${lt.rows} rows of dim ${lt.dim} with ${sw} state floats`);
    const f = new Float32Array(cells.buffer.slice(cells.byteOffset, cells.byteOffset + cells.length));
    const slots = BigInt64Array.from({ length: lt.rows }, (_, j) => BigInt(j));
    e.writeRows(li, slots, f.subarray(0, lt.rows * lt.dim));
    if (sw > 0) e.writeState(li, slots, f.subarray(lt.rows * lt.dim));
    // spill is the collection's setting: spilled rows need a spilling shard to keep them
    if (!dyn.spills && s.spill && s.spill.records > 0)
      throw new EmbshardError('INVALID_CONFIG', `checkpoint '${dir}': row shard [${lt.r0}, ${lt.r0 + lt.rows}) of dynamic table '${name}' holds ${s.spill.records} spilled rows; load it with config.spill to keep them`, { path: 'spill' });
    maps.push({ table: lt.name, file: s.map.file, bytes: s.map.bytes, crc32c: s.map.crc32c, ...(dyn.spills && s.spill ? { spill: { ...s.spill } } : {}) });
  }
  // the maps through their own checkpoint reader (sizes and the embedded CRC-32C verified)
  if (dyn.spills && maps.some((m) => !m.spill)) await loadWithEmptySpills(dyn, dir, maps);
  else await dyn.tablesOfRank.load(dir, maps);
  dyn.resetSinks(e);
}

/**
 * Spilling shards loading maps saved without spill (`maps`, files in `dir`): each starts with an empty
 * spill file, read from the copy its own fresh map writes beside copies of the saved maps.
 */
async function loadWithEmptySpills(dyn: DynamicShards, dir: string, maps: readonly DynamicPayload[]): Promise<void> {
  const scratch = mkdtempSync(join(tmpdir(), 'embshard-dshard-'));
  try {
    const empty = await dyn.tablesOfRank.save(scratch);
    const entries: DynamicPayload[] = [];
    for (const m of maps) {
      // each saved file copied whole (its size checked here, its checksums by the maps' own reader)
      for (const f of [m, ...(m.spill ? [m.spill] : [])]) await writeFileDurable(join(scratch, f.file), await readVerified(dir, f.file, f.bytes, f.crc32c, () => f.crc32c));
      entries.push({ ...m, spill: m.spill ?? empty.find((x) => x.table === m.table)!.spill! });
    }
    await dyn.tablesOfRank.load(scratch, entries);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

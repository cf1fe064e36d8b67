// dynamic-drive.ts — drives sharded collections of dynamic-oracle.mjs's plan and its naive model side by
// side, for the tests of test/sharded/dynamic-*: one training step on both (each rank's outputs against
// the model's), and every row shard's counters and held ids against the model's.
import { expect } from 'vitest';
import { JaggedBatch } from '../../lib/batch.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import type { ShardedEmbeddingCollection } from '../../lib/sharded/sharded.js';
// @ts-expect-error plain JS model shared with the mpirun scripts
import * as O from './dynamic-oracle.mjs';

export const lib = { JaggedBatch, ShardPlan };
export type Bags = bigint[][][];

/** A shard of the model: its counters and held ids (ascending). */
export interface ModelShard {
  range: [number, number];
  hits: number;
  misses: number;
  admissions: number;
  evictions: number;
  rows: number;
  spilled?: number;
  held: bigint[];
}

/** The model's output / gradient columns (a then b) in a rank's pooled layout. */
function columns(sc: ShardedEmbeddingCollection): number[] {
  const off = (f: string) => sc.featureInfo.find((x) => x.name === f)!.offset;
  return [...Array.from({ length: O.DIM }, (_, c) => off('a') + c), ...Array.from({ length: O.DIM }, (_, c) => off('b') + c)];
}
function toModel(x: Float32Array, cols: number[], B: number): Float64Array {
  const P = cols.length, out = new Float64Array(B * P);
  for (let b = 0; b < B; b++) cols.forEach((c, k) => (out[b * P + k] = x[b * P + c]!));
  return out;
}
function fromModel(x: Float32Array, cols: number[], B: number): Float32Array {
  const P = cols.length, out = new Float32Array(B * P);
  for (let b = 0; b < B; b++) cols.forEach((c, k) => (out[b * P + c] = x[b * P + k]!));
  return out;
}

/** One training step of `bags` (per rank) on the ranks and on the model; each rank's outputs checked. */
export async function stepBoth(ranks: ShardedEmbeddingCollection[], model: { train(b: Bags[], g: Float32Array[]): Float64Array[] }, bags: Bags[], step: number): Promise<void> {
  const Bs = bags.map((x) => x[0]!.length);
  const grads: Float32Array[] = Bs.map((B, r) => O.gradOf(r, step, B));
  const want = model.train(bags, grads);
  const outs = await Promise.all(ranks.map((sc, r) => sc.forward(O.batchOf(lib, bags[r]!))));
  for (let r = 0; r < ranks.length; r++) expect(O.relErr(toModel(outs[r]!.pooled, columns(ranks[r]!), Bs[r]!), want[r]!), `rank ${r} outputs, step ${step}`).toBeLessThanOrEqual(1e-5);
  await Promise.all(ranks.map((sc, r) => sc.backward(outs[r]!, { pooled: fromModel(grads[r]!, columns(sc), Bs[r]!) })));
}

/** An evaluation forward (admit: false) of `bags` on the ranks: the model's outputs, no shard changed. */
export async function expectLookup(ranks: ShardedEmbeddingCollection[], model: { lookup(b: Bags[]): Float64Array[] }, bags: Bags[]): Promise<void> {
  const before = JSON.stringify(ranks.map((sc) => sc.stats()));
  const want = model.lookup(bags);
  const outs = await Promise.all(ranks.map((sc, r) => sc.forward(O.batchOf(lib, bags[r]!), { admit: false })));
  for (let r = 0; r < ranks.length; r++) expect(O.relErr(toModel(outs[r]!.pooled, columns(ranks[r]!), bags[r]![0]!.length), want[r]!), `rank ${r} evaluation outputs`).toBeLessThanOrEqual(1e-5);
  await Promise.all(ranks.map((sc, r) => sc.release(outs[r]!)));
  expect(JSON.stringify(ranks.map((sc) => sc.stats()))).toBe(before);
}

/** Every row shard of the ranks has the model's counters and held ids. */
export function expectShards(ranks: ShardedEmbeddingCollection[], model: { shardStats(): ModelShard[] }, what: string): void {
  const st = ranks.flatMap((sc) => sc.stats());
  const ms = model.shardStats();
  expect(st.length, `shards ${what}`).toBe(ms.length);
  const held = ranks.flatMap((sc) => sc.heldIds('dyn'));
  for (const m of ms) {
    const s = st.find((x) => x.range[0] === m.range[0] && x.range[1] === m.range[1])!;
    const { held: ids, range: _r, ...counters } = m;
    expect({ hits: s.hits, misses: s.misses, admissions: s.admissions, evictions: s.evictions, rows: s.rows, ...(s.spilled !== undefined ? { spilled: s.spilled } : {}) }, `shard [${m.range}] ${what}`).toEqual(counters);
    const h = held.find((x) => x.range[0] === m.range[0])!;
    expect([...h.ids].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0)), `held ids of [${m.range}] ${what}`).toEqual(ids);
  }
}

/** readRows / readState of raw `ids` on every rank equal the model's (within 1e-5). */
export async function expectCells(ranks: ShardedEmbeddingCollection[], model: { rows(ids: bigint[]): number[]; state(ids: bigint[]): number[] }, ids: BigInt64Array, sw: number): Promise<void> {
  const rows = await Promise.all(ranks.map((sc) => sc.readRows('dyn', ids)));
  const state = await Promise.all(ranks.map((sc) => sc.readState('dyn', ids)));
  for (let r = 0; r < ranks.length; r++) {
    expect(O.relErr(rows[r]!, model.rows([...ids])), `rank ${r} readRows`).toBeLessThanOrEqual(1e-5);
    expect(state[r]!.length).toBe(ids.length * sw);
    expect(O.relErr(state[r]!, model.state([...ids])), `rank ${r} readState`).toBeLessThanOrEqual(1e-5);
  }
}

// A plan whose tables carry hot-id remaps (the hot ids are scattered over the table, as hashed ids are)
// on in-process groups of 4 ranks (two modelled nodes), against one EmbeddingCollection trained on the
// same global batches with the user's ids: outputs and final tables within 1e-5, every rank's bytes equal
// measureTraffic's, rows read and written by the user's ids, and a checkpoint that keeps the plan (its
// remap included) and holds rows by the user's ids.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { measureTraffic } from '../../lib/plan/traffic.js';
import { idPermutation } from '../../lib/workloads/permutation.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { gatherTable } from '../../lib/sharded/reshard.js';
import { ShardedEmbeddingCollection, collectionConfigOf, type ShardedConfig } from '../../lib/sharded/sharded.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';

const lib = { JaggedBatch, ShardPlan };
const W = 4, RPN = 2;

/** The scenario's tables, each with its ids scattered by a permutation; the hot ids are the images of the lowest rows. */
function remappedPlan(): { plan: ShardPlan; perms: Map<string, number[]> } {
  const perms = new Map<string, number[]>();
  const tables = S.scenarioTables(W).map((e: { table: { name: string; rows: number }; tiers?: { replicated: number; node: number } }, i: number) => {
    const perm = Array.from(idPermutation(e.table.rows, 100, i));
    perms.set(e.table.name, perm);
    const K = Math.max(6, (e.tiers?.replicated ?? 0) + (e.tiers?.node ?? 0));
    return { ...e, table: { ...e.table, hotIds: perm.slice(0, K) } };
  });
  return { plan: ShardPlan.create({ topology: S.topology(W, RPN), batchSize: 6, tables }), perms };
}

/** The scenario's skewed batch of a rank with every id scattered by its table's permutation. */
function scatteredBatch(plan: ShardPlan, perms: Map<string, number[]>, rank: number, step: number): JaggedBatch {
  const b: JaggedBatch = S.localBatch(lib, plan, rank, step);
  const ids = new BigInt64Array(b.ids.length);
  let at = 0;
  for (const f of b.features) {
    const perm = perms.get(plan.tables.find((t) => t.features.includes(f))!.name)!;
    for (const id of b.feature(f).ids as BigInt64Array) ids[at++] = BigInt(perm[Number(id)]!);
  }
  return JaggedBatch.fromLengths({ features: b.features, batchSize: b.batchSize, lengths: b.lengths, ids });
}

describe('sharded training with hot-id remaps equals one collection over the user ids', () => {
  it('4 ranks, 2 nodes, adagrad, 3 steps: outputs, tables, state within 1e-5; bytes = measureTraffic; checkpoint keeps the remap', async () => {
    const { plan, perms } = remappedPlan();
    expect(plan.tables.every((t) => t.hotIds.length > 0)).toBe(true);
    const cfg: ShardedConfig = { optimizer: { type: 'adagrad', lr: 0.1 }, seed: 5 };
    const groups = createInProcessGroups(W, { ranksPerNode: RPN, timeoutMs: 30_000 });
    const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, cfg));
    const oracle = new EmbeddingCollection(collectionConfigOf(plan, cfg));
    const dir = mkdtempSync(join(tmpdir(), 'embshard-remap-'));
    let loaded: ShardedEmbeddingCollection[] = [];
    try {
      // the initial rows are the single collection's, by user id
      for (const t of plan.tables) {
        const g = await Promise.all(ranks.map((sc) => gatherTable(sc, t.name)));
        const ids = Array.from({ length: t.rows }, (_, i) => i);
        expect(S.relErr(g[0]!.weights, oracle.readRows(t.name, ids)), t.name).toBe(0);
      }
      let outErr = 0;
      for (let step = 0; step < 3; step++) {
        const batches = groups.map((_, r) => scatteredBatch(plan, perms, r, step));
        outErr = Math.max(outErr, await S.stepBoth(lib, ranks, oracle, batches, step));
        const predicted = measureTraffic(plan, batches).perRank;
        ranks.forEach((sc, r) => expect(sc.traffic, `step ${step} rank ${r}`).toEqual(predicted[r]));
      }
      expect(outErr).toBeLessThanOrEqual(1e-5);
      for (const t of plan.tables) {
        const ids = Array.from({ length: t.rows }, (_, i) => i);
        const w = oracle.readRows(t.name, ids), st = oracle.readState(t.name, ids);
        for (const g of await Promise.all(ranks.map((sc) => gatherTable(sc, t.name)))) {
          expect(S.relErr(g.weights, w), t.name).toBeLessThanOrEqual(1e-5);
          expect(S.relErr(g.state, st), t.name).toBeLessThanOrEqual(1e-5);
        }
      }
      // rows by user id: a write to a hot id lands where the tiers hold it, and reads back on every rank
      const hotId = plan.table('D').hotIds[0]!;
      const vals = Float32Array.from({ length: 4 }, (_, i) => i + 0.5);
      await Promise.all(ranks.map((sc) => sc.writeRows('D', [hotId], vals)));
      oracle.writeRows('D', [hotId], vals);
      for (const got of await Promise.all(ranks.map((sc) => sc.readRows('D', [hotId, 0, 47])))) expect(got).toEqual(oracle.readRows('D', [hotId, 0, 47]));
      // checkpoint: rows by user id (a one-collection load sees the oracle's tables), the plan with its remap kept
      await Promise.all(ranks.map((sc) => sc.save(dir)));
      const saved = await ShardedEmbeddingCollection.savedPlan(dir);
      expect(saved!.toJSON()).toEqual(plan.toJSON());
      const ec = await EmbeddingCollection.load(dir);
      try {
        for (const t of plan.tables) {
          const ids = Array.from({ length: t.rows }, (_, i) => i);
          const gathered = (await Promise.all(ranks.map((sc) => gatherTable(sc, t.name))))[0]!;
          expect(ec.readRows(t.name, ids), t.name).toEqual(gathered.weights);
          expect(S.relErr(ec.readRows(t.name, ids), oracle.readRows(t.name, ids)), t.name).toBeLessThanOrEqual(1e-5);
        }
      } finally {
        ec.dispose();
      }
      const groups2 = createInProcessGroups(W, { ranksPerNode: RPN, timeoutMs: 30_000 });
      loaded = await Promise.all(groups2.map((g) => ShardedEmbeddingCollection.load(dir, saved!, g)));
      for (const t of plan.tables) {
        const before = await Promise.all(ranks.map((sc) => gatherTable(sc, t.name)));
        const after = await Promise.all(loaded.map((sc) => gatherTable(sc, t.name)));
        expect(after[0]!.weights, t.name).toEqual(before[0]!.weights);
        expect(after[0]!.state, t.name).toEqual(before[0]!.state);
      }
    } finally {
      ranks.forEach((x) => x.dispose());
      loaded.forEach((x) => {
        x.dispose();
        x.group.close();
      });
      oracle.dispose();
      groups.forEach((g) => g.close());
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

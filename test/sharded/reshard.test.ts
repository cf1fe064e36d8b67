// Checkpoints that reshard: a sharded collection saved under one plan and world size loads under another,
// and into / from a single EmbeddingCollection, with tables, optimizer state and step identical (bitwise);
// damaged or mismatched checkpoints are refused, on every rank when only one rank reads the damage.
import { describe, it, expect } from 'vitest';
import { cpSync, mkdtempSync, rmSync, unlinkSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection, collectionConfigOf, type ShardedConfig } from '../../lib/sharded/sharded.js';
import { gatherTable, loadSharded, saveSharded } from '../../lib/sharded/reshard.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';
import { idPool, localBatch as dynamicBatch, makePlan as dynamicPlan } from './dynamic-scenario.js';

const lib = { JaggedBatch, ShardPlan };

async function train(ranks: ShardedEmbeddingCollection[], plan: ShardPlan, steps: number, from = 0): Promise<void> {
  for (let step = from; step < from + steps; step++) {
    const outs = await Promise.all(ranks.map((sc, r) => sc.forward(S.localBatch(lib, plan, r, step))));
    await Promise.all(ranks.map((sc, r) => sc.backward(outs[r]!, S.gradsFor(outs[r]!, r, step))));
  }
}

async function gatherAll(ranks: ShardedEmbeddingCollection[], plan: ShardPlan) {
  const out: Record<string, { weights: Float32Array; state: Float32Array }> = {};
  for (const t of plan.tables) out[t.name] = (await Promise.all(ranks.map((sc) => gatherTable(sc, t.name))))[0]!;
  return out;
}

function readAll(ec: EmbeddingCollection, plan: ShardPlan) {
  const out: Record<string, { weights: Float32Array; state: Float32Array }> = {};
  for (const t of plan.tables) {
    const ids = Array.from({ length: t.rows }, (_, i) => i);
    out[t.name] = { weights: ec.readRows(t.name, ids), state: ec.stateWidth(t.name) > 0 ? ec.readState(t.name, ids) : new Float32Array(0) };
  }
  return out;
}

describe('resharding checkpoints', () => {
  const cfg: ShardedConfig = { optimizer: { type: 'adam', lr: 0.01 }, seed: 5 };

  for (const hierarchical of [false, true]) {
  it(`4 ranks (2 nodes${hierarchical ? ', hierarchical protocol' : ''}) -> 2 ranks -> 1 collection -> 4 ranks: tables, state and step identical`, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-reshard-'));
    try {
      const plan4 = S.makePlan(lib, 4, 2, { hierarchical });
      const g4 = createInProcessGroups(4, { ranksPerNode: 2 });
      const r4 = g4.map((g) => new ShardedEmbeddingCollection(plan4, g, cfg));
      await train(r4, plan4, 2);
      const before = await gatherAll(r4, plan4);
      await Promise.all(r4.map((sc) => saveSharded(sc, join(dir, 'a'))));
      r4.forEach((x) => x.dispose());
      g4.forEach((g) => g.close());

      // into a single collection
      const ec = await EmbeddingCollection.load(join(dir, 'a'));
      expect(ec.step).toBe(2);
      const single = readAll(ec, plan4);
      for (const t of plan4.tables) {
        expect(single[t.name]!.weights).toEqual(before[t.name]!.weights);
        expect(single[t.name]!.state).toEqual(before[t.name]!.state);
      }

      // under another plan and world size
      const plan2 = S.makePlan(lib, 2, 2);
      const g2 = createInProcessGroups(2);
      const r2 = await Promise.all(g2.map((g) => loadSharded(join(dir, 'a'), plan2, g)));
      expect(r2.every((sc) => sc.step === 2)).toBe(true);
      const after = await gatherAll(r2, plan2);
      for (const t of plan2.tables) {
        expect(after[t.name]!.weights).toEqual(before[t.name]!.weights);
        expect(after[t.name]!.state).toEqual(before[t.name]!.state);
      }
      // training goes on from there exactly like the single collection does
      await train(r2, plan2, 1, 2);
      const oracleBatches = [0, 1].map((r) => S.localBatch(lib, plan2, r, 2));
      const gout = await ec.forward(S.globalBatch(lib, oracleBatches));
      const grads = [0, 1].map((r) => S.gradsFor({ pooled: S.sliceRows(gout.pooled, ec.pooledDim, r * 6, 6), sequences: Object.fromEntries(Object.keys(gout.sequences).map((f) => [f, { values: new Float32Array(oracleBatches[r]!.feature(f).ids.length * 4) }])) }, r, 2));
      await ec.backward(gout, S.concatGrads(grads, ec.sequenceFeatures));
      const cont = await gatherAll(r2, plan2);
      const ref = readAll(ec, plan2);
      for (const t of plan2.tables) expect(S.relErr(cont[t.name]!.weights, ref[t.name]!.weights)).toBeLessThanOrEqual(1e-5);

      // a single collection's checkpoint loads sharded too
      await ec.save(join(dir, 'b'));
      const g4b = createInProcessGroups(4, { ranksPerNode: 2 });
      const r4b = await Promise.all(g4b.map((g) => loadSharded(join(dir, 'b'), plan4, g)));
      const back = await gatherAll(r4b, plan4);
      const refb = readAll(ec, plan4);
      for (const t of plan4.tables) {
        expect(back[t.name]!.weights).toEqual(refb[t.name]!.weights);
        expect(back[t.name]!.state).toEqual(refb[t.name]!.state);
      }
      expect(r4b[0]!.step).toBe(ec.step);
      r2.forEach((x) => x.dispose());
      r4b.forEach((x) => x.dispose());
      g2.forEach((g) => g.close());
      g4b.forEach((g) => g.close());
      ec.dispose();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  }

  it('refuses a missing, damaged or mismatched checkpoint', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-reshard-'));
    try {
      const plan = S.makePlan(lib, 2, 2);
      const [g] = createInProcessGroups(1);
      await expect(loadSharded(join(dir, 'nope'), S.makePlan(lib, 1, 1), g!)).rejects.toMatchObject({ code: 'CHECKPOINT_MISSING' });
      const ec = new EmbeddingCollection(collectionConfigOf(plan, cfg));
      await ec.save(join(dir, 'c'));
      // a plan whose table differs from the checkpoint's
      const other = ShardPlan.create({ topology: S.topology(1, 1), batchSize: 6, tables: [{ table: { name: 'A', rows: 41, dim: 8, features: ['a1', 'a2'] }, cluster: 'dp' }] });
      await expect(loadSharded(join(dir, 'c'), other, g!)).rejects.toMatchObject({ code: 'CHECKPOINT_CORRUPT', message: expect.stringMatching(/'A'/) });
      // flip a byte of the payload
      const payload = join(dir, 'c', 'tables.bin');
      const bytes = readFileSync(payload);
      bytes[bytes.length - 5] ^= 0xff;
      writeFileSync(payload, bytes);
      await expect(loadSharded(join(dir, 'c'), S.makePlan(lib, 1, 1), g!)).rejects.toMatchObject({ code: 'CHECKPOINT_CORRUPT' });
      ec.dispose();
      g!.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a dynamic shard file damaged or missing fails the load on every rank, not only on the rank that reads it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-reshard-'));
    const W = 2;
    const plan = dynamicPlan(W, { dyn: 'rb', pooling: 'sum', capacity: 30, seqCapacity: 20 });
    const dcfg: ShardedConfig = { optimizer: { type: 'adagrad', lr: 0.1 }, seed: 9 };
    const groups = createInProcessGroups(W, { ranksPerNode: W, timeoutMs: 30_000 });
    const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, dcfg));
    try {
      const pool = idPool(80, 4);
      for (let k = 0; k < 2; k++) {
        const outs = await Promise.all(ranks.map((sc, r) => sc.forward(dynamicBatch(pool, r, k))));
        await Promise.all(ranks.map((sc, r) => sc.backward(outs[r]!, S.gradsFor(outs[r], r, k))));
      }
      await Promise.all(ranks.map((sc) => sc.save(join(dir, 'ck'))));
      // table 0's row shard 1 (rank 1's): its rows, its id map; table 1's shard 0 (rank 0's) missing
      const damage: [string, (d: string) => void][] = [
        ['dshard-0-1.rows', (d) => { const b = readFileSync(join(d, 'dshard-0-1.rows')); b[5] ^= 0x10; writeFileSync(join(d, 'dshard-0-1.rows'), b); }],
        ['dshard-0-1.map', (d) => { const b = readFileSync(join(d, 'dshard-0-1.map')); b[b.length - 9] ^= 0x01; writeFileSync(join(d, 'dshard-0-1.map'), b); }],
        ['dshard-1-0.map', (d) => unlinkSync(join(d, 'dshard-1-0.map'))],
      ];
      for (const [file, spoil] of damage) {
        const d = join(dir, file);
        cpSync(join(dir, 'ck'), d, { recursive: true });
        spoil(d);
        const g2 = createInProcessGroups(W, { ranksPerNode: W, timeoutMs: 30_000 });
        try {
          const results = await Promise.allSettled(g2.map((g) => ShardedEmbeddingCollection.load(d, plan, g, dcfg)));
          for (const x of results) if (x.status === 'fulfilled') x.value.dispose();
          expect(results.map((x) => (x.status === 'rejected' ? (x.reason as { code?: string }).code : 'loaded')), file).toEqual(['CHECKPOINT_CORRUPT', 'CHECKPOINT_CORRUPT']);
        } finally {
          g2.forEach((g) => g.close());
        }
      }
      // the intact checkpoint still loads on both ranks
      const g3 = createInProcessGroups(W, { ranksPerNode: W, timeoutMs: 30_000 });
      const back = await Promise.all(g3.map((g) => ShardedEmbeddingCollection.load(join(dir, 'ck'), plan, g, dcfg)));
      expect(back.map((sc) => sc.step)).toEqual([2, 2]);
      back.forEach((sc) => sc.dispose());
      g3.forEach((g) => g.close());
    } finally {
      ranks.forEach((sc) => sc.dispose());
      groups.forEach((g) => g.close());
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('another optimizer than the checkpoint state\'s is INVALID_CONFIG; after sgd (no state) any optimizer starts fresh', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-reshard-'));
    const plan = S.makePlan(lib, 1, 1);
    const [g] = createInProcessGroups(1);
    try {
      const ada = new EmbeddingCollection(collectionConfigOf(plan, { optimizer: { type: 'adagrad', lr: 0.1 }, seed: 2 }));
      await ada.save(join(dir, 'adagrad'));
      ada.dispose();
      for (const type of ['sgd', 'adam', 'rowwise_adagrad'] as const)
        await expect(loadSharded(join(dir, 'adagrad'), plan, g!, { optimizer: { type, lr: 0.1 } }), type).rejects.toMatchObject({ code: 'INVALID_CONFIG' });
      const same = await loadSharded(join(dir, 'adagrad'), plan, g!, { optimizer: { type: 'adagrad', lr: 0.5 } });
      expect(same.learningRate).toBe(0.5);
      same.dispose();
      const sgd = new EmbeddingCollection(collectionConfigOf(plan, { optimizer: { type: 'sgd', lr: 0.1 }, seed: 2 }));
      await sgd.save(join(dir, 'sgd'));
      const w = sgd.readRows('A', [3]);
      sgd.dispose();
      const sc = await loadSharded(join(dir, 'sgd'), plan, g!, { optimizer: { type: 'adam', lr: 0.1 } });
      expect(await sc.readRows('A', [3])).toEqual(w);
      expect(await sc.readState('A', [3])).toEqual(new Float32Array(16));
      sc.dispose();
    } finally {
      g!.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

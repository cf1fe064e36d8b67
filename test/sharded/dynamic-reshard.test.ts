// dynamic-reshard.test.ts — checkpoints of sharded dynamic tables across world sizes and spill settings,
// against the naive model of dynamic-oracle.mjs (in-process groups):
//  - ub row shards saved at 2 ranks (spilling, filled past capacity) load at 4 ranks and at 1 (the same row
//    groups on other ranks; at 1 rank both on rank 0): counters, held ids, spilled rows and values kept,
//    training goes on as the model's, and their saves load back at 2 ranks;
//  - rb row shards saved at 2 ranks: a plan of 4 ranks or of 1 (other row groups) is INVALID_PLAN naming
//    the table on every rank; EmbeddingCollection.load reads the dynamic table empty;
//  - spill is the loading collection's setting: shards saved without spill load into spilling shards (empty
//    spill files; training goes on as the model with spill); spilled rows loaded without spill are
//    INVALID_CONFIG naming spill on every rank, not dropped;
//  - a rank whose part of a save fails (its spill file altered) fails the save on every rank with that
//    code: no rank waits in the gather, the folder keeps the previous checkpoint, the ranks go on together;
//    a folder rank 0 cannot write fails it on every rank too;
//  - a checkpoint of one collection is refused by a sharded plan with a dynamic table (CHECKPOINT_CORRUPT
//    naming the table) on every rank.
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { EmbeddingCollection } from '../../lib/collection.js';
import type { ShardPlan } from '../../lib/plan/shard-plan.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection, type ShardedConfig } from '../../lib/sharded/sharded.js';
import { expectCells, expectShards, lib, stepBoth } from './dynamic-drive.js';
// @ts-expect-error plain JS model shared with the mpirun scripts
import * as O from './dynamic-oracle.mjs';

const dir = mkdtempSync(join(tmpdir(), 'embshard-dyn-reshard-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const opt = O.OPTIMIZERS[3]; // adam: its step travels with the checkpoint too
const sw = O.stateWidthOf(opt.type, O.DIM);
const pool: bigint[] = O.edgeIds(20);
let folders = 0;
const folder = () => {
  const p = join(dir, `f${folders++}`);
  mkdirSync(p, { recursive: true });
  return p;
};
const spill = () => ({ spill: { path: folder() } });

type Model = InstanceType<typeof O.NaiveShardedDynamic>;
const modelOf = (plan: ShardPlan, placement: string, spills: boolean): Model =>
  new O.NaiveShardedDynamic({ capacity: plan.tables[0]!.rows, groups: plan.layouts[0]!.groups.map((g) => [g.a, g.b]), cluster: placement === 'ub' ? 'ub' : 'rb', optimizer: opt, spill: spills });

/** W ranks of `plan` with `config`, trained on steps [from, to) beside `model`; the ranks stay open. */
async function train(ranks: ShardedEmbeddingCollection[], model: Model, from: number, to: number): Promise<void> {
  for (let step = from; step < to; step++) {
    await stepBoth(ranks, model, O.edgeBags(pool, ranks.length, step), step);
    expectShards(ranks, model, `step ${step}`);
  }
}

async function open(W: number, plan: ShardPlan, config: ShardedConfig): Promise<{ ranks: ShardedEmbeddingCollection[]; close: () => void }> {
  const groups = createInProcessGroups(W, { ranksPerNode: W, timeoutMs: 30_000 });
  const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, config));
  return { ranks, close: () => (ranks.forEach((x) => x.dispose()), groups.forEach((g) => g.close())) };
}

/** Every rank's outcome of a load: the collections, or the codes and messages of its rejections. */
async function loadAll(ck: string, plan: ShardPlan, W: number, config: ShardedConfig) {
  const groups = createInProcessGroups(W, { ranksPerNode: W, timeoutMs: 30_000 });
  const res = await Promise.allSettled(groups.map((g) => ShardedEmbeddingCollection.load(ck, plan, g, config)));
  const ranks = res.flatMap((x) => (x.status === 'fulfilled' ? [x.value] : []));
  const errors = res.flatMap((x) => (x.status === 'rejected' ? [x.reason as { code: string; message: string; details?: { path?: string } }] : []));
  return { ranks, errors, close: () => (ranks.forEach((x) => x.dispose()), groups.forEach((g) => g.close())) };
}

describe('sharded dynamic checkpoints across world sizes', () => {
  it('ub shards saved at 2 ranks load at 4 and at 1 (same row groups): spilled rows kept, training goes on', async () => {
    const cap = 9;
    const a = await open(2, O.dynPlan(lib, 2, 'ub', cap, opt.type), O.dynConfig(opt, spill()));
    const ck = join(dir, 'ub');
    try {
      const m = modelOf(O.dynPlan(lib, 2, 'ub', cap, opt.type), 'ub', true);
      await train(a.ranks, m, 0, 6);
      expect(m.shardStats().reduce((n: number, s: { spilled: number }) => n + s.spilled, 0)).toBeGreaterThan(0);
      await Promise.all(a.ranks.map((sc) => sc.save(ck)));
    } finally {
      a.close();
    }
    for (const W of [4, 1]) {
      const plan = O.dynPlan(lib, W, 'ub', cap, opt.type) as ShardPlan;
      const b = await loadAll(ck, plan, W, O.dynConfig(opt, spill()));
      try {
        expect(b.errors).toEqual([]);
        // the model of the saved run, then both go on at W ranks
        const m = modelOf(plan, 'ub', true);
        for (let step = 0; step < 6; step++) m.train(O.edgeBags(pool, 2, step), O.edgeBags(pool, 2, step).map((x: bigint[][][], r: number) => O.gradOf(r, step, x[0]!.length)));
        expectShards(b.ranks, m, `loaded at ${W} ranks`);
        await expectCells(b.ranks, m, BigInt64Array.from(pool), sw);
        await train(b.ranks, m, 6, 10);
        await expectCells(b.ranks, m, BigInt64Array.from(pool), sw);
        // and back to 2 ranks
        const back = join(dir, `ub-from-${W}`);
        await Promise.all(b.ranks.map((sc) => sc.save(back)));
        const c = await loadAll(back, O.dynPlan(lib, 2, 'ub', cap, opt.type), 2, O.dynConfig(opt, spill()));
        try {
          expect(c.errors).toEqual([]);
          expectShards(c.ranks, m, `saved at ${W} ranks, loaded at 2`);
          await expectCells(c.ranks, m, BigInt64Array.from(pool), sw);
        } finally {
          c.close();
        }
      } finally {
        b.close();
      }
    }
  });

  it('rb shards saved at 2 ranks: plans of 4 ranks and of 1 are INVALID_PLAN on every rank; one collection reads them empty', async () => {
    const cap = 16;
    const a = await open(2, O.dynPlan(lib, 2, 'rb', cap, opt.type), O.dynConfig(opt));
    const ck = join(dir, 'rb');
    try {
      await train(a.ranks, modelOf(O.dynPlan(lib, 2, 'rb', cap, opt.type), 'rb', false), 0, 3);
      await Promise.all(a.ranks.map((sc) => sc.save(ck)));
    } finally {
      a.close();
    }
    for (const W of [4, 1]) {
      const b = await loadAll(ck, O.dynPlan(lib, W, 'rb', cap, opt.type), W, O.dynConfig(opt));
      b.close();
      expect(b.ranks.length).toBe(0);
      expect(b.errors.map((e) => e.code)).toEqual(Array(W).fill('INVALID_PLAN'));
      for (const e of b.errors) expect(e.message).toMatch(/dynamic table 'dyn'/);
    }
    const ec = await EmbeddingCollection.load(ck);
    try {
      expect(ec.stats().dyn!.rows).toBe(0);
      expect(ec.heldIds('dyn').length).toBe(0);
    } finally {
      ec.dispose();
    }
  });
});

describe('spill is the loading collection\'s setting', () => {
  const cap = 6;
  const plan = () => O.dynPlan(lib, 2, 'rb', cap, opt.type) as ShardPlan;

  it('shards saved without spill load into spilling shards with empty spill files and train on as the model with spill', async () => {
    const a = await open(2, plan(), O.dynConfig(opt));
    const ck = join(dir, 'nospill');
    const m = modelOf(plan(), 'rb', false);
    try {
      await train(a.ranks, m, 0, 5);
      expect(m.shardStats().reduce((n: number, s: { evictions: number }) => n + s.evictions, 0)).toBeGreaterThan(0);
      await Promise.all(a.ranks.map((sc) => sc.save(ck)));
    } finally {
      a.close();
    }
    const b = await loadAll(ck, plan(), 2, O.dynConfig(opt, spill()));
    try {
      expect(b.errors).toEqual([]);
      expect(b.ranks.flatMap((sc) => sc.stats()).map((s) => s.spilled)).toEqual([0, 0]);
      m.spill = true;
      await train(b.ranks, m, 5, 10);
      expect(m.shardStats().reduce((n: number, s: { spilled: number }) => n + s.spilled, 0)).toBeGreaterThan(0);
      await expectCells(b.ranks, m, BigInt64Array.from(pool), sw);
    } finally {
      b.close();
    }
  });

  it('spilled rows loaded without spill are INVALID_CONFIG naming spill on every rank', async () => {
    const a = await open(2, plan(), O.dynConfig(opt, spill()));
    const ck = join(dir, 'spilled');
    try {
      const m = modelOf(plan(), 'rb', true);
      await train(a.ranks, m, 0, 5);
      expect(m.shardStats().every((s: { spilled: number }) => s.spilled > 0)).toBe(true);
      await Promise.all(a.ranks.map((sc) => sc.save(ck)));
    } finally {
      a.close();
    }
    const b = await loadAll(ck, plan(), 2, O.dynConfig(opt));
    b.close();
    expect(b.ranks.length).toBe(0);
    expect(b.errors.map((e) => [e.code, e.details?.path])).toEqual([['INVALID_CONFIG', 'spill'], ['INVALID_CONFIG', 'spill']]);
    for (const e of b.errors) expect(e.message).toMatch(/dynamic table 'dyn' holds \d+ spilled rows; load it with config\.spill/);
  });
});

describe('a rank whose part of a save fails', () => {
  it('fails the save on every rank with its code; the previous checkpoint stays; the ranks go on together', async () => {
    const path = folder();
    const a = await open(2, O.dynPlan(lib, 2, 'rb', 6, opt.type), O.dynConfig(opt, { spill: { path } }));
    const ck = join(dir, 'failing');
    const m = modelOf(O.dynPlan(lib, 2, 'rb', 6, opt.type), 'rb', true);
    try {
      await train(a.ranks, m, 0, 3);
      await Promise.all(a.ranks.map((sc) => sc.save(ck)));
      const before = readFileSync(join(ck, 'manifest.json'));
      await train(a.ranks, m, 3, 6);
      // one of rank 1's spilled records altered: only rank 1 can find out, when it copies its spill file
      const f = join(path, 'rank1', readdirSync(join(path, 'rank1')).find((x) => x.startsWith('spill-'))!);
      const bytes = readFileSync(f);
      expect(bytes.length).toBeGreaterThan(16);
      bytes[bytes.length - 8] = bytes[bytes.length - 8]! ^ 0x10;
      writeFileSync(f, bytes);
      const res = await Promise.allSettled(a.ranks.map((sc) => sc.save(ck)));
      expect(res.map((x) => (x.status === 'rejected' ? (x.reason as { code: string }).code : 'saved'))).toEqual(['CHECKPOINT_CORRUPT', 'CHECKPOINT_CORRUPT']);
      expect(readFileSync(join(ck, 'manifest.json'))).toEqual(before);
      // the ranks still call their collectives together
      await expectCells(a.ranks, m, BigInt64Array.from(pool.slice(0, 6)), sw);
    } finally {
      a.close();
    }
  });

  it('a folder rank 0 cannot write fails the save on every rank', async () => {
    const a = await open(2, O.dynPlan(lib, 2, 'rb', 6, opt.type), O.dynConfig(opt, spill()));
    try {
      await train(a.ranks, modelOf(O.dynPlan(lib, 2, 'rb', 6, opt.type), 'rb', true), 0, 3);
      const file = join(dir, 'a-file');
      writeFileSync(file, 'not a folder');
      const res = await Promise.allSettled(a.ranks.map((sc) => sc.save(join(file, 'ck'))));
      const codes = res.map((x) => (x.status === 'rejected' ? (x.reason as { code: string }).code : 'saved'));
      expect(codes[0]).not.toBe('saved');
      expect(codes[1]).toBe(codes[0]);
    } finally {
      a.close();
    }
  });
});

describe('a checkpoint of one collection', () => {
  it('is refused by a sharded plan with a dynamic table on every rank, naming the table', async () => {
    const ec = new EmbeddingCollection({ tables: [{ name: 'dyn', rows: 'dynamic', capacity: 12, dim: O.DIM, pooling: 'sum', features: ['a', 'b'], init: { type: 'constant', value: O.INIT } }], optimizer: opt, seed: 7 });
    const ck = join(dir, 'single');
    try {
      await ec.save(ck);
    } finally {
      ec.dispose();
    }
    const b = await loadAll(ck, O.dynPlan(lib, 2, 'rb', 12, opt.type), 2, O.dynConfig(opt));
    b.close();
    expect(b.ranks.length).toBe(0);
    expect(b.errors.map((e) => e.code)).toEqual(['CHECKPOINT_CORRUPT', 'CHECKPOINT_CORRUPT']);
    for (const e of b.errors) expect(e.message).toMatch(/dynamic table 'dyn'/);
  });
});

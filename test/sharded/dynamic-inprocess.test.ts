// dynamic-inprocess.test.ts — dynamic tables (rows: 'dynamic', raw 64-bit ids) in the sharded runtime,
// sharded by id hash, on in-process groups of 2 and 4 ranks:
//  - with capacities that never evict, training equals one EmbeddingCollection with the same dynamic
//    tables over the global batch (outputs, rows and optimizer state of every held id within 1e-5; the
//    held ids are exactly the ids seen), for sum / mean / sequence pooling, row-sharded rb, row-sharded ub
//    and table-wise placements, sgd and adagrad; the bytes each rank sends equal measureTraffic;
//  - with small capacities (LRU, admission after 2 sightings) every shard's stats() and held ids equal a
//    naive model of hash-sharded maps: the hash written here from its documented formula
//    (SplitMix64 of id XOR salt, times capacity, top 64 bits), each shard a naive LRU map (the single-table
//    oracle of test/storage) fed the ids in the order the owner sees them;
//  - with admission.default 'hashed', forwards that admit nothing and reads of ids never seen give the
//    single collection's init rows; with admission after 2 sightings, rb and table-wise shards admit
//    exactly as the single collection does.
import { describe, expect, it } from 'vitest';
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import { measureTraffic } from '../../lib/plan/traffic.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection, type ShardedConfig } from '../../lib/sharded/sharded.js';
import { NaiveDynamicMap } from '../storage/dynamic-oracle.js';
import { hashRow, idPool, localBatch, makePlan, oracleConfig, type Spec } from './dynamic-scenario.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';

import { ShardPlan } from '../../lib/plan/shard-plan.js';

const lib = { JaggedBatch, ShardPlan };
async function runEqual(W: number, s: Spec, optimizer: ShardedConfig['optimizer'], steps = 4): Promise<void> {
  const plan = makePlan(W, s);
  const cfg: ShardedConfig = { optimizer, seed: 5 };
  const groups = createInProcessGroups(W, { ranksPerNode: W, timeoutMs: 30_000 });
  const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, cfg));
  const oracle = new EmbeddingCollection(oracleConfig(s, cfg));
  const pool = idPool(120, 3 + W);
  try {
    for (let step = 0; step < steps; step++) {
      const batches = groups.map((_, r) => localBatch(pool, r, step));
      const err = await S.stepBoth(lib, ranks, oracle, batches, step);
      expect(err, `step ${step} outputs`).toBeLessThanOrEqual(1e-5);
      const predicted = measureTraffic(plan, batches).perRank;
      for (let r = 0; r < W; r++) expect(ranks[r]!.traffic, `rank ${r} bytes of step ${step}`).toEqual(predicted[r]);
    }
    for (const table of ['dyn', 'seqd']) {
      // no eviction: the shards together hold exactly the ids the single collection holds, each on the
      // shard its hash names
      const held = ranks.flatMap((sc) => sc.heldIds(table));
      const all = held.flatMap((h) => [...h.ids]);
      expect(new Set(all).size).toBe(all.length);
      expect([...all].sort()).toEqual([...oracle.heldIds(table)].sort());
      const t = plan.table(table);
      for (const h of held) for (const id of h.ids) {
        const v = hashRow(id, t.rows);
        expect(v >= h.range[0] && v < h.range[1], `id ${id} (virtual row ${v}) on shard [${h.range}]`).toBe(true);
      }
      expect(ranks.flatMap((sc) => sc.stats()).filter((x) => x.table === table).reduce((n, x) => n + x.evictions, 0)).toBe(0);
      const ids = BigInt64Array.from(all);
      const rows = await Promise.all(ranks.map((sc) => sc.readRows(table, ids)));
      const state = await Promise.all(ranks.map((sc) => sc.readState(table, ids)));
      for (let r = 0; r < W; r++) {
        expect(S.relErr(rows[r], oracle.readRows(table, ids)), `${table} rows`).toBeLessThanOrEqual(1e-5);
        if (oracle.stateWidth(table) > 0) expect(S.relErr(state[r], oracle.readState(table, ids)), `${table} state`).toBeLessThanOrEqual(1e-5);
      }
      // an id no shard holds reads its default (zero, or its hashed init row), as in the single collection
      const unseen = BigInt64Array.of(123456789123n, -5n);
      const none = await Promise.all(ranks.map((sc) => sc.readRows(table, unseen)));
      const want = oracle.readRows(table, unseen);
      expect(want.some((v) => v !== 0)).toBe(s.default === 'hashed' && (table === 'dyn' || !s.dynOnly));
      for (const x of none) expect([...x]).toEqual([...want]);
    }
    // evaluation (admit: false) admits nothing and agrees with the single collection
    const batches = groups.map((_, r) => localBatch(idPool(120, 99), r, 50));
    const before = ranks.map((sc) => sc.stats().map((x) => x.rows));
    const outs = await Promise.all(ranks.map((sc, r) => sc.forward(batches[r]!, { admit: false })));
    const gout = await oracle.forward(S.globalBatch(lib, batches), { admit: false });
    expect(S.outputErr(outs, gout, oracle, batches)).toBeLessThanOrEqual(1e-5);
    expect(ranks.map((sc) => sc.stats().map((x) => x.rows))).toEqual(before);
  } finally {
    ranks.forEach((x) => x.dispose());
    oracle.dispose();
    groups.forEach((g) => g.close());
  }
}

describe('dynamic tables sharded by id hash equal one collection (no eviction)', () => {
  for (const W of [2, 4])
    for (const opt of [{ type: 'sgd', lr: 0.1 }, { type: 'adagrad', lr: 0.1 }] as const)
      for (const pooling of ['sum', 'mean'] as const)
        for (const dyn of ['rb', 'ub', 'tw'] as const) {
          if (W === 4 && dyn === 'tw') continue;
          it(`W=${W} ${opt.type} ${pooling} ${dyn}`, async () => {
            await runEqual(W, { dyn, pooling, capacity: 4000, seqCapacity: 2000 }, opt);
          });
        }
});

describe('hashed defaults: ids not yet admitted read their init row, sharded as in one collection', () => {
  for (const W of [2, 4])
    for (const pooling of ['sum', 'mean'] as const)
      for (const dyn of ['rb', 'ub', 'tw'] as const) {
        if (W === 4 && dyn === 'tw') continue;
        it(`W=${W} adagrad ${pooling} ${dyn}`, async () => {
          await runEqual(W, { dyn, pooling, capacity: 4000, seqCapacity: 2000, default: 'hashed' }, { type: 'adagrad', lr: 0.1 });
        });
      }
});

describe('admission after 2 sightings: rb and table-wise shards admit as one collection', () => {
  // every occurrence reaches its owner under rb and table-wise placement, so each shard counts what one
  // collection counts (ub sends a source's distinct ids once per step: counted below against its model)
  for (const [W, dyn] of [[2, 'rb'], [2, 'tw'], [4, 'rb']] as const)
    for (const def of [undefined, 'hashed'] as const)
      it(`W=${W} ${dyn} adagrad mean, ${def ?? 'zero'} default`, async () => {
        await runEqual(W, { dyn, pooling: 'mean', capacity: 4000, seqCapacity: 2000, minCount: 2, dynOnly: true, ...(def ? { default: def } : {}) }, { type: 'adagrad', lr: 0.1 });
      });
});

describe('hash-sharded eviction and admission against a naive model', () => {
  for (const dyn of ['rb', 'ub'] as const)
    it(`W=2, ${dyn}: small LRU shards, minCount 2: every shard's stats and held ids`, async () => {
      const W = 2;
      const s: Spec = { dyn, pooling: 'sum', capacity: 24, seqCapacity: 15, minCount: 2 };
      const plan = makePlan(W, s);
      const groups = createInProcessGroups(W, { ranksPerNode: W, timeoutMs: 30_000 });
      const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, { optimizer: { type: 'sgd', lr: 0.1 }, seed: 5 }));
      // the naive shards: one map per (table, row group), capacity = the group's rows, candidates its share
      const naive = new Map<string, NaiveDynamicMap>();
      for (const [ti, t] of plan.tables.entries()) {
        if (!t.dynamic) continue;
        for (const g of plan.layouts[ti]!.groups)
          naive.set(`${t.name}:${g.a}`, new NaiveDynamicMap({ capacity: g.b - g.a, minCount: 2, candidates: Math.ceil((t.rows * (g.b - g.a)) / t.rows), eviction: 'lru' }));
      }
      const groupOf = (table: string, id: bigint) => {
        const ti = plan.tables.findIndex((x) => x.name === table), cap = plan.tables[ti]!.rows;
        const v = hashRow(id, cap);
        return plan.layouts[ti]!.groups.find((g) => v >= g.a && v < g.b)!.a;
      };
      const pool = idPool(60, 17);
      try {
        for (let step = 0; step < 8; step++) {
          const batches = groups.map((_, r) => localBatch(pool, r, step));
          // what each shard sees, in the owner batch's order: rb — per feature, per source rank, its ids
          // in bag order; ub — per source rank, its distinct ids ascending (signed)
          const seen = new Map<string, bigint[]>();
          const push = (table: string, id: bigint) => {
            const k = `${table}:${groupOf(table, id)}`;
            seen.set(k, [...(seen.get(k) ?? []), id]);
          };
          for (const [table, feats, cluster] of [['dyn', ['a', 'b'], dyn], ['seqd', ['s'], 'ub']] as const) {
            if (cluster === 'ub') {
              for (const b of batches) {
                const d = [...new Set(feats.flatMap((f) => [...(b.feature(f).ids as BigInt64Array)]))].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
                for (const id of d) push(table, id);
              }
            } else for (const f of feats) for (const b of batches) for (const id of b.feature(f).ids as BigInt64Array) push(table, id);
          }
          for (const [k, m] of naive) m.translate(seen.get(k) ?? [], () => 1);
          const outs = await Promise.all(ranks.map((sc, r) => sc.forward(batches[r]!)));
          await Promise.all(ranks.map((sc, r) => sc.backward(outs[r]!, S.gradsFor(outs[r], r, step))));
          const stats = ranks.flatMap((sc) => sc.stats());
          expect(stats.length).toBe(naive.size);
          for (const st of stats) {
            const m = naive.get(`${st.table}:${st.range[0]}`)!;
            expect({ hits: st.hits, misses: st.misses, admissions: st.admissions, evictions: st.evictions, rows: st.rows }, `${st.table} [${st.range}] step ${step}`).toEqual({ ...m.stats, rows: m.held.size });
          }
          for (const sc of ranks)
            for (const table of ['dyn', 'seqd'])
              for (const h of sc.heldIds(table)) expect(new Set(h.ids)).toEqual(new Set(naive.get(`${table}:${h.range[0]}`)!.held.keys()));
        }
        const ev = ranks.flatMap((sc) => sc.stats()).reduce((n, x) => n + x.evictions, 0);
        expect(ev).toBeGreaterThan(0);
      } finally {
        ranks.forEach((x) => x.dispose());
        groups.forEach((g) => g.close());
      }
    });
});

describe('stale forward outputs', () => {
  it('a backward after a later admitting forward is refused on every rank alike (also ranks without a dynamic shard)', async () => {
    const W = 2;
    // both dynamic tables on rank 1 only: rank 0 holds no dynamic shard
    const base = makePlan(W, { dyn: 'tw', pooling: 'sum', capacity: 100, seqCapacity: 50 }).toJSON();
    base.tables[1]!.shards = [{ rows: [0, 50], cols: [0, 4], rank: 1 }];
    const plan = ShardPlan.fromJSON(base);
    const groups = createInProcessGroups(W, { ranksPerNode: W, timeoutMs: 30_000 });
    const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, { optimizer: { type: 'sgd', lr: 0.1 }, seed: 1 }));
    const pool = idPool(30, 2);
    try {
      expect(ranks[0]!.stats()).toEqual([]);
      const a = await Promise.all(ranks.map((sc, r) => sc.forward(localBatch(pool, r, 0))));
      const b = await Promise.all(ranks.map((sc, r) => sc.forward(localBatch(pool, r, 1))));
      for (let r = 0; r < W; r++) await expect(ranks[r]!.backward(a[r]!, S.gradsFor(a[r], r, 0))).rejects.toThrow(/stale forward output/);
      await Promise.all(ranks.map((sc, r) => sc.backward(b[r]!, S.gradsFor(b[r], r, 1))));
      // evaluation forwards admit nothing, so they leave a training output fresh
      const c = await Promise.all(ranks.map((sc, r) => sc.forward(localBatch(pool, r, 2))));
      await Promise.all(ranks.map((sc, r) => sc.forward(localBatch(pool, r, 3), { admit: false })));
      await Promise.all(ranks.map((sc, r) => sc.backward(c[r]!, S.gradsFor(c[r], r, 2))));
    } finally {
      ranks.forEach((x) => x.dispose());
      groups.forEach((g) => g.close());
    }
  });
});

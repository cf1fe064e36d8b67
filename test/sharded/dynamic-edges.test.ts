// dynamic-edges.test.ts — sharded dynamic tables against the naive model of dynamic-oracle.mjs (JS Maps,
// float64, written from the documented rules), on in-process groups of 2 and 4 ranks, every optimizer,
// row-sharded rb, ub (ranks between the two shards hold none) and table-wise placements:
//  - edge ids (0, ±1, 2^63 − 1, −2^63, ids from the whole 64-bit range), a rank whose bags are all empty,
//    every rank's bags empty, batch size 1 on every rank, batch sizes that differ by rank;
//  - every id hashing to one row shard (the other ranks own no id of the step);
//  - shards far smaller than one step's distinct ids (filled past capacity: eviction, LRU and LFU, and ids
//    that find no free row read their default in that step), with zero and hashed defaults;
// each step's outputs, every shard's counters and held ids, and at the end readRows / readState by raw id
// (held ids, ids never seen; writes by id refused) and an evaluation forward (admit: false: nothing changes) equal the model's
// (values within 1e-5), and dynamicTotals (the train summary's collective sums) gives every rank the
// model's totals.
import { describe, expect, it } from 'vitest';
import type { ShardPlan } from '../../lib/plan/shard-plan.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection } from '../../lib/sharded/sharded.js';
import { dynamicTotals } from '../../lib/train/sharded-dynamic.js';
import { expectCells, expectLookup, expectShards, lib, stepBoth, type Bags, type ModelShard } from './dynamic-drive.js';
// @ts-expect-error plain JS model shared with the mpirun scripts
import * as O from './dynamic-oracle.mjs';

type Opt = (typeof O.OPTIMIZERS)[number];

interface Case {
  W: number;
  placement: 'rb' | 'ub' | 'tw';
  opt: Opt;
  capacity: number;
  pool: bigint[];
  steps: number;
  def?: 'zero' | 'hashed';
  /** the model's shards must have evicted (and, in some step, found every row in use) */
  overflow?: boolean;
  eviction?: 'lru' | 'lfu';
}

async function runCase(c: Case): Promise<void> {
  const def = c.def ?? 'zero';
  const plan = O.dynPlan(lib, c.W, c.placement, c.capacity, c.opt.type, def, c.eviction ?? 'lru') as ShardPlan;
  const groups = createInProcessGroups(c.W, { ranksPerNode: c.W, timeoutMs: 30_000 });
  const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, O.dynConfig(c.opt)));
  const model = new O.NaiveShardedDynamic({ capacity: c.capacity, groups: plan.layouts[0]!.groups.map((g) => [g.a, g.b]), cluster: c.placement === 'ub' ? 'ub' : 'rb', optimizer: c.opt, def, eviction: c.eviction ?? 'lru' });
  try {
    for (let step = 0; step < c.steps; step++) {
      const bags: Bags[] = O.edgeBags(c.pool, c.W, step);
      await stepBoth(ranks, model, bags, step);
      expectShards(ranks, model, `step ${step}`);
    }
    const ms: ModelShard[] = model.shardStats();
    const sum = (k: 'rows' | 'admissions' | 'evictions' | 'hits' | 'misses') => ms.reduce((n, m) => n + m[k], 0);
    if (c.overflow) {
      expect(sum('evictions'), 'evictions').toBeGreaterThan(0);
      // minCount 1: a miss not admitted found no free row in its step
      expect(sum('misses') - sum('admissions'), 'misses that found no row').toBeGreaterThan(0);
    }
    // evaluation: ids read their rows or defaults, nothing admitted
    await expectLookup(ranks, model, O.edgeBags([...c.pool, 55n, -55n], c.W, 99));
    // the summary's totals: every rank gets the sums over every shard
    const totals = await Promise.all(ranks.map((sc) => dynamicTotals(sc)));
    for (const t of totals) expect(t).toEqual({ tables: 1, maps: ms.length, rows: sum('rows'), admissions: sum('admissions'), evictions: sum('evictions'), hits: sum('hits'), misses: sum('misses') });
    // rows and state by raw id: every id of the pool, ids never seen, a duplicate; every rank alike
    await expectCells(ranks, model, BigInt64Array.from([...c.pool, 987654321987n, -(2n ** 62n) + 3n, c.pool[0]!]), O.stateWidthOf(c.opt.type, O.DIM));
    // no ids at all
    expect((await Promise.all(ranks.map((sc) => sc.readRows('dyn', new BigInt64Array(0))))).map((x) => x.length)).toEqual(ranks.map(() => 0));
    // writes by id are refused on every rank, and change nothing
    const held = BigInt64Array.from(model.shardStats().flatMap((m: ModelShard) => m.held));
    for (const write of [(sc: ShardedEmbeddingCollection) => sc.writeRows('dyn', held, new Float32Array(held.length * O.DIM)), (sc: ShardedEmbeddingCollection) => sc.writeState('dyn', held, new Float32Array(held.length * O.stateWidthOf(c.opt.type, O.DIM)))])
      for (const sc of ranks) await expect(write(sc)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expectCells(ranks, model, held, O.stateWidthOf(c.opt.type, O.DIM));
  } finally {
    ranks.forEach((x) => x.dispose());
    groups.forEach((g) => g.close());
  }
}

const PLACEMENTS = ['rb', 'ub', 'tw'] as const;

describe('sharded dynamic tables against a naive hash-sharded model', () => {
  for (const W of [2, 4])
    for (const placement of PLACEMENTS)
      for (const opt of O.OPTIMIZERS as Opt[]) {
        it(`W=${W} ${placement} ${opt.type}: edge ids, empty ranks, batch size 1 (no eviction)`, async () => {
          await runCase({ W, placement, opt, capacity: 4000, pool: O.edgeIds(), steps: 6 });
        });
        it(`W=${W} ${placement} ${opt.type}: shards filled past capacity`, async () => {
          await runCase({ W, placement, opt, capacity: 3 * W, pool: O.edgeIds(20), steps: 7, def: W === 4 ? 'hashed' : 'zero', overflow: true });
        });
      }
  for (const W of [2, 4])
    for (const placement of PLACEMENTS)
      it(`W=${W} ${placement} adagrad, LFU: shards filled past capacity`, async () => {
        await runCase({ W, placement, opt: O.OPTIMIZERS[1], capacity: 3 * W, pool: O.edgeIds(20), steps: 8, eviction: 'lfu', overflow: true });
      });
  for (const W of [2, 4])
    it(`W=${W} rb adagrad: every id on the first row shard, the other ranks own none`, async () => {
      const capacity = 40 * W;
      const pool = (O.edgeIds(400) as bigint[]).filter((id) => O.hashRow(id, capacity) < capacity / W).slice(0, 14);
      expect(pool.length).toBe(14);
      await runCase({ W, placement: 'rb', opt: O.OPTIMIZERS[1], capacity, pool, steps: 6 });
      // and past its capacity
      await runCase({ W, placement: 'rb', opt: O.OPTIMIZERS[1], capacity: 3 * W, pool: (O.edgeIds(400) as bigint[]).filter((id) => O.hashRow(id, 3 * W) < 3).slice(0, 12), steps: 6, overflow: true });
    });
});

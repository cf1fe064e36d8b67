// dynamic-spill.test.ts — sharded dynamic tables that spill (ShardedConfig.spill), on 2 in-process ranks:
// with row shards far smaller than the ids they see, each shard writes the rows it evicts (values and
// optimizer state) to its rank's spill file and takes them back on re-admission, so training equals one
// EmbeddingCollection whose dynamic tables hold every id (within 1e-5; rb, ub and table-wise, sum and mean
// pooling, adagrad). A checkpoint keeps each shard's spilled rows: the loaded collection has the saved one's
// counters and trains on as the single collection does; an altered spill copy is CHECKPOINT_CORRUPT;
// a spill folder that does not exist is IO_ERROR naming spill.path before anything is built.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection, type ShardedConfig } from '../../lib/sharded/sharded.js';
import { idPool, localBatch, makePlan, oracleConfig, type Spec } from './dynamic-scenario.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';

const lib = { JaggedBatch, ShardPlan };
const dir = mkdtempSync(join(tmpdir(), 'embshard-dyn-spill-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const W = 2;

function folder(name: string): string {
  const p = join(dir, name);
  mkdirSync(p, { recursive: true });
  return p;
}

describe('sharded dynamic tables spilling evicted rows', () => {
  for (const dyn of ['rb', 'ub', 'tw'] as const)
    for (const pooling of ['sum', 'mean'] as const)
      it(`${dyn} ${pooling}: small spilling shards train as one collection holding every id`, async () => {
        // row shards hold one step's ids but far fewer than the pool's
        const spec: Spec = { dyn, pooling, capacity: 60, seqCapacity: 45 };
        const plan = makePlan(W, spec);
        // the same init in both (the default scales with rows, here the capacities differ)
        const init = { type: 'uniform', low: -0.2, high: 0.2 } as const;
        const cfg: ShardedConfig = { optimizer: { type: 'adagrad', lr: 0.1 }, seed: 3, spill: { path: folder(`${dyn}-${pooling}`) }, init: { dyn: init, seqd: init } };
        const groups = createInProcessGroups(W, { ranksPerNode: W, timeoutMs: 30_000 });
        const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, cfg));
        const oc = oracleConfig({ ...spec, capacity: 4000, seqCapacity: 2000 }, cfg);
        const oracle = new EmbeddingCollection({ ...oc, tables: oc.tables.map((t) => (t.rows === 'dynamic' ? { ...t, init } : t)) });
        const pool = idPool(400, 11);
        try {
          for (let step = 0; step < 8; step++) {
            const batches = ranks.map((_, r) => localBatch(pool, r, step));
            expect(await S.stepBoth(lib, ranks, oracle, batches, step), `step ${step} outputs`).toBeLessThanOrEqual(1e-5);
          }
          const st = ranks.flatMap((sc) => sc.stats());
          expect(st.reduce((n, s) => n + s.evictions, 0)).toBeGreaterThan(0);
          expect(st.reduce((n, s) => n + (s.spilled ?? 0), 0)).toBeGreaterThan(0);
          // every rank spills into its own folder
          expect(existsSync(join(cfg.spill!.path, 'rank0')) && existsSync(join(cfg.spill!.path, 'rank1'))).toBe(true);
          if (dyn !== 'rb' || pooling !== 'mean') return;

          // checkpoint: the spilled rows travel with it
          const ck = join(dir, 'ck');
          await Promise.all(ranks.map((sc) => sc.save(ck)));
          expect(readdirSync(ck).some((f) => f.endsWith('.spill'))).toBe(true);
          const groups2 = createInProcessGroups(W, { ranksPerNode: W, timeoutMs: 30_000 });
          const cfg2 = { ...cfg, spill: { path: folder('loaded') } };
          const loaded = await Promise.all(groups2.map((g) => ShardedEmbeddingCollection.load(ck, plan, g, cfg2)));
          try {
            for (let r = 0; r < W; r++) expect(loaded[r]!.stats()).toEqual(ranks[r]!.stats());
            // the loaded shards (rows held and spilled) train on as the single collection does
            for (let step = 8; step < 12; step++) {
              const batches = loaded.map((_, r) => localBatch(pool, r, step));
              expect(await S.stepBoth(lib, loaded, oracle, batches, step), `step ${step} outputs after load`).toBeLessThanOrEqual(1e-5);
            }
            expect(loaded.flatMap((sc) => sc.stats()).reduce((n, s) => n + (s.spilled ?? 0), 0)).toBeGreaterThan(0);
          } finally {
            loaded.forEach((sc) => sc.dispose());
            groups2.forEach((g) => g.close());
          }
          // an altered spill copy
          const sp = readdirSync(ck).find((f) => f.endsWith('.spill'))!;
          const bytes = readFileSync(join(ck, sp));
          bytes[bytes.length - 5] = bytes[bytes.length - 5]! ^ 0x10;
          writeFileSync(join(ck, sp), bytes);
          const g3 = createInProcessGroups(W, { ranksPerNode: W, timeoutMs: 30_000 });
          try {
            const results = await Promise.allSettled(g3.map((g) => ShardedEmbeddingCollection.load(ck, plan, g, { ...cfg, spill: { path: folder('corrupt') } })));
            expect(results.some((x) => x.status === 'rejected' && (x.reason as { code?: string }).code === 'CHECKPOINT_CORRUPT')).toBe(true);
            for (const x of results) if (x.status === 'fulfilled') x.value.dispose();
          } finally {
            g3.forEach((g) => g.close());
          }
        } finally {
          ranks.forEach((x) => x.dispose());
          oracle.dispose();
          groups.forEach((g) => g.close());
        }
      });

  it('a spill folder that does not exist is IO_ERROR naming spill.path; a bad spill field is INVALID_CONFIG', () => {
    const plan = makePlan(W, { dyn: 'rb', pooling: 'sum', capacity: 24, seqCapacity: 16 });
    const groups = createInProcessGroups(W, { ranksPerNode: W, timeoutMs: 5_000 });
    try {
      expect(() => new ShardedEmbeddingCollection(plan, groups[0]!, { spill: { path: join(dir, 'no', 'such') } })).toThrow(expect.objectContaining({ code: 'IO_ERROR' }));
      expect(() => new ShardedEmbeddingCollection(plan, groups[0]!, { spill: { path: '' } })).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG' }));
      expect(() => new ShardedEmbeddingCollection(plan, groups[0]!, { spill: { path: dir, where: 1 } as never })).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG' }));
    } finally {
      groups.forEach((x) => x.close());
    }
  });
});

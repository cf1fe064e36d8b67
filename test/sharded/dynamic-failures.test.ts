// dynamic-failures.test.ts — a rank of a sharded collection with dynamic tables whose part of a step
// fails (in-process ranks): its spill file altered, the step that would read a spilled row back fails
// there with CHECKPOINT_CORRUPT, and no other rank is left waiting: each rejects that step too, with the
// code, agreed right after the translation. The step is found with the naive model
// of dynamic-oracle.mjs: the first one in which the altered shard takes back a spilled id.
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection } from '../../lib/sharded/sharded.js';
import { expectShards, lib, stepBoth } from './dynamic-drive.js';
// @ts-expect-error plain JS model shared with the mpirun scripts
import * as O from './dynamic-oracle.mjs';

const dir = mkdtempSync(join(tmpdir(), 'embshard-dyn-fail-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('a rank whose dynamic translation fails mid-step', () => {
  it('an altered spill record on the last rank: that step fails on every rank, none waits', async () => {
    const W = 2, opt = O.OPTIMIZERS[1], cap = 3 * W;
    const plan = O.dynPlan(lib, W, 'rb', cap, opt.type);
    const groups = createInProcessGroups(W, { ranksPerNode: W, timeoutMs: 3000 });
    const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, O.dynConfig(opt, { spill: { path: dir } })));
    const model = new O.NaiveShardedDynamic({ capacity: cap, groups: plan.layouts[0]!.groups.map((g) => [g.a, g.b]), cluster: 'rb', optimizer: opt, spill: true });
    const pool: bigint[] = O.edgeIds(20);
    try {
      let step = 0;
      for (; step < 4; step++) await stepBoth(ranks, model, O.edgeBags(pool, W, step), step);
      expectShards(ranks, model, 'before the damage');
      // every record of the last rank's spill files altered (a byte of its values)
      const rec = 8 + 4 * (O.DIM + O.stateWidthOf(opt.type, O.DIM)) + 4;
      const rankDir = join(dir, `rank${W - 1}`);
      for (const f of readdirSync(rankDir).filter((x) => x.startsWith('spill-'))) {
        const b = readFileSync(join(rankDir, f));
        for (let k = 0; k + rec <= b.length; k += rec) b[k + 10] = b[k + 10]! ^ 0x20;
        writeFileSync(join(rankDir, f), b);
      }
      // the first later step in which the last shard takes back one of its spilled ids
      const last = model.shards[W - 1];
      const takesBack = (s: number) => (O.edgeBags(pool, W, s) as bigint[][][][]).some((bags) => bags.flat(2).some((id) => last.spilled.has(id)));
      let s = step;
      while (!takesBack(s)) {
        await stepBoth(ranks, model, O.edgeBags(pool, W, s), s);
        s++;
        expect(s, 'a step that takes a spilled id back').toBeLessThan(30);
      }
      const bags = O.edgeBags(pool, W, s);
      const res = await Promise.allSettled(ranks.map((sc, r) => sc.forward(O.batchOf(lib, bags[r]))));
      const codes = res.map((x) => (x.status === 'rejected' ? (x.reason as { code: string }).code : 'ok'));
      expect(codes[W - 1]).toBe('CHECKPOINT_CORRUPT');
      // the other ranks agree on it right after the translation, well before the group's timeout
      for (let r = 0; r < W - 1; r++) {
        expect(codes[r], `rank ${r}`).toBe('CHECKPOINT_CORRUPT');
        expect((res[r] as PromiseRejectedResult).reason.message).toMatch(/^another rank's dynamic shards failed this forward \(CHECKPOINT_CORRUPT\)/);
      }
    } finally {
      ranks.forEach((x) => x.dispose());
      groups.forEach((g) => g.close());
    }
  });
});

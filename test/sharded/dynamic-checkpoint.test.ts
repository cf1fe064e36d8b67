// dynamic-checkpoint.test.ts — save / load of a sharded collection with dynamic tables (2 in-process
// ranks, shards that have evicted): the loaded collection has every shard's stats, held ids, rows and
// optimizer state, and trains on bitwise like the one that saved; a plan with other row shards for a
// dynamic table (another world size) is refused with INVALID_PLAN, an altered shard file with
// CHECKPOINT_CORRUPT.
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection } from '../../lib/sharded/sharded.js';
import { idPool, localBatch, makePlan, type Spec } from './dynamic-scenario.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';

const dir = mkdtempSync(join(tmpdir(), 'embshard-dyn-ck-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const bits = (a: Float32Array) => Array.from(new Uint32Array(a.buffer, a.byteOffset, a.length));

describe('sharded dynamic tables in checkpoints', () => {
  it('round-trip: stats, held ids, rows and state per shard; training continues bitwise; other row shards refused', async () => {
    const W = 2;
    const spec: Spec = { dyn: 'rb', pooling: 'mean', capacity: 30, seqCapacity: 20 };
    const plan = makePlan(W, spec);
    const cfg = { optimizer: { type: 'adagrad' as const, lr: 0.1 }, seed: 9 };
    const groups = createInProcessGroups(W, { ranksPerNode: W, timeoutMs: 30_000 });
    const a = groups.map((g) => new ShardedEmbeddingCollection(plan, g, cfg));
    const pool = idPool(80, 4);
    const step = async (ranks: ShardedEmbeddingCollection[], k: number) => {
      const batches = ranks.map((_, r) => localBatch(pool, r, k));
      const outs = await Promise.all(ranks.map((sc, r) => sc.forward(batches[r]!)));
      const pooled = outs.map((o) => Float32Array.from(o.pooled));
      await Promise.all(ranks.map((sc, r) => sc.backward(outs[r]!, S.gradsFor(outs[r], r, k))));
      return pooled;
    };
    for (let k = 0; k < 5; k++) await step(a, k);
    expect(a.flatMap((sc) => sc.stats()).some((s) => s.evictions > 0)).toBe(true);
    const ck = join(dir, 'ck');
    await Promise.all(a.map((sc) => sc.save(ck)));
    const groups2 = createInProcessGroups(W, { ranksPerNode: W, timeoutMs: 30_000 });
    const b = await Promise.all(groups2.map((g) => ShardedEmbeddingCollection.load(ck, plan, g, cfg)));
    try {
      for (let r = 0; r < W; r++) {
        expect(b[r]!.stats()).toEqual(a[r]!.stats());
        for (const table of ['dyn', 'seqd']) {
          const ha = a[r]!.heldIds(table), hb = b[r]!.heldIds(table);
          expect(hb).toEqual(ha);
        }
      }
      for (const table of ['dyn', 'seqd', 'plain']) {
        const ids = table === 'plain' ? BigInt64Array.from({ length: 40 }, (_, i) => BigInt(i)) : BigInt64Array.from(a.flatMap((sc) => sc.heldIds(table).flatMap((h) => [...h.ids])));
        const [ra, rb] = await Promise.all([Promise.all(a.map((sc) => sc.readRows(table, ids))), Promise.all(b.map((sc) => sc.readRows(table, ids)))]);
        const [sa, sb] = await Promise.all([Promise.all(a.map((sc) => sc.readState(table, ids))), Promise.all(b.map((sc) => sc.readState(table, ids)))]);
        expect(bits(rb[0]!)).toEqual(bits(ra[0]!));
        expect(bits(sb[0]!)).toEqual(bits(sa[0]!));
      }
      expect(b[0]!.step).toBe(a[0]!.step);
      for (let k = 5; k < 8; k++) {
        const [pa, pb] = await Promise.all([step(a, k), step(b, k)]);
        for (let r = 0; r < W; r++) expect(bits(pb[r]!)).toEqual(bits(pa[r]!));
      }
      for (let r = 0; r < W; r++) expect(b[r]!.stats()).toEqual(a[r]!.stats());
    } finally {
      [...a, ...b].forEach((sc) => sc.dispose());
      groups.forEach((g) => g.close());
      groups2.forEach((g) => g.close());
    }
    // another world size: other row shards of the dynamic tables
    const g4 = createInProcessGroups(4, { ranksPerNode: 4, timeoutMs: 30_000 });
    try {
      await expect(ShardedEmbeddingCollection.load(ck, makePlan(4, spec), g4[0]!, cfg)).rejects.toMatchObject({ code: 'INVALID_PLAN' });
    } finally {
      g4.forEach((g) => g.close());
    }
    // an altered shard file
    const rows = readdirSync(ck).find((f) => f.endsWith('.rows'))!;
    const bytes = readFileSync(join(ck, rows));
    bytes[3] = bytes[3]! ^ 0x40;
    writeFileSync(join(ck, rows), bytes);
    const g2 = createInProcessGroups(W, { ranksPerNode: W, timeoutMs: 30_000 });
    try {
      const results = await Promise.allSettled(g2.map((g) => ShardedEmbeddingCollection.load(ck, plan, g, cfg)));
      expect(results.some((x) => x.status === 'rejected' && (x.reason as { code?: string }).code === 'CHECKPOINT_CORRUPT')).toBe(true);
      for (const x of results) if (x.status === 'fulfilled') x.value.dispose();
    } finally {
      g2.forEach((g) => g.close());
    }
  });
});

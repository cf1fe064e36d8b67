// sharded.test.ts — a ShardedEmbeddingCollection whose row / column shards live on disk behind caches
// smaller than the shards trains bitwise like the same sharded collection in memory (2 in-process
// ranks, every cluster type and tier of the shared scenario, adam).
import { describe, expect, it } from 'vitest';
import { JaggedBatch } from '../../lib/batch.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection, type ShardedConfig } from '../../lib/sharded/sharded.js';
import { gatherTable } from '../../lib/sharded/reshard.js';
import { readdirSync } from 'node:fs';
import { tempDir } from '../temp-dir.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from '../sharded/scenario.mjs';

const lib = { JaggedBatch, ShardPlan };
const tmp = tempDir('disk-sharded');
const bits = (a: Float32Array) => Array.from(new Uint32Array(a.buffer, a.byteOffset, a.length));

describe('disk-backed shards', () => {
  it('train bitwise like memory shards', async () => {
    const W = 2;
    const plan: ShardPlan = S.makePlan(lib, W, 2, { variant: 'all' });
    const base: ShardedConfig = { optimizer: { type: 'adam', lr: 0.02 }, seed: 11 };
    const mk = (cfg: ShardedConfig) => createInProcessGroups(W, { ranksPerNode: 2, timeoutMs: 30_000 }).map((g) => new ShardedEmbeddingCollection(plan, g, cfg));
    const mem = mk(base);
    const disk = mk({ ...base, storage: { path: tmp.dir, cacheBytes: 14000, policy: 'lru' } });
    expect(readdirSync(tmp.dir).filter((f) => f.endsWith('.embtable')).length).toBeGreaterThanOrEqual(2);
    for (let step = 0; step < 6; step++) {
      const batches: JaggedBatch[] = mem.map((_, r) => S.localBatch(lib, plan, r, step, {}));
      const om = await Promise.all(mem.map((sc, r) => sc.forward(batches[r]!)));
      const od = await Promise.all(disk.map((sc, r) => sc.forward(batches[r]!)));
      for (let r = 0; r < W; r++) expect(bits(od[r]!.pooled)).toEqual(bits(om[r]!.pooled));
      const grads = om.map((out, r) => S.gradsFor(out, r, step));
      await Promise.all(mem.map((sc, r) => sc.backward(om[r]!, grads[r]!)));
      await Promise.all(disk.map((sc, r) => sc.backward(od[r]!, grads[r]!)));
    }
    for (const t of plan.tables) {
      const a = await Promise.all(mem.map((sc) => gatherTable(sc, t.name)));
      const b = await Promise.all(disk.map((sc) => gatherTable(sc, t.name)));
      for (let r = 0; r < W; r++) {
        expect(bits(b[r]!.weights)).toEqual(bits(a[r]!.weights));
        expect(bits(b[r]!.state)).toEqual(bits(a[r]!.state));
      }
    }
    [...mem, ...disk].forEach((sc) => sc.dispose());
  });
});

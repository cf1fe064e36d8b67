// CacheBaseline (caches without embedding scheduling) against counts worked out by hand on a 2-rank
// scenario (misses, stale copies after another rank's update, LRU eviction, owned rows), and without caches
// against the scheduler's own no-cache counts on the shared scenario (every remote read one copy and one
// gradient row: two independent implementations of the same count).
import { describe, it, expect } from 'vitest';
import { JaggedBatch } from '../../lib/batch.js';
import { CacheBaseline } from '../../lib/herald/cache-baseline.js';
import { HeraldScheduler } from '../../lib/herald/scheduler.js';
import type { HeraldTable } from '../../lib/herald/owners.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';

const one: HeraldTable[] = [{ name: 't', rows: 4, dim: 2, stateWidth: 2, features: ['f'] }];

function batch(bags: number[][]): JaggedBatch {
  return JaggedBatch.fromLengths({ features: ['f'], batchSize: bags.length, lengths: Int32Array.from(bags, (b) => b.length), ids: Int32Array.from(bags.flat()) });
}

describe('CacheBaseline', () => {
  it('counts pulls, pushes and hits as worked out by hand', () => {
    // rank 0 owns rows 0-1, rank 1 rows 2-3; one cache slot per rank; sample 0 → rank 0, sample 1 → rank 1
    const c = new CacheBaseline(one, 2, 1);
    const place = [Int32Array.of(0), Int32Array.of(1)];
    // rank 0 misses 2 (pull + push); rank 1 owns 2, misses 0 (pull + push); rank 1 updated 2: rank 0's copy goes stale
    expect(c.step(batch([[2], [2, 0]]), place)).toEqual({ pulls: 2, pushes: 2, rows: 4, bytes: 32, reads: 3, hits: 1 });
    // rank 0's stale copy of 2 is pulled again; rank 1 owns 3
    expect(c.step(batch([[2], [3]]), place)).toEqual({ pulls: 1, pushes: 1, rows: 2, bytes: 16, reads: 2, hits: 1 });
    // rank 0: 2 valid (hit, push), 3 missed (pull, push; evicts 2); rank 1: 0 still valid (hit, push)
    expect(c.step(batch([[2, 3], [0]]), place)).toEqual({ pulls: 1, pushes: 3, rows: 4, bytes: 32, reads: 3, hits: 2 });
    // 2 was evicted: pulled again
    expect(c.step(batch([[2], []]), place)).toEqual({ pulls: 1, pushes: 1, rows: 2, bytes: 16, reads: 1, hits: 0 });
  });

  it('without caches, equals the scheduler counting every remote read as one copy and one gradient', () => {
    const tables: HeraldTable[] = [
      { name: 'users', rows: 600, dim: 8, stateWidth: 8, features: ['user', 'friend'] },
      { name: 'items', rows: 2000, dim: 4, stateWidth: 1, features: ['items'] },
      { name: 'tiny', rows: 7, dim: 4, stateWidth: 0, features: ['tiny'] },
    ];
    const W = 4, B = 10;
    const s = new HeraldScheduler(tables, { world: W, batchSize: B, cacheRows: 0, allocation: 'random', seed: 3 });
    const c = new CacheBaseline(tables, W, 0);
    for (let step = 0; step < 4; step++) {
      const g: JaggedBatch = S.globalBatch({ JaggedBatch }, step, W * B);
      const p = s.schedule(g);
      const b = c.step(g, p.samples);
      expect(b.rows).toBe(p.counts.copies + p.counts.grads);
      expect(b.bytes).toBe(p.counts.bytes);
      expect(b.reads).toBe(p.counts.reads);
      expect(b.hits).toBe(p.counts.hits);
    }
  });
});

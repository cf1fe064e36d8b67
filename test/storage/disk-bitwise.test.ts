// disk-bitwise.test.ts — a collection whose tables live on disk behind a cache far smaller than the
// table trains exactly like the same collection in memory: forward outputs, rows and optimizer state
// bitwise equal over many steps, for every optimizer, dtype and pooling, with uniform and Zipf ids,
// LRU and LFU, weighted bags, prefetch between steps, and a memory table beside the disk one.
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection } from '../../lib/index.js';
import type { OptimizerConfig, TableConfig } from '../../lib/index.js';
import { Rng } from '../../lib/random/rng.js';
import { everything, grads, idBatch } from './helpers.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('disk-bitwise');

function bits(a: Float32Array): Uint32Array {
  return new Uint32Array(a.buffer, a.byteOffset, a.length);
}

interface Case {
  name: string;
  optimizer: OptimizerConfig;
  tables: TableConfig[];
  /** tables (by index) kept on disk, with their cache bytes */
  disk: Record<number, number>;
  alpha: number;
  policy?: 'lru' | 'lfu';
  weights?: boolean;
  prefetch?: boolean;
}

const CASES: Case[] = [
  { name: 'sgd fp32 sum, uniform', optimizer: { type: 'sgd', lr: 0.1 }, tables: [{ name: 'a', rows: 3000, dim: 8 }], disk: { 0: 25600 }, alpha: 0 },
  {
    name: 'adagrad fp16 mean + a memory table, Zipf 1.05, LFU',
    optimizer: { type: 'adagrad', lr: 0.05 },
    tables: [{ name: 'a', rows: 4000, dim: 16, dtype: 'fp16', pooling: 'mean' }, { name: 'm', rows: 50, dim: 4 }],
    disk: { 0: 38400 },
    alpha: 1.05,
    policy: 'lfu',
  },
  {
    name: 'rowwise_adagrad bf16 sequence + weighted sum, Zipf 1.2',
    optimizer: { type: 'rowwise_adagrad', lr: 0.05, weightDecay: 0.01 },
    tables: [{ name: 'a', rows: 2500, dim: 12, dtype: 'bf16', pooling: 'none' }, { name: 'b', rows: 4000, dim: 4, features: ['b0', 'b1'] }],
    disk: { 0: 15000, 1: 26000 },
    alpha: 1.2,
    weights: true,
  },
  {
    name: 'adam fp32 sum, Zipf 1.05, prefetch between steps',
    optimizer: { type: 'adam', lr: 0.01 },
    tables: [{ name: 'a', rows: 5000, dim: 8 }, { name: 'b', rows: 2000, dim: 8, pooling: 'mean' }],
    disk: { 0: 64000, 1: 25600 },
    alpha: 1.05,
    prefetch: true,
  },
  {
    name: 'adam fp16, uniform, LFU, prefetch',
    optimizer: { type: 'adam', lr: 0.02 },
    tables: [{ name: 'a', rows: 3000, dim: 4, dtype: 'fp16' }],
    disk: { 0: 21600 },
    alpha: 0,
    policy: 'lfu',
    prefetch: true,
  },
];

describe('disk-backed tables train bitwise like memory tables', () => {
  for (const c of CASES) {
    it(c.name, async () => {
      const mem = new EmbeddingCollection({ tables: c.tables, optimizer: c.optimizer, seed: 3 });
      const disk = new EmbeddingCollection({
        tables: c.tables.map((t, i) =>
          c.disk[i] === undefined ? t : { ...t, storage: { kind: 'disk', path: `${tmp.dir}/${c.name.replace(/\W+/g, '_')}`, cacheBytes: c.disk[i]!, policy: c.policy } },
        ),
        optimizer: c.optimizer,
        seed: 3,
      });
      const rng = new Rng(42);
      const STEPS = 12;
      const batches = Array.from({ length: STEPS }, () => idBatch(mem, rng, 24, 5, c.alpha, c.weights));
      for (let s = 0; s < STEPS; s++) {
        const g = grads(mem, batches[s]!, rng);
        const om = await mem.forward(batches[s]!);
        const od = await disk.forward(batches[s]!);
        if (c.prefetch && s + 1 < STEPS) await disk.prefetch(batches[s + 1]!);
        expect(bits(od.pooled)).toEqual(bits(om.pooled));
        for (const f of Object.keys(om.sequences)) expect(bits(od.sequences[f]!.values)).toEqual(bits(om.sequences[f]!.values));
        const rm = await mem.backward(om, g);
        const rd = await disk.backward(od, g);
        expect(rd).toEqual(rm);
      }
      expect(disk.step).toBe(mem.step);
      const a = everything(mem), b = everything(disk);
      a.forEach((x, i) => expect(bits(b[i]!)).toEqual(bits(x)));
      // the cache was far smaller than the tables: rows really went to the file and back
      const stats = disk.storageStats();
      for (const [i] of Object.entries(c.disk)) {
        const s = stats[c.tables[Number(i)]!.name]!;
        expect(s.slots).toBeLessThan(c.tables[Number(i)]!.rows / 4);
        expect(s.evictions).toBeGreaterThan(0);
        expect(s.writebacks).toBeGreaterThan(0);
        if (c.prefetch) expect(s.prefetched).toBeGreaterThan(0);
      }
      mem.dispose();
      disk.dispose();
    });
  }
});

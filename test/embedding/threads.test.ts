// threads.test.ts — the CPU backward leaves bitwise-equal tables and optimizer state whatever the size of
// the thread pool: each row's contributions are summed in id order and each row is updated once, whether
// it has one contribution (updated in id order) or several (grouped by partition), and how the work is
// split among threads changes neither. Batches mix both kinds of rows, features sharing a table, mean
// pooling with weights, a sequence feature, a width the kernels handle without a fixed-width copy, and
// bf16 storage with stochastic rounding.
import { afterAll, describe, expect, it } from 'vitest';
import { EmbeddingCollection } from '../../lib/index.js';
import type { OptimizerConfig, TableConfig } from '../../lib/index.js';
import { loadAddon } from '../../lib/native.js';
import { randomBatch, randomGrads } from './helpers.js';
import { rng } from './oracle.js';

const TABLES: TableConfig[] = [
  { name: 'wide', rows: 5000, dim: 64, features: ['wide_a', 'wide_b'] },
  { name: 'odd', rows: 300, dim: 20, pooling: 'mean', dtype: 'bf16' },
  { name: 'seq', rows: 2000, dim: 16, pooling: 'none' },
];

const OPTIMIZERS: OptimizerConfig[] = [
  { type: 'sgd', lr: 0.1, stochasticRounding: true },
  { type: 'adagrad', lr: 0.05 },
  { type: 'rowwise_adagrad', lr: 0.05, weightDecay: 0.01 },
  { type: 'adam', lr: 0.01 },
];

const addon = loadAddon();
const poolSize = addon.threads();
afterAll(() => addon.setThreads(poolSize));

/** Every row and state value of every table after three steps, as bytes. */
async function train(threads: number, optimizer: OptimizerConfig): Promise<{ bytes: Buffer[]; uniqueRows: number[] }> {
  addon.setThreads(threads);
  const ec = new EmbeddingCollection({ tables: TABLES, optimizer, seed: 3 });
  const r = rng(11);
  const uniqueRows: number[] = [];
  for (let step = 0; step < 3; step++) {
    // 4 features × 2048 samples: more bags than one thread's share of the update work
    const { batch, ob } = randomBatch(ec, r, { B: 2048, maxLen: 6, weights: true });
    const out = await ec.forward(batch);
    const g = randomGrads(ec, ob, r);
    const res = await ec.backward(out, { pooled: g.pooled, sequences: g.sequences });
    uniqueRows.push(res.uniqueRows);
  }
  const bytes: Buffer[] = [];
  for (const t of TABLES) {
    const all = BigInt64Array.from({ length: t.rows }, (_, i) => BigInt(i));
    bytes.push(Buffer.from(ec.readRows(t.name, all).buffer));
    if (optimizer.type !== 'sgd') bytes.push(Buffer.from(ec.readState(t.name, all).buffer));
  }
  ec.dispose();
  return { bytes, uniqueRows };
}

describe('CPU backward: bitwise the same for every thread-pool size', () => {
  for (const opt of OPTIMIZERS) {
    it(`${opt.type}: 1, 2 and 3 threads`, async () => {
      const one = await train(1, opt);
      for (const threads of [2, 3]) {
        const other = await train(threads, opt);
        expect(other.uniqueRows).toEqual(one.uniqueRows);
        other.bytes.forEach((b, i) => expect(Buffer.compare(b, one.bytes[i]!), `array ${i} with ${threads} threads`).toBe(0));
      }
    });
  }
});

describe('setThreads', () => {
  it('takes an integer in [0, 1024] and rejects anything else with INVALID_ARGUMENT, leaving the pool as it was', () => {
    addon.setThreads(3);
    for (const bad of [1025, 100000, -1, 1.5, NaN, Infinity, '4'])
      expect(() => addon.setThreads(bad as number)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('threads must be an integer in [0, 1024]') }));
    expect(addon.threads()).toBe(3);
    addon.setThreads(0); // all cores
    expect(addon.threads()).toBe(poolSize);
  });
});

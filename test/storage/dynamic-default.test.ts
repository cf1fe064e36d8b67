// dynamic-default.test.ts — a dynamic table's hashed default (admission.default: 'hashed'): ids without a
// row (not yet admitted under minCount > 1, or not admitted because every row was in use) read their init
// row, the SplitMix64 hash of (seed, table, id · dim + column) that the oracle computes from its definition,
// and get no update; an admitted id starts from that same row. Multi-step training against the naive map
// and naive math, sum / mean / sequence pooling, weighted bags, fp32 and bf16; on the CPU and, where one is
// usable (or emulated: scripts/test-cuda-emu.mjs), on cuda:0. Also the config's typed errors.
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError, JaggedBatch, type OptimizerConfig, type TableConfig } from '../../lib/index.js';
import type { Pool } from '../embedding/oracle.js';
import { testDevices } from '../embedding/devices.js';
import { initRow } from './dynamic-oracle.js';
import { runCase } from './dynamic-case.js';

const OPTS: OptimizerConfig[] = [{ type: 'adagrad', lr: 0.1 }, { type: 'adam', lr: 0.05 }, { type: 'sgd', lr: 0.1 }];
const POOLS: Pool[] = ['sum', 'mean', 'none'];

for (const { device, skip } of testDevices())
  describe.skipIf(skip)(`hashed default of ids without a row (${device})`, () => {
    for (const [i, pooling] of POOLS.entries()) {
      const opt = OPTS[i]!;
      it(`${opt.type} / ${pooling} / minCount 3 / ${pooling === 'none' ? 'unweighted' : 'weighted'} bags`, async () => {
        const spec = { capacity: 12, minCount: 3, candidates: 40, eviction: (i % 2 ? 'lfu' : 'lru') as 'lru' | 'lfu' };
        await runCase({ opt, pooling, dtype: 'fp32', spec, zipf: i !== 1, weights: pooling !== 'none', device, hashed: true }, 500 + i, 8);
      });
    }

    it('minCount 1 with every row in use (capacity 1): the ids left out read their init row', async () => {
      await runCase({ opt: { type: 'sgd', lr: 0.1 }, pooling: 'sum', dtype: 'fp32', spec: { capacity: 1, minCount: 1, candidates: 1, eviction: 'lru' }, zipf: false, weights: true, device, hashed: true }, 510, 5);
    });

    if (device === 'cpu')
      it('bf16 storage: defaults are read as the table would store them', async () => {
        await runCase({ opt: { type: 'adam', lr: 0.05 }, pooling: 'mean', dtype: 'bf16', spec: { capacity: 16, minCount: 2, candidates: 20, eviction: 'lfu' }, zipf: true, weights: true, device, hashed: true }, 520, 8);
      });

    it('an admitted id keeps the value it read before admission; evaluation forwards read defaults too', async () => {
      const ec = new EmbeddingCollection({
        tables: [{ name: 'd', rows: 'dynamic', capacity: 4, dim: 3, features: ['a'], pooling: 'sum', init: { type: 'uniform', low: -1, high: 1 }, admission: { minCount: 2, default: 'hashed' } }],
        optimizer: { type: 'sgd', lr: 0.5 },
        seed: 9,
        device,
      });
      try {
        const one = (id: bigint) => JaggedBatch.fromLengths({ features: ['a'], batchSize: 1, lengths: Int32Array.of(1), ids: BigInt64Array.of(id) });
        const want = new Float64Array(3);
        initRow(want, 0, 3, 'fp32', -1, 1, 9, 0, 77n);
        const ev = await ec.forward(one(77n), { admit: false });
        expect(ev.pooled).toEqual(Float32Array.from(want));
        const first = await ec.forward(one(77n)); // one sighting: not admitted, reads its init row
        expect(first.pooled).toEqual(Float32Array.from(want));
        await ec.backward(first, { pooled: Float32Array.of(1, 1, 1) }); // no update
        expect(ec.heldIds('d')).toEqual(new BigInt64Array(0));
        expect(ec.readRows('d', [77n])).toEqual(Float32Array.from(want));
        const second = await ec.forward(one(77n)); // second sighting: admitted with the same row
        expect(ec.heldIds('d')).toEqual(BigInt64Array.of(77n));
        expect(second.pooled).toEqual(Float32Array.from(want));
        await ec.backward(second, { pooled: Float32Array.of(1, 1, 1) });
        expect(ec.readRows('d', [77n])).toEqual(Float32Array.from(want, (x) => Math.fround(x - 0.5)));
      } finally {
        ec.dispose();
      }
    });
  });

describe('admission.default config', () => {
  const make = (admission: unknown) => () =>
    new EmbeddingCollection({ tables: [{ name: 'd', rows: 'dynamic', capacity: 4, dim: 2, admission } as TableConfig] });
  for (const [admission, field] of [[{ minCount: 2, default: 'random' }, 'tables[0].admission.default'], [{ minCount: 2, defaults: 'hashed' }, 'tables[0].admission.defaults']] as const)
    it(`${JSON.stringify(admission)}: INVALID_CONFIG naming ${field}`, () => {
      let e: unknown;
      try {
        make(admission)().dispose();
      } catch (x) {
        e = x;
      }
      expect(e).toBeInstanceOf(EmbshardError);
      expect((e as EmbshardError).code).toBe('INVALID_CONFIG');
      expect((e as EmbshardError).message).toContain(field);
    });
  it('the resolved config keeps the default (checkpoints rebuild it)', () => {
    const ec = make({ minCount: 1, default: 'hashed' })();
    expect(ec.tables[0]!.dynamic!.default).toBe('hashed');
    ec.dispose();
    const z = make({ minCount: 1 })();
    expect(z.tables[0]!.dynamic!.default).toBe('zero');
    z.dispose();
  });
});

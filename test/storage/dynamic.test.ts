// dynamic.test.ts — dynamic tables (rows: 'dynamic') against a naive oracle: raw 64-bit ids from a pool
// far larger than the capacity (uniform and Zipf), multi-step training with every optimizer and pooling,
// LRU / LFU eviction, admission after minCount sightings; held ids, stats, rows and optimizer state
// compared with the naive map + naive math after every step (dynamic-case.ts). On the CPU and, where one
// is usable (or emulated: scripts/test-cuda-emu.mjs), on cuda:0 (the slot table then lives in device memory).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'vitest';
import type { OptimizerConfig } from '../../lib/index.js';
import type { Pool } from '../embedding/oracle.js';
import { testDevices } from '../embedding/devices.js';
import type { NaiveSpec } from './dynamic-oracle.js';
import { runCase, type Case } from './dynamic-case.js';

const OPTS: OptimizerConfig[] = [
  { type: 'sgd', lr: 0.1, weightDecay: 0.01 },
  { type: 'adagrad', lr: 0.1 },
  { type: 'rowwise_adagrad', lr: 0.1 },
  { type: 'adam', lr: 0.05 },
];
const POOLS: Pool[] = ['sum', 'mean', 'none'];

for (const { device, skip } of testDevices())
  describe.skipIf(skip)(`dynamic tables vs a naive map and naive math (${device})`, () => {
    let k = 0;
    for (const opt of OPTS)
      for (const pooling of POOLS) {
        const i = k++;
        // the CPU runs every optimizer × pooling; a CUDA device one pooling per optimizer (emulated kernels are slow)
        if (device !== 'cpu' && i % 3 !== Math.floor(i / 3) % 3) continue;
        const spec: NaiveSpec = { capacity: 24, minCount: i % 3 === 2 ? 2 : 1, candidates: i % 3 === 2 ? 30 : 24, eviction: i % 2 ? 'lfu' : 'lru' };
        const c: Case = { opt, pooling, dtype: 'fp32', spec, zipf: i % 4 < 2, weights: pooling !== 'none' && i % 2 === 0, device };
        it(`${opt.type} / ${pooling} / ${spec.eviction} minCount ${spec.minCount} / ${c.zipf ? 'zipf' : 'uniform'} ids`, async () => {
          await runCase(c, 100 + i, 8);
        });
      }

    it('fp16 and bf16 storage (round to nearest) under adam and LFU with minCount 3', async () => {
      for (const dtype of ['fp16', 'bf16'] as const)
        await runCase({ opt: { type: 'adam', lr: 0.05 }, pooling: 'sum', dtype, spec: { capacity: 16, minCount: 3, candidates: 8, eviction: 'lfu' }, zipf: true, weights: false, device }, 7, 8);
    });

    it('spill: evicted rows (values + state) come back on re-admission, under every optimizer, LRU / LFU, minCount 1 / 2', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'embshard-spill-'));
      try {
        for (const [i, opt] of OPTS.entries()) {
          if (device !== 'cpu' && i % 2 === 1) continue;
          const spec: NaiveSpec = { capacity: 24, minCount: i === 3 ? 2 : 1, candidates: 30, eviction: i % 2 ? 'lfu' : 'lru', spill: true };
          await runCase({ opt, pooling: i === 2 ? 'mean' : 'sum', dtype: i === 3 ? 'bf16' : 'fp32', spec, zipf: i % 2 === 0, weights: i === 1, device, spillDir: dir }, 300 + i, 10);
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it('a capacity of one row: after its first admission every other id reads zero', async () => {
      await runCase({ opt: { type: 'sgd', lr: 0.1 }, pooling: 'sum', dtype: 'fp32', spec: { capacity: 1, minCount: 1, candidates: 1, eviction: 'lru' }, zipf: false, weights: false, device }, 9, 5);
    });
  });

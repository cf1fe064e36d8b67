// synthetic-native.test.ts — the native batch generator (native/data/synthetic_batch.cc) against the
// per-value TypeScript oracle of the documented formulas (synthetic-oracle.ts): every length, id, dense
// value, label and planted probability equal, over presets, Zipf exponents (0, 1, 1.05, 1.2), fixed and
// uniform bags, capped tables, unscattered ids, sessions, ranks and sample indices past 2^32.
import { describe, it, expect } from 'vitest';
import { SyntheticSource, type SyntheticOptions } from '../../lib/data/synthetic.js';
import { loadAddon } from '../../lib/native.js';
import { isEmbshardError } from '../../lib/errors.js';
import { oracleBatch } from './synthetic-oracle.js';

const cases: [string, SyntheticOptions, number[]][] = [
  ['criteo-kaggle, default α', { preset: 'criteo-kaggle', batchSize: 256, seed: 3 }, [0, 7]],
  ['mlperf-dcnv2 multi-hot, uniform bags, capped', { preset: 'mlperf-dcnv2', batchSize: 64, maxRows: 50_000, lengths: 'uniform', seed: 11 }, [0, 2]],
  ['dlrm-benchmark, fixed bags', { preset: 'dlrm-benchmark', batchSize: 32, seed: 5 }, [1]],
  ['α = 1', { preset: 'criteo-kaggle', batchSize: 128, alpha: 1, seed: 2 }, [3]],
  ['α = 0 (uniform ids), unscattered', { preset: 'criteo-kaggle', batchSize: 128, alpha: 0, scatter: false, seed: 9 }, [0]],
  ['α = 1.2, rank 2 of 3, sample offset past 2^32', { preset: 'criteo-kaggle', batchSize: 100, alpha: 1.2, rank: 2, worldSize: 3, sampleOffset: 2 ** 33 + 17, seed: -4 }, [0, 5]],
  ['sessions', { preset: 'criteo-kaggle', batchSize: 200, sessions: { concurrent: 16, samples: 8, share: 0.5 }, seed: 1 }, [0, 4]],
];

describe('native synthetic batches', () => {
  for (const [name, options, ks] of cases) {
    it(`equal the formulas value by value: ${name}`, () => {
      const src = new SyntheticSource(options);
      for (const k of ks) {
        const got = src.batch(k), want = oracleBatch(src.generator, k);
        expect(got.sparse.lengths).toEqual(want.lengths);
        expect(got.sparse.ids).toEqual(want.ids);
        expect(got.dense).toEqual(want.dense);
        expect(got.labels).toEqual(want.labels);
        expect(got.planted).toEqual(want.planted);
      }
    });
  }

  it('the binding rejects a malformed spec with INVALID_ARGUMENT', () => {
    const synth = (loadAddon() as unknown as { synth: { batch(s: unknown, first: number, b: number): unknown } }).synth;
    for (const [spec, re] of [[new Float64Array(3), /too short/], [new Float32Array(12), /Float64Array/], [Float64Array.of(1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), /length/]] as const) {
      try {
        synth.batch(spec, 0, 4);
        expect.unreachable('expected an EmbshardError');
      } catch (e) {
        expect(isEmbshardError(e)).toBe(true);
        expect((e as { code: string }).code).toBe('INVALID_ARGUMENT');
        expect((e as Error).message).toMatch(re);
      }
    }
  });
});

// synthetic.test.ts — the synthetic generator: Criteo constants against the published sums, determinism
// (per seed, per sample, across batch sizes and ranks), Zipf rank frequencies against the closed form,
// multi-hot sizes, dense-feature moments, the generator loop against a naive recomputation of the planted
// model, label calibration, and planted-AUC sanity.
import { describe, it, expect } from 'vitest';
import {
  CRITEO_1TB_40M_CARDINALITIES, CRITEO_1TB_CARDINALITIES, CRITEO_KAGGLE_CARDINALITIES, MLPERF_DCNV2_CARDINALITIES,
  MLPERF_DCNV2_MULTI_HOT, CAT_FEATURE_NAMES,
} from '../../lib/data/criteo.js';
import { SyntheticSource, plantedAUC } from '../../lib/data/synthetic.js';
import { makeScatter, zipfParams, zipfRank, zipfRankProbability } from '../../lib/random/zipf.js';
import { logGeometricMoments, sigmoid } from '../../lib/data/planted.js';
import { fmix32 } from '../../lib/random/rng.js';
import { auc } from '../../lib/data/metrics.js';
import { isEmbshardError } from '../../lib/errors.js';
import type { Batch } from '../../lib/data/types.js';

const sum = (a: readonly number[]): number => a.reduce((x, y) => x + y, 0);

function expectCode(f: () => unknown, code: string, field: RegExp): void {
  try {
    f();
    expect.unreachable('expected an EmbshardError');
  } catch (e) {
    expect(isEmbshardError(e)).toBe(true);
    expect((e as { code: string }).code).toBe(code);
    expect((e as Error).message).toMatch(field);
  }
}

function sameBatch(a: Batch, b: Batch): void {
  expect(a.size).toBe(b.size);
  expect(Array.from(a.dense)).toEqual(Array.from(b.dense));
  expect(Array.from(a.labels)).toEqual(Array.from(b.labels));
  expect(Array.from(a.planted!)).toEqual(Array.from(b.planted!));
  expect(Array.from(a.sparse.lengths)).toEqual(Array.from(b.sparse.lengths));
  expect(Array.from(a.sparse.ids as Int32Array)).toEqual(Array.from(b.sparse.ids as Int32Array));
}

describe('Criteo constants', () => {
  it('match the published sums and shapes', () => {
    expect(sum(CRITEO_KAGGLE_CARDINALITIES)).toBe(33_762_577);
    expect(sum(CRITEO_1TB_CARDINALITIES)).toBe(882_774_559);
    expect(sum(CRITEO_1TB_40M_CARDINALITIES)).toBe(187_767_399);
    expect(sum(MLPERF_DCNV2_CARDINALITIES)).toBe(204_184_588);
    expect(sum(MLPERF_DCNV2_MULTI_HOT)).toBe(214);
    expect(CAT_FEATURE_NAMES[0]).toBe('cat_0');
    expect(CAT_FEATURE_NAMES[25]).toBe('cat_25');
    for (const t of [CRITEO_KAGGLE_CARDINALITIES, CRITEO_1TB_CARDINALITIES, MLPERF_DCNV2_CARDINALITIES, MLPERF_DCNV2_MULTI_HOT]) expect(t).toHaveLength(26);
  });
});

describe('fmix32', () => {
  it('is murmur3’s finalizer (checked with exact BigInt arithmetic)', () => {
    const M = (1n << 32n) - 1n;
    const ref = (x: number): number => {
      let h = BigInt(x >>> 0);
      h ^= h >> 16n;
      h = (h * 0x85ebca6bn) & M;
      h ^= h >> 13n;
      h = (h * 0xc2b2ae35n) & M;
      h ^= h >> 16n;
      return Number(h);
    };
    for (const x of [0, 1, 2, 0xdeadbeef, 0xffffffff, 12345678, -7]) expect(fmix32(x)).toBe(ref(x));
  });
});

describe('synthetic determinism', () => {
  const base = { batchSize: 16, maxRows: 5000, seed: 11, numBatches: 3 };

  it('gives identical batches for the same seed and different ones for another seed', async () => {
    const a = new SyntheticSource(base), b = new SyntheticSource(base), c = new SyntheticSource({ ...base, seed: 12 });
    const A: Batch[] = [], Bs: Batch[] = [];
    for await (const x of a) A.push(x);
    for await (const x of b) Bs.push(x);
    expect(A).toHaveLength(3);
    A.forEach((x, k) => sameBatch(x, Bs[k]!));
    // a second pass (epoch) starts over
    const again: Batch[] = [];
    for await (const x of a) again.push(x);
    again.forEach((x, k) => sameBatch(x, A[k]!));
    expect(Array.from(c.batch(0).sparse.ids as Int32Array)).not.toEqual(Array.from(A[0]!.sparse.ids as Int32Array));
  });

  it('is per sample: two batches of 8 are the halves of one batch of 16, and ranks take their slices', () => {
    const big = new SyntheticSource({ ...base, preset: 'mlperf-dcnv2', lengths: 'uniform' }).batch(1);
    const small = new SyntheticSource({ ...base, preset: 'mlperf-dcnv2', lengths: 'uniform', batchSize: 8 });
    const r0 = new SyntheticSource({ ...base, preset: 'mlperf-dcnv2', lengths: 'uniform', batchSize: 8, worldSize: 2, rank: 0 });
    const r1 = new SyntheticSource({ ...base, preset: 'mlperf-dcnv2', lengths: 'uniform', batchSize: 8, worldSize: 2, rank: 1 });
    // global batch 1 of 16 samples = samples 16..31 = small batches 2 and 3 = rank 0 / rank 1 batch 1
    for (const [half, b] of [[0, small.batch(2)], [1, small.batch(3)], [0, r0.batch(1)], [1, r1.batch(1)]] as const) {
      expect(Array.from(b.labels)).toEqual(Array.from(big.labels.subarray(half * 8, half * 8 + 8)));
      expect(Array.from(b.dense)).toEqual(Array.from(big.dense.subarray(half * 8 * 13, (half + 1) * 8 * 13)));
      for (const f of ['cat_0', 'cat_20', 'cat_25']) {
        const g = big.sparse.feature(f), s = b.sparse.feature(f);
        const glen = Array.from(g.lengths);
        const before = glen.slice(0, half * 8).reduce((x, y) => x + y, 0);
        const mine = glen.slice(half * 8, half * 8 + 8);
        expect(Array.from(s.lengths)).toEqual(mine);
        const n = mine.reduce((x, y) => x + y, 0);
        expect(Array.from(s.ids as Int32Array)).toEqual(Array.from((g.ids as Int32Array).subarray(before, before + n)));
      }
    }
  });

  it('rejects bad options with a code naming the field', () => {
    expectCode(() => new SyntheticSource({ batchSize: 0 }), 'INVALID_SIZE', /batchSize/);
    // an absurd batch is refused before anything is allocated (2^24 samples at most)
    expectCode(() => new SyntheticSource({ batchSize: 2 ** 24 + 1 }), 'INVALID_SIZE', /batchSize must be at most 16777216 samples \(got 16777217\)/);
    expectCode(() => new SyntheticSource({ batchSize: 4, hotness: [1, 2] }), 'LENGTH_MISMATCH', /hotness/);
    expectCode(() => new SyntheticSource({ batchSize: 4, alpha: -1 }), 'INVALID_ARGUMENT', /alpha/);
    expectCode(() => new SyntheticSource({ batchSize: 4, rank: 2, worldSize: 2 }), 'INVALID_ARGUMENT', /rank/);
    expectCode(() => new SyntheticSource({ batchSize: 4, maxRows: 2 ** 31 }), 'INVALID_SIZE', /maxRows/);
    expectCode(() => new SyntheticSource({ batchSize: 4, cardinalities: [10, -1] }), 'INVALID_SIZE', /cardinalities\[1\]/);
    expectCode(() => new SyntheticSource({ batchSize: 4, preset: 'nope' as never }), 'INVALID_CONFIG', /preset/);
  });
});

describe('Zipf ids', () => {
  it('the rank law is a distribution close to discrete Zipf down the tail', () => {
    for (const alpha of [0, 0.8, 1, 1.1, 1.45]) {
      let total = 0;
      for (let r = 0; r < 1000; r++) total += zipfRankProbability(1000, alpha, r);
      expect(total).toBeCloseTo(1, 12);
    }
    // decays like r ↦ (r+1)^−α: neighbouring ranks' ratio converges to the discrete Zipf ratio
    const N = 1000, a = 1.1;
    for (const r of [50, 200, 998]) {
      const ratio = zipfRankProbability(N, a, r + 1) / zipfRankProbability(N, a, r);
      expect(Math.abs(ratio / ((r + 1) / (r + 2)) ** a - 1)).toBeLessThan(1e-3);
    }
    // closed form by direct integration of x^−α over [r+1, r+2), for one rank
    const r = 3, Z = (Math.pow(N + 1, 1 - a) - 1) / (1 - a);
    expect(zipfRankProbability(N, a, r)).toBeCloseTo((Math.pow(r + 2, 1 - a) - Math.pow(r + 1, 1 - a)) / (1 - a) / Z, 14);
  });

  it('exponents next to 1: the rank probabilities and the sampler agree with the closed form (no cancellation)', () => {
    const N = 1e6, M = 200_000;
    // P(rank 0) = ∫_1^2 x^−α / ∫_1^(N+1) x^−α = expm1((1−α)·ln 2) / expm1((1−α)·ln(N+1)), ln 2 / ln(N+1) at α = 1
    const p0 = (a: number) => (a === 1 ? Math.log(2) / Math.log(N + 1) : Math.expm1((1 - a) * Math.log(2)) / Math.expm1((1 - a) * Math.log(N + 1)));
    for (const alpha of [1 - 1e-12, 1 + 2 ** -52, 1 - 2 ** -53, 1 + 1e-14, 1 + 1e-10, 1 + 1e-6, 1 - 1e-5]) {
      expect(Math.abs(zipfRankProbability(N, alpha, 0) / p0(alpha) - 1), `P(0) at α = ${alpha}`).toBeLessThan(1e-6);
      // the sampler's rank 0 over a uniform grid of u: within the grid's resolution of the same mass
      const z = zipfParams(N, alpha);
      let hits = 0;
      for (let i = 0; i < M; i++) if (zipfRank(z, (i + 0.5) / M) === 0) hits++;
      expect(Math.abs(hits / M - p0(alpha)), `sampler at α = ${alpha}`).toBeLessThan(2 / M);
    }
  });

  it('the scatter is a bijection of [0, N)', () => {
    for (const n of [1, 2, 97, 1000, 4096]) {
      const s = makeScatter(n, 5, 3);
      const seen = new Uint8Array(n);
      for (let r = 0; r < n; r++) seen[(s.a * r + s.c) % n] = 1;
      expect(seen.reduce((x, y) => x + y, 0)).toBe(n);
    }
  });

  for (const alpha of [0, 1, 1.1, 1.45]) {
    it(`id frequencies follow the closed-form rank law (α = ${alpha}, χ² test)`, () => {
      const N = 1000, seed = 7;
      const src = new SyntheticSource({ batchSize: 4000, cardinalities: [N], hotness: 25, alpha, seed, numDense: 0 });
      const counts = new Float64Array(N);
      let M = 0;
      for (let k = 0; k < 2; k++) {
        const ids = src.batch(k).sparse.ids as Int32Array;
        for (const id of ids) counts[id]!++;
        M += ids.length;
      }
      expect(M).toBe(200_000);
      // id = (a·r + c) mod N, so the expected count of id(r) is M·P(r); merge bins with < 5 expected
      const s = makeScatter(N, seed, 0);
      let chi2 = 0, dof = -1, accO = 0, accE = 0;
      for (let r = 0; r < N; r++) {
        accO += counts[(s.a * r + s.c) % N]!;
        accE += M * zipfRankProbability(N, alpha, r);
        if (accE >= 5 || r === N - 1) {
          chi2 += (accO - accE) ** 2 / accE;
          dof++;
          accO = accE = 0;
        }
      }
      // χ²/dof has mean 1 and sd √(2/dof) under the law; α off by 0.05 gives 1.5 – 3.1 (measured)
      expect(dof).toBeGreaterThan(100);
      expect(chi2 / dof).toBeLessThan(1 + 5 * Math.sqrt(2 / dof));
      // the hottest rank within 5 binomial sd
      const p0 = zipfRankProbability(N, alpha, 0);
      expect(Math.abs(counts[s.c]! - M * p0)).toBeLessThan(5 * Math.sqrt(M * p0 * (1 - p0)) + 1);
    });
  }

  it('scatter: false puts rank r at id r (hottest = row 0, the planner’s access model)', () => {
    const ids = new SyntheticSource({ batchSize: 4000, cardinalities: [1000], hotness: 25, seed: 7, numDense: 0, scatter: false }).batch(0).sparse.ids as Int32Array;
    const counts = new Float64Array(1000);
    for (const id of ids) counts[id]!++;
    const M = ids.length;
    for (const r of [0, 1, 5, 20]) {
      const p = zipfRankProbability(1000, 1.1, r);
      expect(Math.abs(counts[r]! - M * p)).toBeLessThan(5 * Math.sqrt(M * p * (1 - p)) + 1);
    }
  });

  it('caps tables with maxRows by hashing ids modulo the cap', () => {
    const src = new SyntheticSource({ batchSize: 512, cardinalities: [10_000_000, 40], maxRows: 1000, seed: 3 });
    expect(src.tableRows).toEqual([1000, 40]);
    const b = src.batch(0);
    const f0 = b.sparse.feature('cat_0').ids as Int32Array, f1 = b.sparse.feature('cat_1').ids as Int32Array;
    expect(Math.max(...f0)).toBeLessThan(1000);
    expect(Math.min(...f0)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...f1)).toBeLessThan(40);
    // uncapped ids of the same draws, folded, give the capped ones
    const raw = new SyntheticSource({ batchSize: 512, cardinalities: [10_000_000, 40], seed: 3 }).batch(0).sparse.feature('cat_0').ids as Int32Array;
    expect(Array.from(f0)).toEqual(Array.from(raw, (v) => v % 1000));
  });
});

describe('bags and dense features', () => {
  it('MLPerf DCNv2 bags have exactly the multi-hot sizes; uniform bags lie in [1, 2h−1] with mean ≈ h', () => {
    const fixed = new SyntheticSource({ preset: 'mlperf-dcnv2', batchSize: 64, maxRows: 100_000 }).batch(0);
    MLPERF_DCNV2_MULTI_HOT.forEach((h, f) => {
      const l = fixed.sparse.feature(`cat_${f}`).lengths;
      expect(l.every((v) => v === h)).toBe(true);
    });
    expect(fixed.sparse.numIds).toBe(64 * 214);
    const uni = new SyntheticSource({ preset: 'mlperf-dcnv2', batchSize: 2000, maxRows: 100_000, lengths: 'uniform' }).batch(0);
    const l = uni.sparse.feature('cat_20').lengths; // h = 100
    expect(Math.min(...l)).toBeGreaterThanOrEqual(1);
    expect(Math.max(...l)).toBeLessThanOrEqual(199);
    const mean = l.reduce((a, b) => a + b, 0) / l.length;
    // sd of U{1..199} is ≈ 57.4; mean of 2000 within 5 sd / √2000
    expect(Math.abs(mean - 100)).toBeLessThan((5 * 57.4) / Math.sqrt(2000));
    expect(Array.from(uni.sparse.feature('cat_2').lengths).every((v) => v === 1)).toBe(true); // h = 1
  });

  it('dense column j is ln(1 + K), K geometric with mean m_j: moments match the exact series', () => {
    // series vs brute force for one m
    const m = 3;
    let s1 = 0, s2 = 0;
    for (let k = 0; k < 2000; k++) {
      const p = (1 / (1 + m)) * (m / (1 + m)) ** k;
      s1 += p * Math.log(1 + k);
      s2 += p * Math.log(1 + k) ** 2;
    }
    const mo = logGeometricMoments(m);
    expect(mo.mean).toBeCloseTo(s1, 12);
    expect(mo.std).toBeCloseTo(Math.sqrt(s2 - s1 * s1), 12);

    const n = 20_000;
    const b = new SyntheticSource({ batchSize: n, cardinalities: [10], seed: 1 }).batch(0);
    for (const j of [0, 6, 12]) {
      const mj = 0.5 * 2 ** ((10 * j) / 12);
      const { mean, std } = logGeometricMoments(mj);
      let acc = 0;
      for (let i = 0; i < n; i++) {
        const x = b.dense[i * 13 + j]!;
        acc += x;
        // every value is ln(1 + integer)
        expect(Math.abs(Math.round(Math.expm1(x)) - Math.expm1(x))).toBeLessThan(1e-3 * Math.max(1, Math.expm1(x)));
      }
      expect(Math.abs(acc / n - mean)).toBeLessThan((5 * std) / Math.sqrt(n));
    }
  });

  it('the moments take the terms down to a tail of 1e-15 and no more, for every dense column of 2 … 64', () => {
    // the oracle: P(K > k) = q^(k+1) drops to 1e-15 after ⌈ln 1e-15 / ln q⌉ terms; the brute-force sums to 1e-30
    const log1p = Math.log1p;
    let calls = 0;
    Math.log1p = (x: number): number => (calls++, log1p(x));
    try {
      for (const D of [2, 13, 64])
        for (let j = 0; j < D; j++) {
          const m = 0.5 * 2 ** ((10 * j) / (D - 1)), q = m / (1 + m);
          const terms = Math.ceil(Math.log(1e-15) / Math.log(q));
          calls = 0;
          const mo = logGeometricMoments(m);
          expect([D, j, calls <= terms + 1]).toEqual([D, j, true]);
          let s1 = 0, s2 = 0;
          for (let k = 0, p = 1 - q; k < 2 * terms + 10; k++, p *= q) {
            const x = log1p(k);
            s1 += p * x;
            s2 += p * x * x;
          }
          expect(mo.mean).toBeCloseTo(s1, 12);
          expect(mo.std).toBeCloseTo(Math.sqrt(s2 - s1 * s1), 11);
        }
    } finally {
      Math.log1p = log1p;
    }
  });
});

describe('planted model', () => {
  it('the batch loop agrees with a naive recomputation of the documented logit', () => {
    const src = new SyntheticSource({ preset: 'mlperf-dcnv2', batchSize: 50, maxRows: 20_000, lengths: 'uniform', seed: 4 });
    const g = src.generator, m = g.model;
    const b = src.batch(2);
    const F = 26, D = 13;
    for (let i = 0; i < b.size; i++) {
      let z = g.logitOffset;
      for (let f = 0; f < F; f++) {
        const bag = b.sparse.feature(`cat_${f}`);
        let start = 0;
        for (let t = 0; t < i; t++) start += bag.lengths[t]!;
        let acc = 0;
        for (let t = 0; t < bag.lengths[i]!; t++) acc += m.hiddenScore(f, (bag.ids as Int32Array)[start + t]!);
        z += (1.5 / Math.sqrt(F * MLPERF_DCNV2_MULTI_HOT[f]!)) * acc;
      }
      for (let j = 0; j < D; j++) z += m.denseCoef[j]! * (b.dense[i * D + j]! - m.denseMean[j]!);
      expect(b.planted![i]).toBeCloseTo(sigmoid(z), 6);
    }
  });

  it('labels are calibrated to the planted probabilities', () => {
    const src = new SyntheticSource({ batchSize: 50_000, maxRows: 100_000, seed: 21 });
    const b = src.batch(0);
    // per probability decile, the click rate matches the mean planted probability within 5 sd
    const bins = Array.from({ length: 10 }, () => ({ n: 0, y: 0, p: 0, v: 0 }));
    for (let i = 0; i < b.size; i++) {
      const p = b.planted![i]!;
      const bin = bins[Math.min(9, Math.floor(p * 10))]!;
      bin.n++;
      bin.y += b.labels[i]!;
      bin.p += p;
      bin.v += p * (1 - p);
    }
    for (const bin of bins) if (bin.n > 100) expect(Math.abs(bin.y - bin.p)).toBeLessThan(5 * Math.sqrt(bin.v) + 1);
    const ctr = b.labels.reduce((a, y) => a + y, 0) / b.size;
    expect(ctr).toBeGreaterThan(0.15);
    expect(ctr).toBeLessThan(0.35);
  });

  it('plantedAUC: realized ≈ expected; no signal gives ½; overwhelming signal nearly separates', async () => {
    const batches: Batch[] = [];
    for await (const b of new SyntheticSource({ batchSize: 5000, numBatches: 4, maxRows: 100_000, seed: 2 })) batches.push(b);
    const r = plantedAUC(batches);
    expect(r.samples).toBe(20_000);
    expect(r.expected).toBeGreaterThan(0.7);
    expect(r.expected).toBeLessThan(0.9);
    expect(Math.abs(r.realized - r.expected)).toBeLessThan(0.02);
    // the planted probability is the best score: a noisier score does worse
    const p = new Float32Array(20_000), y = new Float32Array(20_000);
    batches.forEach((b, k) => {
      p.set(b.planted!, k * 5000);
      y.set(b.labels, k * 5000);
    });
    const noisy = Float32Array.from(p, (v, i) => v + 0.3 * ((Math.imul(i, 2654435761) >>> 0) / 2 ** 32));
    expect(auc(noisy, y)).toBeLessThan(r.realized);

    const flat = new SyntheticSource({ batchSize: 4000, maxRows: 1000, planted: { sparseScale: 0, denseScale: 0 } }).batch(0);
    expect(plantedAUC([flat]).expected).toBe(0.5);
    const sharp = new SyntheticSource({ batchSize: 4000, maxRows: 1000, planted: { sparseScale: 60, denseScale: 10, bias: 0 } }).batch(0);
    expect(plantedAUC([sharp]).realized).toBeGreaterThan(0.99);
  });
});

// Workload presets against their published aggregates, seeded generators, the Zipf sampler against the
// access model's masses, and profileAccess on generated batches.
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { criteoTsvSource } from '../../lib/data/criteo-tsv.js';
import { planShards } from '../../lib/plan/planner.js';
import { measureTraffic } from '../../lib/plan/traffic.js';
import { bruteForceTraffic, smallTopology } from './helpers.js';
import { JaggedBatch } from '../../lib/batch.js';
import { AccessModel } from '../../lib/plan/access.js';
import { profileAccess, withProfiledAccess } from '../../lib/plan/profile.js';
import { normalizeTables } from '../../lib/plan/tables.js';
import { generateBatch, generateBatches } from '../../lib/workloads/generator.js';
import { workload, WORKLOAD_NAMES, type Workload } from '../../lib/workloads/presets.js';
import { Rng } from '../../lib/random/rng.js';
import { ZipfSampler } from '../../lib/random/zipf.js';

const sum = (a: number[]) => a.reduce((x, y) => x + y, 0);

describe('workload presets', () => {
  it('match the reference aggregates', () => {
    const d = workload('dlrm-dcnv2');
    expect(d.tables).toHaveLength(26);
    expect(sum(d.tables.map((t) => t.rows))).toBe(204_184_588);
    expect(sum(d.tables.map((t) => t.poolingFactors![0]!))).toBe(214);
    expect(d.tables.every((t) => t.dim === 128 && t.optimizer === 'adagrad')).toBe(true);
    expect(sum(workload('criteo-kaggle').tables.map((t) => t.rows))).toBe(33_762_577);
    for (const [name, count, params, hot, dims] of [
      ['t180', 177, 66.3e9, 14450, [32, 64, 128, 256]],
      ['t200', 200, 103.9e9, 4550, [64, 128]],
      ['t510', 510, 114.6e9, 2670, [128]],
    ] as const) {
      const w = workload(name);
      expect(w.tables).toHaveLength(count);
      expect(Math.abs(sum(w.tables.map((t) => t.rows * t.dim)) - params) / params).toBeLessThan(1e-6);
      expect(sum(w.tables.map((t) => t.poolingFactors![0]!))).toBe(hot);
      expect(w.tables.every((t) => (dims as readonly number[]).includes(t.dim) && t.access?.zipf === 1.1)).toBe(true);
    }
    const s = workload('seq-skewed');
    expect(s.tables.some((t) => t.pooling === 'none')).toBe(true);
    expect(s.tables.every((t) => t.access!.zipf! >= 1.1 && t.access!.zipf! <= 1.2)).toBe(true);
    expect(() => workload('nope')).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG' }));
  });

  it('generate seeded per-rank batches that follow the bag laws', () => {
    for (const name of WORKLOAD_NAMES) {
      const w = workload(name);
      const a = generateBatch(w, 3, { batchSize: 4, seed: 9, step: 2 });
      const b = generateBatch(w, 3, { batchSize: 4, seed: 9, step: 2 });
      const c = generateBatch(w, 4, { batchSize: 4, seed: 9, step: 2 });
      expect(a.ids).toEqual(b.ids);
      expect(a.ids).not.toEqual(c.ids);
      w.tables.forEach((t) =>
        (t.features ?? [t.name]).forEach((f) => {
          const { lengths, ids } = a.feature(f);
          const bag = w.bags[f]!;
          for (const n of lengths) {
            if (bag.kind === 'fixed') expect(n).toBe(bag.n);
            else expect(n >= 1 && n <= 2 * bag.mean - 1).toBe(true);
          }
          for (const id of ids) expect(id >= 0 && id < t.rows).toBe(true);
        }),
      );
    }
    const int64 = generateBatches(workload('criteo-kaggle'), 2, { batchSize: 3, idType: 'int64' });
    expect(int64[0]!.ids).toBeInstanceOf(BigInt64Array);
  });
});

describe('Zipf sampler', () => {
  it('draws rows with the access model masses (within 5 sigma per bucket)', () => {
    for (const alpha of [0, 1, 1.1, 1.45]) {
      const rows = 5000, n = 200_000;
      const z = new ZipfSampler(rows, alpha), m = new AccessModel(rows, { zipf: alpha });
      const rng = new Rng(42, alpha * 100);
      const counts = new Float64Array(rows);
      for (let i = 0; i < n; i++) counts[z.sample(rng)]++;
      for (let lo = 0; lo < rows; lo = lo === 0 ? 1 : lo * 2) {
        const hi = Math.min(rows, lo === 0 ? 1 : lo * 2);
        let obs = 0;
        for (let i = lo; i < hi; i++) obs += counts[i]!;
        const p = m.mass(lo, hi), exp = n * p, sd = Math.sqrt(n * p * (1 - p));
        expect(Math.abs(obs - exp), `α ${alpha} rows [${lo}, ${hi})`).toBeLessThanOrEqual(5 * sd + 1);
      }
    }
  });
});

describe('profileAccess', () => {
  const w: Workload = {
    name: 'p',
    description: '',
    source: '',
    tables: [
      { name: 'z', rows: 1_000_000, dim: 8, features: ['z'], access: { zipf: 1.1 } },
      { name: 'u', rows: 1000, dim: 8, features: ['u'] },
    ],
    bags: { z: { kind: 'fixed', n: 50 }, u: { kind: 'fixed', n: 5 } },
  };

  /** Brute-force oracle: every id counted with a Map; those hit at least twice sorted by (count desc, id asc). */
  function bruteTop(batches: JaggedBatch[], f: string, k: number): { ids: number[]; counts: number[]; distinct: number } {
    const m = new Map<number, number>();
    for (const b of batches) for (const id of b.feature(f).ids) m.set(Number(id), (m.get(Number(id)) ?? 0) + 1);
    const all = [...m].filter((x) => x[1] >= 2).sort((x, y) => y[1] - x[1] || x[0] - y[0]).slice(0, k);
    return { ids: all.map((x) => x[0]), counts: all.map((x) => x[1]), distinct: m.size };
  }

  it('finds the most frequent ids exactly, fits the Zipf exponent and sees the ids were frequency-ordered', async () => {
    const batches = generateBatches(w, 8, { batchSize: 500, seed: 1 });
    const [z, u] = await profileAccess(batches, w.tables, { topK: 256 });
    expect(z!.lookups).toBe(8 * 500 * 50);
    expect(Math.abs(z!.zipf - 1.1)).toBeLessThan(0.06);
    expect(z!.hotPrefixShare).toBeGreaterThan(0.9);
    const o = bruteTop(batches, 'z', 256);
    expect(z!.hotIds).toEqual(o.ids);
    expect(o.counts[255]).toBeGreaterThanOrEqual(20); // none smoothed
    expect(z!.access.top!.counts).toEqual(o.counts);
    expect(z!.access.top!.total).toBe(8 * 500 * 50);
    expect(z!.tail).toBe('ordered');
    expect(z!.access.tail).toBeUndefined();
    expect(z!.distinct).toBe(o.distinct);
    expect(z!.hotMass).toBeCloseTo(o.counts.reduce((a, b) => a + b, 0) / (8 * 500 * 50), 12);
    expect(u!.zipf).toBeLessThan(0.2);
    // 'u''s small counts are smoothed: they keep the hot ids' measured total, and the specs still validate
    expect(u!.access.top!.counts.reduce((a, b) => a + b, 0)).toBeCloseTo(bruteTop(batches, 'u', 256).counts.reduce((a, b) => a + b, 0), 6);
    expect(normalizeTables(withProfiledAccess(w.tables, [z!, u!]))[1]!.hotIds).toEqual(u!.hotIds);
    // every id hot: the smoothed counts add up to the total itself
    const [, all] = await profileAccess(batches, w.tables, { topK: 1000 });
    expect(all!.hotIds).toHaveLength(1000);
    expect(normalizeTables(withProfiledAccess(w.tables, [z!, all!]))[1]!.hotIds).toEqual(all!.hotIds);
    expect(u!.hotIds).toEqual(bruteTop(batches, 'u', 256).ids);
  });

  it('finds the same hot set, shape and counts when the ids are permuted', async () => {
    const perm = (id: number) => (id * 7919 + 13) % 1_000_000;
    const ordered = generateBatches(w, 4, { batchSize: 500, seed: 2 });
    const batches = ordered.map((b) => {
      const ids = Int32Array.from(b.ids as Int32Array);
      const f = b.feature('z');
      const start = f.ids.byteOffset / 4 - (b.ids as Int32Array).byteOffset / 4;
      for (let i = 0; i < f.ids.length; i++) ids[start + i] = perm(ids[start + i]!);
      return JaggedBatch.fromLengths({ features: b.features, batchSize: b.batchSize, lengths: b.lengths, ids });
    });
    const [a] = await profileAccess(ordered, w.tables, { topK: 256 });
    const [z] = await profileAccess(batches, w.tables, { topK: 256 });
    expect(z!.hotPrefixShare).toBeLessThan(0.1);
    expect(z!.access.tail).toBe('shuffled');
    expect(z!.access.top!.counts).toEqual(a!.access.top!.counts);
    expect(z!.zipf).toBe(a!.zipf);
    expect(new Set(z!.hotIds)).toEqual(new Set(a!.hotIds.map(perm)));
  });

  it('rejects an id outside its table, naming the batch and feature', async () => {
    const b = JaggedBatch.fromLengths({ features: ['z', 'u'], batchSize: 1, lengths: Int32Array.from([1, 1]), ids: Int32Array.from([3, 1000]) });
    await expect(profileAccess([b], w.tables)).rejects.toMatchObject({ code: 'ID_OUT_OF_RANGE', message: expect.stringContaining("batches[0] feature 'u'") });
  });

  it('names an option out of its range', async () => {
    const b = JaggedBatch.fromLengths({ features: ['z', 'u'], batchSize: 1, lengths: Int32Array.from([1, 1]), ids: Int32Array.from([3, 1]) });
    for (const [o, field] of [[{ topK: -1 }, 'topK'], [{ minHits: 0 }, 'minHits'], [{ minCount: 0.5 }, 'minCount'], [{ smoothBelow: -1 }, 'smoothBelow'], [{ smoothBelow: NaN }, 'smoothBelow']] as const)
      await expect(profileAccess([b], w.tables, o)).rejects.toMatchObject({ code: 'INVALID_CONFIG', message: expect.stringMatching(new RegExp(`^${field}:`)) });
  });
});

describe('Criteo feature names', () => {
  it('a plan made from a Criteo workload reads the batches of a Criteo TSV file', async () => {
    const B = 3;
    const w = workload('criteo-kaggle');
    const plan = planShards(w.tables, smallTopology(2, 2), { batchSize: B, timeBudgetMs: 300 });
    const source = criteoTsvSource({ path: fileURLToPath(new URL('../fixtures/data/criteo-sample.tsv', import.meta.url)), batchSize: B, dropLast: true });
    expect(plan.tables.flatMap((t) => t.features)).toEqual([...source.features]);
    const batches: JaggedBatch[] = [];
    for await (const b of source) if (batches.length < 2) batches.push(b.sparse);
    expect(batches).toHaveLength(2);
    // The traffic of exactly these batches under the plan, counted per id by the brute-force oracle.
    expect(measureTraffic(plan, batches).perRank).toEqual(bruteForceTraffic(plan, batches));
  });
});

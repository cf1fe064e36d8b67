// train.test.ts — disk-backed tables under the Trainer: `embshard train --storage disk:<dir>
// --cache-bytes N` prints exactly the losses and AUC of the same run in memory (training is bitwise the
// same), with table files under <dir>; and the RAM budget's split between memory tables and caches.
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { runTrain } from '../../lib/cli/train.js';
import { storageWithin } from '../../lib/storage/budget.js';
import { SyntheticSource } from '../../lib/data/synthetic.js';
import { Trainer, embeddingsFor } from '../../lib/train/index.js';
import type { DenseModelSpec } from '../../lib/train/dense.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('disk-train');
afterEach(() => vi.restoreAllMocks());

async function run(extra: string[]): Promise<string> {
  const out: string[] = [], err: string[] = [];
  vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void out.push(a.join(' ')));
  vi.spyOn(console, 'error').mockImplementation((...a: unknown[]) => void err.push(a.join(' ')));
  vi.spyOn(process.stderr, 'write').mockImplementation((s: string | Uint8Array) => (err.push(String(s)), true));
  const rc = await runTrain([
    '--model', 'custom', '--bottom', '13-16-8', '--top', '16-1', '--data', 'synthetic', '--max-rows', '2000', '--steps', '40',
    '--batch', '64', '--optimizer', 'adagrad', '--lr', '0.05', '--eval-batches', '2', '--quiet', ...extra,
  ]);
  vi.restoreAllMocks();
  expect(rc, err.join('')).toBe(0);
  return out.join('\n');
}

describe('disk-backed tables in training', () => {
  it('embshard train --storage disk: prints what the in-memory run prints', async () => {
    const mem = await run([]);
    const dir = join(tmp.dir, 'tables');
    const disk = await run(['--storage', `disk:${dir}`, '--cache-bytes', String(600_000), '--cache-policy', 'lfu']);
    const metrics = (s: string) => s.split('\n').filter((l) => /loss|AUC/.test(l)).map((l) => l.replace(/[0-9.,]+ ?(samples\/s|ms|s\b|%)/g, ''));
    expect(metrics(disk)).toEqual(metrics(mem));
    expect(metrics(mem).join('\n')).toMatch(/AUC [0-9.]+/);
    const files = readdirSync(dir).filter((f) => f.endsWith('.embtable'));
    expect(files.length).toBeGreaterThan(3);
    expect(existsSync(join(dir, 'cat_0.embtable'))).toBe(true);
  }, 60_000);

  it('Trainer.step(batch, next) prefetches the next batch of disk-backed tables; losses equal the memory run', async () => {
    const F = 4, DIM = 8;
    const spec: DenseModelSpec = { denseIn: 13, bottom: [16, DIM], top: [16, 1], numSparse: F, embDim: DIM, interaction: 'dot' };
    const src = new SyntheticSource({ batchSize: 64, cardinalities: Array.from({ length: F }, () => 3000), seed: 2 });
    const make = (storage?: { path: string; cacheBytes: number }) =>
      new Trainer({
        model: spec, optimizer: { type: 'adagrad', lr: 0.05 }, seed: 7,
        embeddings: embeddingsFor(src.features, src.tableRows, { dim: DIM, optimizer: { type: 'adagrad', lr: 0.05 }, seed: 3, ...(storage ? { storage } : {}) }),
      });
    const mem = make();
    const disk = make({ path: join(tmp.dir, 'trainer'), cacheBytes: 4 * 150 * (DIM * 8 + 32) });
    const lm: number[] = [], ld: number[] = [];
    for (let k = 0; k < 12; k++) {
      lm.push(await mem.step(src.batch(k), src.batch(k + 1)));
      ld.push(await disk.step(src.batch(k), src.batch(k + 1)));
    }
    expect(ld).toEqual(lm);
    const stats = (disk.embeddings as unknown as { storageStats(): Record<string, { prefetched: number; evictions: number }> }).storageStats();
    expect(Object.keys(stats)).toHaveLength(F);
    for (const s of Object.values(stats)) {
      expect(s.prefetched).toBeGreaterThan(0);
      expect(s.evictions).toBeGreaterThan(0);
    }
  });

  it('the budget: tables under an even share of what is left stay in memory, the rest share it by size', () => {
    // 96 bytes per row with the bookkeeping (64 + 32)
    const s = storageWithin(['a', 'b', 'c', 'd', 'e'], [10, 1000, 100000, 50, 300000], [64, 64, 64, 64, 64], { path: '/t', cacheBytes: 1_000_000 });
    // ascending: 10 rows (960 B) and 50 rows (4,800 B) fit an even share; 1000 rows (96,000 B) <= 994,240 / 3
    expect(s.map((x) => x.kind)).toEqual(['memory', 'memory', 'disk', 'memory', 'disk']);
    const left = 1_000_000 - 960 - 4800 - 96000;
    expect(s[2]).toEqual({ kind: 'disk', path: '/t', cacheBytes: Math.floor((left * 9_600_000) / 38_400_000) });
    expect(s[4]).toEqual({ kind: 'disk', path: '/t', cacheBytes: Math.floor((left * 28_800_000) / 38_400_000) });
  });

  it('a budget that leaves a disk-backed table less than one row of cache is INVALID_CONFIG naming the table', () => {
    // 960 B stay in memory; 2,000 B left for tables of 96,000 and 9,600,000 B: the smaller one's share,
    // floor(2000 × 96,000 / 9,696,000) = 19 bytes, holds no 96-byte row
    const budget = { path: '/t', cacheBytes: 2960 };
    expect(() => storageWithin(['a', 'b', 'c'], [10, 1000, 100000], [64, 64, 64], budget)).toThrow(
      expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringMatching(/leaves table 'b' a cache of 19 bytes, less than one row \(96 bytes\)/) }),
    );
    // 10,200 B left: 'b' gets floor(10,200 × 96,000 / 9,696,000) = 100 bytes, one row
    const ok = storageWithin(['a', 'b', 'c'], [10, 1000, 100000], [64, 64, 64], { path: '/t', cacheBytes: 960 + 10_200 });
    expect(ok.map((x) => x.kind)).toEqual(['memory', 'disk', 'disk']);
    expect((ok[1] as { cacheBytes: number }).cacheBytes).toBe(Math.floor((10_200 * 96_000) / 9_696_000));
  });

  it('usage errors', async () => {
    const err: string[] = [];
    vi.spyOn(console, 'error').mockImplementation((...a: unknown[]) => void err.push(a.join(' ')));
    vi.spyOn(console, 'log').mockImplementation(() => undefined);
    expect(await runTrain(['--model', 'custom', '--data', 'synthetic', '--steps', '1', '--storage', 'disk:/x'])).toBe(2);
    expect(err.join('\n')).toMatch(/--storage disk:<dir> and --cache-bytes N go together/);
    expect(await runTrain(['--model', 'custom', '--data', 'synthetic', '--steps', '1', '--storage', 'ssd'])).toBe(2);
  });
});

// heldout.test.ts — held-out evaluation: the split keeps the last fraction of a source for evaluation and
// never yields those samples for training (checked by sample index, malformed lines in between, batch
// boundaries that cut through the split), and `embshard train --eval-split / --eval-data` trains on the
// training share only and names the evaluated samples.
import { describe, it, expect, vi, afterEach } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CriteoTsvSource } from '../../lib/data/criteo-tsv.js';
import { heldOutSplit, sliceBatch } from '../../lib/data/sample-range.js';
import { runTrain } from '../../lib/cli/train.js';
import { sampleIndex, writeCriteoTsv } from './fixture.js';
import type { BatchSource } from '../../lib/data/types.js';

async function indices(src: BatchSource): Promise<number[]> {
  const out: number[] = [];
  for await (const b of src) for (let r = 0; r < b.size; r++) out.push(sampleIndex(b.dense, r));
  return out;
}

afterEach(() => vi.restoreAllMocks());

describe('held-out split', () => {
  it('never yields a held-out sample for training, by sample index', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-heldout-'));
    try {
      const file = join(dir, 'd.txt');
      writeCriteoTsv(file, 103, 10); // 103 samples, a malformed line after every 10
      for (const [batch, frac] of [[16, 0.25], [7, 0.1], [200, 0.5], [1, 0.02]] as const) {
        const split = await heldOutSplit(new CriteoTsvSource({ path: file, batchSize: batch, maxRows: 100 }), frac);
        const held = Math.ceil(frac * 103);
        expect(split.total).toBe(103);
        expect(split.evalStart).toBe(103 - held);
        const tr = await indices(split.train), ev = await indices(split.eval);
        expect(tr).toEqual(Array.from({ length: 103 - held }, (_, i) => i));
        expect(ev).toEqual(Array.from({ length: held }, (_, i) => 103 - held + i));
        const seen = new Set(tr);
        expect(ev.some((i) => seen.has(i))).toBe(false);
        // a second pass (epoch) of the training share is the same samples again
        expect(await indices(split.train)).toEqual(tr);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('slices a batch: ids, lengths and dense rows of the kept samples only', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-heldout-'));
    try {
      const file = join(dir, 'd.txt');
      writeCriteoTsv(file, 20);
      const it = new CriteoTsvSource({ path: file, batchSize: 20, maxRows: 1000, missingCategorical: 'empty' })[Symbol.asyncIterator]();
      const b = (await it.next()).value!;
      const s = sliceBatch(b, 5, 12);
      expect(s.size).toBe(7);
      for (let r = 0; r < 7; r++) expect(sampleIndex(s.dense, r)).toBe(5 + r);
      for (const f of ['cat_0', 'cat_25']) {
        const whole = b.sparse.feature(f), part = s.sparse.feature(f);
        expect(Array.from(part.ids)).toEqual(Array.from(whole.ids).slice(5, 12));
      }
      expect(Array.from(s.labels)).toEqual(Array.from(b.labels.subarray(5, 12)));
      expect(() => sliceBatch(b, 3, 3)).toThrow(/non-empty range/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('embshard train --eval-split trains on the training share and names the held-out range', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-heldout-'));
    try {
      const file = join(dir, 'd.txt');
      writeCriteoTsv(file, 200);
      const out: string[] = [];
      vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void out.push(a.join(' ')));
      vi.spyOn(console, 'error').mockImplementation(() => undefined);
      const base = ['--model', 'custom', '--bottom', '13-8-4', '--top', '8-1', '--max-rows', '64', '--batch', '32', '--optimizer', 'sgd', '--lr', '0.05', '--quiet'];
      expect(await runTrain([...base, '--data', `criteo-tsv:${file}`, '--eval-split', '0.2', '--epochs', '2', '--eval-batches', 'all'])).toBe(0);
      let text = out.join('\n');
      expect(text).toMatch(/trained 10 steps, 320 samples/); // 160 training samples × 2 epochs
      expect(text).toMatch(/held-out: AUC [0-9.]+, logloss [0-9.]+ over 40 samples \[160, 200\) of Criteo TSV/);
      out.length = 0;
      const evalFile = join(dir, 'e.txt');
      writeCriteoTsv(evalFile, 50);
      expect(await runTrain([...base, '--data', `criteo-tsv:${file}`, '--eval-data', `criteo-tsv:${evalFile}`, '--steps', '3', '--eval-batches', '1'])).toBe(0);
      text = out.join('\n');
      expect(text).toMatch(/over 32 samples \[0, 32\) of Criteo TSV .*e\.txt/);
      out.length = 0;
      expect(await runTrain([...base, '--data', `criteo-tsv:${file}`, '--steps', '2'])).toBe(0);
      expect(out.join('\n')).toMatch(/no held-out evaluation \(give --eval-data or --eval-split\)/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

// `embshard train --schedule herald` through runTrain on one rank: a short synthetic run that learns
// (held-out AUC above chance), reports its row transmissions and saves a checkpoint that loads as one
// collection; usage errors (--cache-rows without --schedule herald, an unknown schedule, herald with a
// plan) return exit code 2. On a file source, the final partial global batch is left out and reported.
import { describe, it, expect, vi, afterEach } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runTrain } from '../../lib/cli/train.js';
import { capture } from '../train/capture.js';
import { Trainer } from '../../lib/train/trainer.js';
import { writeCriteoTsv } from '../serve/fixture.js';

afterEach(() => vi.restoreAllMocks());

describe('embshard train --schedule herald', () => {
  it('trains, reports its transmissions and saves a checkpoint', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-herald-cli-'));
    try {
      const c = capture();
      const rc = await runTrain([
        '--model', 'custom', '--bottom', '13-32-8', '--top', '32-1', '--data', 'synthetic', '--max-rows', '500', '--steps', '120', '--batch', '256',
        '--optimizer', 'adagrad', '--lr', '0.05', '--eval-batches', '2', '--schedule', 'herald', '--cache-rows', '64', '--save', join(dir, 'ck'),
      ]);
      vi.restoreAllMocks();
      expect(rc, c.err.join('')).toBe(0);
      expect(c.err.join('')).toMatch(/Herald scheduling over 1 rank\(s\) \(64 cache rows per table\)/);
      const text = c.out.join('\n');
      expect(text).toMatch(/trained 120 steps, 30,720 samples/);
      expect(text).toMatch(/herald: 0 row transmissions in the last step .*100\.0% of rows read where they lived/);
      const auc = Number(/held-out: AUC ([0-9.]+)/.exec(text)![1]);
      expect(auc).toBeGreaterThan(0.6);
      const t = await Trainer.load(join(dir, 'ck'));
      expect(t.stepCount).toBe(120);
      expect(t.embeddings.step).toBe(120);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it("trains a file's whole global batches, epoch after epoch, and reports the samples left out", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-herald-tsv-'));
    try {
      const file = join(dir, 'd.tsv');
      writeCriteoTsv(file, 300);
      const args = ['--model', 'custom', '--bottom', '13-16-8', '--top', '16-1', '--data', `criteo-tsv:${file}`, '--max-rows', '100', '--schedule', 'herald', '--quiet'];
      let c = capture();
      let rc = await runTrain([...args, '--epochs', '2', '--batch', '64']);
      vi.restoreAllMocks();
      expect(rc, c.err.join('')).toBe(0);
      // 300 samples: 4 global batches of 64 per epoch, 44 samples left out
      expect(c.out.join('\n')).toMatch(/trained 8 steps, 512 samples/);
      expect(c.out.join('\n')).toMatch(/herald: the last 44 samples of each epoch \(less than a global batch of 64\) were not trained/);
      c = capture();
      rc = await runTrain([...args, '--epochs', '1', '--batch', '400']);
      vi.restoreAllMocks();
      expect(rc).toBe(1);
      expect(c.err.join('')).toMatch(/yielded no batches \(its 300 samples are less than one global batch of 400, which --schedule herald needs\)/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('usage errors exit with 2', async () => {
    for (const args of [['--cache-rows', '8'], ['--schedule', 'fast'], ['--schedule', 'herald', '--plan', 'auto']]) {
      const c = capture();
      const rc = await runTrain(['--model', 'dlrm-criteo-kaggle', '--data', 'synthetic', '--steps', '1', ...args]);
      vi.restoreAllMocks();
      expect(rc, c.err.join('')).toBe(2);
    }
  });
});

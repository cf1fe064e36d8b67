// dynamic-train.test.ts — dynamic tables under the Trainer and `embshard train --dynamic-capacity`:
// with a capacity that holds every id, a dynamic table's init (a function of the id) and updates equal
// the static table's, so training gives bit-identical losses and predictions to the static collection
// (an independently tested engine); with a capacity far below the ids, the CLI trains, evicts, and saves
// the id maps in its checkpoint; evaluation admits nothing.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { SyntheticSource, type Batch } from '../../lib/data/index.js';
import { Trainer, embeddingsFor } from '../../lib/train/index.js';
import { runTrain } from '../../lib/cli/train.js';
import type { EmbeddingCollection } from '../../lib/index.js';
import type { DenseModelSpec } from '../../lib/train/dense.js';

const F = 4, ROWS = 60, DIM = 4;
const spec: DenseModelSpec = { denseIn: 13, bottom: [16, DIM], top: [16, 1], numSparse: F, embDim: DIM, interaction: 'dot' };

afterEach(() => vi.restoreAllMocks());

describe('dynamic tables in the Trainer', () => {
  for (const opt of ['adagrad', 'adam'] as const)
    it(`${opt}: a capacity holding every id trains bit-identically to static tables; evaluation admits nothing`, async () => {
      const src = new SyntheticSource({ batchSize: 32, cardinalities: Array.from({ length: F }, () => ROWS), seed: 2 });
      const make = (dynamicCapacity?: number) =>
        new Trainer({
          model: spec,
          embeddings: embeddingsFor(src.features, src.tableRows, { dim: DIM, optimizer: { type: opt, lr: 0.05 }, seed: 4, ...(dynamicCapacity ? { dynamicCapacity } : {}) }),
          optimizer: { type: opt, lr: 0.05 },
          seed: 5,
        });
      const a = make(), b = make(ROWS);
      for (let k = 0; k < 12; k++) expect(await b.step(src.batch(k)), `step ${k}`).toBe(await a.step(src.batch(k)));
      // a trained batch: every id has its row (ids never seen read zero in a dynamic table, init in a static one)
      const seen: Batch = src.batch(3);
      const emb = b.embeddings as EmbeddingCollection;
      const before = emb.stats();
      expect(await b.predict(seen)).toEqual(await a.predict(seen));
      await b.evaluate([src.batch(1001)]);
      expect(emb.stats()).toEqual(before);
      expect(Object.values(before).every((s) => s.evictions === 0 && s.admissions === s.rows)).toBe(true);
      // a dynamic table has no id range: the model's inputs (serving's id checks) are not derived from it
      expect(b.inputs).toBeUndefined();
      expect(a.inputs?.tableRows).toEqual(src.tableRows);
    });
});

describe('embshard train --dynamic-capacity', () => {
  it('trains 26 dynamic tables far smaller than their ids, evicting, and saves their maps', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-dyn-cli-'));
    try {
      const out: string[] = [];
      vi.spyOn(console, 'log').mockImplementation((...x: unknown[]) => void out.push(x.join(' ')));
      vi.spyOn(console, 'error').mockImplementation((...x: unknown[]) => void out.push(x.join(' ')));
      vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
      const rc = await runTrain([
        '--model', 'custom', '--bottom', '13-16-8', '--top', '16-1', '--data', 'synthetic', '--max-rows', '2000', '--dynamic-capacity', '64',
        '--steps', '30', '--batch', '128', '--optimizer', 'adagrad', '--lr', '0.05', '--eval-batches', '1', '--quiet', '--save', join(dir, 'ck'),
      ]);
      vi.restoreAllMocks();
      expect(rc, out.join('\n')).toBe(0);
      expect(out.join('\n')).toMatch(/trained 30 steps/);
      const t = await Trainer.load(join(dir, 'ck'));
      const emb = t.embeddings as EmbeddingCollection;
      const stats = Object.values(emb.stats());
      expect(stats).toHaveLength(26);
      expect(stats.every((s) => s.rows <= 64)).toBe(true);
      expect(stats.some((s) => s.evictions > 0)).toBe(true);
      const bad = await runTrain(['--model', 'custom', '--data', 'synthetic', '--steps', '1', '--dynamic-capacity', '0', '--quiet']);
      expect(bad).toBe(2);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

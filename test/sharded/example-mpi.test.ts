// example-mpi.test.ts — examples/sharded-train.mjs, the example docs/distributed.md opens with, runs as
// a user runs it (mpirun, the package imported by its own name): every step printed, the loss falling
// from its first value, and the checkpoint it saves loads as one EmbeddingCollection holding the example's
// four tables with their rows and dims.
import { describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EmbeddingCollection } from '../../lib/collection.js';
import { compileTs, mpiSuitesRun, mpirun } from './mpi-harness.js';

const run = mpiSuitesRun();

describe.runIf(run)('examples/sharded-train.mjs under mpirun', () => {
  it('-np 2 --steps 6 --save: six steps, a falling loss, a checkpoint of the four tables', async () => {
    compileTs();
    const dir = mkdtempSync(join(tmpdir(), 'embshard-example-'));
    try {
      const ck = join(dir, 'ck');
      const r = await mpirun(2, 'examples/sharded-train.mjs', ['--steps', '6', '--save', ck], { limitMs: 240_000 });
      expect(r.code, r.stderr.slice(-2000)).toBe(0);
      const losses = [...r.stdout.matchAll(/^step (\d+): loss ([\d.]+)/gm)].map((m) => [Number(m[1]), Number(m[2])]);
      expect(losses.map(([s]) => s)).toEqual([0, 1, 2, 3, 4, 5]);
      expect(losses[5]![1]).toBeLessThan(losses[0]![1]!);
      expect(r.stdout).toContain(`checkpoint written to ${ck}`);
      const ec = await EmbeddingCollection.load(ck);
      try {
        expect(ec.tables.map((t) => [t.name, t.rows, t.dim])).toEqual([['user', 400_000, 64], ['item', 200_000, 64], ['category', 1_000, 32], ['query', 100_000, 32]]);
      } finally {
        ec.dispose();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 300_000);
});

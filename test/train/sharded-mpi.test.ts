// sharded-mpi.test.ts — the Trainer on the MPI group under mpirun -np 2 and -np 4 (and 4 ranks as two
// modelled nodes): training with overlap (look-ahead id exchange, bottom MLP beside the embedding forward,
// all-reduce beside the embedding backward) is bitwise equal to training without it, on every rank
// (test/train/mpi/overlap.mjs compares losses, dense weights and every table row); and a step one rank
// rejects (a NaN dense feature, a label out of range) ends on every rank with nothing changed, training
// going on from a later batch as if the step never came (test/train/mpi/bad-step.mjs).
import { describe, it, expect, beforeAll } from 'vitest';
import { compileTs, mpiSuitesRun, mpirun } from '../sharded/mpi-harness.js';

const run = mpiSuitesRun();

describe.runIf(run)('Trainer over MPI (mpirun): overlapped = not overlapped, bitwise', () => {
  beforeAll(() => compileTs());
  for (const c of [{ np: 2 }, { np: 4 }, { np: 4, rpn: '2' }]) {
    it(`-np ${c.np}${c.rpn ? ' (two nodes)' : ''}`, async () => {
      const r = await mpirun(c.np, 'test/train/mpi/overlap.mjs', [], c.rpn ? { env: { EMBSHARD_RANKS_PER_NODE: c.rpn } } : {});
      expect(r.code, r.stderr + r.stdout).toBe(0);
      expect(r.lines.map((l) => l.rank).sort()).toEqual(Array.from({ length: c.np }, (_, i) => i));
      for (const l of r.lines) {
        expect(l.equal).toBe(true);
        expect(l.timesOk).toBe(true);
        expect(l.communicated).toBe(true);
        expect(l.steps).toEqual([4, 4]);
        expect(l.losses).toBe(4);
      }
    });
  }
});

describe.runIf(run)('Trainer over MPI (mpirun): a step one rank rejects', () => {
  beforeAll(() => compileTs());
  for (const np of [2, 4]) {
    it(`-np ${np}: every rank rejects it, nothing changes, and training goes on as if it never came`, async () => {
      const r = await mpirun(np, 'test/train/mpi/bad-step.mjs', []);
      expect(r.code, r.stderr + r.stdout).toBe(0);
      expect(r.lines.map((l) => l.rank).sort()).toEqual(Array.from({ length: np }, (_, i) => i));
      for (const l of r.lines) {
        expect(l.equal).toBe(true);
        expect(l.steps).toBe(4);
        if (l.rank === 0) {
          expect(l.errors[0]).toMatch(/^INVALID_ARGUMENT: batch\.dense\[5\] \(sample 1, dense feature 2\) is NaN/);
          expect(l.errors[1]).toMatch(/^INVALID_ARGUMENT: batch\.labels\[5\] is 7: labels must lie in \[0, 1\]/);
        } else for (const e of l.errors) expect(e).toMatch(/^INVALID_ARGUMENT: another rank rejected its gradients/);
      }
    });
  }
});

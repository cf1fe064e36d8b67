// Herald scheduling over MPI (mpirun -np 4): outputs, gathered tables, optimizer state and a lookup within
// 1e-5 of one EmbeddingCollection trained on the same global batches; training steps one rank refuses in
// its forward end on every rank with its code, change nothing, and the next step is bitwise that of a run
// that never saw them; a rank killed mid-run makes the 3 survivors fail with COMM_TIMEOUT / COMM_FAILED
// within their timeout.
import { describe, it, expect, beforeAll } from 'vitest';
import { compileTs, expectSurvivorsFail, mpiSuitesRun, mpirun } from '../sharded/mpi-harness.js';

const run = mpiSuitesRun();

describe.runIf(run)('HeraldEmbeddingCollection over MPI (mpirun)', () => {
  beforeAll(() => compileTs());

  for (const [opt, cache] of [['adagrad', '8'], ['adam', '0']] as const)
    it(`4 ranks, ${opt}, cache ${cache}: equals one collection`, async () => {
      const r = await mpirun(4, 'test/herald/mpi/herald.mjs', [opt, cache, '4']);
      expect(r.lines.length, r.stdout + r.stderr).toBe(4);
      for (const l of r.lines) {
        expect(l.size).toBe(4);
        expect(l.outErr as number).toBeLessThan(1e-5);
        expect(l.tableErr as number).toBeLessThan(1e-5);
        expect(l.stateErr as number).toBeLessThan(1e-5);
        expect(l.lookupErr as number).toBeLessThan(1e-5);
        expect(l.steps).toBe(l.oracleSteps);
        if (cache !== '0') expect(l.moves as number).toBeGreaterThan(0);
      }
    });

  it('4 ranks: steps refused by one rank end on every rank with its code, change nothing, and the next step is that of a run without them', async () => {
    const seen = await mpirun(4, 'test/herald/mpi/herald-refused.mjs', ['refused']);
    const clean = await mpirun(4, 'test/herald/mpi/herald-refused.mjs', ['clean']);
    expect(seen.lines.length, seen.stdout + seen.stderr).toBe(4);
    expect(clean.lines.length, clean.stdout + clean.stderr).toBe(4);
    const byRank = (r: typeof seen) => [...r.lines].sort((a, b) => (a.rank as number) - (b.rank as number));
    const s = byRank(seen), c = byRank(clean);
    for (let r = 0; r < 4; r++) {
      expect(s[r]!.codes).toEqual(['NON_FINITE_GRADIENT', 'INVALID_ARGUMENT']);
      expect(s[r]!.unchanged).toBe(true);
      expect(s[r]!.digest).toBe(c[r]!.digest);
      expect(s[r]!.tableErr as number).toBeLessThan(1e-5);
    }
  });

  it('a rank killed mid-run makes the 3 survivors fail with a clear error within the timeout', async () => {
    await expectSurvivorsFail('test/herald/mpi/herald-kill.mjs');
  });
});

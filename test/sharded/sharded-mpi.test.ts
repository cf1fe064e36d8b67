// Sharded training on the MPI group under mpirun -np 2 and -np 4 (and 4 ranks as two modelled nodes):
// every rank checks its outputs, the final tables and optimizer state against a single collection over the
// global batch, and its byte counters against measureTraffic (flat and hierarchical protocol); a rank killed mid-run makes the others fail.
import { describe, it, expect, beforeAll } from 'vitest';
import { compileTs, expectSurvivorsFail, mpiSuitesRun, mpirun } from './mpi-harness.js';

const run = mpiSuitesRun();

describe.runIf(run)('ShardedEmbeddingCollection over MPI (mpirun)', () => {
  beforeAll(() => compileTs());

  const cases: { np: number; rpn?: string; opt: string; wire: string; bound: number; weighted?: boolean; hier?: boolean }[] = [
    { np: 2, opt: 'adagrad', wire: 'fp32', bound: 1e-5 },
    { np: 4, opt: 'adam', wire: 'fp32', bound: 1e-5 },
    { np: 4, rpn: '2', opt: 'sgd', wire: 'fp32', bound: 1e-5, weighted: true },
    { np: 4, rpn: '2', opt: 'adagrad', wire: 'fp16', bound: 2e-3 },
    { np: 2, opt: 'sgd', wire: 'bf16', bound: 1.6e-2 },
    { np: 4, rpn: '2', opt: 'adam', wire: 'fp32', bound: 1e-5, weighted: true, hier: true },
    { np: 4, rpn: '2', opt: 'adagrad', wire: 'fp16', bound: 2e-3, hier: true },
  ];
  for (const c of cases) {
    it(`-np ${c.np}${c.rpn ? ` (two nodes)` : ''}, ${c.opt}, ${c.wire} wire${c.weighted ? ', weighted' : ''}${c.hier ? ', hierarchical protocol' : ''}: equal to one collection within ${c.bound}; bytes = measureTraffic`, async () => {
      const r = await mpirun(c.np, 'test/sharded/mpi/sharded.mjs', [c.opt, c.wire, '3', c.weighted ? 'weighted' : '', c.hier ? 'hier' : ''], c.rpn ? { env: { EMBSHARD_RANKS_PER_NODE: c.rpn } } : {});
      expect(r.code, r.stderr + r.stdout).toBe(0);
      expect(r.lines.map((l) => l.rank).sort()).toEqual(Array.from({ length: c.np }, (_, i) => i));
      for (const l of r.lines) {
        expect(l.outErr as number).toBeLessThanOrEqual(c.bound);
        expect(l.tableErr as number).toBeLessThanOrEqual(c.bound);
        expect(l.stateErr as number).toBeLessThanOrEqual(c.bound);
        expect(l.trafficOk).toBe(true);
        expect(l.step).toBe(3);
      }
      if (c.rpn) expect(r.lines.some((l) => (l.inter as number) > 0)).toBe(true);
    });
  }

  it('a rank killed mid-run makes the 3 survivors fail with a clear error within the timeout', async () => {
    await expectSurvivorsFail('test/sharded/mpi/sharded-kill.mjs');
  });
});

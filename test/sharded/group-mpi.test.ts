// The MPI process group under mpirun -np 2 and -np 4: every collective against closed-form results,
// mismatched calls, byte counters (one node and two modelled nodes), a rank killed mid-run, and a group
// closed under a pending collective.
import { describe, it, expect, beforeAll } from 'vitest';
import { compileTs, mpiSuitesRun, mpirun } from './mpi-harness.js';

const run = mpiSuitesRun();

describe.runIf(run)('MPI process group (mpirun)', () => {
  beforeAll(() => compileTs());

  // (one rank: every collective is a local copy, settled on the JS thread; no mismatch is possible)
  for (const np of [1, 2, 4]) {
    it(`every collective is exact on ${np} rank${np > 1 ? 's' : ''}`, async () => {
      const r = await mpirun(np, 'test/sharded/mpi/collectives.mjs');
      expect(r.code, r.stderr + r.stdout).toBe(0);
      expect(r.lines.map((l) => l.rank).sort()).toEqual(Array.from({ length: np }, (_, i) => i));
      for (const l of r.lines) expect(l).toMatchObject({ ok: true, size: np, ranksPerNode: np, mismatch: np > 1 ? 'COMM_FAILED' : 'none' });
    });
  }

  for (const [np, rpn] of [[2, undefined], [4, undefined], [4, '2']] as const) {
    it(`allReduce (MPI_Allreduce and deterministic) matches a naive sum and counts its bytes (${np} ranks${rpn ? `, ${rpn} per node` : ''})`, async () => {
      const r = await mpirun(np, 'test/sharded/mpi/allreduce.mjs', [], rpn ? { env: { EMBSHARD_RANKS_PER_NODE: rpn } } : {});
      expect(r.code, r.stderr + r.stdout).toBe(0);
      expect(r.lines.map((l) => l.rank).sort()).toEqual(Array.from({ length: np }, (_, i) => i));
      for (const l of r.lines) expect(l).toMatchObject({ ok: true, size: np, algorithm: '3' });
    });
  }

  it("allReduce keeps an Open MPI algorithm the launcher's environment names (ring, 4 ranks) and stays exact", async () => {
    const r = await mpirun(4, 'test/sharded/mpi/allreduce.mjs', [], { env: { OMPI_MCA_coll_libnbc_iallreduce_algorithm: '1' } });
    expect(r.code, r.stderr + r.stdout).toBe(0);
    expect(r.lines).toHaveLength(4);
    for (const l of r.lines) expect(l).toMatchObject({ ok: true, size: 4, algorithm: '1' });
  });

  it('counts intra- and inter-node bytes with two modelled nodes (EMBSHARD_RANKS_PER_NODE=2, 4 ranks)', async () => {
    const r = await mpirun(4, 'test/sharded/mpi/collectives.mjs', [], { env: { EMBSHARD_RANKS_PER_NODE: '2' } });
    expect(r.code, r.stderr + r.stdout).toBe(0);
    expect(r.lines).toHaveLength(4);
    for (const l of r.lines) expect(l).toMatchObject({ ok: true, ranksPerNode: 2 });
  });

  for (const [np, what] of [[2, 'known'], [2, 'counts'], [3, 'allReduce'], [3, 'deterministic']] as const) {
    it(`close() during a pending ${what} collective rejects it with COMM_FAILED and leaves the process intact (${np} ranks)`, async () => {
      const r = await mpirun(np, 'test/sharded/mpi/close.mjs', [what], { recovery: true, limitMs: 60_000 });
      expect(r.stderr + r.stdout).not.toMatch(/Segmentation fault|signal 11|Read -1/);
      expect(r.lines.map((l) => l.rank).sort(), r.stdout + r.stderr).toEqual(Array.from({ length: np }, (_, i) => i));
      for (const l of r.lines) {
        if (l.rank === 0) expect(l).toMatchObject({ code: 'COMM_FAILED', intact: true });
        else expect(['ok', 'COMM_TIMEOUT', 'COMM_FAILED']).toContain(l.code);
      }
    });
  }

  for (const np of [2, 4]) {
    it(`a rank killed mid-run makes the ${np - 1} survivor(s) fail within the timeout (${np} ranks)`, async () => {
      const timeoutMs = 3000;
      const t0 = Date.now();
      const r = await mpirun(np, 'test/sharded/mpi/kill.mjs', [String(timeoutMs)], { recovery: true, limitMs: 60_000 });
      expect(Date.now() - t0).toBeLessThan(30_000);
      const survivors = r.lines.filter((l) => 'code' in l || 'error' in l);
      expect(survivors.map((l) => l.rank).sort(), r.stdout + r.stderr).toEqual(Array.from({ length: np - 1 }, (_, i) => i));
      for (const l of survivors) {
        expect(['COMM_TIMEOUT', 'COMM_FAILED']).toContain(l.code);
        expect(l.step).toBe(3);
        expect(l.message).toMatch(/rank \d/);
        // failed within the timeout of the collective that hung (plus the steps before it)
        expect(l.waitedMs as number).toBeLessThan(timeoutMs + 5000);
      }
    });
  }
});

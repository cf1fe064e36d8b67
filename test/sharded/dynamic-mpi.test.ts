// dynamic-mpi.test.ts — sharded dynamic tables under `mpirun -np 2` and `-np 4` (scripts in mpi/dynamic-*):
//  - every optimizer, rb and ub row shards, edge ids (0, ±1, 2^63 − 1, −2^63), empty ranks and batch size
//    1, shards filled past capacity: each rank's outputs, shard counters, held ids and readRows / readState
//    by raw id equal the naive model of dynamic-oracle.mjs (values within 1e-5);
//  - a checkpoint of spilling ub shards saved under -np 2 loads under -np 4 and -np 1 (the same row
//    groups) and trains on as the model;
//  - a save whose part fails on the last rank fails on every rank with one code, and the ranks go on;
//  - a rank killed, or leaving the step, mid-step: the others fail with COMM_TIMEOUT / COMM_FAILED naming
//    a rank instead of waiting.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compileTs, expectSurvivorsFail, mpiSuitesRun, mpirun, type MpiRun } from './mpi-harness.js';

const run = mpiSuitesRun();
const dir = mkdtempSync(join(tmpdir(), 'embshard-dyn-mpi-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** One line per rank of the model script, each within tolerance and with no shard mismatch. */
function expectModel(r: MpiRun, np: number): Record<string, unknown>[] {
  expect(r.code, r.stderr + r.stdout).toBe(0);
  const lines = r.lines.filter((l) => 'outErr' in l);
  expect(lines.map((l) => l.rank).sort(), r.stdout + r.stderr).toEqual(Array.from({ length: np }, (_, k) => k));
  for (const l of lines) {
    expect(l.shards, `rank ${l.rank}`).toEqual([]);
    expect(l.outErr as number, `rank ${l.rank} outputs`).toBeLessThanOrEqual(1e-5);
    expect(l.cellErr as number, `rank ${l.rank} rows and state`).toBeLessThanOrEqual(1e-5);
  }
  return lines;
}

describe.runIf(run)('sharded dynamic tables under mpirun against a naive model', () => {
  beforeAll(() => compileTs());
  for (const np of [2, 4])
    for (const [opt, name] of [[0, 'sgd'], [1, 'adagrad'], [2, 'rowwise_adagrad'], [3, 'adam']] as const)
      it(`-np ${np} rb ${name}: edge ids, empty ranks, shards past capacity`, async () => {
        const lines = expectModel(await mpirun(np, 'test/sharded/mpi/dynamic-model.mjs', ['rb', String(3 * np), String(opt), '0', '7', '0']), np);
        expect(lines[0]!.evictions as number).toBeGreaterThan(0);
      }, 120_000);
  for (const np of [2, 4])
    it(`-np ${np} ub adagrad: two uneven shards, ranks between them hold none`, async () => {
      expectModel(await mpirun(np, 'test/sharded/mpi/dynamic-model.mjs', ['ub', '4000', '1', '0', '6', '0']), np);
    }, 120_000);

  it('a spilling ub checkpoint saved under -np 2 loads under -np 4 and -np 1 and trains on as the model', async () => {
    const ck = mkdtempSync(join(dir, 'ck-'));
    const saved = expectModel(await mpirun(2, 'test/sharded/mpi/dynamic-model.mjs', ['ub', '9', '3', '0', '6', '1', '-', ck]), 2);
    expect(saved[0]!.spilled as number).toBeGreaterThan(0);
    for (const np of [4, 1]) expectModel(await mpirun(np, 'test/sharded/mpi/dynamic-model.mjs', ['ub', '9', '3', '6', '10', '1', join(ck, 'ck'), '-', '2']), np);
  }, 240_000);

  for (const np of [2, 4])
    it(`-np ${np}: a save whose part fails on the last rank fails on every rank with IO_ERROR; the ranks go on`, async () => {
      const r = await mpirun(np, 'test/sharded/mpi/dynamic-fail.mjs', ['save', mkdtempSync(join(dir, 'save-'))], { limitMs: 100_000 });
      expect(r.code, r.stderr + r.stdout).toBe(0);
      expect(r.lines.map((l) => l.rank).sort()).toEqual(Array.from({ length: np }, (_, k) => k));
      for (const l of r.lines) expect({ first: l.first, second: l.second, after: l.after }, `rank ${l.rank}`).toEqual({ first: 'ok', second: 'IO_ERROR', after: 'ok' });
    }, 120_000);

  for (const mode of ['kill', 'throw'])
    it(`-np 4: the last rank ${mode === 'kill' ? 'killed' : 'leaving the step'} at step 2: the others fail with COMM_TIMEOUT / COMM_FAILED`, async () => {
      await expectSurvivorsFail('test/sharded/mpi/dynamic-fail.mjs', 3000, { args: [mode, mkdtempSync(join(dir, `${mode}-`)), '3000'] });
    }, 90_000);
});

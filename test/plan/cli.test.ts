// `embshard plan`: writes a plan that ShardPlan.fromJSON accepts; usage and planning errors give exit codes.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { JaggedBatch } from '../../lib/batch.js';
import { runPlan } from '../../lib/cli/plan.js';
import { criteoTsvSource } from '../../lib/data/criteo-tsv.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { workload } from '../../lib/workloads/presets.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('plan-cli');

describe('embshard plan', () => {
  afterEach(() => vi.restoreAllMocks());

  it('prints the explanation and writes a valid plan', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    const out = join(tmp.dir, 'plan-a.json');
    const code = await runPlan(['--model', 'dlrm-dcnv2', '--gpus', '16', '--preset', 'dgx-h100', '--batch', '1024', '--time-budget-ms', '3000', '--out', out]);
    expect(code).toBe(0);
    const text = log.mock.calls.map((c) => String(c[0])).join('\n');
    expect(text).toContain('Predicted embedding stage');
    expect(text).toContain('table-row-wise');
    const plan = ShardPlan.fromJSON(readFileSync(out, 'utf8'));
    expect(plan.topology).toMatchObject({ worldSize: 16, ranksPerNode: 8, name: 'dgx-h100' });
    expect(plan.batchSize).toBe(1024);
    expect(plan.tables.map((t) => t.name)).toEqual(workload('dlrm-dcnv2').tables.map((t) => t.name));
    expect(plan.meta.model).toBe('dlrm-dcnv2');
  });

  it('returns 2 on usage errors and 1 on planning errors', async () => {
    const err = vi.spyOn(console, 'error').mockImplementation(() => {});
    expect(await runPlan(['--gpus', '8'])).toBe(2);
    expect(await runPlan(['--model', 'dlrm-dcnv2', '--gpus', 'eight'])).toBe(2);
    expect(await runPlan(['--model', 'dlrm-dcnv2', '--gpus', '8', '--colour', 'red'])).toBe(2);
    expect(await runPlan(['--model', 'nope', '--gpus', '8'])).toBe(1);
    expect(await runPlan(['--model', 'dlrm-dcnv2', '--gpus', '12', '--ranks-per-node', '8'])).toBe(1);
    // 510 tables of 114.6B parameters cannot fit on one GPU
    expect(await runPlan(['--model', 't510', '--gpus', '1'])).toBe(1);
    expect(err.mock.calls.map((c) => String(c[0])).join('\n')).toContain('PLAN_INFEASIBLE');
    // an --out / --svg the system cannot write: 1 with one IO_ERROR line naming the path
    vi.spyOn(console, 'log').mockImplementation(() => {});
    err.mockClear();
    const missing = join(tmp.dir, 'no-such-folder', 'plan.svg');
    expect(await runPlan(['--model', 'criteo-kaggle', '--gpus', '2', '--time-budget-ms', '200', '--svg', missing])).toBe(1);
    expect(err.mock.calls.map((c) => String(c[0]))).toEqual([`embshard plan: IO_ERROR: open '${missing}' failed (ENOENT)`]);
  });

  it('--profile criteo-tsv:<file> plans from the ids measured there: each table\'s most frequent ids are its hot ids', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    const file = fileURLToPath(new URL('../fixtures/data/criteo-sample.tsv', import.meta.url));
    const out = join(tmp.dir, 'plan-b.json');
    const B = 4, N = 2, K = 5, H = 2;
    const code = await runPlan(['--model', 'criteo-kaggle', '--gpus', '4', '--ranks-per-node', '2', '--batch', String(B), '--time-budget-ms', '500',
      '--profile', `criteo-tsv:${file}`, '--profile-batches', String(N), '--top-k', String(K), '--min-hits', String(H), '--out', out]);
    expect(code).toBe(0);
    expect(log.mock.calls.map((c) => String(c[0])).join('\n')).toContain(`Profiled ${N} batches of Criteo TSV`);
    const plan = ShardPlan.fromJSON(readFileSync(out, 'utf8'));
    expect(plan.meta.profile).toBe(`criteo-tsv:${file}`);
    expect(plan.tables.filter((t) => t.hotIds.length > 0).length).toBeGreaterThan(3);
    // oracle: the same file read directly, every id counted with a Map, those hit H times or more sorted by (count desc, id asc)
    const w = workload('criteo-kaggle');
    const source = criteoTsvSource({ path: file, batchSize: B, tableRows: w.tables.map((t) => t.rows) });
    const batches: JaggedBatch[] = [];
    for await (const b of source) if (batches.length < N) batches.push(b.sparse);
    for (const t of plan.tables) {
      const m = new Map<number, number>();
      for (const b of batches) for (const id of b.feature(t.features[0]!).ids) m.set(Number(id), (m.get(Number(id)) ?? 0) + 1);
      const top = [...m].filter((x) => x[1] >= H).sort((x, y) => y[1] - x[1] || x[0] - y[0]).slice(0, K);
      expect(t.hotIds, t.name).toEqual(top.map((x) => x[0]));
      // counts below 20 are planned from the fitted law, with the same total
      const sum = (a: number[]) => a.reduce((x, y) => x + y, 0);
      expect(sum(t.access.top!.counts), t.name).toBeCloseTo(sum(top.map((x) => x[1])), 9);
    }
  });

  it('--profile errors: a source that cannot open gives 1, a profiling option without --profile gives 2', async () => {
    const err = vi.spyOn(console, 'error').mockImplementation(() => {});
    for (const [k, v] of [['--max-rows', '100'], ['--top-k', '5'], ['--min-hits', '3'], ['--profile-batches', '2']]) {
      err.mockClear();
      expect(await runPlan(['--model', 'criteo-kaggle', '--gpus', '4', k!, v!])).toBe(2);
      expect(err.mock.calls.map((c) => String(c[0])).join('\n')).toContain(`${k} needs --profile`);
    }
    expect(await runPlan(['--model', 'criteo-kaggle', '--gpus', '4', '--batch', '99999999999'])).toBe(2);
    expect(await runPlan(['--model', 'criteo-kaggle', '--gpus', '4', '--profile', 'binary:/nonexistent'])).toBe(1);
    expect(err.mock.calls.map((c) => String(c[0])).join('\n')).toContain('binary:<dir>');
  });
});

// `embshard plan`: writes a plan that ShardPlan.fromJSON accepts; usage and planning errors give exit codes.
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { runPlan } from '../../lib/cli/plan.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { workload } from '../../lib/workloads/presets.js';

describe('embshard plan', () => {
  afterEach(() => vi.restoreAllMocks());

  it('prints the explanation and writes a valid plan', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    const out = join(mkdtempSync(join(tmpdir(), 'embshard-plan-')), 'plan.json');
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
  });
});

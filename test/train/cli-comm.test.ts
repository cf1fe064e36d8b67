// cli-comm.test.ts — `embshard train --comm`: the choice of transport is checked before anything trains
// (an unknown value exits with 2, NCCL on the CPU with INVALID_ARGUMENT naming --comm), and where a CUDA
// device exists (a GPU, or the CUDA emulation under `npm run test:cuda-emu`) a sharded run over an NCCL
// group trains exactly as the same run over the in-process group: same steps, same final loss.
import { describe, it, expect, vi, afterEach } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runTrain } from '../../lib/cli/train.js';
import { cudaBackend } from '../../lib/backends.js';
import { CAT_FEATURE_NAMES, CRITEO_KAGGLE_CARDINALITIES } from '../../lib/data/criteo.js';
import { planShards } from '../../lib/plan/planner.js';
import { topologyPreset } from '../../lib/plan/topology.js';
import { capture } from './capture.js';

afterEach(() => vi.restoreAllMocks());

const MAX_ROWS = 64;
const gpu = cudaBackend().available;

/** A one-rank plan file for the custom model below (embedding dim 8, every table capped at MAX_ROWS). */
function planFile(dir: string): string {
  const tables = CAT_FEATURE_NAMES.map((f, i) => ({ name: f, rows: Math.min(CRITEO_KAGGLE_CARDINALITIES[i]!, MAX_ROWS), dim: 8, features: [f] }));
  const plan = planShards(tables, topologyPreset('cpu', { worldSize: 1, ranksPerNode: 1 }), { batchSize: 64 });
  const file = join(dir, 'plan.json');
  writeFileSync(file, JSON.stringify(plan.toJSON()));
  return file;
}

const base = (plan: string): string[] => [
  '--model', 'custom', '--bottom', '13-16-8', '--top', '16-1', '--data', 'synthetic', '--max-rows', String(MAX_ROWS),
  '--steps', '6', '--batch', '64', '--optimizer', 'sgd', '--lr', '0.05', '--eval-batches', '0', '--plan', plan,
];

async function train(args: string[]): Promise<{ rc: number; out: string; err: string }> {
  const c = capture();
  const rc = await runTrain(args);
  vi.restoreAllMocks();
  return { rc, out: c.out.join('\n'), err: c.err.join('') };
}

describe('embshard train --comm', () => {
  it('an unknown transport exits with 2; NCCL without a CUDA device is INVALID_ARGUMENT naming --comm', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-comm-'));
    try {
      const bad = await train([...base(planFile(dir)), '--comm', 'tcp']);
      expect(bad.rc).toBe(2);
      expect(bad.err).toMatch(/--comm must be auto, mpi, nccl \(got 'tcp'\)/);
      const cpu = await train([...base(planFile(dir)), '--comm', 'nccl', '--device', 'cpu']);
      expect(cpu.rc).toBe(1);
      expect(cpu.err).toMatch(/INVALID_ARGUMENT.*--comm nccl needs --device cuda/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it.runIf(gpu)('a sharded run over an NCCL group trains as the same run over the in-process group', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-comm-'));
    try {
      const plan = planFile(dir);
      const nccl = await train([...base(plan), '--device', 'cuda:0', '--comm', 'nccl']);
      expect(nccl.rc, nccl.err).toBe(0);
      expect(nccl.err).toMatch(/sharded over 1 rank\(s\) \(NCCL\)/);
      // the CUDA engine over NCCL on its GPU: the embedding exchanges stay in device memory
      expect(nccl.err).toMatch(/exchanges in device memory/);
      // and the dense model on the same GPU takes the pooled embeddings there
      expect(nccl.err).toMatch(/embeddings handed to the dense model in device memory/);
      const local = await train([...base(plan), '--device', 'cuda:0', '--comm', 'mpi']);
      expect(local.rc, local.err).toBe(0);
      expect(local.err).toMatch(/sharded over 1 rank\(s\) \(one process\)/);
      expect(local.err).toMatch(/exchanges through host memory \(the group is an in-process group/);
      const loss = (t: string) => /final loss \(mean of the last 6 steps\): ([0-9.]+)/.exec(t)?.[1];
      expect(loss(nccl.out)).toBeDefined();
      expect(loss(nccl.out)).toBe(loss(local.out));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});

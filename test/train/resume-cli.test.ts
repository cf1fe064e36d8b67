// resume-cli.test.ts — `embshard train --resume <dir>` against the same run without the interruption:
// `--steps 7 --save S` straight, and `--steps 3 --save I` then `--steps 7 --resume I --save R` (each run a
// fresh process, the CLI of dist/); the final checkpoints are compared byte for byte (dense weights and
// optimizer state, tables and their state, step counts, schedule) and so are the held-out evaluations at the
// end. Synthetic data (the batches after the checkpoint's), a Criteo TSV file with --eval-split whose
// passes the interruption crosses (the batches read and dropped), and a --plan file (sharded tables).
import { describe, it, expect } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SyntheticSource } from '../../lib/data/synthetic.js';
import { planShards } from '../../lib/plan/planner.js';
import { topologyPreset } from '../../lib/plan/topology.js';

const MAIN = join(__dirname, '..', '..', 'dist', 'lib', 'cli', 'main.js');

/** `embshard train` in a fresh process (the CLI of dist/): its exit code and output. */
function cli(args: string[]): { status: number | null; out: string; err: string } {
  const r = spawnSync(process.execPath, [MAIN, 'train', ...args, '--quiet'], { encoding: 'utf8', timeout: 60_000 });
  return { status: r.status, out: r.stdout, err: r.stderr };
}

function train(args: string[]): string {
  const r = cli(args);
  expect(r.status, r.err).toBe(0);
  return r.out;
}

function files(ck: string): Record<string, string> {
  const m = JSON.parse(readFileSync(join(ck, 'embeddings', 'manifest.json'), 'utf8')) as { payload: { file: string }; step: number };
  const t = JSON.parse(readFileSync(join(ck, 'trainer.json'), 'utf8')) as Record<string, unknown>;
  return {
    dense: readFileSync(join(ck, 'dense.bin')).toString('hex'),
    tables: readFileSync(join(ck, 'embeddings', m.payload.file)).toString('hex'),
    embeddingStep: String(m.step),
    trainer: JSON.stringify(t),
  };
}

const heldOut = (text: string): string | undefined => /held-out: [^\n]*/.exec(text)?.[0];

function check(dir: string, args: string[], total: number, at: number): void {
  const straight = train([...args, '--steps', String(total), '--save', join(dir, 's')]);
  train([...args, '--steps', String(at), '--save', join(dir, 'i')]);
  const resumed = train([...args, '--steps', String(total), '--resume', join(dir, 'i'), '--save', join(dir, 'r')]);
  expect(resumed).toMatch(new RegExp(`trained ${total - at} steps`));
  expect(files(join(dir, 'r'))).toEqual(files(join(dir, 's')));
  expect(JSON.parse(readFileSync(join(dir, 'r', 'trainer.json'), 'utf8')).steps).toBe(total);
  expect(heldOut(resumed)).toBeDefined();
  expect(heldOut(resumed)).toBe(heldOut(straight));
}

const model = ['--model', 'custom', '--bottom', '13-8-4', '--top', '8-1'];

describe('embshard train --resume equals the run without the interruption', () => {
  it('synthetic data, adam, warmup and decay across the interruption', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-resume-cli-'));
    try {
      check(dir, [...model, '--data', 'synthetic', '--max-rows', '60', '--batch', '32', '--optimizer', 'adam', '--lr', '0.01', '--emb-lr', '0.05',
        '--warmup', '2', '--decay-steps', '5', '--eval-batches', '1', '--eval-every', '2'], 7, 3);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a Criteo TSV file with --eval-split: the interruption a pass and a batch into it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-resume-cli-'));
    try {
      const line = (i: number) => [i % 3 === 0 ? 1 : 0, ...Array.from({ length: 13 }, (_, j) => String((i * j) % 7)), ...Array.from({ length: 26 }, (_, j) => ((i * 31 + j) * 2654435761 % 4294967296).toString(16).padStart(8, '0'))].join('\t');
      const file = join(dir, 'train.txt');
      writeFileSync(file, Array.from({ length: 40 }, (_, i) => line(i)).join('\n') + '\n'); // 32 trained: 2 batches of 16 a pass
      check(dir, [...model, '--data', `criteo-tsv:${file}`, '--max-rows', '100', '--batch', '16', '--eval-split', '0.2', '--optimizer', 'adagrad', '--lr', '0.05', '--warmup', '2', '--decay-steps', '4'], 6, 3);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a --plan file (sharded tables)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-resume-cli-'));
    try {
      const src = new SyntheticSource({ batchSize: 1, preset: 'criteo-kaggle', maxRows: 60 });
      const tables = src.features.map((f, i) => ({ name: f, rows: src.tableRows[i]!, dim: 4, features: [f] }));
      await src.close?.();
      const plan = join(dir, 'plan.json');
      writeFileSync(plan, JSON.stringify(planShards(tables, topologyPreset('dgx-h100', { worldSize: 1 }), { batchSize: 32 }).toJSON()));
      check(dir, [...model, '--data', 'synthetic', '--max-rows', '60', '--batch', '32', '--plan', plan, '--optimizer', 'adam', '--lr', '0.01',
        '--warmup', '1', '--decay-steps', '3', '--eval-batches', '1'], 5, 2);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('refuses a checkpoint of another run, and --resume without --steps', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-resume-cli-'));
    try {
      const args = [...model, '--data', 'synthetic', '--max-rows', '60', '--batch', '32', '--eval-batches', '0'];
      train([...args, '--optimizer', 'adam', '--steps', '2', '--save', join(dir, 'i')]);
      let r = cli([...args, '--optimizer', 'sgd', '--steps', '4', '--resume', join(dir, 'i')]);
      expect(r.status).toBe(1);
      expect(r.err).toMatch(/INVALID_ARGUMENT: --resume '.*': its optimizer is adam, this run's sgd/);
      r = cli([...args, '--optimizer', 'adam', '--steps', '2', '--resume', join(dir, 'i')]);
      expect(r.status).toBe(1);
      expect(r.err).toMatch(/INVALID_ARGUMENT: --resume '.*' has trained 2 steps already/);
      r = cli([...args, '--epochs', '1', '--resume', join(dir, 'i')]);
      expect(r.status).toBe(2);
      expect(r.err).toMatch(/--resume needs --steps N/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

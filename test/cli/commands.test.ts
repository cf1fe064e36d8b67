// commands.test.ts — the `embshard` binary as a shell runs it (dist/): stdout that cannot be written (a full
// disk) fails the command with one line, a reader that stops early does not; the `backends` and `bench` commands:
// --help prints a usage and runs nothing (no benchmark starts), a stray argument is a usage error (exit 2),
// a bench's unknown option is refused before any work; a signal that stops `embshard bench` (kill, timeout)
// stops the bench it started too, and an interrupted bench leaves no temporary folder behind.
import { describe, it, expect } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { tempDir } from '../temp-dir.js';

const root = process.cwd();
const cli = join(root, 'dist', 'lib', 'cli', 'main.js');
const benches = join(root, 'dist', 'bench');
const tmp = tempDir('cli-bench');

/** A result name no bench writes by default, should a bench run to its end (EMBSHARD_BENCH_NAME: bench/plan.ts). */
const NAME = `cli-test-${process.pid}`;

/**
 * Runs the CLI in a process group of its own; a guard kills the whole group after `guardMs` (a bench that
 * should not have started fails the test instead of running on, its own processes included).
 */
async function run(args: string[], env: Record<string, string> = {}, guardMs = 60_000): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const p = spawn(process.execPath, [cli, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let stdout = '', stderr = '';
  p.stdout.on('data', (d: Buffer) => void (stdout += d.toString()));
  p.stderr.on('data', (d: Buffer) => void (stderr += d.toString()));
  const guard = setTimeout(() => killGroup(p.pid!), guardMs);
  const status = await new Promise<number | null>((done) => p.on('close', (code) => done(code)));
  clearTimeout(guard);
  return { status, stdout, stderr };
}

function killGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // the group is gone
  }
}

/** The ids of `pid`'s child processes (Linux /proc). */
function children(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function removeResults(): void {
  for (const ext of ['json', 'md']) rmSync(join(root, 'bench', 'results', `${NAME}.${ext}`), { force: true });
}

describe.skipIf(!existsSync(cli) || !existsSync(join(benches, 'plan.js')))('embshard backends / bench', () => {
  it('backends --help prints its usage; an argument it does not take is a usage error', async () => {
    const help = await run(['backends', '--help']);
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^usage: embshard backends\n/);
    expect(help.stdout).not.toMatch(/^cpu /m);
    const bad = await run(['backends', '--all']);
    expect(bad.status).toBe(2);
    expect(bad.stdout).toBe('');
    expect(bad.stderr.split('\n')[0]).toBe("embshard backends: unexpected argument '--all'");
  });

  it.skipIf(!existsSync('/dev/full'))('output that cannot be written (a full disk) is exit 1 with one line; a reader that stops early (EPIPE) is not', async () => {
    for (const args of [['backends'], ['--help'], ['plan', '--model', 'criteo-kaggle', '--gpus', '2', '--time-budget-ms', '100']]) {
      const r = spawnSync('sh', ['-c', `"${process.execPath}" "${cli}" ${args.join(' ')} > /dev/full`], { encoding: 'utf8', timeout: 60_000 });
      expect(r.status, args.join(' ')).toBe(1);
      expect(r.stderr, args.join(' ')).toBe('embshard: IO_ERROR: the output could not be written to stdout (ENOSPC)\n');
    }
    // a usage error keeps its own code
    const usage = spawnSync('sh', ['-c', `"${process.execPath}" "${cli}" plan --gpus 2 > /dev/full`], { encoding: 'utf8', timeout: 60_000 });
    expect(usage.status).toBe(2);
    const early = spawnSync('bash', ['-c', `set -o pipefail; "${process.execPath}" "${cli}" plan --model criteo-kaggle --gpus 768 --time-budget-ms 100 | head -1 > /dev/null`], { encoding: 'utf8', timeout: 60_000 });
    expect(early.status, early.stderr).toBe(0);
    expect(early.stderr).toBe('');
  }, 120_000);

  it('bench --help and bench <name> --help print a usage and run no benchmark', async () => {
    try {
      for (const args of [['bench', '--help'], ['bench', '-h'], ['bench', 'plan', '--help'], ['bench', 'embedding', '-h'], ['bench', 'train', '--help'], ['bench', 'data', '--help'], ['bench', 'dist', '--help']]) {
        const r = await run(args, { EMBSHARD_BENCH_NAME: NAME, EMBSHARD_BENCH_MODELS: 'criteo-kaggle', EMBSHARD_BENCH_GPUS: '8' }, 30_000);
        expect(r.status, `${args.join(' ')}: ${r.stderr}`).toBe(0);
        expect(r.stdout, args.join(' ')).toMatch(/^usage: /);
        expect(r.stdout.split('\n').length, args.join(' ')).toBeLessThan(12);
      }
      expect(existsSync(join(root, 'bench', 'results', `${NAME}.json`))).toBe(false);
    } finally {
      removeResults();
    }
  }, 240_000);

  it("a bench's unknown option, missing value or bad --device is a usage error before any work", async () => {
    for (const [args, line] of [
      [['bench', 'embedding', '--quik'], "unknown option '--quik'"],
      [['bench', 'embedding', '--device'], '--device needs a value'],
      [['bench', 'embedding', '--device', 'gpu'], "--device must be cpu, cuda or cuda:N (got 'gpu')"],
      [['bench', 'train', '--device=tpu'], "--device must be cpu, cuda or cuda:N (got 'tpu')"],
      [['bench', 'plan', 'quick'], "unexpected argument 'quick'"],
      [['bench', 'nope'], "unknown bench 'nope' (one of embedding, plan, dist, train, data)"],
    ] as const) {
      const r = await run([...args], { EMBSHARD_BENCH_NAME: NAME }, 30_000);
      expect(r.status, `${args.join(' ')}: ${r.stdout}`).toBe(2);
      expect(r.stderr.split('\n')[0], args.join(' ')).toBe(line);
    }
  }, 120_000);

  it('a bench setting of the wrong type or an unknown name in the environment is one line and exit 2, before any work', async () => {
    try {
      for (const [env, line] of [
        [{ EMBSHARD_BENCH_GPUS: '8x' }, "EMBSHARD_BENCH_GPUS must be an integer >= 1, separated by commas (got '8x')"],
        [{ EMBSHARD_BENCH_GPUS: '8,,64' }, "EMBSHARD_BENCH_GPUS must be integers >= 1, separated by commas (got '8,,64')"],
        [{ EMBSHARD_BENCH_GPUS: '0' }, "EMBSHARD_BENCH_GPUS must be an integer >= 1, separated by commas (got '0')"],
        [{ EMBSHARD_BENCH_MODELS: 'criteo-kaggle,t999' }, "EMBSHARD_BENCH_MODELS: unknown name 't999' (known: dlrm-dcnv2, criteo-kaggle, t180, t200, t510, seq-skewed)"],
        [{ EMBSHARD_BENCH_PROTOCOL_IDS: '1e6' }, "EMBSHARD_BENCH_PROTOCOL_IDS must be an integer >= 1, separated by commas (got '1e6')"],
        [{ EMBSHARD_BENCH_NAME: '../escaped' }, "EMBSHARD_BENCH_NAME must be a file name of letters, digits, '.', '_' and '-' (got '../escaped')"],
      ] as const) {
        const r = await run(['bench', 'plan'], { EMBSHARD_BENCH_NAME: NAME, EMBSHARD_BENCH_MODELS: 'criteo-kaggle', EMBSHARD_BENCH_GPUS: '8', ...env }, 30_000);
        expect(r.status, JSON.stringify(env)).toBe(2);
        expect(r.stderr, JSON.stringify(env)).toBe(`${line}\n`);
      }
    } finally {
      removeResults();
    }
  }, 240_000);

  it('a SIGTERM to embshard bench stops the bench it runs, and the command exits with the bench\'s signal status', async () => {
    const env = { ...process.env, EMBSHARD_BENCH_NAME: NAME, EMBSHARD_BENCH_MODELS: 't510', EMBSHARD_BENCH_GPUS: '128' };
    const p = spawn(process.execPath, [cli, 'bench', 'plan'], { env, stdio: 'ignore', detached: true });
    const exited = new Promise<number | null>((done) => p.on('exit', (code) => done(code)));
    let bench: number[] = [];
    try {
      while ((bench = children(p.pid!)).length === 0) await sleep(20);
      process.kill(p.pid!, 'SIGTERM');
      expect(await exited).toBe(128 + 15);
      expect(bench.filter(alive)).toEqual([]);
    } finally {
      killGroup(p.pid!);
      removeResults();
    }
  }, 60_000);

  it.skipIf(!existsSync(join(benches, 'data.js')))('an interrupted bench removes its temporary folder', async () => {
    const p = spawn(process.execPath, [join(benches, 'data.js')], { env: { ...process.env, TMPDIR: tmp.dir, EMBSHARD_BENCH_QUICK: '1' }, stdio: 'ignore', detached: true });
    const exited = new Promise<number | null>((done) => p.on('exit', (code) => done(code)));
    const made = () => readdirSync(tmp.dir).filter((f) => f.startsWith('embshard-bench-data-'));
    try {
      while (made().length === 0) await sleep(20);
      process.kill(p.pid!, 'SIGINT');
      expect(await exited).toBe(128 + 2);
      expect(made()).toEqual([]);
    } finally {
      killGroup(p.pid!);
    }
  }, 60_000);
});

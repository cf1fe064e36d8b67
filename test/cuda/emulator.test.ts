// emulator.test.ts — tests of the CUDA emulation itself (native/cuda/emu, docs/cuda-emulation.md). Builds
// test/fixtures/native/emu_check.cc with g++ against the emulator and runs it in order and under three
// random schedule seeds. Each of its checks compares a kernel with a host oracle; this file asserts that
// the correct kernels pass under every schedule, that the two deliberately planted bugs (a copy of
// rows.cu's gather kernel with a wrong index, a block reduction without its __syncthreads) are caught
// under every schedule, that misuse a GPU would hang on or leave undefined is reported as a launch
// failure, and that a seed really changes the order in which threads run. It also builds and runs
// test/fixtures/native/emu_nccl_check.cc, the emulated NCCL's checks (ranks as threads), which must all pass,
// and, where g++ has AddressSanitizer, test/fixtures/native/emu_asan_check.cc with -fsanitize=address: a
// correct kernel switching fibers at barriers and shuffles must run without a report, and a kernel's store
// one element past its cudaMalloc'ed array must be reported.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../lib/native.js';

const gxx = spawnSync('g++', ['--version'], { encoding: 'utf8' }).status === 0;
// g++'s AddressSanitizer runtime: without it -fsanitize=address cannot link
const asan = gxx && existsSync(spawnSync('g++', ['-print-file-name=libasan.so'], { encoding: 'utf8' }).stdout.trim());
const SEEDS = ['0', '1', '2', '3'];

const out = mkdtempSync(join(tmpdir(), 'embshard-emu-check-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

function build(name: string, extra: string[] = []): Promise<string> {
  const exe = join(out, name);
  const native = join(packageRoot, 'native');
  const args = ['-O1', '-std=c++17', '-ffp-contract=off', '-Wall', '-Wextra', '-Werror', '-Wno-unused-parameter', '-Wno-unknown-pragmas', ...extra,
    '-DEMBSHARD_CUDA_EMU=1', '-I', join(native, 'cuda', 'emu', 'include'), '-I', native, '-o', exe,
    join(packageRoot, 'test', 'fixtures', 'native', `${name}.cc`)];
  return new Promise((resolve, reject) => {
    const p = spawn('g++', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    p.stderr.on('data', (d) => (err += d));
    p.on('close', (code) => (code === 0 ? resolve(exe) : reject(new Error(`g++ ${name} failed:\n${err}`))));
  });
}

/** The driver's `name: result` lines under one schedule seed. */
function runUnder(exe: string, seed: string): Map<string, string> {
  const r = spawnSync(exe, [], { encoding: 'utf8', timeout: 60_000, env: { ...process.env, EMBSHARD_CUDA_EMU_SEED: seed } });
  expect(r.status, `${exe} (seed ${seed}) exited with ${r.status} ${r.signal ?? ''}: ${r.stderr}`).toBe(0);
  const lines = new Map<string, string>();
  for (const line of r.stdout.split('\n')) {
    const at = line.indexOf(': ');
    if (at > 0) lines.set(line.slice(0, at), line.slice(at + 2));
  }
  return lines;
}

describe.runIf(gxx)('the CUDA emulator', () => {
  const runs = new Map<string, Map<string, string>>();
  let nccl = new Map<string, string>();
  beforeAll(async () => {
    const [exe, ncclExe] = await Promise.all([build('emu_check'), build('emu_nccl_check')]);
    for (const seed of SEEDS) runs.set(seed, runUnder(exe, seed));
    nccl = runUnder(ncclExe, '0');
  }, 180_000);

  const CORRECT = [
    'gather_rows',
    'block reduction with __syncthreads',
    'warp intrinsics in lockstep',
    'dynamic shared memory',
    'atomics',
    'launch limits are cudaErrorInvalidConfiguration',
    'a shuffle that leaves lanes out is a launch failure',
    'a deadlock at a barrier is a launch failure',
    'the emulator stays usable after a failed launch',
    'copies to memory that is not device memory are cudaErrorInvalidValue',
  ];
  for (const name of CORRECT) {
    it(`${name}: right under every schedule`, () => {
      for (const seed of SEEDS) expect(runs.get(seed)!.get(name), `seed ${seed}`).toBe('ok');
    });
  }

  for (const name of ['planted wrong index (gather_rows copy)', 'planted missing __syncthreads (block reduction)']) {
    it(`${name}: caught under every schedule`, () => {
      for (const seed of SEEDS) expect(runs.get(seed)!.get(name), `seed ${seed}`).toMatch(/^WRONG /);
    });
  }

  for (const name of [
    'nccl collectives (fp32 sum in rank order, max, all-gather, reduce-scatter, broadcast)',
    'nccl send / recv in a group',
    'nccl a stream waits for a late peer',
    'nccl mismatched collectives are ncclInvalidUsage',
    'nccl an aborted peer ends waiting operations with ncclRemoteError',
    'nccl host pointers are ncclInvalidArgument',
  ]) {
    it(`${name}: right`, () => expect(nccl.get(name)).toBe('ok'));
  }

  it('seed 0 runs threads in index order; other seeds run them in other orders', () => {
    expect(runs.get('0')!.get('last thread')).toBe(String(16 * 64 - 1));
    const lasts = new Set(SEEDS.map((s) => runs.get(s)!.get('last thread')));
    expect(lasts.size).toBeGreaterThan(1);
  });
});

describe.runIf(asan)('the CUDA emulator under AddressSanitizer', () => {
  let exe = '';
  beforeAll(async () => {
    exe = await build('emu_asan_check', ['-fsanitize=address', '-fno-omit-frame-pointer']);
  }, 180_000);
  const env = { ...process.env, ASAN_OPTIONS: 'detect_leaks=0' };

  it('fibers switching at barriers and shuffles, over reused stacks: no report, right sums, under every schedule', () => {
    for (const seed of SEEDS) {
      const r = spawnSync(exe, [], { encoding: 'utf8', timeout: 60_000, env: { ...env, EMBSHARD_CUDA_EMU_SEED: seed } });
      expect([r.status, r.stdout.trim(), r.stderr], `seed ${seed}`).toEqual([0, 'in bounds: ok', '']);
    }
  });

  it("a kernel's store one element past its cudaMalloc'ed array is reported", () => {
    const r = spawnSync(exe, ['past-end'], { encoding: 'utf8', timeout: 60_000, env });
    expect(r.status).not.toBe(0);
    expect(r.stdout).not.toMatch(/not reported/);
    expect(r.stderr).toMatch(/ERROR: AddressSanitizer: use-after-poison/);
    expect(r.stderr).toMatch(/fill_past_end/);
  });
});

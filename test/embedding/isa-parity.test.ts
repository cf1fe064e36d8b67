// isa-parity.test.ts — cpu/isa.h compiles the CPU kernels for AVX-512, AVX2 and baseline x86-64 and
// promises bitwise-equal results. This builds a small native driver (test/fixtures/native/isa_check.cc)
// over the engine sources twice: as shipped (the loader picks this machine's best copy) and with the
// clones off (baseline code only), plus an AVX2-only build where the CPU has AVX2; each runs three
// forward/backward steps of every optimizer × dtype × rounding × weight decay and hashes all outputs and
// both arenas, then runs the dense layers' element-wise kernels (bf16 conversion, ReLU, bias sums). The hashes must be equal.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../lib/native.js';

const gxx = spawnSync('g++', ['--version'], { encoding: 'utf8' });
const x64 = process.arch === 'x64' && !gxx.error && gxx.status === 0;
const avx2 = x64 && /\bavx2\b/.test(readFileSync('/proc/cpuinfo', 'utf8'));
const native = join(packageRoot, 'native');
// the engine, and the dense layers' element-wise kernels with what they link (GEMMs on the naive path: no BLAS, no oneDNN here)
const denseSources = ['activation.cc', 'linear.cc', 'precision.cc', 'gemm.cc', 'gemm_onednn.cc'].map((f) => join(native, 'dense', f));
const sources = [...['core', 'cpu'].flatMap((d) => readdirSync(join(native, d)).filter((f) => f.endsWith('.cc')).map((f) => join(native, d, f))), ...denseSources];
const out = mkdtempSync(join(tmpdir(), 'embshard-isa-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

function build(name: string, flags: string[]): Promise<string> {
  const exe = join(out, name);
  const args = ['-O2', '-std=c++17', '-ffp-contract=off', '-fno-math-errno', ...flags, '-I', native, '-o', exe, join(packageRoot, 'test/fixtures/native/isa_check.cc'), ...sources, '-lpthread'];
  return new Promise((resolve, reject) => {
    const p = spawn('g++', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    p.stderr.on('data', (d: Buffer) => (err += d.toString()));
    p.on('close', (code) => (code === 0 ? resolve(exe) : reject(new Error(`g++ ${name} failed:\n${err}`))));
  });
}

function run(exe: string): string {
  const r = spawnSync(exe, [], { encoding: 'utf8', timeout: 120_000 });
  expect(r.status, r.stderr).toBe(0);
  return r.stdout.trim();
}

describe.runIf(x64)('CPU kernels: every ISA copy gives bitwise-equal results', () => {
  it('shipped (best copy for this CPU) = baseline only (= AVX2 only)', { timeout: 600_000 }, async () => {
    const [shipped, baseline, only2] = await Promise.all([
      build('shipped', []),
      build('baseline', ['-DEMBSHARD_NO_ISA_CLONES']),
      avx2 ? build('avx2', ['-DEMBSHARD_NO_ISA_CLONES', '-march=x86-64-v3']) : Promise.resolve(undefined),
    ]);
    const h = run(shipped);
    expect(h).toMatch(/^[0-9a-f]{16}$/);
    expect(run(baseline)).toBe(h);
    if (only2) expect(run(only2)).toBe(h);
  });
});

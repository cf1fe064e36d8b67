// ptx-numerics.test.ts — the floating-point instructions the CUDA kernels compile to, checked where
// nvcc exists (no GPU needed). Bitwise parity with the CPU backend (native/cuda/README.md) needs every
// fp32 multiply and add of the kernels to round on its own, as x86-64 without FMA does: no fused
// multiply-add (contracted by nvcc, or written as fmaf / __fmaf_rn), no approximate or flush-to-zero
// instructions (__fdividef, __expf, -use_fast_math). With --fmad=false nvcc emits mul.rn / add.rn,
// which the PTX ISA forbids ptxas to contract, so the PTX is the proof.
// The other half of the precondition is the host: the CPU backend (and the host code of the CUDA
// addon) must not contract either; on x86-64 that means no vfmadd… (and no approximate reciprocal) in
// the engines' object files, in every ISA copy of their kernels (cpu/isa.h).
// Normal initialisation (logf / cosf, whose CUDA implementations use fma) is computed on the host by
// the CUDA engine, so init_kernel is the one kernel allowed fma; it must still hold no approximations.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../lib/native.js';

const nvcc = spawnSync('nvcc', ['--version'], { encoding: 'utf8' });
const hasNvcc = !nvcc.error && nvcc.status === 0;
const out = mkdtempSync(join(tmpdir(), 'embshard-ptx-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

// The kernel flags of CMakeLists.txt that matter here (source-rules.test.ts checks the real build
// line carries --fmad=false and no fast-math flag), for the PTX of compute_90.
function ptx(source: string, fmad = false): string {
  const file = join(out, source.replace(/[^A-Za-z0-9]/g, '_') + '.ptx');
  const r = spawnSync(
    'nvcc',
    ['-O3', '-std=c++17', `--fmad=${fmad}`, '--expt-relaxed-constexpr', '-arch=compute_90', '-ptx', '-I', join(packageRoot, 'native'), source, '-o', file],
    { encoding: 'utf8', timeout: 180_000 },
  );
  expect(r.status, r.stderr).toBe(0);
  return readFileSync(file, 'utf8');
}

/** Kernel entry name (mangled) → its PTX body. */
function entries(text: string): Map<string, string> {
  const m = new Map<string, string>();
  const parts = text.split(/\n\.(?:visible )?entry /);
  for (const p of parts.slice(1)) m.set(p.slice(0, p.indexOf('(')), p);
  return m;
}

const FUSED = /\b(fma|mad)(\.rn|\.rz|\.rm|\.rp)?(\.ftz)?(\.sat)?\.f32\b/g;
const INEXACT = /\.approx\b|\.ftz\b/g;
const count = (s: string, re: RegExp) => (s.match(re) ?? []).length;

/** No kernel of `ks` fuses or approximates; each op of `ops` appears in `text` as its own rounded instruction. */
function expectRounded(text: string, ks: Map<string, string>, ops: readonly RegExp[]): void {
  for (const [name, body] of ks) {
    expect(count(body, FUSED), name).toBe(0);
    expect(count(body, INEXACT), name).toBe(0);
  }
  for (const op of ops) expect(count(text, op), String(op)).toBeGreaterThan(0);
}

if (!hasNvcc) console.log('test/cuda/ptx-numerics: nvcc is not on PATH, nothing to compile');

describe.runIf(hasNvcc)('fp32 instructions of the CUDA kernels (PTX, compute_90)', () => {
  const slow = { timeout: 600_000 }; // nvcc on a shared, busy machine

  it('the detector sees a contracted a·b + c (--fmad=true) and its absence (--fmad=false)', slow, () => {
    const src = join(out, 'probe.cu');
    writeFileSync(src, '__global__ void k(float* p) { p[threadIdx.x] = p[threadIdx.x] * p[1] + p[2]; }\n');
    expect(count(ptx(src, true), FUSED)).toBeGreaterThan(0);
    const strict = ptx(src, false);
    expect(count(strict, FUSED)).toBe(0);
    expect(count(strict, /mul\.rn\.f32/g)).toBe(1);
  });

  for (const f of ['forward.cu', 'backward.cu']) {
    it(`${f}: every kernel rounds each multiply and add (no fma, no approximations, no ftz)`, slow, () => {
      const text = ptx(join(packageRoot, 'native', 'cuda', f));
      const ks = entries(text);
      expect(ks.size).toBeGreaterThan(f === 'forward.cu' ? 5 : 6);
      // the math is there, as separately rounded instructions
      expectRounded(text, ks, [/mul\.rn\.f32/g, /add\.rn\.f32/g, /div\.rn\.f32/g, ...(f === 'backward.cu' ? [/sqrt\.rn\.f32/g] : [])]);
    });
  }

  it('exchange_kernels.cu: the block copies, indexed rows, the pooling, the mean division and the row gradient sums round each operation, as the host does', slow, () => {
    const text = ptx(join(packageRoot, 'native', 'cuda', 'exchange_kernels.cu'));
    const ks = entries(text);
    expect(ks.size).toBe(5);
    expectRounded(text, ks, [/mul\.rn\.f32/g, /add\.rn\.f32/g, /div\.rn\.f32/g]);
  });

  it('rows.cu: only init_kernel (normal init, host-computed in practice) holds fma; none approximates', slow, () => {
    const ks = entries(ptx(join(packageRoot, 'native', 'cuda', 'rows.cu')));
    expect(ks.size).toBe(5);
    for (const [name, body] of ks) {
      expect(count(body, INEXACT), name).toBe(0);
      if (!name.includes('init_kernel')) expect(count(body, FUSED), name).toBe(0);
    }
  });
});

const objdump = spawnSync('objdump', ['--version'], { encoding: 'utf8' });
const objects = join(packageRoot, process.env.EMBSHARD_BUILD_DIR ?? 'build', 'CMakeFiles');
// the CPU engine's kernels and initialisation, and the CUDA engine's host-side normal initialisation
const hostObjects = [
  'embshard_host.dir/native/cpu/forward.cc.o',
  'embshard_host.dir/native/cpu/backward.cc.o',
  'embshard_host.dir/native/cpu/cpu_engine.cc.o',
  'embshard_cuda.dir/native/cuda/cuda_engine.cu.o',
].filter((f) => existsSync(join(objects, f)));

describe.runIf(process.arch === 'x64' && !objdump.error && objdump.status === 0 && hostObjects.length > 0)(
  'host code of the embedding engines (x86-64 objects of the build)',
  () => {
    for (const f of hostObjects) {
      it(`${f} holds no fused multiply-add instruction`, () => {
        const r = spawnSync('objdump', ['-d', '--no-show-raw-insn', join(objects, f)], { encoding: 'utf8', maxBuffer: 1 << 30 });
        expect(r.status, r.stderr).toBe(0);
        expect(r.stdout).toMatch(/\b(v?mulss|v?mulps)\b/); // fp32 multiplies are there, as separate instructions
        const fused = /\bv?fn?m(add|sub)\d{3}[sp][sd]\b/g;
        expect('vfmadd231ss %xmm2,%xmm1,%xmm0 vfnmsub132ps'.match(fused)).toHaveLength(2); // the pattern sees them
        expect(r.stdout.match(fused) ?? []).toEqual([]);
        // nor approximate reciprocals, which vectorised divisions and square roots could turn into
        const approx = /\bv?(rcp|rsqrt)(14|28)?[sp]s\b/g;
        expect('vrcp14ps rsqrtss'.match(approx)).toHaveLength(2);
        expect(r.stdout.match(approx) ?? []).toEqual([]);
      });
    }
    // cpu/isa.h: the hot loops are compiled for AVX-512, AVX2 and the baseline (GCC target_clones); every
    // copy is covered by the checks above, which read the whole object file
    for (const f of hostObjects.filter((o) => /cpu\/(forward|backward)\.cc\.o$/.test(o))) {
      it(`${f} holds AVX-512, AVX2 and baseline copies of its kernels`, () => {
        const r = spawnSync('objdump', ['-d', '--no-show-raw-insn', join(objects, f)], { encoding: 'utf8', maxBuffer: 1 << 30 });
        expect(r.status, r.stderr).toBe(0);
        for (const suffix of ['arch_x86_64_v4', 'arch_x86_64_v3', 'default']) expect(r.stdout).toContain(`.${suffix}>:`);
        expect(r.stdout).toMatch(/\bvaddps\s[^\n]*%zmm/); // the v4 copy really uses 512-bit vectors
      });
    }
  },
);

// cuda-source-rules.test.ts — rules of the GPU dense model that a machine without a GPU can still check,
// by reading native/dense/cuda and its binding: every CUDA runtime and cuBLAS call is checked (wrapped in
// EMB_CUDA_CHECK / EMB_BLAS_CHECK, assigned to a status that is tested, or deliberately discarded with
// `(void)` in cleanup); every kernel launch goes through EMB_LAUNCH and is followed at once by EMB_CUDA_CHECK_LAUNCH(); no atomics
// (the determinism the docs promise); and the N-API binding exists only in builds that have cuBLAS.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../lib/native.js';

const dir = join(packageRoot, 'native', 'dense', 'cuda');
const sources = readdirSync(dir)
  .filter((f) => /\.(cu|cc|h)$/.test(f))
  .map((f) => ({ name: f, lines: readFileSync(join(dir, f), 'utf8').split('\n').map((l) => l.replace(/\/\/.*$/, '')) }));

const PURE = new Set(['cudaGetErrorName', 'cudaGetErrorString']);

function uncheckedCalls(name: string, lines: string[]): string[] {
  const bad: string[] = [];
  lines.forEach((code, i) => {
    for (const m of code.matchAll(/\b((?:cuda|cublas)[A-Z]\w*)\s*\(/g)) {
      const fn = m[1]!;
      if (PURE.has(fn)) continue;
      const before = code.slice(0, m.index);
      const ok =
        /EMB_(CUDA|BLAS)_CHECK\($/.test(before.trimEnd()) ||
        /\(void\)\s*$/.test(before) ||
        /\b\w+\s*=\s*$/.test(before); // status variable, tested on a later line
      if (!ok) bad.push(`${name}:${i + 1}: ${code.trim()}`);
    }
  });
  return bad;
}

function uncheckedLaunches(name: string, lines: string[]): string[] {
  const bad: string[] = [];
  lines.forEach((code, i) => {
    if (!/\bEMB_LAUNCH\(/.test(code)) return;
    let j = i;
    while (!lines[j]!.includes(';')) j++; // the launch statement may span lines
    const next = lines.slice(j + 1).find((l) => l.trim() !== '');
    if (!next || !next.includes('EMB_CUDA_CHECK_LAUNCH()')) bad.push(`${name}:${i + 1}: ${code.trim()}`);
  });
  return bad;
}

describe('native/dense/cuda source rules', () => {
  it('finds the GPU dense sources', () => {
    expect(sources.map((s) => s.name).sort()).toEqual(expect.arrayContaining(['dense_cuda.cu', 'launch.cu', 'launch.h', 'model_cuda.cu', 'model_cuda.h']));
  });

  it('checks every CUDA runtime and cuBLAS call', () => {
    expect(sources.flatMap((s) => uncheckedCalls(s.name, s.lines))).toEqual([]);
    // the checker itself catches a bare call
    expect(uncheckedCalls('x', ['  cudaMemcpy(a, b, n, k);', '  EMB_CUDA_CHECK(cudaFree(p));', '  cublasSgemm(h);'])).toHaveLength(2);
  });

  it('follows every kernel launch with EMB_CUDA_CHECK_LAUNCH()', () => {
    const launches = sources.reduce((n, s) => n + s.lines.filter((l) => /\bEMB_LAUNCH\(/.test(l)).length, 0);
    expect(launches).toBeGreaterThanOrEqual(13); // the 13 kernels of launch.cu
    // every launch goes through EMB_LAUNCH (cuda/kernel_launch.h), so the emulated build runs it too
    expect(sources.flatMap((s) => s.lines.filter((l) => l.includes('<<<')).map((l) => `${s.name}: ${l.trim()}`))).toEqual([]);
    expect(sources.flatMap((s) => uncheckedLaunches(s.name, s.lines))).toEqual([]);
    expect(uncheckedLaunches('x', ['EMB_LAUNCH(k, 1, 1, 0, s, a);', 'other();'])).toHaveLength(1);
  });

  it('uses no atomics (every output element has one writer, reductions run in a fixed order)', () => {
    expect(sources.flatMap((s) => s.lines.filter((l) => /\batomic\w*\s*\(/.test(l)).map((l) => `${s.name}: ${l.trim()}`))).toEqual([]);
  });

  it('compiles the GPU dense-model binding only with CUDA and cuBLAS', () => {
    const binding = readFileSync(join(packageRoot, 'native', 'addon', 'dense_cuda_model.cc'), 'utf8');
    expect(binding).toMatch(/^#if defined\(EMBSHARD_WITH_CUDA\) && defined\(EMBSHARD_WITH_CUBLAS\)$/m);
    expect(binding.trimEnd().endsWith('#endif  // EMBSHARD_WITH_CUDA && EMBSHARD_WITH_CUBLAS')).toBe(true);
  });
});

// source-rules.test.ts — rules of the CUDA backend that a machine without a GPU can still check, by
// reading native/cuda and the build it was compiled with (the CPU-equivalence list of native/cuda/README.md):
//   * every CUDA runtime call is checked (EMB_CUDA_CHECK / check(), an error variable that is tested,
//     or a deliberate `(void)` discard in cleanup and probe paths);
//   * every kernel launch goes through EMB_LAUNCH (kernel_launch.h: `<<<…>>>` under nvcc, the CPU
//     emulator's launch in the test-only emulated build) and is followed at once by EMB_CUDA_CHECK_LAUNCH();
//   * every native/cuda/*.cu file is compiled with --fmad=false (what makes the GPU's a·b + c round
//     like the CPU's, so that CUDA results can be bitwise the CPU backend's).
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../lib/native.js';

const dir = join(packageRoot, 'native', 'cuda');
const sources = readdirSync(dir)
  .filter((f) => /\.(cu|cc|h)$/.test(f))
  .map((f) => ({ name: f, lines: readFileSync(join(dir, f), 'utf8').split('\n') }));

// Pure functions of an error code: nothing to check.
const PURE = new Set(['cudaGetErrorName', 'cudaGetErrorString']);

/** Calls of the CUDA runtime whose result is neither checked nor deliberately discarded. */
function uncheckedCalls(name: string, lines: string[]): string[] {
  const bad: string[] = [];
  lines.forEach((line, i) => {
    const code = line.replace(/\/\/.*$/, '');
    for (const m of code.matchAll(/\b(cuda[A-Z]\w*)\s*\(/g)) {
      const fn = m[1]!;
      if (PURE.has(fn)) continue;
      const before = code.slice(0, m.index);
      const ok =
        /EMB_CUDA_CHECK\($/.test(before.trimEnd()) || // EMB_CUDA_CHECK(cudaX(...))
        /\bcheck\($/.test(before.trimEnd()) || // check(cudaX(...), ...)
        /\(void\)\s*$/.test(before) || // (void)cudaX(...): cleanup / best-effort probe
        /\b\w+\s*=\s*$/.test(before) || // cudaError_t e = cudaX(...): the variable is tested below
        /if \($/.test(before.trimEnd()) && /!= cudaSuccess/.test(code); // if (cudaX(...) != cudaSuccess ...
      if (!ok) bad.push(`${name}:${i + 1}: ${line.trim()}`);
    }
  });
  return bad;
}

/** Kernel launches not followed (as the next statement) by EMB_CUDA_CHECK_LAUNCH(). */
function uncheckedLaunches(name: string, lines: string[]): string[] {
  const bad: string[] = [];
  lines.forEach((line, i) => {
    if (!/\bEMB_LAUNCH\(/.test(line.replace(/\/\/.*$/, '')) || /#define/.test(line)) return;
    let j = i;
    while (j < lines.length && !/\);\s*$/.test(lines[j]!)) j++; // the launch statement may wrap
    const next = lines.slice(j + 1).find((l) => l.trim() !== '');
    if (!next || !next.includes('EMB_CUDA_CHECK_LAUNCH();')) bad.push(`${name}:${i + 1}: ${line.trim()}`);
  });
  return bad;
}

describe('native/cuda source rules', () => {
  it('has the engine sources', () => {
    expect(sources.map((s) => s.name)).toEqual(expect.arrayContaining(['cuda_engine.cu', 'forward.cu', 'backward.cu', 'staging.cu']));
  });

  it('every CUDA runtime call is checked or deliberately discarded', () => {
    const bad = sources.flatMap((s) => uncheckedCalls(s.name, s.lines));
    expect(bad).toEqual([]);
    // the rule sees what it should: a bare call is reported, the accepted forms are not
    expect(uncheckedCalls('x', ['  cudaMemsetAsync(p, 0, n, s);'])).toHaveLength(1);
    expect(uncheckedCalls('x', ['  foo(cudaStreamSynchronize(s));'])).toHaveLength(1);
    expect(
      uncheckedCalls('x', [
        '  EMB_CUDA_CHECK(cudaMemsetAsync(p, 0, n, s));',
        '  (void)cudaFree(p);',
        '  cudaError_t e = cudaMalloc(&p, n);',
        '  fail("X", "%s", cudaGetErrorString(e));',
      ]),
    ).toEqual([]);
  });

  it('every kernel launch goes through EMB_LAUNCH and is followed by EMB_CUDA_CHECK_LAUNCH()', () => {
    const launches = sources.flatMap((s) => s.lines.filter((l) => /^\s*EMB_LAUNCH\(/.test(l)));
    expect(launches.length).toBeGreaterThanOrEqual(12);
    // the only `<<<` is the macro's own definition, so the emulated build runs every kernel
    const raw = sources.flatMap((s) =>
      s.lines.filter((l) => l.replace(/\/\/.*$/, '').includes('<<<') && !/#define EMB_LAUNCH/.test(l)).map((l) => `${s.name}: ${l.trim()}`),
    );
    expect(raw).toEqual([]);
    expect(sources.flatMap((s) => uncheckedLaunches(s.name, s.lines))).toEqual([]);
    expect(uncheckedLaunches('x', ['  EMB_LAUNCH(k, 1, 1, 0, s, a,', '      b);', '', '  EMB_CUDA_CHECK_LAUNCH();'])).toEqual([]);
    expect(uncheckedLaunches('x', ['  EMB_LAUNCH(k, 1, 1, 0, s, a);', '}'])).toHaveLength(1);
  });

  const ninja = join(packageRoot, process.env.EMBSHARD_BUILD_DIR ?? 'build', 'build.ninja');
  it.runIf(existsSync(ninja) && readFileSync(ninja, 'utf8').includes('embshard_cuda.dir'))(
    'every native/cuda/*.cu file is compiled with --fmad=false',
    () => {
      const text = readFileSync(ninja, 'utf8');
      const cuFiles = sources.filter((s) => s.name.endsWith('.cu')).map((s) => s.name);
      expect(cuFiles.length).toBeGreaterThanOrEqual(5);
      for (const f of cuFiles) {
        // build.ninja: "build <object>: CUDA_COMPILER__... <source>" then indented variables, FLAGS among them
        const at = text.indexOf(`native/cuda/${f}.o:`);
        expect(at, f).toBeGreaterThanOrEqual(0);
        const block = text.slice(at, text.indexOf('\nbuild ', at + 1));
        const flags = /\n\s+FLAGS = (.*)/.exec(block)?.[1] ?? '';
        expect(flags, f).toContain('--fmad=false');
        expect(flags, f).not.toMatch(/use_fast_math|ftz=true|prec-div=false|prec-sqrt=false/);
      }
    },
  );
});

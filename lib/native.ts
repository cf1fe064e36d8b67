// native.ts — finds and loads the native addons, saying exactly why one could not be loaded (the sharp
// way). Search order for the CPU addon: $EMBSHARD_ADDON (a file), $EMBSHARD_BUILD_DIR/Release, build/Release,
// then prebuilds/<platform>-<arch>/ through node-gyp-build. The CUDA addon (embshard_cuda.node) lives in the
// same build folder or in prebuilds/<platform>-<arch>-cuda/, a folder node-gyp-build never picks by itself.
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { EmbshardError } from './errors.js';
import type { Addon } from './binding.js';

const require = createRequire(import.meta.url);

/** The package root (the folder holding embshard's package.json). */
export const packageRoot: string = (() => {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pj = join(dir, 'package.json');
    if (existsSync(pj)) {
      try {
        if (JSON.parse(readFileSync(pj, 'utf8')).name === 'embshard') return dir;
      } catch {
        /* keep walking */
      }
    }
    const up = dirname(dir);
    if (up === dir) throw new EmbshardError('BINARY_NOT_FOUND', 'cannot locate the embshard package root');
    dir = up;
  }
})();

function buildDirs(): string[] {
  const dirs = [];
  if (process.env.EMBSHARD_BUILD_DIR) dirs.push(join(packageRoot, process.env.EMBSHARD_BUILD_DIR, 'Release'));
  dirs.push(join(packageRoot, 'build', 'Release'));
  return dirs;
}

function attach(addon: Addon): Addon {
  addon.setErrorClass(EmbshardError);
  return addon;
}

let cpuAddon: Addon | undefined;

/** Loads the CPU addon (cached). Throws EmbshardError BINARY_NOT_FOUND listing every place tried and why. */
// The dense layers' oneDNN GEMMs run on an OpenMP team, whose threads by default spin after every
// parallel region: that steals the cores from embshard's own thread pool (and, on a shared machine, from
// everyone), and a GEMM then waits on preempted spinners — measured 10–100× slower small GEMMs under load.
// Passive waiting unless the user chose a policy; OpenMP reads it once, when the addon loads it.
function openmpDefaults(): void {
  process.env.OMP_WAIT_POLICY ??= 'passive';
}

// EMBSHARD_THREADS sizes the host thread pool when the process first uses it (native/core/parallel.cc
// reads it there); a value the pool would not take is refused here, before any addon loads.
function checkThreadsVariable(): void {
  const v = process.env.EMBSHARD_THREADS;
  if (v === undefined || v === '') return;
  if (!/^\d{1,4}$/.test(v) || Number(v) > MAX_POOL_THREADS)
    throw new EmbshardError('INVALID_CONFIG', `EMBSHARD_THREADS: must be an integer in [0, ${MAX_POOL_THREADS}] (0 = every core; got '${v}')`, { path: 'EMBSHARD_THREADS' });
}
/** kMaxPoolThreads of native/core/parallel.h */
const MAX_POOL_THREADS = 1024;

export function loadAddon(): Addon {
  if (cpuAddon) return cpuAddon;
  checkThreadsVariable();
  openmpDefaults();
  const tried: string[] = [];
  const candidates: string[] = [];
  if (process.env.EMBSHARD_ADDON) candidates.push(process.env.EMBSHARD_ADDON);
  for (const d of buildDirs()) candidates.push(join(d, 'embshard.node'));
  for (const file of candidates) {
    if (!existsSync(file)) {
      tried.push(`${file}: not found`);
      continue;
    }
    try {
      cpuAddon = attach(require(file) as Addon);
      return cpuAddon;
    } catch (e) {
      tried.push(`${file}: ${(e as Error).message}`);
    }
  }
  try {
    const file = (require('node-gyp-build') as { resolve(dir: string): string }).resolve(packageRoot);
    cpuAddon = attach(require(file) as Addon);
    return cpuAddon;
  } catch (e) {
    tried.push(`prebuilds/${process.platform}-${process.arch}: ${(e as Error).message.split('\n')[0]}`);
  }
  throw new EmbshardError(
    'BINARY_NOT_FOUND',
    `embshard: no native addon could be loaded for ${process.platform}-${process.arch} (Node ${process.version}, ` +
      `N-API 8 needed).\nTried:\n  ${tried.join('\n  ')}\n` +
      'Build it from source with `npm rebuild embshard` (needs cmake and a C++17 compiler), or install a release ' +
      'with prebuilt binaries for this platform.',
  );
}

/**
 * Candidate files for the CUDA addon, in search order. With EMBSHARD_CUDA_EMU=1 (tests only, see
 * docs/cuda-emulation.md) the only candidate is embshard_cuda_emu.node: the same CUDA sources built
 * against a CPU emulation of the CUDA execution model, which the GPU test suites then run against.
 */
export function cudaAddonCandidates(): string[] {
  if (process.env.EMBSHARD_CUDA_EMU === '1') return buildDirs().map((d) => join(d, 'embshard_cuda_emu.node'));
  const files = [];
  if (process.env.EMBSHARD_CUDA_ADDON) files.push(process.env.EMBSHARD_CUDA_ADDON);
  for (const d of buildDirs()) files.push(join(d, 'embshard_cuda.node'));
  files.push(join(packageRoot, 'prebuilds', `${process.platform}-${process.arch}-cuda`, 'embshard_cuda.node'));
  return files;
}

/** Loads a specific addon file in-process and attaches the error class. */
export function loadAddonFile(file: string): Addon {
  openmpDefaults();
  return attach(require(file) as Addon);
}

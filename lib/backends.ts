// backends.ts — which backends this machine can run, and the addon that serves a device string.
// The CUDA addon (embshard_cuda.node) is first loaded in a child process (node-llama-cpp's
// testBindingBinary pattern): a binary that fails to load, or crashes while loading or probing, cannot
// take the main process down; the child reports `cudaInfo()` (driver, runtime, devices, HBM peak) or
// why not. The answer is cached for the life of the process.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { EmbshardError } from './errors.js';
import { cudaAddonCandidates, loadAddon, loadAddonFile } from './native.js';
import type { Addon } from './binding.js';

/** One CUDA device as the CUDA addon's probe sees it. */
export interface CudaDevice {
  index: number;
  name: string;
  /** e.g. '9.0' */
  computeCapability: string;
  smCount: number;
  /** bytes */
  totalMemory: number;
  memoryClockKHz: number;
  busWidthBits: number;
  /** peak HBM bandwidth from the device properties: 2 × memory clock × bus width / 8, in GB/s (1e9 B/s) */
  hbmPeakGBps: number;
}

/** What `cudaInfo()` of the CUDA addon returns. */
export interface NativeCudaInfo {
  available: boolean;
  reason?: string;
  /** e.g. 13000 for CUDA 13.0; 0 when no driver is installed */
  driverVersion: number;
  /** the CUDA runtime the binary was built with (linked statically) */
  runtimeVersion: number;
  devices: CudaDevice[];
}

/** The CUDA addon's own exports, beside the common Addon interface. */
export interface CudaAddon extends Addon {
  cudaInfo(): NativeCudaInfo;
}

/** What the CPU backend's dense layers (linear, interaction, cross) run their GEMMs on. */
export interface DenseBackendInfo {
  /** 'onednn' (fused bias + ReLU, bf16 kernels), 'openblas' (fp32 only) or 'naive' (a blocked loop, several times slower) */
  backend: 'onednn' | 'openblas' | 'naive';
  /** why: oneDNN's version and the instruction set it picked here, or what to install */
  reason: string;
}

export interface BackendInfo {
  name: 'cpu' | 'cuda';
  available: boolean;
  /** why the backend cannot be used here (when !available) */
  reason?: string;
  /** cuda: the usable devices (device strings 'cuda:<index>') */
  devices?: CudaDevice[];
  /** the binary that serves (or failed to serve) the backend */
  binary?: string;
  driverVersion?: number;
  runtimeVersion?: number;
  /** cpu: the dense layers' GEMM backend */
  dense?: DenseBackendInfo;
  /** cpu: threads of the host pool every CPU kernel runs on (EMBSHARD_THREADS, else every core) */
  threads?: number;
}

export type BinaryProbe = { ok: true; info: NativeCudaInfo } | { ok: false; reason: string };

const MARK = '@@embshard-cuda-info@@';

// Run by `node -e` in the child: load the binary, probe, print the answer after a marker line (libraries
// may print their own noise to stdout).
const CHILD = `
const file = process.argv[1];
const m = require(file);
if (typeof m.cudaInfo !== 'function') throw new Error(file + ' does not export cudaInfo() (not an embshard CUDA addon)');
process.stdout.write('\\n${MARK}' + JSON.stringify(m.cudaInfo()) + '\\n');
`;

function lastLine(s: string): string {
  const lines = s.split('\n').map((l) => l.trim()).filter((l) => l.length > 0 && !l.startsWith('at ') && !/^Node\.js v\d/.test(l));
  const err = lines.filter((l) => /Error/.test(l));
  return (err.length > 0 ? err[err.length - 1]! : lines[lines.length - 1]) ?? '';
}

/**
 * Loads `file` in a child Node process and asks it for `cudaInfo()`. Never throws and never loads the
 * binary into this process: failures (missing shared library, wrong architecture, crash, hang) become
 * `reason`.
 */
export function probeCudaBinary(file: string, timeoutMs = 120_000): BinaryProbe {
  if (!existsSync(file)) return { ok: false, reason: `${file} does not exist` };
  const r = spawnSync(process.execPath, ['-e', CHILD, file], {
    encoding: 'utf8',
    timeout: timeoutMs,
    env: process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
    maxBuffer: 16 << 20,
  });
  if (r.error) {
    const timedOut = (r.error as NodeJS.ErrnoException).code === 'ETIMEDOUT';
    return { ok: false, reason: timedOut ? `probing ${file} did not finish within ${timeoutMs} ms` : `probing ${file} failed: ${r.error.message}` };
  }
  if (r.signal) return { ok: false, reason: `loading ${file} crashed the probe process (signal ${r.signal})` };
  const at = r.stdout.lastIndexOf(MARK);
  if (r.status !== 0 || at < 0) {
    const why = lastLine(r.stderr) || lastLine(r.stdout) || `exit status ${r.status}`;
    return { ok: false, reason: `cannot load ${file}: ${why}` };
  }
  try {
    const info = JSON.parse(r.stdout.slice(at + MARK.length).split('\n')[0]!) as NativeCudaInfo;
    return { ok: true, info };
  } catch (e) {
    return { ok: false, reason: `the probe of ${file} printed an unreadable answer: ${(e as Error).message}` };
  }
}

function probeCpu(): BackendInfo {
  try {
    const addon = loadAddon() as Addon & { denseOps?: { gemmInfo(): DenseBackendInfo } };
    const info = addon.denseOps?.gemmInfo();
    return { name: 'cpu', available: true, threads: addon.threads(), ...(info ? { dense: { backend: info.backend, reason: info.reason } } : {}) };
  } catch (e) {
    return { name: 'cpu', available: false, reason: (e as Error).message };
  }
}

function probeCuda(): BackendInfo {
  const candidates = cudaAddonCandidates();
  const file = candidates.find((f) => existsSync(f));
  if (!file) {
    return {
      name: 'cuda',
      available: false,
      reason: `the CUDA addon (embshard_cuda.node) is not built or installed here (looked for ${candidates.join(', ')}); ` +
        'it is built when nvcc is found at install time',
    };
  }
  const p = probeCudaBinary(file);
  if (!p.ok) return { name: 'cuda', available: false, reason: p.reason, binary: file };
  const info = p.info;
  const base = { name: 'cuda' as const, binary: file, driverVersion: info.driverVersion, runtimeVersion: info.runtimeVersion };
  if (!info.available) return { ...base, available: false, reason: info.reason ?? 'CUDA is unavailable (no reason given)', devices: [] };
  return { ...base, available: true, devices: info.devices };
}

let cached: BackendInfo[] | undefined;

/**
 * Every backend with whether it can run here: `cpu` (the CPU addon loads; `dense` says what its dense
 * layers run on) and `cuda` (the CUDA addon
 * loads in a child process and finds a usable GPU). Cached; `{ refresh: true }` probes again.
 */
export function backends(options?: { refresh?: boolean }): BackendInfo[] {
  if (!cached || options?.refresh) cached = [probeCpu(), probeCuda()];
  return cached.map((b) => ({ ...b, ...(b.devices ? { devices: b.devices.map((d) => ({ ...d })) } : {}), ...(b.dense ? { dense: { ...b.dense } } : {}) }));
}

/** The CUDA backend's entry of backends(). */
export function cudaBackend(options?: { refresh?: boolean }): BackendInfo {
  return backends(options).find((b) => b.name === 'cuda')!;
}

let cudaAddon: CudaAddon | undefined;

/**
 * The CUDA addon, loaded into this process only after a child process proved it loads and found a
 * usable GPU; BACKEND_UNAVAILABLE with the probe's reason otherwise. `what` names the caller in errors.
 */
export function probedCudaAddon(what = 'the CUDA backend'): CudaAddon {
  const cuda = cudaBackend();
  if (!cuda.available) throw new EmbshardError('BACKEND_UNAVAILABLE', `${what} is unavailable: ${cuda.reason}`);
  if (!cudaAddon) {
    try {
      cudaAddon = loadAddonFile(cuda.binary!) as CudaAddon;
    } catch (e) {
      throw new EmbshardError('BACKEND_UNAVAILABLE', `${what}: loading ${cuda.binary} failed: ${(e as Error).message}`);
    }
  }
  return cudaAddon;
}

/** The index N of a 'cuda:N' device, or undefined for any other string ('cpu', malformed names). */
export function cudaIndex(device: string): number | undefined {
  const m = typeof device === 'string' ? /^cuda:(\d+)$/.exec(device) : null;
  return m ? Number(m[1]) : undefined;
}

/**
 * The addon serving `device`: 'cpu' → the CPU addon; 'cuda:N' → the CUDA addon, once the probe has
 * found device N usable. Otherwise EmbshardError BACKEND_UNAVAILABLE with the reason.
 */
export function resolveBackend(device: string): Addon {
  if (device === 'cpu') return loadAddon();
  const index = cudaIndex(device);
  if (index === undefined) throw new EmbshardError('BACKEND_UNAVAILABLE', `unknown device '${String(device)}' (expected 'cpu' or 'cuda:N')`);
  const cuda = cudaBackend();
  if (!cuda.available) throw new EmbshardError('BACKEND_UNAVAILABLE', `device '${device}' is unavailable: ${cuda.reason}`);
  const devices = cuda.devices ?? [];
  if (!devices.some((d) => d.index === index)) {
    const have = devices.map((d) => `cuda:${d.index} (${d.name})`).join(', ');
    throw new EmbshardError('BACKEND_UNAVAILABLE', `device '${device}' does not exist or is not usable; usable devices: ${have}`);
  }
  return probedCudaAddon(`device '${device}'`);
}

// build.test.ts — CI proves the CUDA build: wherever nvcc is on PATH, the CUDA addon must have been
// built (by the same build that made the CPU addon) from the current native/cuda sources, and must
// load in a process without touching the GPU (static cudart: it loads even where no driver exists).
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { probeCudaBinary } from '../../lib/backends.js';
import { packageRoot } from '../../lib/native.js';

const nvcc = spawnSync('nvcc', ['--version'], { encoding: 'utf8' });
const hasNvcc = !nvcc.error && nvcc.status === 0;
const binary = join(packageRoot, process.env.EMBSHARD_BUILD_DIR ?? 'build', 'Release', 'embshard_cuda.node');

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : [join(dir, e.name)]));
}

// The entries of the CUDA fat binaries in an ELF64 shared object's .nv_fatbin section: each fat binary
// is a header (magic 0xBA55ED50, u16 version, u16 header size, u64 payload size) followed by entries
// (u16 kind: 1 PTX / 2 ELF, u16, u32 header size, u64 payload size, …, u32 sm arch at +28).
function fatbinEntries(so: Buffer): { kind: 'ptx' | 'elf' | string; arch: number }[] {
  const shoff = Number(so.readBigUInt64LE(0x28));
  const shentsize = so.readUInt16LE(0x3a);
  const shnum = so.readUInt16LE(0x3c);
  const strtab = Number(so.readBigUInt64LE(shoff + so.readUInt16LE(0x3e) * shentsize + 24));
  let off = -1;
  let size = 0;
  for (let i = 0; i < shnum; i++) {
    const h = shoff + i * shentsize;
    const nameAt = strtab + so.readUInt32LE(h);
    if (so.toString('latin1', nameAt, nameAt + 11) === '.nv_fatbin\0') {
      off = Number(so.readBigUInt64LE(h + 24));
      size = Number(so.readBigUInt64LE(h + 32));
    }
  }
  if (off < 0) return [];
  const out: { kind: string; arch: number }[] = [];
  for (let p = off; p + 16 <= off + size; ) {
    if (so.readUInt32LE(p) !== 0xba55ed50) {
      p += 8;
      continue;
    }
    const hs = so.readUInt16LE(p + 6);
    const fs = Number(so.readBigUInt64LE(p + 8));
    for (let q = p + hs; q < p + hs + fs; ) {
      const kind = so.readUInt16LE(q);
      const ehs = so.readUInt32LE(q + 4);
      const esize = Number(so.readBigUInt64LE(q + 8));
      out.push({ kind: kind === 1 ? 'ptx' : kind === 2 ? 'elf' : `kind${kind}`, arch: so.readUInt32LE(q + 28) });
      q += ehs + esize;
    }
    p += hs + fs;
  }
  return out;
}

if (!hasNvcc) console.log('test/cuda/build: nvcc is not on PATH, so no CUDA addon is expected here');

describe.runIf(hasNvcc)('the CUDA addon is built wherever nvcc exists', () => {
  it(`${binary} exists`, () => {
    expect(existsSync(binary)).toBe(true);
  });

  it('is newer than every native/cuda source', () => {
    const built = statSync(binary).mtimeMs;
    // native/cuda/emu is the CPU emulation, compiled only into the test-only embshard_cuda_emu.node
    const emu = join(packageRoot, 'native', 'cuda', 'emu');
    const sources = files(join(packageRoot, 'native', 'cuda')).filter((f) => /\.(cu|cuh|cc|h)$/.test(f) && !f.startsWith(emu));
    expect(sources.length).toBeGreaterThan(5);
    const stale = sources.filter((f) => statSync(f).mtimeMs > built);
    expect(stale, `rebuild: ${stale.join(', ')} changed after the binary was built`).toEqual([]);
  });

  it('loads (in a child process) and reports the CUDA runtime nvcc compiled it with', () => {
    const p = probeCudaBinary(binary);
    expect(p.ok, p.ok ? '' : p.reason).toBe(true);
    if (!p.ok) return;
    const m = /release (\d+)\.(\d+)/.exec(nvcc.stdout);
    expect(m).not.toBeNull();
    expect(p.info.runtimeVersion).toBe(Number(m![1]) * 1000 + Number(m![2]) * 10);
    if (p.info.available) expect(p.info.devices.length).toBeGreaterThan(0);
    else expect(p.info.reason!.length).toBeGreaterThan(10);
  });

  it('embeds sm_80 and sm_90 machine code and compute_90 PTX for every kernel file (the default architectures)', () => {
    const entries = fatbinEntries(readFileSync(binary));
    const kinds = new Set(entries.map((e) => `${e.kind}:${e.arch}`));
    expect([...kinds].sort()).toEqual(['elf:80', 'elf:90', 'ptx:90']);
    // one fat binary per translation unit with device code, each carrying all three
    const count = (k: string) => entries.filter((e) => `${e.kind}:${e.arch}` === k).length;
    const cuFiles = files(join(packageRoot, 'native', 'cuda')).filter((f) => f.endsWith('.cu')).length;
    expect(count('elf:80')).toBeGreaterThanOrEqual(cuFiles);
    expect(count('elf:90')).toBe(count('elf:80'));
    expect(count('ptx:90')).toBe(count('elf:80'));
  });
});

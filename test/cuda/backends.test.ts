// backends.test.ts — backends() / resolveBackend(): the CPU backend is always there; the CUDA backend
// is reported available only when its binary loads in a child process and finds a usable GPU, and
// otherwise says why; 'cuda:N' then fails with BACKEND_UNAVAILABLE carrying that reason. A binary that
// cannot load or crashes while loading is contained in the child process.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { backends, probeCudaBinary, resolveBackend } from '../../lib/backends.js';
import { EmbshardError } from '../../lib/errors.js';
import { tempDir } from '../temp-dir.js';

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (e) {
    return e instanceof EmbshardError ? e.code : `not an EmbshardError: ${String(e)}`;
  }
  return undefined;
}

describe('backends()', () => {
  const list = backends();
  const cpu = list.find((b) => b.name === 'cpu')!;
  const cuda = list.find((b) => b.name === 'cuda')!;

  it('lists cpu (available) and cuda (available, or with a reason)', () => {
    expect(list.map((b) => b.name)).toEqual(['cpu', 'cuda']);
    expect(cpu.available).toBe(true);
    if (cuda.available) {
      expect(cuda.reason).toBeUndefined();
      expect(cuda.devices!.length).toBeGreaterThan(0);
      for (const d of cuda.devices!) {
        expect(d.name.length).toBeGreaterThan(0);
        expect(d.totalMemory).toBeGreaterThan(0);
        // the device-property formula: 2 × clock (kHz) × bus width (bits) / 8 bits per byte / 1e9
        expect(d.hbmPeakGBps).toBeCloseTo((2 * d.memoryClockKHz * 1e3 * d.busWidthBits) / 8 / 1e9, 6);
      }
    } else {
      console.log(`cuda backend unavailable here: ${cuda.reason}`);
      expect(typeof cuda.reason).toBe('string');
      expect(cuda.reason!.length).toBeGreaterThan(10);
    }
  });

  it('is cached, and a refresh probes again with the same answer', () => {
    expect(backends()).toEqual(list);
    expect(backends({ refresh: true })).toEqual(list);
  });

  it("resolveBackend('cpu') is the CPU addon", () => {
    expect(resolveBackend('cpu').variant).toBe('cpu');
  });

  it("resolveBackend('cuda:0') follows the probe", () => {
    if (cuda.available) {
      expect(resolveBackend('cuda:0').variant).toBe('cuda');
    } else {
      let err: unknown;
      try {
        resolveBackend('cuda:0');
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(EmbshardError);
      expect((err as EmbshardError).code).toBe('BACKEND_UNAVAILABLE');
      expect((err as EmbshardError).message).toContain(cuda.reason!);
    }
  });

  it('rejects malformed device strings and absent devices with BACKEND_UNAVAILABLE', () => {
    for (const d of ['gpu', 'cuda', 'cuda:', 'cuda:-1', 'cuda:1.5', 'CUDA:0', ' cpu', 'cuda:0 ']) {
      expect(codeOf(() => resolveBackend(d)), d).toBe('BACKEND_UNAVAILABLE');
    }
    expect(codeOf(() => resolveBackend('cuda:4096'))).toBe('BACKEND_UNAVAILABLE');
  });
});

describe('probeCudaBinary() contains bad binaries in a child process', () => {
  const probeDir = tempDir('probe');

  it('a missing file', () => {
    const p = probeCudaBinary(join(probeDir.dir, 'absent.node'));
    expect(p.ok).toBe(false);
    if (!p.ok) expect(p.reason).toContain('does not exist');
  });

  it('a file that is not a shared object', () => {
    const f = join(probeDir.dir, 'garbage.node');
    writeFileSync(f, Buffer.from('this is not an ELF file at all, just text'));
    const p = probeCudaBinary(f);
    expect(p.ok).toBe(false);
    if (!p.ok) {
      expect(p.reason).toContain(f);
      expect(p.reason).toMatch(/invalid ELF header|file too short|not a valid|wrong ELF/i);
    }
  });

  it('a module that loads but is not the CUDA addon', () => {
    const f = join(probeDir.dir, 'other.js');
    writeFileSync(f, 'module.exports = { hello: 1 };\n');
    const p = probeCudaBinary(f);
    expect(p.ok).toBe(false);
    if (!p.ok) expect(p.reason).toContain('does not export cudaInfo()');
  });

  it('a module that crashes the process while loading', () => {
    const f = join(probeDir.dir, 'crash.js');
    writeFileSync(f, 'process.kill(process.pid, "SIGSEGV");\nsetTimeout(() => {}, 10000);\n');
    const p = probeCudaBinary(f);
    expect(p.ok).toBe(false);
    if (!p.ok) expect(p.reason).toContain('SIGSEGV');
  });

  it('a module that hangs', () => {
    const f = join(probeDir.dir, 'hang.js');
    writeFileSync(f, 'const t = Date.now(); while (Date.now() - t < 60000) {}\n');
    const p = probeCudaBinary(f, 1500);
    expect(p.ok).toBe(false);
    if (!p.ok) expect(p.reason).toMatch(/did not finish within 1500 ms|SIGTERM/);
  });

  it('a fake addon answering like the real one is parsed, noise on stdout included', () => {
    const f = join(probeDir.dir, 'fake.js');
    const info = { available: false, reason: 'no CUDA device: test', driverVersion: 13000, runtimeVersion: 13000, devices: [] };
    writeFileSync(f, `console.log('some library banner');\nmodule.exports = { cudaInfo: () => (${JSON.stringify(info)}) };\n`);
    const p = probeCudaBinary(f);
    expect(p).toEqual({ ok: true, info });
  });
});

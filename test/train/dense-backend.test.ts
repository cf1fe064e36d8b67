// dense-backend.test.ts — the loader tells the user what the dense layers run on: backends()' cpu entry
// carries the GEMM backend and why, and building a CPU DenseModel on a backend other than oneDNN says so
// once on stderr (checked in a child process, so the forced backend and the once-per-process flag are its own).
import { describe, it, expect } from 'vitest';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { backends } from '../../lib/backends.js';
import { denseAddon } from '../../lib/train/binding.js';
import { packageRoot } from '../../lib/native.js';

describe('the dense backend is reported', () => {
  it("backends()' cpu entry names the dense GEMM backend the addon reports, with a reason", () => {
    const cpu = backends({ refresh: true }).find((b) => b.name === 'cpu')!;
    const info = denseAddon('cpu').denseOps.gemmInfo();
    expect(cpu.dense).toEqual({ backend: info.backend, reason: info.reason });
    expect(['onednn', 'openblas', 'naive']).toContain(cpu.dense!.backend);
  });

  it('a DenseModel built on the naive path says so once on stderr; on oneDNN it says nothing', () => {
    const dist = join(packageRoot, 'dist', 'lib', 'train', 'index.js');
    const script = (force: string) => `
      const { DenseModel } = await import(${JSON.stringify(dist)});
      const { denseAddon } = await import(${JSON.stringify(join(packageRoot, 'dist', 'lib', 'train', 'binding.js'))});
      ${force}
      const spec = { denseIn: 2, bottom: [4], top: [1], numSparse: 1, embDim: 4, interaction: 'dot' };
      new DenseModel(spec); new DenseModel(spec, { precision: 'bf16' });`;
    const run = (force: string) => spawnSync(process.execPath, ['--input-type=module', '-e', script(force)], { encoding: 'utf8' });
    const slow = run(`denseAddon('cpu').denseOps.forceGemmBackend('naive');`);
    expect(slow.status, slow.stderr).toBe(0);
    const lines = slow.stderr.split('\n').filter((l) => l.includes('dense layers run on'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/dense layers run on naive/);
    if (denseAddon('cpu').denseOps.gemmInfo().built.onednn) {
      const fast = run('');
      expect(fast.status, fast.stderr).toBe(0);
      expect(fast.stderr).not.toMatch(/dense layers run on/);
    }
  });
});

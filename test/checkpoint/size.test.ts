// size.test.ts — memory of large checkpoints: saving and loading a 2M × 64 fp32 table (512 MiB) in a
// child process raises its peak resident memory by the payload's chunk (64 MiB) and some slack, never by
// another copy of the table.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { compileTs } from '../sharded/mpi-harness.js';
import { tempDir } from '../temp-dir.js';
import { libIndex } from './child.js';

const tmp = tempDir('ckpt-size');
const MiB = 1 << 20;

/** Runs a save or a load of the 512 MiB checkpoint at `dir` in a child; its resident bytes (before / after the call, peak). */
function measured(mode: 'save' | 'load', dir: string): { before: number; after: number; peak: number } {
  const script = `const { EmbeddingCollection } = await import(${JSON.stringify(libIndex)});
    const cfg = { tables: [{ name: 'a', rows: 2000000, dim: 64 }], optimizer: { type: 'sgd', lr: 0.1 } };
    let ec = ${mode === 'save' ? 'new EmbeddingCollection(cfg)' : 'undefined'};
    const before = process.memoryUsage().rss;
    ${mode === 'save' ? `await ec.save(${JSON.stringify(dir)});` : `ec = await EmbeddingCollection.load(${JSON.stringify(dir)});`}
    console.log(JSON.stringify({ before, after: process.memoryUsage().rss, peak: process.resourceUsage().maxRSS * 1024 }));`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
  expect(r.stderr).toBe('');
  return JSON.parse(r.stdout) as { before: number; after: number; peak: number };
}

describe('a 512 MiB table', () => {
  it('save and load: peak resident memory the table plus at most 128 MiB', () => {
    compileTs();
    const dir = join(tmp.dir, 'big');
    const s = measured('save', dir);
    expect(s.before).toBeGreaterThan(512 * MiB); // the table is resident
    expect(s.peak - s.before).toBeLessThan(128 * MiB);
    const l = measured('load', dir);
    expect(l.after).toBeGreaterThan(512 * MiB);
    expect(l.peak - l.after).toBeLessThan(128 * MiB);
  }, 120_000);
});

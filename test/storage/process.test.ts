// process.test.ts — disk-backed tables across processes: a process killed while it trains (and
// saves) leaves the last finished checkpoint intact and loadable; a disk too small for a table file
// (a file size limit) gives IO_ERROR when the table is made; a table six times larger than its cache
// trains while the process's resident memory stays within cacheBytes plus the documented overhead.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, JaggedBatch } from '../../lib/index.js';
import { compileTs, root } from '../sharded/mpi-harness.js';
import { everything, killAfterSaves } from './helpers.js';
import { tempDir } from '../temp-dir.js';
// @ts-expect-error a plain ES module shared with the child process
import { config, SAVE_EVERY, train } from './kill-steps.mjs';

const tmp = tempDir('disk-process');
const index = join(root, 'dist', 'lib', 'index.js');
/** bitwise equality (a plain comparison: a diff of arrays this large would take minutes to print) */
const same = (a: Float32Array, b: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));

describe('disk-backed tables across processes', () => {
  it('killed mid-step (or mid-save): the last finished save() loads, bitwise what that many steps give', async () => {
    compileTs();
    const ckpt = join(tmp.dir, 'ckpt');
    // a few saves in, kill it at whatever point of a step or a save it is in
    const lastSaved = await killAfterSaves(join(root, 'test', 'storage', 'kill-steps.mjs'), [index, join(tmp.dir, 'run'), ckpt], 4 * SAVE_EVERY, 7);
    const loaded = await EmbeddingCollection.load(ckpt, { storagePath: join(tmp.dir, 'loaded') });
    // the checkpoint is the last printed save or one that finished just before the kill
    expect([lastSaved, lastSaved + SAVE_EVERY]).toContain(loaded.step);
    const twin = new EmbeddingCollection({ ...config(join(tmp.dir, 'unused')), tables: config('').tables.map((t: { storage?: unknown }) => ({ ...t, storage: undefined })) });
    for (let s = 0; s < loaded.step; s++) await train(twin, JaggedBatch, s);
    const a = everything(twin), b = everything(loaded);
    a.forEach((x, i) => expect(same(b[i]!, x)).toBe(true));
    // and it trains on like the twin
    const at = loaded.step;
    for (let s = at; s < at + 3; s++) {
      await train(twin, JaggedBatch, s);
      await train(loaded, JaggedBatch, s);
    }
    const c = everything(loaded);
    everything(twin).forEach((x, i) => expect(same(c[i]!, x)).toBe(true));
    twin.dispose();
    loaded.dispose();
  });

  it('a disk too small for the table (file size limit): IO_ERROR when the table is made', () => {
    compileTs();
    const script = `process.on('SIGXFSZ', () => {});
      const { EmbeddingCollection } = await import(${JSON.stringify(index)});
      try { new EmbeddingCollection({ tables: [{ name: 't', rows: 100000, dim: 16, storage: { kind: 'disk', path: ${JSON.stringify(join(tmp.dir, 'full'))}, cacheBytes: 1 << 20 } }] }); console.log('made'); }
      catch (e) { console.log(e.code + ': ' + e.message); }`;
    const r = spawnSync('bash', ['-c', `ulimit -f 1024; exec "${process.execPath}" --input-type=module -e "$0"`, script], { encoding: 'utf8' });
    expect(r.stdout).toMatch(/^IO_ERROR: storage\.path: cannot allocate table file .* File too large/);
  });

  it('a table far larger than cacheBytes trains within cacheBytes + the documented overhead of resident memory', () => {
    compileTs();
    const cacheBytes = 24 << 20;
    // 300k rows × (64 fp32 + 64 adagrad state) = 147 MiB of rows and state, six times the cache
    const script = `const { EmbeddingCollection, JaggedBatch } = await import(${JSON.stringify(index)});
      const rss = () => process.memoryUsage().rss;
      const rows = 300000, dim = 64, B = 512, L = 8;
      let x = 12345;
      const next = () => ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 4294967296);
      const lengths = new Int32Array(B).fill(L), ids = new BigInt64Array(B * L), pooled = new Float32Array(B * dim);
      globalThis.gc?.();
      const base = rss();
      const ec = new EmbeddingCollection({ tables: [{ name: 't', rows, dim, storage: { kind: 'disk', path: ${JSON.stringify(join(tmp.dir, 'rss'))}, cacheBytes: ${cacheBytes} } }], optimizer: { type: 'adagrad', lr: 0.1 } });
      let peak = rss();
      for (let s = 0; s < 120; s++) {
        for (let i = 0; i < ids.length; i++) ids[i] = BigInt(Math.floor(rows * next()));
        for (let i = 0; i < pooled.length; i++) pooled[i] = next() - 0.5;
        const batch = JaggedBatch.fromLengths({ features: ['t'], batchSize: B, lengths, ids });
        await ec.backward(await ec.forward(batch), { pooled });
        peak = Math.max(peak, rss());
      }
      const st = ec.storageStats().t;
      console.log(JSON.stringify({ grew: peak - base, misses: st.misses, evictions: st.evictions }));`;
    const r = spawnSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', script], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
    const out = JSON.parse(r.stdout) as { grew: number; misses: number; evictions: number };
    // every row was read from the file at least once: far more rows than the cache holds passed through it
    expect(out.misses).toBeGreaterThan(300000 * 0.9);
    expect(out.evictions).toBeGreaterThan(200000);
    // the documented bound: cacheBytes + 64 MiB (engine scratch, per-batch buffers, the JS heap)
    expect(out.grew).toBeLessThan(cacheBytes + (64 << 20));
  });
});

// resume-kill.test.ts — a run killed (SIGKILL) right after its save resolved, resumed in another process,
// against the same run without the interruption: a child process (resume-child.mjs, the Trainer of dist/)
// trains N steps of a collection with dynamic tables that evict and spill and a disk-backed table, saves
// and is killed with its spill and table files open; this process loads the checkpoint and trains M more
// on the same batches. Losses, dense weights and state, every held row and state cell, the tables' held
// ids and the step counts are compared bit for bit with N + M steps trained straight.
import { describe, it, expect } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SyntheticSource } from '../../lib/data/index.js';
import { Trainer } from '../../lib/train/index.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import type { CollectionConfig } from '../../lib/config.js';

const DIST = join(__dirname, '..', '..', 'dist');
const N = 3, M = 3, DIM = 4;
const dataOptions = { batchSize: 16, cardinalities: [40, 40, 40], seed: 9 };
const spec = { denseIn: 13, bottom: [8, DIM], top: [8, 1], numSparse: 3, embDim: DIM, interaction: 'dot' as const };
const trainerOptions = { model: spec, optimizer: { type: 'adam' as const, lr: 0.01 }, seed: 3, schedule: { warmupSteps: 2, decaySteps: 4 } };

function config(dir: string): CollectionConfig {
  const init = { type: 'uniform' as const, low: -0.2, high: 0.2 };
  return {
    tables: [
      { name: 'cat_0', rows: 'dynamic', capacity: 10, dim: DIM, features: ['cat_0'], init, eviction: 'lru', spill: { path: dir } },
      { name: 'cat_1', rows: 'dynamic', capacity: 12, dim: DIM, features: ['cat_1'], init, eviction: 'lfu', admission: { minCount: 2 }, spill: { path: dir } },
      { name: 'cat_2', rows: 40, dim: DIM, features: ['cat_2'], init, storage: { kind: 'disk', path: dir, cacheBytes: 16 * 64 } },
    ],
    optimizer: { type: 'adam', lr: 0.05 },
    seed: 4,
  };
}

const hex = (a: Float32Array | BigInt64Array): string => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('hex');

function snapshot(t: Trainer) {
  const emb = t.embeddings as EmbeddingCollection;
  const tables = emb.config.tables.map((tab) => {
    const ids = tab.dynamic ? BigInt64Array.from([...emb.heldIds(tab.name)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))) : BigInt64Array.from({ length: tab.rows }, (_, i) => BigInt(i));
    return [hex(ids), hex(emb.readRows(tab.name, ids)), hex(emb.readState(tab.name, ids))];
  });
  return { steps: t.stepCount, denseStep: t.dense.step, embStep: emb.step, params: hex(t.dense.params), state: hex(t.dense.state), tables };
}

/** Runs the child until it has saved, then kills it with SIGKILL. */
function trainSaveAndKill(options: object): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(__dirname, 'resume-child.mjs'), DIST, JSON.stringify(options)], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('saved\n')) child.kill('SIGKILL');
    });
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('exit', (code, signal) => (signal === 'SIGKILL' && out.includes('saved\n') ? resolve() : reject(new Error(`child exited (${code ?? signal}) before saving: ${err}`))));
  });
}

describe('a run killed right after its save, resumed in another process', () => {
  it('equals the run without the interruption (dynamic tables with eviction and spill, a disk-backed table, adam)', async () => {
    const root = mkdtempSync(join(tmpdir(), 'embshard-resume-kill-'));
    const dirA = join(root, 'a'), dirB = join(root, 'b');
    mkdirSync(dirA);
    mkdirSync(dirB);
    try {
      const data = new SyntheticSource(dataOptions);
      const a = new Trainer({ ...trainerOptions, embeddings: new EmbeddingCollection(config(dirA)) });
      const lossA: number[] = [];
      for (let k = 0; k < N + M; k++) lossA.push(await a.step(data.batch(k)));
      const stats = Object.values((a.embeddings as EmbeddingCollection).stats());
      expect(stats.every((s) => s.evictions > 0 && (s.spilled ?? 0) > 0)).toBe(true); // the dynamic tables evicted and spilled rows
      expect((a.embeddings as EmbeddingCollection).storageStats().cat_2!.evictions).toBeGreaterThan(0); // the disk table's cache too
      const want = snapshot(a);
      a.dispose();

      await trainSaveAndKill({ data: dataOptions, config: config(dirB), trainer: trainerOptions, steps: N, checkpoint: join(root, 'ck') });
      const r = await Trainer.load(join(root, 'ck'));
      try {
        expect(r.stepCount).toBe(N);
        const lossB: number[] = [];
        for (let k = N; k < N + M; k++) lossB.push(await r.step(data.batch(k)));
        expect(lossB).toEqual(lossA.slice(N));
        expect(snapshot(r)).toEqual(want);
      } finally {
        r.dispose();
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }, 60_000);
});

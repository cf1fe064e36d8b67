// dynamic-spill-checkpoint.test.ts — checkpoints of dynamic tables that spill evicted rows: the
// checkpoint holds a compact copy of the spill file's live records; a collection loaded from it (into a
// fresh spill folder) trains on bitwise like the one saved, and like a dynamic table whose capacity holds
// every id; a missing, truncated or altered copy is CHECKPOINT_CORRUPT; a process killed while it trains
// and saves leaves the last finished save, which loads to what that many steps give.
import { mkdirSync, readFileSync, truncateSync, writeFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError, JaggedBatch, type OptimizerConfig, type TableConfig } from '../../lib/index.js';
import { rng } from '../embedding/oracle.js';
import { compileTs, root } from '../sharded/mpi-harness.js';
import { killAfterSaves } from './helpers.js';
import { tempDir } from '../temp-dir.js';
import { manifestFields, sealedManifest } from '../manifest-seal.js';
// @ts-expect-error a plain ES module shared with the child process
import { config as killConfig, SAVE_EVERY, train as killTrain } from './kill-spill.mjs';

const tmp = tempDir('spill-ck');
let sub = 0;
const fresh = (tag: string) => {
  const d = join(tmp.dir, `${tag}-${sub++}`);
  mkdirSync(d);
  return d;
};

function make(capacity: number, opt: OptimizerConfig, extra: Partial<TableConfig>): EmbeddingCollection {
  return new EmbeddingCollection({
    tables: [
      { name: 'd', rows: 'dynamic', capacity, dim: 4, features: ['a', 'b'], pooling: 'sum', init: { type: 'uniform', low: -0.5, high: 0.5 }, ...extra } as TableConfig,
      { name: 's', rows: 5, dim: 2, pooling: 'mean' },
    ],
    optimizer: opt,
    seed: 11,
  });
}

function batch(r: () => number, pool: bigint[], B: number): JaggedBatch {
  const lengths = Int32Array.from({ length: 3 * B }, () => Math.floor(r() * 5));
  const n = lengths.reduce((s, x) => s + x, 0);
  const nDyn = lengths.subarray(0, 2 * B).reduce((s, x) => s + x, 0);
  const ids = BigInt64Array.from({ length: n }, (_, i) => (i < nDyn ? pool[Math.floor(r() * r() * pool.length)]! : BigInt(Math.floor(r() * 5))));
  return JaggedBatch.fromLengths({ features: ['a', 'b', 's'], batchSize: B, lengths, ids });
}

/** One step on every collection with the same batch and gradients; their pooled outputs must agree bitwise. */
async function stepAll(ecs: EmbeddingCollection[], r: () => number, pool: bigint[], label: string): Promise<void> {
  const b = batch(r, pool, 4);
  const outs = [];
  for (const ec of ecs) outs.push(await ec.forward(b));
  for (const o of outs.slice(1)) expect(o.pooled, label).toEqual(outs[0]!.pooled);
  const g = Float32Array.from({ length: outs[0]!.pooled.length }, () => r() * 2 - 1);
  for (const [k, ec] of ecs.entries()) await ec.backward(outs[k]!, { pooled: g });
}

function held(ec: EmbeddingCollection) {
  const ids = ec.heldIds('d');
  return { ids, stats: ec.stats(), rows: ec.readRows('d', ids), state: ec.readState('d', ids), s: ec.readRows('s', [0, 1, 2, 3, 4]), step: ec.step };
}

async function err(f: () => unknown): Promise<EmbshardError> {
  const e: unknown = await Promise.resolve().then(f).then(() => undefined, (x: unknown) => x);
  expect(e, 'an EmbshardError was raised').toBeInstanceOf(EmbshardError);
  return e as EmbshardError;
}

describe('checkpoints of dynamic tables with spill', () => {
  const CASES: [OptimizerConfig, Partial<TableConfig>][] = [
    [{ type: 'adam', lr: 0.05 }, { eviction: 'lru' }],
    [{ type: 'rowwise_adagrad', lr: 0.1 }, { eviction: 'lfu', dtype: 'fp16', admission: { minCount: 2, candidates: 100 } }],
  ];
  for (const [opt, extra] of CASES)
    it(`${opt.type} / ${extra.eviction}${extra.dtype ? ' / ' + extra.dtype : ''}: saved, loaded elsewhere, trains on bitwise like the saved one and like a table holding every id`, async () => {
      const r = rng(77);
      const pool = Array.from({ length: 300 }, (_, k) => BigInt.asIntN(64, BigInt(k + 1) * 0x9e3779b97f4a7c15n));
      const small = make(40, opt, { ...extra, spill: { path: fresh('a') } });
      const big = make(400, opt, extra);
      const ck = join(fresh('ck'), 'ck');
      let loaded: EmbeddingCollection | undefined;
      try {
        // with minCount 1 a spilled id comes back at its next sighting, as a held id would be used: the
        // table trains like one holding every id (with minCount 2 it needs two sightings again)
        const every = extra.admission ? [] : [big];
        for (let s = 0; s < 15; s++) await stepAll([small, ...every], r, pool, `step ${s}`);
        expect(small.stats()["d"]!.spilled, "rows are spilled when saved").toBeGreaterThan(10);
        await small.save(ck);
        const m = JSON.parse(readFileSync(join(ck, 'manifest.json'), 'utf8'));
        expect(m.dynamic[0].spill.records).toBe(small.stats()['d']!.spilled);
        loaded = await EmbeddingCollection.load(ck, { spillPath: fresh('b') });
        expect(held(loaded)).toEqual(held(small));
        for (let s = 15; s < 35; s++) await stepAll([small, loaded, ...every], r, pool, `step ${s}`);
        expect(held(loaded)).toEqual(held(small));
        const ids = small.heldIds('d');
        if (every.length > 0) {
          expect(small.readRows('d', ids)).toEqual(big.readRows('d', ids));
          expect(small.readState('d', ids)).toEqual(big.readState('d', ids));
        }
        expect(small.stats()['d']!.evictions).toBeGreaterThan(100);
      } finally {
        small.dispose();
        big.dispose();
        loaded?.dispose();
      }
    });

  it('a missing, truncated or altered spill copy, or one the manifest does not list, is CHECKPOINT_CORRUPT', async () => {
    const r = rng(5);
    const pool = Array.from({ length: 200 }, (_, k) => BigInt(k) * 1000003n - 77n);
    const ec = make(10, { type: 'adagrad', lr: 0.1 }, { spill: { path: fresh('c') } });
    const ck = join(fresh('ck'), 'ck');
    try {
      for (let s = 0; s < 6; s++) await stepAll([ec], r, pool, `step ${s}`);
      await ec.save(ck);
    } finally {
      ec.dispose();
    }
    const file = join(ck, 'spill-0.bin');
    const good = readFileSync(file);
    const manifest = readFileSync(join(ck, 'manifest.json'), 'utf8');
    expect(statSync(file).size).toBe(JSON.parse(manifest).dynamic[0].spill.bytes);
    const load = async () => (await EmbeddingCollection.load(ck, { spillPath: fresh('l') })).dispose();
    await load(); // the untouched checkpoint loads
    const faults: [string, () => void][] = [
      ['truncated', () => truncateSync(file, good.length - 7)],
      ['a flipped bit in a record', () => writeFileSync(file, Buffer.from(good).fill(good[40]! ^ 0x04, 40, 41))],
      ['a flipped bit in the header', () => writeFileSync(file, Buffer.from(good).fill(good[9]! ^ 0x01, 9, 10))],
      // the manifest edits are sealed again, so the file checks are what refuse them
      ['missing', () => writeFileSync(join(ck, 'manifest.json'), sealedManifest(manifestFields(manifest.replace('"spill-0.bin"', '"spill-9.bin"'))))],
      ['not listed', () => writeFileSync(join(ck, 'manifest.json'), sealedManifest({ ...manifestFields(manifest), dynamic: manifestFields(manifest).dynamic.map(({ spill: _, ...d }: { spill: unknown }) => d) }))],
    ];
    for (const [what, harm] of faults) {
      harm();
      const e = await err(load);
      expect([what, e.code]).toEqual([what, 'CHECKPOINT_CORRUPT']);
      writeFileSync(file, good);
      writeFileSync(join(ck, 'manifest.json'), manifest);
    }
    await load();
  });

  it('killed while it trains and saves: the last finished save loads, bitwise what that many steps give', async () => {
    compileTs();
    const ckpt = join(fresh('kill'), 'ck');
    const lastSaved = await killAfterSaves(join(root, 'test', 'storage', 'kill-spill.mjs'), [join(root, 'dist', 'lib', 'index.js'), fresh('run'), ckpt], 6 * SAVE_EVERY, 3);
    const loaded = await EmbeddingCollection.load(ckpt, { spillPath: fresh('loaded') });
    const twin = new EmbeddingCollection(killConfig(fresh('twin')));
    try {
      expect([lastSaved, lastSaved + SAVE_EVERY]).toContain(loaded.step);
      const at = loaded.step;
      for (let s = 0; s < at; s++) await killTrain(twin, JaggedBatch, s);
      expect(twin.stats()['u']!.spilled).toBeGreaterThan(0);
      const all = (ec: EmbeddingCollection) => {
        const ids = ec.heldIds('u');
        return { ids, stats: ec.stats(), rows: ec.readRows('u', ids), state: ec.readState('u', ids) };
      };
      expect(all(loaded)).toEqual(all(twin));
      for (let s = at; s < at + 4; s++) {
        await killTrain(twin, JaggedBatch, s);
        await killTrain(loaded, JaggedBatch, s);
      }
      expect(all(loaded)).toEqual(all(twin));
    } finally {
      twin.dispose();
      loaded.dispose();
    }
  });
});

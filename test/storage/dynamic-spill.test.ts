// dynamic-spill.test.ts — dynamic tables with `spill: { path }`: a table far smaller than its ids, whose
// evicted rows go to the spill file and come back, trains bit-identically to a dynamic table whose
// capacity holds every id (no eviction at all), under every optimizer, LRU and LFU, fp32 and fp16; and
// the spill faults: a bad path (IO_ERROR naming the field, at construction), bad spill configs, an altered
// spill record (CHECKPOINT_CORRUPT on the step that reads it back, before anything changes, and on a save()
// that would copy it; the batch's other dynamic tables keep what the step gave them, rows included); a
// collection that fails to take one spill file leaves the others it opened unlocked.
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError, JaggedBatch, type OptimizerConfig, type TableConfig } from '../../lib/index.js';
import { rng } from '../embedding/oracle.js';

const dir = mkdtempSync(join(tmpdir(), 'embshard-spill-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function make(capacity: number, opt: OptimizerConfig, extra: Partial<TableConfig>): EmbeddingCollection {
  return new EmbeddingCollection({
    tables: [{ name: 'd', rows: 'dynamic', capacity, dim: 4, features: ['a', 'b'], pooling: 'sum', init: { type: 'uniform', low: -0.5, high: 0.5 }, ...extra } as TableConfig],
    optimizer: opt,
    seed: 11,
  });
}

function batch(r: () => number, pool: bigint[], B: number): JaggedBatch {
  const lengths = Int32Array.from({ length: 2 * B }, () => Math.floor(r() * 5));
  const n = lengths.reduce((s, x) => s + x, 0);
  const ids = BigInt64Array.from({ length: n }, () => pool[Math.floor(r() * pool.length)]!);
  return JaggedBatch.fromLengths({ features: ['a', 'b'], batchSize: B, lengths, ids });
}

/** The EmbshardError `f` (sync or async) raised. */
async function err(f: () => unknown): Promise<EmbshardError> {
  const e: unknown = await Promise.resolve().then(f).then(() => undefined, (x: unknown) => x);
  expect(e, 'an EmbshardError was raised').toBeInstanceOf(EmbshardError);
  return e as EmbshardError;
}

describe('a dynamic table with spill trains like one whose capacity holds every id', () => {
  const OPTS: OptimizerConfig[] = [{ type: 'sgd', lr: 0.1 }, { type: 'adagrad', lr: 0.1 }, { type: 'rowwise_adagrad', lr: 0.1 }, { type: 'adam', lr: 0.05 }];
  for (const [i, opt] of OPTS.entries())
    it(`${opt.type} / ${i % 2 ? 'lfu' : 'lru'} / ${i === 3 ? 'fp16' : 'fp32'}: bitwise outputs, rows and state`, async () => {
      const r = rng(40 + i);
      const pool = Array.from({ length: 300 }, (_, k) => BigInt.asIntN(64, BigInt(k + 1) * 0x9e3779b97f4a7c15n));
      const extra: Partial<TableConfig> = { eviction: i % 2 ? 'lfu' : 'lru', ...(i === 3 ? { dtype: 'fp16' } : {}) };
      const small = make(40, opt, { ...extra, spill: { path: dir } });
      const big = make(400, opt, extra);
      try {
        for (let step = 0; step < 25; step++) {
          const b = batch(r, pool, 4); // at most 40 ids a step: every one fits
          const [o1, o2] = [await small.forward(b), await big.forward(b)];
          expect(o1.pooled, `step ${step} pooled`).toEqual(o2.pooled);
          const g = Float32Array.from({ length: o1.pooled.length }, () => r() * 2 - 1);
          await small.backward(o1, { pooled: g });
          await big.backward(o2, { pooled: g });
        }
        const s = small.stats()['d']!;
        expect(s.evictions, 'the small table evicted').toBeGreaterThan(100);
        expect(s.spilled).toBe(s.evictions - (s.admissions - big.stats()['d']!.admissions));
        expect(big.stats()['d']!.evictions).toBe(0);
        const held = small.heldIds('d');
        expect(small.readRows('d', held)).toEqual(big.readRows('d', held));
        expect(small.readState('d', held)).toEqual(big.readState('d', held));
      } finally {
        small.dispose();
        big.dispose();
      }
    });
});

describe('spill faults', () => {
  it('bad configs and an unusable path give typed errors naming the field', async () => {
    expect((await err(() => make(4, { type: 'sgd', lr: 0.1 }, { spill: { path: join(dir, 'no', 'such') } }))).code).toBe('IO_ERROR');
    expect((await err(() => make(4, { type: 'sgd', lr: 0.1 }, { spill: { path: join(dir, 'no', 'such') } }))).message).toContain('tables[0].spill.path');
    const bad = await err(() => make(4, { type: 'sgd', lr: 0.1 }, { spill: { path: dir, size: 3 } as never }));
    expect([bad.code, bad.message.includes('tables[0].spill.size: unknown field')]).toEqual(['INVALID_CONFIG', true]);
    const empty = await err(() => make(4, { type: 'sgd', lr: 0.1 }, { spill: { path: '' } }));
    expect([empty.code, empty.message.includes('tables[0].spill.path')]).toEqual(['INVALID_CONFIG', true]);
    // a spill file is held by one live table: a second collection on the same folder is refused
    const sub = mkdtempSync(join(dir, 'lock-'));
    const first = make(4, { type: 'sgd', lr: 0.1 }, { spill: { path: sub } });
    const second = await err(() => make(4, { type: 'sgd', lr: 0.1 }, { spill: { path: sub } }));
    expect([second.code, second.message.includes('tables[0].spill.path'), second.message.includes('in use')]).toEqual(['IO_ERROR', true, true]);
    first.dispose();
    const numeric = await err(() => new EmbeddingCollection({ tables: [{ name: 'd', rows: 10, dim: 4, spill: { path: dir } }] }));
    expect([numeric.code, numeric.message.includes('tables[0].spill')]).toEqual(['INVALID_CONFIG', true]);
  });

  it('a collection that cannot take one spill file keeps none of the others locked', async () => {
    const [p0, p1, p2] = [mkdtempSync(join(dir, 'l0-')), mkdtempSync(join(dir, 'l1-')), mkdtempSync(join(dir, 'l2-'))];
    const config = (second: string) => ({
      tables: [
        { name: 'x', rows: 'dynamic', capacity: 2, dim: 2, features: ['a'], spill: { path: p0 } },
        { name: 'y', rows: 'dynamic', capacity: 2, dim: 2, features: ['b'], spill: { path: second } },
      ] as TableConfig[],
    });
    const other = new EmbeddingCollection({ tables: [{ name: 'u', rows: 4, dim: 2 }, { name: 'v', rows: 'dynamic', capacity: 2, dim: 2, spill: { path: p1 } }] });
    try {
      // p1/spill-1.bin is in use: this one fails, and leaves p0/spill-0.bin free
      const e = await err(() => new EmbeddingCollection(config(p1)));
      expect([e.code, e.message.includes('tables[1].spill.path')]).toEqual(['IO_ERROR', true]);
      new EmbeddingCollection(config(p2)).dispose();
    } finally {
      other.dispose();
    }
  });

  it("a collection that cannot take its spill file leaves its disk tables' files free", async () => {
    const [disk, p1, p2] = [mkdtempSync(join(dir, 'd-')), mkdtempSync(join(dir, 's1-')), mkdtempSync(join(dir, 's2-'))];
    const config = (spill: string) => ({
      tables: [
        { name: 'big', rows: 64, dim: 2, features: ['a'], storage: { kind: 'disk' as const, path: disk, cacheBytes: 4096 } },
        { name: 'y', rows: 'dynamic' as const, capacity: 2, dim: 2, features: ['b'], spill: { path: spill } },
      ] as TableConfig[],
    });
    const holder = new EmbeddingCollection({ tables: [{ name: 'u', rows: 4, dim: 2 }, { name: 'v', rows: 'dynamic', capacity: 2, dim: 2, spill: { path: p1 } }] });
    try {
      // p1/spill-1.bin is in use: this one fails after its disk table's file was made and locked ...
      const e = await err(() => new EmbeddingCollection(config(p1)));
      expect([e.code, e.message.includes('tables[1].spill.path')]).toEqual(['IO_ERROR', true]);
      // ... and has given that file back: the same disk table with a free spill path opens at once
      new EmbeddingCollection(config(p2)).dispose();
    } finally {
      holder.dispose();
    }
  });

  it('an altered spill record is CHECKPOINT_CORRUPT on the step that reads it back, and on save()', async () => {
    const sub = mkdtempSync(join(dir, 'c-'));
    const ec = new EmbeddingCollection({ tables: [{ name: 'd', rows: 'dynamic', capacity: 2, dim: 2, features: ['a'], spill: { path: sub } }], optimizer: { type: 'adagrad', lr: 0.1 } });
    try {
      const step = async (ids: bigint[]) => {
        const out = await ec.forward(JaggedBatch.fromLengths({ features: ['a'], batchSize: 1, lengths: Int32Array.of(ids.length), ids: BigInt64Array.from(ids) }));
        await ec.backward(out, { pooled: Float32Array.of(1, -1) });
      };
      await step([1n, 2n]);
      await step([3n, 4n]); // 1 and 2 spilled, in that order
      expect(ec.stats()['d']!.spilled).toBe(2);
      await step([1n]); // 1 comes back as it was trained
      await step([3n, 4n]); // 1 spilled again (its newest record)
      await step([1n, 5n]);
      expect([...ec.heldIds('d')].sort()).toEqual([1n, 5n]);
      // alter id 2's record (the second one: 8 + 4·(2 + 2) + 4 = 28 bytes each)
      const file = join(sub, readdirSync(sub)[0]!);
      const bytes = readFileSync(file);
      bytes[28 + 9]! ^= 0x10;
      writeFileSync(file, bytes);
      const before = { stats: ec.stats(), held: ec.heldIds('d'), rows: ec.readRows('d', [1n, 5n]), state: ec.readState('d', [1n, 5n]) };
      const e = await err(() => step([2n]));
      expect(e.code).toBe('CHECKPOINT_CORRUPT');
      // the record is verified before the map changes: the table is exactly as it was
      expect({ stats: ec.stats(), held: ec.heldIds('d'), rows: ec.readRows('d', [1n, 5n]), state: ec.readState('d', [1n, 5n]) }).toEqual(before);
      // save() verifies every spilled record it copies: the altered one is not carried into a checkpoint
      const s = await err(() => ec.save(join(sub, 'ck')));
      expect([s.code, s.message.includes('spill')]).toEqual(['CHECKPOINT_CORRUPT', true]);
      expect(existsSync(join(sub, 'ck'))).toBe(false);
    } finally {
      ec.dispose();
    }
  });

  it('an altered record of one table fails the step; the batch\'s other dynamic tables keep their admitted rows and spilled ones', async () => {
    const sub = mkdtempSync(join(dir, 'two-'));
    const table = (name: string, feature: string, capacity: number, spill: boolean): TableConfig =>
      ({ name, rows: 'dynamic', capacity, dim: 2, features: [feature], ...(spill ? { spill: { path: sub } } : {}) }) as TableConfig;
    const ec = new EmbeddingCollection({ tables: [table('x', 'a', 2, true), table('y', 'b', 2, true)], optimizer: { type: 'sgd', lr: 0.1 }, seed: 5 });
    // oracle: the same tables, fresh (an admitted row starts from its id's init values)
    const roomy = new EmbeddingCollection({ tables: [table('x', 'a', 2, false), table('y', 'b', 2, false)], optimizer: { type: 'sgd', lr: 0.1 }, seed: 5 });
    const b = (xa: bigint[], yb: bigint[]) => JaggedBatch.fromLengths({ features: ['a', 'b'], batchSize: 1, lengths: Int32Array.of(xa.length, yb.length), ids: BigInt64Array.from([...xa, ...yb]) });
    try {
      const step = async (xa: bigint[], yb: bigint[]) => {
        const out = await ec.forward(b(xa, yb));
        await ec.backward(out, { pooled: Float32Array.of(1, -1, 0.5, 2) });
      };
      await step([1n, 2n], [1n, 2n]);
      await step([3n, 4n], [3n, 4n]); // 1 and 2 spilled by both tables
      const trained = ec.readRows('x', [3n, 4n]);
      // alter y's first record
      const file = join(sub, 'spill-1.bin');
      const bytes = readFileSync(file);
      bytes[9]! ^= 0x10;
      writeFileSync(file, bytes);
      // x admits 5 and 6 (evicting 3 and 4 to its spill file); y would read 1 and 2 back
      const e = await err(() => step([5n, 6n], [1n, 2n]));
      expect(e.code).toBe('CHECKPOINT_CORRUPT');
      expect([...ec.heldIds('x')].sort()).toEqual([5n, 6n]);
      await roomy.forward(b([5n, 6n], []));
      expect(ec.readRows('x', [5n, 6n])).toEqual(roomy.readRows('x', [5n, 6n]));
      expect(ec.stats()['x']!.spilled).toBe(4); // 1, 2, 3 and 4
      // 3 and 4 come back from x's spill file as they were trained
      await ec.forward(b([3n, 4n], []));
      expect(ec.readRows('x', [3n, 4n])).toEqual(trained);
    } finally {
      ec.dispose();
      roomy.dispose();
    }
  });

  it("a table's spill file is read only for its own features' ids: an altered record of x does not fail a step whose id reaches x only through y's feature", async () => {
    const sub = mkdtempSync(join(dir, 'own-'));
    const table = (name: string, feature: string, spill: boolean): TableConfig =>
      ({ name, rows: 'dynamic', capacity: 2, dim: 2, features: [feature], ...(spill ? { spill: { path: sub } } : {}) }) as TableConfig;
    const ec = new EmbeddingCollection({ tables: [table('x', 'a', true), table('y', 'b', true)], optimizer: { type: 'sgd', lr: 0.1 }, seed: 5 });
    const roomy = new EmbeddingCollection({ tables: [table('x', 'a', false), table('y', 'b', false)], optimizer: { type: 'sgd', lr: 0.1 }, seed: 5 });
    const b = (xa: bigint[], yb: bigint[]) => JaggedBatch.fromLengths({ features: ['a', 'b'], batchSize: 1, lengths: Int32Array.of(xa.length, yb.length), ids: BigInt64Array.from([...xa, ...yb]) });
    try {
      for (const ids of [[1n, 2n], [3n, 4n]]) {
        const out = await ec.forward(b(ids, []));
        await ec.backward(out, { pooled: Float32Array.of(1, -1, 0, 0) });
      }
      expect(ec.stats()['x']!.spilled).toBe(2); // x spilled 1 and 2; y holds nothing
      const file = join(sub, 'spill-0.bin');
      const bytes = readFileSync(file);
      bytes[9]! ^= 0x10;
      writeFileSync(file, bytes);
      // ids 1 and 2 are y's here (feature b): y admits them fresh, x's altered records are not read
      await ec.forward(b([3n, 4n], [1n, 2n]));
      await roomy.forward(b([], [1n, 2n]));
      expect(ec.readRows('y', [1n, 2n])).toEqual(roomy.readRows('y', [1n, 2n]));
    } finally {
      ec.dispose();
      roomy.dispose();
    }
  });
});

// tamper.test.ts — checkpoints altered after they were written: a flipped bit at positions spread over
// every file (manifest, tables, dynamic tables' id maps, a trainer's manifest and dense file), a file cut
// short or grown by a byte, two checkpoints' payloads swapped, one dynamic table's id map put in place of
// another's: every load refused with CHECKPOINT_CORRUPT naming the file (an id map's file: the checkpoint,
// the file and its table, whether its manifest entry or the map's own checks refuse it), and the
// collection that saved it unchanged. Manifests of another version (newer or older) or with unknown
// fields: refused, the message naming the field.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError, JaggedBatch } from '../../lib/index.js';
import { Trainer, embeddingsFor } from '../../lib/train/index.js';
import { SyntheticSource } from '../../lib/data/index.js';
import { manifestFields, sealedManifest } from '../manifest-seal.js';
import { tempDir } from '../temp-dir.js';
import { trainerSteps } from './child.js';

const tmp = tempDir('ckpt-tamper');

const config = {
  tables: [
    { name: 'd1', rows: 'dynamic' as const, capacity: 16, dim: 4, features: ['f1'], admission: { minCount: 1, candidates: 8 } },
    { name: 'd2', rows: 'dynamic' as const, capacity: 16, dim: 4, features: ['f2'], admission: { minCount: 1, candidates: 8 } },
    { name: 's', rows: 40, dim: 3, pooling: 'mean' as const, dtype: 'bf16' as const },
  ],
  optimizer: { type: 'adagrad' as const, lr: 0.1 },
  seed: 3,
};

/** A collection after `steps` steps of a fixed sequence (ids drawn by a small LCG). */
async function trained(steps: number): Promise<EmbeddingCollection> {
  const ec = new EmbeddingCollection(config);
  let x = 7;
  const next = () => (x = (x * 48271) % 2147483647);
  for (let s = 0; s < steps; s++) {
    const B = 4, lengths = new Int32Array(3 * B).fill(2);
    const ids = BigInt64Array.from({ length: 6 * B }, (_, i) => BigInt(next() % (i < 4 * B ? 30 : 40)));
    const out = await ec.forward(JaggedBatch.fromLengths({ features: ['f1', 'f2', 's'], batchSize: B, lengths, ids }));
    await ec.backward(out, { pooled: Float32Array.from({ length: out.pooled.length }, () => (next() % 1000) / 1000 - 0.5) });
  }
  return ec;
}

/** Everything a collection holds, as text: step, every table's rows and state (dynamic: of its held ids). */
function contents(ec: EmbeddingCollection): string {
  const b64 = (a: Float32Array | BigInt64Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64');
  return [String(ec.step), ...ec.config.tables.flatMap((t) => {
    const ids = t.dynamic ? ec.heldIds(t.name) : BigInt64Array.from({ length: t.rows }, (_, i) => BigInt(i));
    return [b64(ids), b64(ec.readRows(t.name, ids)), b64(ec.readState(t.name, ids))];
  })].join(':');
}

/** The outcome of loading `dir`: 'loaded as <contents>' or '<code>: <message>'. */
async function loadOutcome(dir: string): Promise<string> {
  try {
    const ec = await EmbeddingCollection.load(dir);
    const s = contents(ec);
    ec.dispose();
    return `loaded as ${s}`;
  } catch (e) {
    expect(e).toBeInstanceOf(EmbshardError);
    return `${(e as EmbshardError).code}: ${(e as Error).message}`;
  }
}

/** The tables whose id maps a checkpoint of `config` holds, by file (dynamic-<table index>.bin). */
const MAP_TABLES: Record<string, string> = { 'dynamic-0.bin': 'd1', 'dynamic-1.bin': 'd2' };

/** What a refused id map's message starts with: the checkpoint, the file and its table (undefined for other files). */
function mapNamed(dir: string, file: string): RegExp | undefined {
  const table = MAP_TABLES[file];
  const quote = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return table === undefined ? undefined : new RegExp(`^CHECKPOINT_CORRUPT: checkpoint '${quote(dir)}': ${quote(file)} \\(table '${table}'\\): \\S`);
}

/** Positions spread over a file of n bytes: the first, the last, and 30 between. */
function positions(n: number): number[] {
  return [...new Set([0, n - 1, ...Array.from({ length: 30 }, (_, i) => Math.floor(((i + 0.5) * n) / 30))])];
}

/** Runs `check` with file `path` altered to `bytes`, then puts the original back. */
async function altered<T>(path: string, bytes: Buffer, check: () => Promise<T>): Promise<T> {
  const original = readFileSync(path);
  writeFileSync(path, bytes);
  try {
    return await check();
  } finally {
    writeFileSync(path, original);
  }
}

describe('a collection checkpoint altered after it was written', () => {
  it('a flipped bit anywhere in any file, a byte cut or added: CHECKPOINT_CORRUPT naming the file; the saved collection unchanged', async () => {
    const ec = await trained(12);
    expect(ec.heldIds('d1').length).toBeGreaterThan(0);
    const dir = join(tmp.dir, 'flip');
    await ec.save(dir);
    const before = contents(ec);
    const files = readdirSync(dir).sort();
    expect(files).toEqual(['dynamic-0.bin', 'dynamic-1.bin', 'manifest.json', 'tables.bin']);
    expect(await loadOutcome(dir)).toBe(`loaded as ${before}`);
    const text = readFileSync(join(dir, 'manifest.json'), 'utf8');
    for (const file of files) {
      const path = join(dir, file), orig = readFileSync(path);
      // an id map's file (checked by its manifest entry, then by the map itself) is named with its table
      const named = mapNamed(dir, file) ?? new RegExp(`^CHECKPOINT_CORRUPT: .*${file.replace('.', '\\.')}`);
      for (const i of positions(orig.length)) {
        const b = Buffer.from(orig);
        b[i]! ^= 1 << i % 8;
        // a manifest whose text still says the same (1e-8 → 1E-8) is the same checkpoint
        let same = false;
        if (file === 'manifest.json') same = (() => { try { return JSON.stringify(JSON.parse(b.toString('utf8'))) === JSON.stringify(JSON.parse(text)); } catch { return false; } })();
        const got = await altered(path, b, () => loadOutcome(dir));
        if (same) expect(got).toBe(`loaded as ${before}`);
        else expect([file, i, got]).toEqual([file, i, expect.stringMatching(named)]);
      }
      expect([file, await altered(path, orig.subarray(0, orig.length - 1), () => loadOutcome(dir))]).toEqual([file, expect.stringMatching(named)]);
      expect([file, await altered(path, Buffer.concat([orig, Buffer.from([0])]), () => loadOutcome(dir))]).toEqual([file, expect.stringMatching(named)]);
    }
    expect(contents(ec)).toBe(before);
    expect(await loadOutcome(dir)).toBe(`loaded as ${before}`);
    ec.dispose();
  }, 120_000);

  it("another checkpoint's payload, and one dynamic table's id map in place of another's: CHECKPOINT_CORRUPT naming the file", async () => {
    const a = await trained(6), b = await trained(9);
    const da = join(tmp.dir, 'swap-a'), db = join(tmp.dir, 'swap-b');
    await a.save(da);
    await b.save(db);
    expect(readFileSync(join(da, 'tables.bin')).length).toBe(readFileSync(join(db, 'tables.bin')).length);
    for (const file of ['tables.bin', 'dynamic-0.bin', 'dynamic-1.bin'])
      expect(await altered(join(da, file), readFileSync(join(db, file)), () => loadOutcome(da))).toMatch(mapNamed(da, file) ?? new RegExp(`^CHECKPOINT_CORRUPT: .*${file.replace('.', '\\.')}`));
    expect(await altered(join(da, 'dynamic-0.bin'), readFileSync(join(da, 'dynamic-1.bin')), () => loadOutcome(da))).toMatch(mapNamed(da, 'dynamic-0.bin')!);
    expect(await loadOutcome(da)).toBe(`loaded as ${contents(a)}`);
    a.dispose();
    b.dispose();
  });
});

function trainer(): Trainer {
  const src = new SyntheticSource({ batchSize: 16, cardinalities: [50, 60], seed: 1 });
  const emb = embeddingsFor(src.features, src.tableRows, { dim: 4, optimizer: { type: 'adam', lr: 0.02 }, seed: 3 });
  return new Trainer({ model: { denseIn: 13, bottom: [8, 4], top: [8, 1], numSparse: 2, embDim: 4, interaction: 'dot' }, embeddings: emb, optimizer: { type: 'adam', lr: 0.02 }, seed: 7 });
}

async function trainerOutcome(dir: string): Promise<string> {
  try {
    const t = await Trainer.load(dir);
    const s = `${trainerSteps(t)}:${Buffer.from(t.dense.params.buffer).toString('base64')}`;
    t.dispose();
    return `loaded as ${s}`;
  } catch (e) {
    expect(e).toBeInstanceOf(EmbshardError);
    return `${(e as EmbshardError).code}: ${(e as Error).message}`;
  }
}

describe('a trainer checkpoint altered after it was written', () => {
  it('a flipped bit in trainer.json or dense.bin, a byte cut or added: CHECKPOINT_CORRUPT naming the file', async () => {
    const t = trainer();
    const src = new SyntheticSource({ batchSize: 16, cardinalities: [50, 60], seed: 1 });
    for (let k = 0; k < 3; k++) await t.step(src.batch(k));
    const dir = join(tmp.dir, 'trainer');
    await t.save(dir);
    const good = await trainerOutcome(dir);
    expect(good.startsWith('loaded as 3:')).toBe(true);
    const text = readFileSync(join(dir, 'trainer.json'), 'utf8');
    for (const file of ['trainer.json', 'dense.bin']) {
      const path = join(dir, file), orig = readFileSync(path);
      const named = new RegExp(`^CHECKPOINT_CORRUPT: .*${file.replace('.', '\\.')}`);
      for (const i of positions(orig.length)) {
        const b = Buffer.from(orig);
        b[i]! ^= 1 << i % 8;
        let same = false;
        if (file === 'trainer.json') same = (() => { try { return JSON.stringify(JSON.parse(b.toString('utf8'))) === JSON.stringify(JSON.parse(text)); } catch { return false; } })();
        const got = await altered(path, b, () => trainerOutcome(dir));
        if (same) expect(got).toBe(good);
        else expect([file, i, got]).toEqual([file, i, expect.stringMatching(named)]);
      }
      expect(await altered(path, orig.subarray(0, orig.length - 1), () => trainerOutcome(dir))).toMatch(named);
      expect(await altered(path, Buffer.concat([orig, Buffer.from([0])]), () => trainerOutcome(dir))).toMatch(named);
    }
    expect(await trainerOutcome(dir)).toBe(good);
    t.dispose();
  }, 60_000);
});

describe('manifests of another version, or with fields this version does not know', () => {
  it('a collection manifest: refused, naming the version (newer: load with a newer embshard) or the field', async () => {
    const ec = await trained(1);
    const dir = join(tmp.dir, 'versions');
    await ec.save(dir);
    const path = join(dir, 'manifest.json');
    const fields = manifestFields(readFileSync(path, 'utf8'));
    const outcome = (f: object) => altered(path, Buffer.from(sealedManifest(f)), () => loadOutcome(dir));
    expect(await outcome({ ...fields, version: 2 })).toMatch(/^CHECKPOINT_CORRUPT: .*version is 2, newer than this embshard reads \(1\)/);
    expect(await outcome({ ...fields, version: 0 })).toMatch(/^CHECKPOINT_CORRUPT: .*version is 0, not 1/);
    expect(await outcome({ ...fields, format: 'other' })).toMatch(/^CHECKPOINT_CORRUPT: .*format is "other"/);
    expect(await outcome({ ...fields, step: -1 })).toMatch(/^CHECKPOINT_CORRUPT: .*step is -1/);
    expect(await outcome({ ...fields, payload: { file: 'tables.bin' } })).toMatch(/^CHECKPOINT_CORRUPT: .*payload is not a file entry/);
    expect(await outcome({ ...fields, comment: 'x' })).toMatch(/^CHECKPOINT_CORRUPT: .*unknown field 'comment'/);
    expect(await outcome(fields)).toBe(`loaded as ${contents(ec)}`);
    ec.dispose();
  });

  it('a trainer manifest: refused, naming the version or the field', async () => {
    const t = trainer();
    const dir = join(tmp.dir, 'trainer-versions');
    await t.save(dir);
    const path = join(dir, 'trainer.json');
    const fields = manifestFields(readFileSync(path, 'utf8'));
    const outcome = (f: object) => altered(path, Buffer.from(sealedManifest(f)), () => trainerOutcome(dir));
    expect(await outcome({ ...fields, version: 2 })).toMatch(/^CHECKPOINT_CORRUPT: .*version is 2, newer than this embshard reads \(1\)/);
    expect(await outcome({ ...fields, steps: 1.5 })).toMatch(/^CHECKPOINT_CORRUPT: .*steps is 1\.5/);
    expect(await outcome({ ...fields, dense: { ...fields.dense, file: '../dense.bin' } })).toMatch(/^CHECKPOINT_CORRUPT: .*dense\.file is not a file name/);
    expect(await outcome({ ...fields, note: 1 })).toMatch(/^CHECKPOINT_CORRUPT: .*unknown field 'note'/);
    expect((await outcome(fields)).startsWith('loaded as 0:')).toBe(true);
    t.dispose();
  });
});

// checkpoint.test.ts — save/load round trips (tables, optimizer state, step: training continues
// identically), atomic replacement (a save cut off between its renames included), missing / truncated / corrupt
// checkpoints, and the check that a checkpoint could be written before a run starts.
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError } from '../../lib/index.js';
import { checkpointWritable } from '../../lib/checkpoint.js';
import type { CollectionConfig } from '../../lib/index.js';
import { rng } from './oracle.js';
import { randomBatch, randomGrads, snapshot } from './helpers.js';

const root = mkdtempSync(join(tmpdir(), 'embshard-ckpt-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const config: CollectionConfig = {
  tables: [
    { name: 'a', rows: 50, dim: 8, pooling: 'sum' },
    { name: 'b', rows: 20, dim: 5, pooling: 'mean', dtype: 'bf16', features: ['b1', 'b2'] },
    { name: 'c', rows: 9, dim: 3, pooling: 'none', dtype: 'fp16' },
  ],
  optimizer: { type: 'adam', lr: 0.01 },
  seed: 11,
};

async function train(ec: EmbeddingCollection, steps: number, seed: number): Promise<Float32Array[]> {
  const r = rng(seed);
  const outs: Float32Array[] = [];
  for (let s = 0; s < steps; s++) {
    const { batch, ob } = randomBatch(ec, r, { B: 5, maxLen: 4 });
    const out = await ec.forward(batch);
    outs.push(out.pooled.slice()); // backward consumes the output (its arrays are detached)
    const g = randomGrads(ec, ob, r);
    await ec.backward(out, { pooled: g.pooled, sequences: g.sequences });
  }
  return outs;
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'no error';
  } catch (e) {
    expect(e).toBeInstanceOf(EmbshardError);
    return (e as EmbshardError).code;
  }
}

describe('checkpoints', () => {
  it('round trip: tables, optimizer state and step; training continues exactly as without the save', async () => {
    const a = new EmbeddingCollection(config);
    await train(a, 3, 1);
    const dir = join(root, 'ck1');
    await a.save(dir);
    const b = await EmbeddingCollection.load(dir);
    expect(b.step).toBe(3);
    expect(b.config).toEqual(a.config);
    const sa = snapshot(a), sb = snapshot(b);
    sa.forEach((x, k) => expect(Array.from(sb[k]!)).toEqual(Array.from(x)));
    const oa = await train(a, 2, 2);
    const ob = await train(b, 2, 2);
    oa.forEach((x, k) => expect(Array.from(ob[k]!)).toEqual(Array.from(x)));
    snapshot(a).forEach((x, k) => expect(Array.from(snapshot(b)[k]!)).toEqual(Array.from(x)));
    a.dispose();
    b.dispose();
  });

  it('save replaces an existing checkpoint atomically and leaves no temporary folders', async () => {
    const a = new EmbeddingCollection(config);
    const dir = join(root, 'ck2');
    await a.save(dir);
    await train(a, 1, 3);
    await a.save(dir);
    const b = await EmbeddingCollection.load(dir);
    expect(b.step).toBe(1);
    expect(readdirSync(root).filter((n) => n.includes('.tmp-') || n.includes('.old-'))).toEqual([]);
    a.dispose();
    b.dispose();
  });

  // A process killed between the save's two renames leaves no folder at the path: the old checkpoint aside
  // (.<name>.old-<tag>) and the complete new one (.<name>.tmp-<tag>). A pid above Linux's PID_MAX_LIMIT
  // (2^22) names a writer that cannot be alive.
  it('a save cut off between its two renames: load reads the new checkpoint; the next save completes the swap and removes what dead saves left', async () => {
    const a = new EmbeddingCollection(config);
    const dir = join(root, 'ck3'), other = join(root, 'ck3-new');
    await train(a, 1, 4);
    await a.save(dir);
    await train(a, 1, 5);
    await a.save(other);
    const atTwo = snapshot(a);
    renameSync(dir, join(root, '.ck3.old-4194400-0a0b0c0d'));
    renameSync(other, join(root, '.ck3.tmp-4194400-0a0b0c0d'));
    mkdirSync(join(root, '.ck3.tmp-4194401-01020304')); // a dead save's unfinished folder
    writeFileSync(join(root, '.ck3.tmp-4194401-01020304', 'tables.bin'), 'partial');
    mkdirSync(join(root, `.ck3.tmp-${process.pid}-05060708`)); // a live writer's (this process) is left alone
    const b = await EmbeddingCollection.load(dir);
    expect(b.step).toBe(2);
    snapshot(b).forEach((x, k) => expect(Array.from(x)).toEqual(Array.from(atTwo[k]!)));
    b.dispose();
    await train(a, 1, 6);
    await a.save(dir);
    expect(readdirSync(root).filter((n) => n.startsWith('.ck3.')).sort()).toEqual([`.ck3.tmp-${process.pid}-05060708`]);
    rmSync(join(root, `.ck3.tmp-${process.pid}-05060708`), { recursive: true });
    const c = await EmbeddingCollection.load(dir);
    expect(c.step).toBe(3);
    snapshot(c).forEach((x, k) => expect(Array.from(x)).toEqual(Array.from(snapshot(a)[k]!)));
    c.dispose();
    a.dispose();
  });

  it('missing, truncated and corrupt checkpoints are rejected', async () => {
    const a = new EmbeddingCollection(config);
    await train(a, 1, 4);
    expect(await codeOf(EmbeddingCollection.load(join(root, 'nope')))).toBe('CHECKPOINT_MISSING');
    // a folder that is not a path string: INVALID_ARGUMENT, before anything is read or written
    for (const dir of [undefined, null, 0, '', {}])
      for (const call of [() => a.save(dir as never), () => EmbeddingCollection.load(dir as never)])
        await expect(call()).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('a checkpoint folder must be a non-empty path string') });
    // a file where the checkpoint folder (or a folder above it) is named: missing too, not an I/O fault
    writeFileSync(join(root, 'plain-file'), 'x');
    expect(await codeOf(EmbeddingCollection.load(join(root, 'plain-file')))).toBe('CHECKPOINT_MISSING');
    expect(await codeOf(EmbeddingCollection.load(join(root, 'plain-file', 'ck')))).toBe('CHECKPOINT_MISSING');

    const t = join(root, 'trunc');
    await a.save(t);
    const payload = join(t, 'tables.bin');
    truncateSync(payload, 100);
    expect(await codeOf(EmbeddingCollection.load(t))).toBe('CHECKPOINT_CORRUPT');

    const c = join(root, 'flip');
    await a.save(c);
    const bytes = readFileSync(join(c, 'tables.bin'));
    bytes[bytes.length - 7] ^= 0x10;
    writeFileSync(join(c, 'tables.bin'), bytes);
    expect(await codeOf(EmbeddingCollection.load(c))).toBe('CHECKPOINT_CORRUPT');

    const m = join(root, 'manifest');
    await a.save(m);
    const text = readFileSync(join(m, 'manifest.json'), 'utf8');
    writeFileSync(join(m, 'manifest.json'), text.slice(0, text.length / 2));
    expect(await codeOf(EmbeddingCollection.load(m))).toBe('CHECKPOINT_CORRUPT');

    const p = join(root, 'nopayload');
    await a.save(p);
    rmSync(join(p, 'tables.bin'));
    expect(await codeOf(EmbeddingCollection.load(p))).toBe('CHECKPOINT_MISSING');

    const h = join(root, 'header');
    await a.save(h);
    const hb = readFileSync(join(h, 'tables.bin'));
    hb[0] = 0;
    writeFileSync(join(h, 'tables.bin'), hb);
    expect(await codeOf(EmbeddingCollection.load(h))).toBe('CHECKPOINT_CORRUPT');
    a.dispose();
  });

  it('the manifest is sealed: any change to what it says is CHECKPOINT_CORRUPT; a change of layout only, or an unsealed manifest, loads', async () => {
    const a = new EmbeddingCollection(config);
    await train(a, 2, 3);
    const dir = join(root, 'sealed');
    await a.save(dir);
    const path = join(dir, 'manifest.json');
    const text = readFileSync(path, 'utf8');
    const parsed = JSON.parse(text) as Record<string, unknown>;
    // the seal, from its definition: SHA-256 of the other fields' compact JSON, written last
    const { manifestSha256: seal, ...fields } = parsed;
    expect(Object.keys(parsed).at(-1)).toBe('manifestSha256');
    expect(seal).toBe(createHash('sha256').update(JSON.stringify(fields)).digest('hex'));
    const want = snapshot(a);
    const loadsAs = async (t: string): Promise<string> => {
      writeFileSync(path, t);
      try {
        const b = await EmbeddingCollection.load(dir);
        snapshot(b).forEach((x, k) => expect(Array.from(x)).toEqual(Array.from(want[k]!)));
        b.dispose();
        return 'loaded';
      } catch (e) {
        expect(e).toBeInstanceOf(EmbshardError);
        return (e as EmbshardError).code;
      }
    };
    expect(await loadsAs(JSON.stringify(parsed))).toBe('loaded'); // the same fields, compact
    expect(await loadsAs(JSON.stringify(fields))).toBe('loaded'); // no seal: as earlier versions wrote it
    expect(await loadsAs(text.replace('"step": 2', '"step": 3'))).toBe('CHECKPOINT_CORRUPT');
    expect(await loadsAs(JSON.stringify({ ...fields, note: 1 }))).toBe('CHECKPOINT_CORRUPT'); // unknown field, even unsealed
    // one flipped bit at every byte: refused unless the text still says the same (e.g. 1e-8 → 1E-8)
    let refused = 0;
    for (let i = 0; i < text.length; i++) {
      const b = Buffer.from(text, 'utf8');
      b[i]! ^= 1 << i % 8;
      let equal = false;
      try {
        equal = JSON.stringify(JSON.parse(b.toString('utf8'))) === JSON.stringify(parsed);
      } catch {
        // not JSON
      }
      const got = await loadsAs(b.toString('utf8'));
      expect([i, got]).toEqual([i, equal ? 'loaded' : 'CHECKPOINT_CORRUPT']);
      if (!equal) refused++;
    }
    expect(refused).toBeGreaterThan(text.length * 0.9);
    writeFileSync(path, text);
    a.dispose();
  }, 60_000);
});

describe('checkpointWritable', () => {
  it('says IO_ERROR where a folder cannot be made beside the checkpoint, even under a parent that looks writable; leaves nothing behind', async () => {
    // the oracle: the file system itself refuses a folder in /proc, whose access() says writable to root
    let refused = false;
    try {
      mkdirSync('/proc/embshard-probe-oracle');
    } catch {
      refused = true;
    }
    if (refused) expect((await checkpointWritable('/proc/embshard-ck'))?.code).toBe('IO_ERROR');
    const parent = mkdtempSync(join(tmpdir(), 'embshard-writable-'));
    try {
      expect(await checkpointWritable(join(parent, 'ck'))).toBeUndefined();
      expect(readdirSync(parent)).toEqual([]);
    } finally {
      rmSync(parent, { recursive: true, force: true });
    }
  });
});

// disk.test.ts — where a checkpoint is saved: a full file system (a 2 MiB tmpfs, where mounting is
// allowed) and a read-only one give IO_ERROR and leave the old checkpoint loadable, bitwise, with no
// folder of the failed save beside it; a save never deletes what is not a checkpoint (a file, a folder
// holding other files); the error of a file that does not fit names it; a symbolic link at the path is replaced, the folder it names left as it was;
// relative paths, paths through a linked folder, and names with spaces and non-ASCII letters work.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError } from '../../lib/index.js';
import { checkpointWritable } from '../../lib/checkpoint.js';
import { Trainer, embeddingsFor } from '../../lib/train/index.js';
import { SyntheticSource } from '../../lib/data/index.js';
import { tempDir } from '../temp-dir.js';
import { trainerSteps } from './child.js';

const tmp = tempDir('ckpt-disk');
const mounts: string[] = [];
afterAll(() => {
  for (const m of mounts) spawnSync('umount', [m]);
});

/** A tmpfs of `size` at a fresh folder, or undefined where mounting is not allowed. */
function tmpfs(name: string, options: string): string | undefined {
  const at = join(tmp.dir, name);
  mkdirSync(at);
  if (spawnSync('mount', ['-t', 'tmpfs', '-o', options, 'tmpfs', at], { stdio: 'ignore' }).status !== 0) {
    console.warn(`mount -t tmpfs is not allowed here: skipping the ${name} checks`);
    return undefined;
  }
  mounts.push(at);
  return at;
}

const ids = (n: number) => BigInt64Array.from({ length: n }, (_, i) => BigInt(i));
const bytes = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64');

/** A collection of one table of `rows` × 8 (adam) with its rows set to k + row / 8. */
function collection(rows: number, k: number): EmbeddingCollection {
  const ec = new EmbeddingCollection({ tables: [{ name: 'a', rows, dim: 8 }], optimizer: { type: 'adam', lr: 0.1 } });
  ec.writeRows('a', ids(rows), Float32Array.from({ length: rows * 8 }, (_, i) => k + Math.floor(i / 8) / 8));
  ec.step = k;
  return ec;
}

/** Rows and state of the checkpoint at `dir` as text (for bitwise comparison), with its step. */
async function contents(dir: string): Promise<string> {
  const ec = await EmbeddingCollection.load(dir);
  const rows = ec.config.tables[0]!.rows;
  const s = `${ec.step}:${rows}:${bytes(ec.readRows('a', ids(rows)))}:${bytes(ec.readState('a', ids(rows)))}`;
  ec.dispose();
  return s;
}

async function failure(p: Promise<unknown>): Promise<EmbshardError> {
  const e = await p.then(() => undefined, (x: unknown) => x);
  expect(e).toBeInstanceOf(EmbshardError);
  return e as EmbshardError;
}

function trainer(): Trainer {
  const src = new SyntheticSource({ batchSize: 16, cardinalities: [5000, 5000], seed: 1 });
  const emb = embeddingsFor(src.features, src.tableRows, { dim: 8, optimizer: { type: 'adam', lr: 0.02 }, seed: 3 });
  return new Trainer({ model: { denseIn: 13, bottom: [8, 8], top: [8, 1], numSparse: 2, embDim: 8, interaction: 'dot' }, embeddings: emb, optimizer: { type: 'adam', lr: 0.02 }, seed: 7 });
}

describe('a full file system', () => {
  it('every save that does not fit: IO_ERROR (no space), the old checkpoint loads bitwise, no folder left beside it', async () => {
    const fs2 = tmpfs('full', 'size=2m');
    if (!fs2) return;
    const dir = join(fs2, 'ck');
    const small = collection(1000, 1);
    await small.save(dir);
    let want = await contents(dir);
    // a checkpoint larger than the whole file system
    const big = collection(40000, 2);
    expect((await failure(big.save(dir))).code).toBe('IO_ERROR');
    big.dispose();
    expect(readdirSync(fs2)).toEqual(['ck']);
    expect(await contents(dir)).toBe(want);
    // the same small save with less and less room: fails at every point of the save (payload, manifest,
    // folder), or fits; the path always holds the old checkpoint or the new one
    const free = () => Number(spawnSync('df', ['--output=avail', '-B1', fs2], { encoding: 'utf8' }).stdout.split('\n')[1]);
    const size = readFileSync(join(dir, 'tables.bin')).length;
    let refused = 0;
    const where = new Set<string>();
    for (let room = size + 8192; room > 0; room -= 1024) {
      const filler = join(fs2, 'filler');
      writeFileSync(filler, '');
      writeFileSync(filler, Buffer.alloc(Math.max(0, free() - room)));
      small.step = 100 + room;
      const e = await small.save(dir).then(() => undefined, (x: unknown) => x);
      if (e) {
        expect(e).toBeInstanceOf(EmbshardError);
        expect((e as EmbshardError).code).toBe('IO_ERROR');
        expect((e as EmbshardError).message).toMatch(/No space left on device|ENOSPC/);
        refused++;
        where.add(/tables\.bin|manifest\.json/.exec((e as EmbshardError).message)?.[0] ?? (e as EmbshardError).message);
        expect(await contents(dir)).toBe(want);
      } else {
        want = await contents(dir);
        expect(want.startsWith(`${100 + room}:`)).toBe(true);
      }
      expect(readdirSync(fs2).sort()).toEqual(['ck', 'filler']);
    }
    expect(refused).toBeGreaterThan(0);
    expect([...where].sort()).toEqual(['manifest.json', 'tables.bin']); // the file that did not fit is named
    small.dispose();
  }, 120_000);

  it('a trainer save that does not fit: IO_ERROR, the old trainer checkpoint loads, no folder left beside it', async () => {
    const fs2 = tmpfs('full-trainer', 'size=2m');
    if (!fs2) return;
    const dir = join(fs2, 'ck');
    const t = trainer();
    await t.save(dir);
    writeFileSync(join(fs2, 'filler'), Buffer.alloc(1536 * 1024 - readFileSync(join(dir, 'embeddings', 'tables.bin')).length));
    expect((await failure(t.save(dir))).code).toBe('IO_ERROR');
    expect(readdirSync(fs2).sort()).toEqual(['ck', 'filler']);
    const back = await Trainer.load(dir);
    expect(trainerSteps(back)).toBe(0);
    back.dispose();
    t.dispose();
  });
});

describe('a read-only file system', () => {
  it('a save gives IO_ERROR and changes nothing; loads work', async () => {
    const ro = tmpfs('ro', 'size=4m');
    if (!ro) return;
    const dir = join(ro, 'ck');
    const a = collection(100, 1);
    await a.save(dir);
    const want = await contents(dir);
    expect(spawnSync('mount', ['-o', 'remount,ro', ro]).status).toBe(0);
    a.step = 2;
    const e = await failure(a.save(dir));
    expect([e.code, e.message]).toEqual(['IO_ERROR', expect.stringMatching(/read-only file system|EROFS/i)]);
    expect((await checkpointWritable(dir))?.code).toBe('IO_ERROR');
    expect(readdirSync(ro)).toEqual(['ck']);
    expect(await contents(dir)).toBe(want);
    a.dispose();
  });
});

describe('what stands at the path', () => {
  it('a file: IO_ERROR naming it, the file kept (checkpointWritable says so first)', async () => {
    const file = join(tmp.dir, 'notes.txt');
    writeFileSync(file, 'keep me');
    const a = collection(10, 1);
    expect((await checkpointWritable(file))?.message).toMatch(/a file stands at/);
    const e = await failure(a.save(file));
    expect([e.code, e.message]).toEqual(['IO_ERROR', expect.stringContaining(`a file stands at '${file}'`)]);
    expect(readFileSync(file, 'utf8')).toBe('keep me');
    expect(readdirSync(tmp.dir).filter((n) => n.startsWith('.notes.txt.'))).toEqual([]);
    a.dispose();
  });

  it('a folder holding other files: IO_ERROR, its files kept; an empty folder or a checkpoint folder is replaced', async () => {
    const folder = join(tmp.dir, 'results');
    mkdirSync(folder);
    writeFileSync(join(folder, 'log.txt'), 'keep me');
    const a = collection(10, 1);
    expect((await checkpointWritable(folder))?.code).toBe('IO_ERROR');
    const e = await failure(a.save(folder));
    expect([e.code, e.message]).toEqual(['IO_ERROR', expect.stringContaining('holds no checkpoint')]);
    expect(readFileSync(join(folder, 'log.txt'), 'utf8')).toBe('keep me');
    const t = trainer();
    expect((await failure(t.save(folder))).code).toBe('IO_ERROR');
    expect(readdirSync(folder)).toEqual(['log.txt']);
    // an empty folder, then the checkpoint it became, and a trainer's checkpoint folder
    const empty = join(tmp.dir, 'empty');
    mkdirSync(empty);
    expect(await checkpointWritable(empty)).toBeUndefined();
    await a.save(empty);
    a.step = 5;
    await a.save(empty);
    expect((await contents(empty)).startsWith('5:')).toBe(true);
    await t.save(join(tmp.dir, 'tr'));
    await t.save(join(tmp.dir, 'tr'));
    expect(await checkpointWritable(join(tmp.dir, 'tr'))).toBeUndefined();
    t.dispose();
    a.dispose();
  });

  it('a symbolic link: the link is replaced by the checkpoint, the folder it named is left as it was', async () => {
    const real = join(tmp.dir, 'real'), link = join(tmp.dir, 'link');
    const a = collection(10, 1);
    await a.save(real);
    const want = await contents(real);
    symlinkSync(real, link);
    expect(await contents(link)).toBe(want); // a load reads through it
    a.step = 2;
    await a.save(link);
    expect((await contents(link)).startsWith('2:')).toBe(true);
    expect(await contents(real)).toBe(want);
    // a link to a folder that holds other files: the link goes, the files stay
    const other = join(tmp.dir, 'other');
    mkdirSync(other);
    writeFileSync(join(other, 'x'), 'keep me');
    symlinkSync(other, join(tmp.dir, 'link2'));
    await a.save(join(tmp.dir, 'link2'));
    expect(readFileSync(join(other, 'x'), 'utf8')).toBe('keep me');
    a.dispose();
  });

  it('relative paths, a parent reached through a link, spaces and non-ASCII names: save twice, load, no folder left beside it', async () => {
    const a = collection(10, 1);
    const base = join(tmp.dir, 'names');
    mkdirSync(join(base, 'linked-target'), { recursive: true });
    symlinkSync(join(base, 'linked-target'), join(base, 'via link'));
    for (const dir of [relative(process.cwd(), join(base, 'rel', 'ck')), join(base, 'with space', 'ck ✓ 名前 ü'), join(base, 'via link', 'ck')]) {
      a.step = 1;
      await a.save(dir);
      a.step = 2;
      await a.save(dir);
      expect((await contents(dir)).startsWith('2:')).toBe(true);
      expect((await Trainer.load(dir).catch((e: EmbshardError) => e.code))).toBe('CHECKPOINT_MISSING'); // no trainer.json there
    }
    expect(readdirSync(join(base, 'with space'))).toEqual(['ck ✓ 名前 ü']);
    expect(readdirSync(join(base, 'linked-target'))).toEqual(['ck']);
    a.dispose();
  });
});

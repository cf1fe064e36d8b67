// criteo-npy.test.ts — the .npy codec and torchrec's binary Criteo day layout: files written by NumPy
// itself (fixture from make_npy_fixture.py) read back to their closed-form values, our encoder
// byte-identical to NumPy's, day-spanning batches with floor-mod hashing, rank row ranges against a
// naive split, synthetic → npy → batches round trip, corrupt files rejected.
import { describe, it, expect } from 'vitest';
import { readFileSync, writeFileSync, copyFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NpyFile, encodeNpy, parseNpyHeader } from '../../lib/data/npy.js';
import { CriteoNpySource, dayFiles, rankRowRange, writeCriteoNpyDay } from '../../lib/data/criteo-npy.js';
import { SyntheticSource } from '../../lib/data/synthetic.js';
import { workerSource } from '../../lib/data/worker-source.js';
import { isEmbshardError } from '../../lib/errors.js';
import type { Batch } from '../../lib/data/types.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('npy');

const DIR = fileURLToPath(new URL('../fixtures/data/npy/', import.meta.url));
const N = 12; // day 0: 7 rows, day 1: 5 rows

// the fixture's closed form (see make_npy_fixture.py)
const denseAt = (g: number, j: number): number => Math.fround(Math.log(g + j + 3));
const sparseAt = (g: number, f: number): number => Number((BigInt(g) * 7919n + BigInt(f) * 104729n) % 2n ** 32n - 2n ** 31n);
const labelAt = (g: number): number => ((g * 5 + 1) % 3 === 0 ? 1 : 0);
const floorMod = (v: number, m: number): number => ((v % m) + m) % m;

async function collect(src: AsyncIterable<Batch>): Promise<Batch[]> {
  const out: Batch[] = [];
  for await (const b of src) out.push(b);
  return out;
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'no error';
  } catch (e) {
    expect(isEmbshardError(e)).toBe(true);
    return `${(e as { code: string }).code}: ${(e as Error).message}`;
  }
}

describe('.npy codec', () => {
  it('reads NumPy-written files: header, shape and every value', async () => {
    const f = await NpyFile.open(join(DIR, 'day_0_sparse.npy'));
    expect(f.header.dtype).toBe('<i4');
    expect(f.header.shape).toEqual([7, 26]);
    expect(f.header.dataOffset).toBe(128);
    const rows = (await f.readRows(2, 4)) as Int32Array;
    await f.close();
    expect(rows).toBeInstanceOf(Int32Array);
    for (let i = 0; i < 4; i++) for (let c = 0; c < 26; c++) expect(rows[i * 26 + c]).toBe(sparseAt(i + 2, c));
    const d = await NpyFile.open(join(DIR, 'day_1_dense.npy'));
    const dv = (await d.readRows(0, 5)) as Float32Array;
    await d.close();
    for (let i = 0; i < 5; i++) for (let j = 0; j < 13; j++) expect(dv[i * 13 + j]).toBeCloseTo(denseAt(7 + i, j), 6);
  });

  it('encodes byte-for-byte as NumPy does', async () => {
    for (const name of ['day_0_sparse.npy', 'day_1_dense.npy', 'day_0_labels.npy']) {
      const f = await NpyFile.open(join(DIR, name));
      const all = await f.readRows(0, f.rows);
      const shape = f.header.shape;
      await f.close();
      expect(Buffer.from(encodeNpy(all, shape)).equals(readFileSync(join(DIR, name)))).toBe(true);
    }
  });

  it('rejects corrupt, truncated and Fortran-ordered files', async () => {
    const dir = join(tmp.dir, 'case-1');
    mkdirSync(dir);
    const good = readFileSync(join(DIR, 'day_0_dense.npy'));
    writeFileSync(join(dir, 'magic.npy'), Buffer.concat([Buffer.from('XX'), good.subarray(2)]));
    writeFileSync(join(dir, 'short.npy'), good.subarray(0, good.length - 4));
    writeFileSync(join(dir, 'fortran.npy'), Buffer.from(good.toString('latin1').replace("'fortran_order': False", "'fortran_order': True "), 'latin1'));
    expect(await codeOf(NpyFile.open(join(dir, 'magic.npy')))).toMatch(/^INVALID_ARGUMENT: .*bad magic/);
    expect(await codeOf(NpyFile.open(join(dir, 'short.npy')))).toMatch(/^INVALID_ARGUMENT: .*truncated/);
    expect(await codeOf(NpyFile.open(join(dir, 'fortran.npy')))).toMatch(/^INVALID_ARGUMENT: .*fortran_order/);
    expect(await codeOf(NpyFile.open(join(dir, 'missing.npy')))).toMatch(/^IO_ERROR/);
    expect(() => parseNpyHeader(new Uint8Array(4), 'x')).toThrow(/bad magic/);
  });
});

describe('torchrec binary Criteo days', () => {
  it('batches span days, hash with floor-mod, convert labels, keep dense as stored', async () => {
    const hashes = Array.from({ length: 26 }, (_, f) => 1000 + 13 * f);
    const src = await new CriteoNpySource({ dir: DIR, days: [0, 1], batchSize: 5, hashes }).open();
    expect(src.numDense).toBe(13);
    expect(src.features).toHaveLength(26);
    expect(src.numBatches).toBe(3);
    const batches = await collect(src);
    expect(batches.map((b) => b.size)).toEqual([5, 5, 2]);
    let g = 0;
    for (const b of batches) {
      for (let i = 0; i < b.size; i++, g++) {
        expect(b.labels[i]).toBe(labelAt(g));
        for (let j = 0; j < 13; j++) expect(b.dense[i * 13 + j]).toBeCloseTo(denseAt(g, j), 6);
        for (let f = 0; f < 26; f++) expect(b.sparse.ids[f * b.size + i]).toBe(floorMod(sparseAt(g, f), hashes[f]!));
      }
      expect(Array.from(b.sparse.lengths).every((l) => l === 1)).toBe(true);
    }
    expect(g).toBe(N);
  });

  it('splits rows across ranks as torchrec does (first N mod W ranks take one more)', async () => {
    for (const [total, W] of [[12, 5], [12, 4], [7, 3], [3, 5]] as const) {
      // naive: deal rows out in contiguous runs of sizes ⌈⌉/⌊⌋
      let next = 0;
      for (let r = 0; r < W; r++) {
        const size = Math.floor(total / W) + (r < total % W ? 1 : 0);
        expect(rankRowRange(total, r, W)).toEqual([next, next + size]);
        next += size;
      }
      expect(next).toBe(total);
    }
    const hashes = Array.from({ length: 26 }, () => 97);
    const r1 = await collect(new CriteoNpySource({ dir: DIR, days: [0, 1], batchSize: 2, hashes, rank: 1, worldSize: 5 }));
    expect(r1.map((b) => b.size)).toEqual([2, 1]); // rows 3, 4, 5
    expect(Array.from(r1[1]!.labels)).toEqual([labelAt(5)]);
    expect(r1[1]!.sparse.ids[0]).toBe(floorMod(sparseAt(5, 0), 97));
  });

  it('refuses negative values without hashes, mismatched days and bad options', async () => {
    const src = new CriteoNpySource({ dir: DIR, days: [0], batchSize: 4 });
    expect(await codeOf(collect(src))).toMatch(/^ID_OUT_OF_RANGE: .*hashes/);
    const dir = join(tmp.dir, 'case-2');
    mkdirSync(dir);
    const f = dayFiles(dir, 0), f0 = dayFiles(DIR, 0), f1 = dayFiles(DIR, 1);
    copyFileSync(f0.dense, f.dense);
    copyFileSync(f0.sparse, f.sparse);
    copyFileSync(f1.labels, f.labels); // 5 labels for 7 rows
    expect(await codeOf(new CriteoNpySource({ dir, days: [0], batchSize: 4 }).open())).toMatch(/^INVALID_ARGUMENT: day 0: .*7, 7, 5 rows/);
    expect(await codeOf(new CriteoNpySource({ dir: DIR, days: [0], batchSize: 4, hashes: [1, 2] }).open())).toMatch(/^LENGTH_MISMATCH: hashes/);
    expect(await codeOf((async () => new CriteoNpySource({ dir: DIR, days: [], batchSize: 4 }))())).toMatch(/^INVALID_ARGUMENT: .*days/);
    expect(await codeOf((async () => new CriteoNpySource({ dir: DIR, days: [0], batchSize: 4, rank: 3, worldSize: 2 }))())).toMatch(/rank 3/);
  });

  it('round-trips synthetic one-hot batches through the writer, in this thread and in a worker', async () => {
    const dir = join(tmp.dir, 'case-3');
    mkdirSync(dir);
    const syn = new SyntheticSource({ batchSize: 32, numBatches: 3, maxRows: 5000, seed: 8 });
    const orig = await collect(syn);
    expect(await writeCriteoNpyDay(dir, 3, orig)).toEqual({ rows: 96 });
    const opts = { dir, days: [3], batchSize: 32, hashes: syn.tableRows };
    for (const back of [await collect(new CriteoNpySource(opts)), await collect(await workerSource({ kind: 'criteo-npy', options: opts }, { depth: 2 }))]) {
      expect(back).toHaveLength(3);
      back.forEach((b, k) => {
        const o = orig[k]!;
        expect(Array.from(b.dense)).toEqual(Array.from(o.dense));
        expect(Array.from(b.labels)).toEqual(Array.from(o.labels));
        expect(Array.from(b.sparse.lengths)).toEqual(Array.from(o.sparse.lengths));
        expect(Array.from(b.sparse.ids)).toEqual(Array.from(o.sparse.ids));
      });
    }
    const multi = new SyntheticSource({ batchSize: 4, preset: 'mlperf-dcnv2', maxRows: 100 }).batch(0);
    expect(await codeOf(writeCriteoNpyDay(dir, 4, [multi]))).toMatch(/^INVALID_ARGUMENT: .*one-hot/);
  });
});

describe('MLPerf multi-hot archives (.npz)', () => {
  const HOT = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1];
  const multiAt = (g: number, f: number, t: number): number => Number((BigInt(g) * 131n + BigInt(f) * 7n + BigInt(t) * 1009n + 2n ** 31n - 50n) % 2n ** 32n - 2n ** 31n);

  it('reads NumPy np.savez archives (plain and ZIP64) member by member, by row range', async () => {
    const { NpzFile } = await import('../../lib/data/npz.js');
    for (const [name, g0] of [['day_1_sparse_multi_hot.npz', 7], ['zip64.npz', 7]] as const) {
      const z = await NpzFile.open(join(DIR, name));
      expect(z.names).toEqual(HOT.map((_, f) => String(f)));
      const a = await z.array('20');
      expect(a.header.shape).toEqual([5, 100]);
      const rows = (await a.readRows(1, 3)) as Int32Array;
      for (let i = 0; i < 3; i++) for (let t = 0; t < 100; t++) expect(rows[i * 100 + t]).toBe(multiAt(g0 + 1 + i, 20, t));
      await z.close();
    }
    const c = await NpzFile.open(join(DIR, 'compressed.npz'));
    expect(await codeOf(c.array('0'))).toMatch(/^INVALID_ARGUMENT: .*compressed/);
    expect(await codeOf(c.array('7'))).toMatch(/^INVALID_ARGUMENT: .*no array '7'/);
    await c.close();
    expect(await codeOf(NpzFile.open(join(DIR, 'day_0_dense.npy')))).toMatch(/^INVALID_ARGUMENT: .*end-of-central-directory/);
  });

  it('a damaged archive directory is INVALID_ARGUMENT naming the fault, whatever its sizes and offsets say', async () => {
    const { NpzFile } = await import('../../lib/data/npz.js');
    const good = readFileSync(join(DIR, 'zip64.npz'));
    // the records, found as the ZIP format places them: the end record, its ZIP64 locator just before it,
    // the ZIP64 end record the locator points at, and the central directory that record points at
    const eocd = good.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
    const zip64End = Number(good.readBigUInt64LE(eocd - 20 + 8));
    const cdAt = Number(good.readBigUInt64LE(zip64End + 48));
    const d = tmp.dir;
    const damaged = (name: string, edit: (b: Buffer) => void): string => {
      const b = Buffer.from(good);
      edit(b);
      writeFileSync(join(d, name), b);
      return join(d, name);
    };
    const cases: [string, string, RegExp][] = [
      [damaged('cd-size.npz', (b) => b.writeBigUInt64LE(2n ** 62n, zip64End + 40)), 'a central directory size beyond the file', /outside the file/],
      [damaged('cd-offset.npz', (b) => b.writeBigUInt64LE(BigInt(good.length), zip64End + 48)), 'a central directory offset at the end', /outside the file/],
      [damaged('extra-len.npz', (b) => b.writeUInt16LE(0xffff, cdAt + 30)), 'an entry whose extra field overruns the directory', /entry 0 is corrupt/],
      [damaged('zip64-field.npz', (b) => {
        // the first entry's ZIP64 extra field (id 1) shortened to 4 bytes: its values no longer fit
        const x = cdAt + 46 + b.readUInt16LE(cdAt + 28);
        expect(b.readUInt16LE(x)).toBe(1);
        b.writeUInt16LE(4, x + 2);
      }), 'a ZIP64 field too short for the values it must hold', /ZIP64 field of central directory entry 0 is too short/],
    ];
    for (const [file, what, why] of cases) {
      const e = await NpzFile.open(file).then(() => undefined, (x: unknown) => x);
      expect(isEmbshardError(e), what).toBe(true);
      expect([what, (e as Error & { code: string }).code]).toEqual([what, 'INVALID_ARGUMENT']);
      expect((e as Error).message, what).toMatch(why);
    }
  });

  it('batches bags of h_f ids across days, floor-mod hashed, with dense and labels from the .npy files', async () => {
    const hashes = HOT.map((_, f) => 5000 + f);
    const src = await new CriteoNpySource({ dir: DIR, days: [0, 1], batchSize: 5, hashes, multiHot: true }).open();
    expect(src.hotness).toEqual(HOT);
    const batches = await collect(src);
    expect(batches.map((b) => b.size)).toEqual([5, 5, 2]);
    let g = 0;
    for (const b of batches) {
      expect(b.sparse.numIds).toBe(b.size * 214);
      for (let i = 0; i < b.size; i++, g++) {
        expect(b.labels[i]).toBe(labelAt(g));
        expect(b.dense[i * 13 + 4]).toBeCloseTo(denseAt(g, 4), 6);
        for (let f = 0; f < 26; f++) {
          const bag = b.sparse.feature(`cat_${f}`);
          expect(bag.lengths[i]).toBe(HOT[f]);
          for (let t = 0; t < HOT[f]!; t++) expect(bag.ids[i * HOT[f]! + t]).toBe(floorMod(multiAt(g, f, t), hashes[f]!));
        }
      }
    }
    expect(g).toBe(N);
    // without hashes the negative values are refused, naming the archive member
    expect(await codeOf(collect(new CriteoNpySource({ dir: DIR, days: [0], batchSize: 5, multiHot: true })))).toMatch(/^ID_OUT_OF_RANGE: .*multi_hot\.npz:\d+\.npy/);
  });
});

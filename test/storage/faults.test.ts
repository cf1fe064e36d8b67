// faults.test.ts — a disk-backed table meets a path it cannot use, another collection on
// its file, a truncated or altered table file, a record in another row's place (a full disk:
// process.test.ts): each is a typed EmbshardError before anything changes (a row write included),
// and once the file is repaired training goes on bitwise like a memory twin that never saw the fault.
import { closeSync, mkdirSync, openSync, readSync, statSync, truncateSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError, JaggedBatch } from '../../lib/index.js';
import type { TableConfig } from '../../lib/index.js';
import { Rng } from '../../lib/random/rng.js';
import { everything, grads, idBatch } from './helpers.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('disk-faults');

async function code(p: Promise<unknown> | (() => unknown)): Promise<string> {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    expect(e).toBeInstanceOf(EmbshardError);
    return `${(e as EmbshardError).code}: ${(e as EmbshardError).message}`;
  }
  return 'no error';
}

function bytesAt(file: string, pos: number, n: number): Buffer {
  const fd = openSync(file, 'r');
  const b = Buffer.alloc(n);
  readSync(fd, b, 0, n, pos);
  closeSync(fd);
  return b;
}
function putBytes(file: string, pos: number, b: Buffer): void {
  const fd = openSync(file, 'r+');
  writeSync(fd, b, 0, b.length, pos);
  closeSync(fd);
}

const rowsOf = (ids: number[]) => JaggedBatch.fromLengths({ features: ['t'], batchSize: 1, lengths: Int32Array.of(ids.length), ids: BigInt64Array.from(ids, BigInt) });

describe('disk-backed table faults', () => {
  it('a path that cannot be made or a file that cannot be created: IO_ERROR naming storage.path', async () => {
    const file = join(tmp.dir, 'plain-file');
    writeFileSync(file, 'x');
    const t = (path: string): TableConfig => ({ name: 't', rows: 100, dim: 4, storage: { kind: 'disk', path, cacheBytes: 1 << 16 } });
    expect(await code(() => new EmbeddingCollection({ tables: [t(join(file, 'sub'))] }))).toMatch(/^IO_ERROR: .*storage\.path/);
    mkdirSync(join(tmp.dir, 'dir-in-the-way', 't.embtable'), { recursive: true });
    expect(await code(() => new EmbeddingCollection({ tables: [t(join(tmp.dir, 'dir-in-the-way'))] }))).toMatch(/^IO_ERROR: .*storage\.path/);
  });

  it('a second collection on the same table file: IO_ERROR', async () => {
    const t: TableConfig = { name: 't', rows: 100, dim: 4, storage: { kind: 'disk', path: join(tmp.dir, 'shared'), cacheBytes: 1 << 16 } };
    const a = new EmbeddingCollection({ tables: [t] });
    expect(await code(() => new EmbeddingCollection({ tables: [t] }))).toMatch(/^IO_ERROR: storage\.path: .*in use/);
    a.dispose();
  });

  it('a truncated or altered table file: CHECKPOINT_CORRUPT before any change; repaired, training goes on bitwise', async () => {
    const dir = join(tmp.dir, 'damage');
    const base: TableConfig = { name: 't', rows: 1000, dim: 4 };
    const optimizer = { type: 'adagrad' as const, lr: 0.1 };
    // sgd-free adagrad record: 4 fp32 + 4 state + crc/flag; 16 ways × 1 set
    const disk = new EmbeddingCollection({ tables: [{ ...base, storage: { kind: 'disk', path: dir, cacheBytes: 16 * (16 + 16 + 32) } }], optimizer });
    const mem = new EmbeddingCollection({ tables: [base], optimizer });
    const rng = new Rng(9);
    const step = async (b: JaggedBatch) => {
      const g = grads(mem, b, rng);
      await mem.backward(await mem.forward(b), g);
      await disk.backward(await disk.forward(b), g);
    };
    await step(rowsOf([0, 1, 2, 3, 4, 5]));
    await step(rowsOf(Array.from({ length: 16 }, (_, i) => 100 + i))); // evicts rows 0..5 (written back)
    const st = disk.storageStats().t!;
    expect(st.slots).toBe(16);
    expect(st.writebacks).toBe(6);
    const file = join(dir, 't.embtable');
    const before = everything(disk);
    const counters = () => {
      const { hits, misses, evictions, writebacks, bytesWritten } = disk.storageStats().t!;
      return { hits, misses, evictions, writebacks, bytesWritten };
    };
    const statsBefore = counters();

    // altered record of row 3 (on file, not cached)
    const at = 4096 + 3 * st.recordBytes + 1;
    const orig = bytesAt(file, at, 1);
    putBytes(file, at, Buffer.of(orig[0]! ^ 0x40));
    expect(await code(disk.forward(rowsOf([3, 7])))).toMatch(/^CHECKPOINT_CORRUPT: .*row 3 fails its checksum/);
    expect(await code(() => disk.readRows('t', [3]))).toMatch(/^CHECKPOINT_CORRUPT/);
    // a write of several rows, one of them damaged, writes none of them
    expect(await code(() => disk.writeRows('t', [1, 3], new Float32Array(8).fill(7)))).toMatch(/^CHECKPOINT_CORRUPT: .*row 3/);
    expect(await code(() => disk.writeState('t', [1, 3], new Float32Array(8).fill(7)))).toMatch(/^CHECKPOINT_CORRUPT: .*row 3/);
    expect([disk.readRows('t', [1]), disk.readState('t', [1])]).toEqual([before[0]!.slice(4, 8), before[1]!.slice(4, 8)]);
    putBytes(file, at, orig);

    // the intact record of row 4 in the place of row 2's: row 2 does not read row 4's values
    const rec2 = bytesAt(file, 4096 + 2 * st.recordBytes, st.recordBytes);
    putBytes(file, 4096 + 2 * st.recordBytes, bytesAt(file, 4096 + 4 * st.recordBytes, st.recordBytes));
    expect(await code(disk.forward(rowsOf([2])))).toMatch(/^CHECKPOINT_CORRUPT: .*row 2 fails its checksum/);
    expect(await code(() => disk.readRows('t', [2]))).toMatch(/^CHECKPOINT_CORRUPT/);
    putBytes(file, 4096 + 2 * st.recordBytes, rec2);

    // altered header
    const h = bytesAt(file, 20, 1);
    putBytes(file, 20, Buffer.of(h[0]! ^ 1));
    expect(await code(disk.forward(rowsOf([1])))).toMatch(/^CHECKPOINT_CORRUPT: .*header/);
    putBytes(file, 20, h);

    // truncated file
    const size = statSync(file).size;
    const tail = bytesAt(file, size - 1000, 1000);
    truncateSync(file, size - 1000);
    expect(await code(disk.forward(rowsOf([2, 999])))).toMatch(/^CHECKPOINT_CORRUPT: .*truncated/);
    putBytes(file, size - 1000, tail);

    expect(counters()).toEqual(statsBefore);
    everything(disk).forEach((a, i) => expect(a).toEqual(before[i]));
    for (let s = 0; s < 6; s++) await step(idBatch(mem, rng, 3, 4, 1.05));
    const a = everything(mem), b = everything(disk);
    a.forEach((x, i) => expect(b[i]).toEqual(x));
    disk.dispose();
    mem.dispose();
  });
});

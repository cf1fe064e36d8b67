// row-access.test.ts — readRows / writeRows / readState / writeState of a disk-backed table whose rows
// are partly resident in its cache and partly only on file, against a model of the table kept here in
// plain arrays: writes apply in order (duplicate ids: the last wins), reads of any length (past the
// table's read chunk too) return the model's rows, and the file holds them after a flush.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, JaggedBatch } from '../../lib/index.js';
import { Rng } from '../../lib/random/rng.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('disk-row-access');
const ROWS = 600, DIM = 5, STATE = DIM; // adagrad: one accumulator per column

function open(dir: string): EmbeddingCollection {
  // 32 slots of (5 fp32 + 5 state + 32 bytes of slot data): a forward of 24 rows leaves them resident
  return new EmbeddingCollection({
    tables: [{ name: 't', rows: ROWS, dim: DIM, storage: { kind: 'disk', path: dir, cacheBytes: 32 * (20 + 20 + 32) } }],
    optimizer: { type: 'adagrad', lr: 0.1 },
  });
}

/** ids with repeats, from `pool` when given (rows known resident), else from the whole table */
function idsWithRepeats(rng: Rng, n: number, pool?: number[]): number[] {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    if (i > 0 && rng.float() < 0.3) out.push(out[rng.int(0, i - 1)]!);
    else out.push(pool ? pool[rng.int(0, pool.length - 1)]! : rng.int(0, ROWS - 1));
  }
  return out;
}

function values(rng: Rng, n: number): Float32Array {
  return Float32Array.from({ length: n }, () => Math.fround(rng.float() * 4 - 2));
}

/** model[row * width ...] = vals of each id in turn */
function apply(model: Float32Array, width: number, ids: number[], vals: Float32Array): void {
  ids.forEach((id, i) => model.set(vals.subarray(i * width, (i + 1) * width), id * width));
}

function rowsOf(model: Float32Array, width: number, ids: number[]): Float32Array {
  const out = new Float32Array(ids.length * width);
  ids.forEach((id, i) => out.set(model.subarray(id * width, (id + 1) * width), i * width));
  return out;
}

describe('disk-backed table: row and state access, resident and on file', () => {
  it('writes apply in order with the last of duplicate ids winning; reads of any length return them', async () => {
    const dir = join(tmp.dir, 'rows');
    const rng = new Rng(7);
    const w = new Float32Array(ROWS * DIM), s = new Float32Array(ROWS * STATE);
    const all = Array.from({ length: ROWS }, (_, i) => i);
    const ec = open(dir);
    // known contents everywhere first
    const w0 = values(rng, ROWS * DIM), s0 = values(rng, ROWS * STATE).map(Math.abs);
    ec.writeRows('t', all, w0);
    ec.writeState('t', all, s0);
    apply(w, DIM, all, w0);
    apply(s, STATE, all, s0);
    // a forward stages 24 rows into the cache; the rest stay on file
    const resident = Array.from({ length: 24 }, (_, i) => (i * 37) % ROWS);
    const out = await ec.forward(JaggedBatch.fromLengths({ features: ['t'], batchSize: 1, lengths: Int32Array.of(24), ids: BigInt64Array.from(resident, BigInt) }));
    ec.release(out);
    for (let round = 0; round < 6; round++) {
      // mixed, resident only, file only (mostly), each with repeats
      for (const pool of [undefined, resident, undefined]) {
        const ids = idsWithRepeats(rng, 40, pool);
        const wv = values(rng, ids.length * DIM), sv = values(rng, ids.length * STATE);
        ec.writeRows('t', ids, wv);
        apply(w, DIM, ids, wv);
        ec.writeState('t', ids, sv);
        apply(s, STATE, ids, sv);
      }
      const probe = idsWithRepeats(rng, 120);
      expect(ec.readRows('t', probe)).toEqual(rowsOf(w, DIM, probe));
      expect(ec.readState('t', probe)).toEqual(rowsOf(s, STATE, probe));
    }
    // a read longer than the table's read chunk (1,024 rows), with every row several times
    const long = Array.from({ length: 3_001 }, (_, i) => (i * 7919) % ROWS);
    expect(ec.readRows('t', long)).toEqual(rowsOf(w, DIM, long));
    expect(ec.readState('t', long)).toEqual(rowsOf(s, STATE, long));
    // the file after a flush, read here from its documented layout: a 4,096-byte header, then per row its
    // 5 fp32 values and 5 fp32 state values at the start of a record of storageStats().recordBytes
    await ec.flush();
    const rb = ec.storageStats().t!.recordBytes;
    const file = readFileSync(join(dir, 't.embtable'));
    const fw = new Float32Array(ROWS * DIM), fs = new Float32Array(ROWS * STATE);
    for (let r = 0; r < ROWS; r++) {
      const rec = new Float32Array(file.buffer.slice(file.byteOffset + 4096 + r * rb, file.byteOffset + 4096 + r * rb + 4 * (DIM + STATE)));
      fw.set(rec.subarray(0, DIM), r * DIM);
      fs.set(rec.subarray(DIM), r * STATE);
    }
    expect(fw).toEqual(w);
    expect(fs).toEqual(s);
    ec.dispose();
  });
});

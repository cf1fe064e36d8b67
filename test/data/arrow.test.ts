// arrow.test.ts — the Arrow path against the plain path on the same data: synthetic batches → Arrow
// (batchToArrow) → batches must be identical, zero-copy where documented; after an IPC round trip
// (fresh buffers, copies for ids) still identical; sliced RecordBatches (maxBatchSize) equal the plain
// batches' slices; hand-built tables with one-hot columns, separate dense columns and int labels. The
// natively computed parts (dense columns of every number type interleaved, 32-bit ids widened beside
// Int64 ones, null list slots, offsets that run backwards, NaN dense values) against naive references
// written from the layout; the checks of an untrusted body's columns and the errors that name the column.
import { describe, it, expect } from 'vitest';
import {
  Field, FixedSizeList, Float32, Float64, Int16, Int32, Int64, Int8, List, RecordBatch, Schema, Struct, Table, Uint16, Uint32, Uint8,
  makeData, tableFromIPC, tableToIPC, type Data, type DataType,
} from 'apache-arrow';
import {
  ArrowSource, arrowSource, batchToArrow, batchesToTable, checkDenseFinite, checkListOffsets, idsToRows, recordBatchToBatch,
} from '../../lib/data/arrow.js';
import { SyntheticSource } from '../../lib/data/synthetic.js';
import { isEmbshardError } from '../../lib/errors.js';
import type { Batch } from '../../lib/data/types.js';
import type { IdArray } from '../../lib/binding.js';
import { loadAddon } from '../../lib/native.js';

async function collect(src: AsyncIterable<Batch>): Promise<Batch[]> {
  const out: Batch[] = [];
  for await (const b of src) out.push(b);
  return out;
}

function same(a: Batch, b: Batch): void {
  expect(a.size).toBe(b.size);
  expect(a.sparse.features).toEqual(b.sparse.features);
  expect(Array.from(a.dense)).toEqual(Array.from(b.dense));
  expect(Array.from(a.labels)).toEqual(Array.from(b.labels));
  expect(Array.from(a.sparse.lengths)).toEqual(Array.from(b.sparse.lengths));
  expect(Array.from(a.sparse.ids as Int32Array)).toEqual(Array.from(b.sparse.ids as Int32Array));
  expect(a.planted && Array.from(a.planted)).toEqual(b.planted && Array.from(b.planted));
}

/** Plain-path slice of a batch: samples [s, e), built by walking the lengths (the oracle for slicing). */
function sliceBatch(b: Batch, s: number, e: number): { dense: number[]; labels: number[]; lengths: number[]; ids: number[] } {
  const F = b.sparse.features.length, B = b.size, D = b.dense.length / B;
  const lengths: number[] = [], ids: number[] = [];
  let pos = 0;
  for (let f = 0; f < F; f++)
    for (let i = 0; i < B; i++) {
      const l = b.sparse.lengths[f * B + i]!;
      if (i >= s && i < e) {
        lengths.push(l);
        for (let t = 0; t < l; t++) ids.push(Number(b.sparse.ids[pos + t]));
      }
      pos += l;
    }
  return { dense: Array.from(b.dense.subarray(s * D, e * D)), labels: Array.from(b.labels.subarray(s, e)), lengths, ids };
}

describe('Arrow RecordBatches', () => {
  const syn = new SyntheticSource({ preset: 'mlperf-dcnv2', batchSize: 24, numBatches: 3, maxRows: 3000, lengths: 'uniform', seed: 5 });

  it('batch → Arrow → batch is identical and zero-copy (dense, labels, ids share the original buffers)', async () => {
    const plain = await collect(syn);
    const back = await collect(arrowSource(batchesToTable(plain)));
    expect(back).toHaveLength(3);
    back.forEach((b, k) => {
      same(b, plain[k]!);
      expect(b.dense.buffer).toBe(plain[k]!.dense.buffer);
      expect(b.labels.buffer).toBe(plain[k]!.labels.buffer);
      expect(b.sparse.ids.buffer).toBe(plain[k]!.sparse.ids.buffer);
      expect(b.sparse.ids.byteOffset).toBe(plain[k]!.sparse.ids.byteOffset);
    });
  });

  it('after an IPC round trip (stream and file formats) the batches are still identical', async () => {
    const plain = await collect(syn);
    for (const format of ['stream', 'file'] as const) {
      const table = tableFromIPC(tableToIPC(batchesToTable(plain), format));
      const back = await collect(arrowSource(table));
      back.forEach((b, k) => same(b, plain[k]!));
      // dense is still a view of the IPC body, not a copy
      expect(back[0]!.dense.buffer).toBe((table.batches[0]!.getChild('dense')!.data[0]!.children[0]!.values as Float32Array).buffer);
    }
  });

  it('maxBatchSize splits RecordBatches into slices equal to the plain batches’ slices', async () => {
    const plain = await collect(syn);
    const ipc = tableFromIPC(tableToIPC(batchesToTable(plain)));
    for (const table of [batchesToTable(plain), ipc]) {
      const src = new ArrowSource(table, { features: syn.features, numDense: 13, batchSize: 10, maxBatchSize: 10 });
      const back = await collect(src);
      expect(back.map((b) => b.size)).toEqual([10, 10, 4, 10, 10, 4, 10, 10, 4]);
      back.forEach((b, i) => {
        const k = Math.floor(i / 3), s = (i % 3) * 10, e = Math.min(s + 10, 24);
        const want = sliceBatch(plain[k]!, s, e);
        expect(Array.from(b.dense)).toEqual(want.dense);
        expect(Array.from(b.labels)).toEqual(want.labels);
        expect(Array.from(b.sparse.lengths)).toEqual(want.lengths);
        expect(Array.from(b.sparse.ids as Int32Array)).toEqual(want.ids);
      });
    }
  });

  it('reads one-hot Int32 columns, separate Float32 dense columns and Int8 labels', () => {
    const B = 4;
    const fields = [
      new Field('y', new Int8(), false),
      new Field('d0', new Float32(), false),
      new Field('d1', new Float32(), false),
      new Field('a', new Int32(), false),
      new Field('b', new Int32(), false),
    ];
    const children = [
      makeData({ type: new Int8(), length: B, data: Int8Array.from([1, 0, 0, 1]) }),
      makeData({ type: new Float32(), length: B, data: Float32Array.from([0.5, 1.5, 2.5, 3.5]) }),
      makeData({ type: new Float32(), length: B, data: Float32Array.from([-1, -2, -3, -4]) }),
      makeData({ type: new Int32(), length: B, data: Int32Array.from([7, 8, 9, 10]) }),
      makeData({ type: new Int32(), length: B, data: Int32Array.from([70, 80, 90, 100]) }),
    ];
    const rb = new RecordBatch(new Schema(fields), makeData({ type: new Struct(fields), length: B, children, nullCount: 0 }));
    const b = recordBatchToBatch(rb, { label: 'y', dense: ['d0', 'd1'] });
    expect(b.sparse.features).toEqual(['a', 'b']);
    expect(Array.from(b.labels)).toEqual([1, 0, 0, 1]);
    expect(Array.from(b.dense)).toEqual([0.5, -1, 1.5, -2, 2.5, -3, 3.5, -4]);
    expect(Array.from(b.sparse.lengths)).toEqual([1, 1, 1, 1, 1, 1, 1, 1]);
    expect(Array.from(b.sparse.ids as Int32Array)).toEqual([7, 8, 9, 10, 70, 80, 90, 100]);
  });

  it('names the missing or mistyped column', () => {
    const plain = syn.batch(0);
    const rb = batchToArrow(plain);
    const err = (f: () => unknown): string => {
      try {
        f();
      } catch (e) {
        expect(isEmbshardError(e)).toBe(true);
        return `${(e as { code: string }).code}: ${(e as Error).message}`;
      }
      return 'no error';
    };
    expect(err(() => recordBatchToBatch(rb, { label: 'click' }))).toMatch(/^MISSING_FEATURE: .*'click'/);
    expect(err(() => recordBatchToBatch(rb, { dense: 'label' }))).toMatch(/^UNSUPPORTED_DTYPE: .*'label'.*FixedSizeList/);
    expect(err(() => recordBatchToBatch(rb, { features: ['dense'] }))).toMatch(/^UNSUPPORTED_DTYPE: .*'dense'/);
    const empty = new Table();
    expect(err(() => arrowSource(empty))).toMatch(/^INVALID_ARGUMENT/);
    // a FixedSizeList dense column of the wrong element type
    const fsl = new FixedSizeList(2, new Field('item', new Int32(), false));
    const f2 = [new Field('label', new Float32(), false), new Field('dense', fsl, false), new Field('a', new Int32(), false)];
    const rb2 = new RecordBatch(new Schema(f2), makeData({
      type: new Struct(f2), length: 1, nullCount: 0,
      children: [
        makeData({ type: new Float32(), length: 1, data: Float32Array.from([1]) }),
        makeData({ type: fsl, length: 1, child: makeData({ type: new Int32(), length: 2, data: Int32Array.from([1, 2]) }) }),
        makeData({ type: new Int32(), length: 1, data: Int32Array.from([0]) }),
      ],
    }));
    expect(err(() => recordBatchToBatch(rb2))).toMatch(/^UNSUPPORTED_DTYPE: .*Float32/);
  });
});

/** A RecordBatch of the given columns (name, Data), none of them nullable at the struct level. */
function recordBatch(columns: [string, Data][]): RecordBatch {
  const fields = columns.map(([n, d]) => new Field(n, d.type, d.nullCount > 0));
  const B = columns[0]![1].length;
  return new RecordBatch(new Schema(fields), makeData({ type: new Struct(fields), length: B, children: columns.map(([, d]) => d), nullCount: 0 }));
}

/** A list column of `t` ids with these offsets (and validity: the bitmap built bit by bit). */
function listColumn(t: DataType, offsets: number[], values: ArrayLike<number | bigint>, valid?: boolean[]): Data {
  const B = offsets.length - 1, lt = new List(new Field('item', t, false));
  let nullBitmap: Uint8Array | undefined;
  if (valid) {
    nullBitmap = new Uint8Array(Math.ceil(B / 8));
    valid.forEach((v, i) => v && (nullBitmap![i >> 3]! |= 1 << (i & 7)));
  }
  return makeData({
    type: lt, length: B, valueOffsets: Int32Array.from(offsets), nullCount: valid ? valid.filter((v) => !v).length : 0, nullBitmap,
    child: makeData({ type: t, length: values.length, data: values } as never),
  });
}

function errorText(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    if (!isEmbshardError(e)) return `untyped ${(e as Error)?.constructor?.name}: ${(e as Error)?.message}`;
    return `${(e as { code: string }).code}: ${(e as Error).message}`;
  }
  return 'no error';
}

/** Deterministic pseudo-random integers in [0, n). */
function ints(seed: number): (n: number) => number {
  let s = seed >>> 0;
  return (n) => Math.floor(((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32) * n);
}

describe('Arrow columns read natively', () => {
  const one = (t: DataType, v: ArrayLike<number>): Data => makeData({ type: t, length: v.length, data: v } as never);

  it('interleaves dense columns of every number type row-major, each value rounded to Float32 once', () => {
    const cols: [string, DataType, ArrayLike<number>][] = [
      ['i8', new Int8(), Int8Array.from([-128, 127, 0, -1])],
      ['u8', new Uint8(), Uint8Array.from([255, 0, 7, 128])],
      ['i16', new Int16(), Int16Array.from([-32768, 32767, 3, -3])],
      ['u16', new Uint16(), Uint16Array.from([65535, 1, 2, 0])],
      ['i32', new Int32(), Int32Array.from([16777217, -2147483648, 2147483647, 33554435])],
      ['u32', new Uint32(), Uint32Array.from([4294967295, 16777219, 0, 1])],
      ['f64', new Float64(), Float64Array.from([1 / 3, NaN, 1e40, -0])],
      ['f32', new Float32(), Float32Array.from([NaN, -0, Infinity, 0.1])],
    ];
    const rb = recordBatch([['x', listColumn(new Int32(), [0, 1, 1, 2, 3], [4, 5, 6])], ...cols.map(([n, t, v]) => [n, one(t, v)] as [string, Data])]);
    const D = cols.length;
    for (const [s, e] of [[0, 4], [1, 4], [2, 3]] as const) {
      const b = recordBatchToBatch(s === 0 && e === 4 ? rb : rb.slice(s, e), { label: null, dense: cols.map(([n]) => n), features: ['x'] });
      expect(b.dense).toHaveLength((e - s) * D);
      for (let r = s; r < e; r++)
        cols.forEach(([, , v], j) => expect(Object.is(b.dense[(r - s) * D + j], Math.fround(v[r]!)), `row ${r}, column ${j}`).toBe(true));
    }
  });

  it('labels of an integer or Float64 column are converted one value each, a slice from its first row', () => {
    const y = Float64Array.from([0.1, 1, 0, 1e-50, 2 ** 24 + 1]);
    const rb = recordBatch([['y', one(new Float64(), y)], ['x', one(new Int32(), Int32Array.from([1, 2, 3, 4, 5]))]]);
    const s = recordBatchToBatch(rb.slice(2, 5), { label: 'y', dense: [], features: ['x'] });
    expect(Array.from(s.labels)).toEqual([0, 1e-50, 2 ** 24 + 1].map(Math.fround));
  });

  it('widens Int32 and Uint32 ids to int64 beside Int64 ones, sign and all', () => {
    const rb = recordBatch([
      ['a', listColumn(new Int32(), [0, 2, 3], Int32Array.from([-5, 2147483647, -2147483648]))],
      ['b', listColumn(new Uint32(), [0, 1, 2], Uint32Array.from([4294967295, 2147483648]))],
      ['c', listColumn(new Int64(), [0, 0, 1], BigInt64Array.from([1n << 40n]))],
      ['d', one(new Uint32(), Uint32Array.from([3000000000, 0]))],
    ]);
    const b = recordBatchToBatch(rb, { label: null, dense: [] });
    expect(b.sparse.ids).toBeInstanceOf(BigInt64Array);
    expect(Array.from(b.sparse.ids as BigInt64Array)).toEqual([-5n, 2147483647n, -2147483648n, 4294967295n, 2147483648n, 1n << 40n, 3000000000n, 0n]);
    expect(Array.from(b.sparse.lengths)).toEqual([2, 1, 1, 1, 0, 1, 1, 1]);
  });

  it('null list slots are empty bags in every slice, whatever their offsets span (random columns against a naive walk)', () => {
    const rnd = ints(7);
    for (const t of [new Int32(), new Int64()]) {
      const B = 45, offsets = [0], valid: boolean[] = [];
      for (let b = 0; b < B; b++) {
        offsets.push(offsets[b]! + rnd(4));
        valid.push(rnd(3) > 0);
      }
      const n = offsets[B]!;
      const values = t instanceof Int64 ? BigInt64Array.from({ length: n }, (_, i) => BigInt(i * 3 + 1)) : Int32Array.from({ length: n }, (_, i) => i * 3 + 1);
      const rb = recordBatch([['f', listColumn(t, offsets, values, valid)]]);
      for (const [s, e] of [[0, B], [1, B], [3, 20], [9, 10], [13, 45]] as const) {
        const lengths: number[] = [], ids: number[] = [];
        for (let r = s; r < e; r++) {
          const bag = valid[r] ? Array.from(values.subarray(offsets[r]!, offsets[r + 1]!) as ArrayLike<number | bigint>, Number) : [];
          lengths.push(bag.length);
          ids.push(...bag);
        }
        const b = recordBatchToBatch(s === 0 && e === B ? rb : rb.slice(s, e), { label: null, dense: [] });
        expect(Array.from(b.sparse.lengths), `${t} [${s}, ${e})`).toEqual(lengths);
        expect(Array.from(b.sparse.ids as ArrayLike<number | bigint>, Number), `${t} [${s}, ${e})`).toEqual(ids);
        expect(b.sparse.ids.constructor).toBe(values.constructor);
      }
    }
  });

  it('offsets that run backwards give the negative bag length their difference is, which the batch refuses', () => {
    const rb = recordBatch([['f', listColumn(new Int32(), [0, 3, 1, 4], Int32Array.from([9, 8, 7, 6]))]]);
    const b = recordBatchToBatch(rb, { label: null, dense: [] });
    expect(Array.from(b.sparse.lengths)).toEqual([3, -2, 3]);
    expect(Array.from(b.sparse.ids as Int32Array)).toEqual([9, 8, 7, 6]);
    expect(errorText(() => b.sparse.offsets)).toMatch(/^NEGATIVE_LENGTH: lengths\[1\] = -2 .*feature 'f', sample 1/);
  });

  it('NaN and infinite dense values pass through the source unchanged (the trainer checks them)', () => {
    const nan = new Float32Array(new Uint32Array([0x7fc00001, 0x7f800000, 0xff800000, 0x3f800000]).buffer);
    const fsl = new FixedSizeList(2, new Field('item', new Float32(), false));
    const rb = recordBatch([
      ['dense', makeData({ type: fsl, length: 2, child: makeData({ type: new Float32(), length: 4, data: nan }) })],
      ['a', one(new Float32(), nan.subarray(0, 2))],
      ['b', one(new Float32(), nan.subarray(2, 4))],
      ['x', one(new Int32(), Int32Array.from([0, 1]))],
    ]);
    const bitsOf = (a: Float32Array): number[] => Array.from(new Uint32Array(a.buffer, a.byteOffset, a.length));
    expect(bitsOf(recordBatchToBatch(rb, { label: null, features: ['x'] }).dense)).toEqual(bitsOf(nan));
    expect(bitsOf(recordBatchToBatch(rb, { label: null, dense: ['a', 'b'], features: ['x'] }).dense)).toEqual([0x7fc00001, 0xff800000, 0x7f800000, 0x3f800000]);
  });
});

describe('checks of an untrusted Arrow body', () => {
  it('list offsets: too few, past the ids, running backwards — each names the column (and the row)', () => {
    const rb = recordBatch([
      ['ok', listColumn(new Int32(), [0, 1, 1, 3], [1, 2, 3])],
      ['back', listColumn(new Int32(), [0, 2, 1, 3], [1, 2, 3])],
      ['past', listColumn(new Int32(), [0, 1, 2, 5], [1, 2, 3])],
      ['one', makeData({ type: new Int32(), length: 3, data: Int32Array.from([1, 2, 3]) })],
    ]);
    expect(errorText(() => checkListOffsets(rb, 'ok'))).toBe('no error');
    expect(errorText(() => checkListOffsets(rb, 'one'))).toBe('no error');
    expect(errorText(() => checkListOffsets(rb, 'missing'))).toBe('no error');
    expect(errorText(() => checkListOffsets(rb, 'back'))).toBe("INVALID_ARGUMENT: column 'back': its list offsets run backwards at row 1 (2 → 1); the Arrow body is corrupt");
    expect(errorText(() => checkListOffsets(rb, 'past'))).toBe("INVALID_ARGUMENT: column 'past': its list offsets span [0, 5) but the column holds 3 ids; the Arrow body is corrupt");
    const lt = new List(new Field('item', new Int32(), false));
    const short = recordBatch([['short', makeData({ type: lt, length: 3, valueOffsets: Int32Array.from([0, 1]), child: makeData({ type: new Int32(), length: 1, data: Int32Array.from([1]) }) })]]);
    expect(errorText(() => checkListOffsets(short, 'short'))).toBe("INVALID_ARGUMENT: column 'short': its list offsets hold 2 entries for 3 rows; the Arrow body is corrupt");
    // a slice of the column: its rows counted from the slice's first
    expect(errorText(() => checkListOffsets(rb.slice(1, 3), 'back'))).toBe("INVALID_ARGUMENT: column 'back': its list offsets run backwards at row 0 (2 → 1); the Arrow body is corrupt");
    // the first backwards row of a long column, past the native scan's first chunk
    const B = 10000, off = Array.from({ length: B + 1 }, (_, i) => i);
    off[9001] = 9005;
    const long = recordBatch([['f', listColumn(new Int32(), off, new Int32Array(B))]]);
    expect(errorText(() => checkListOffsets(long, 'f'))).toBe("INVALID_ARGUMENT: column 'f': its list offsets run backwards at row 9001 (9005 → 9002); the Arrow body is corrupt");
  });

  it('dense values: the first non-finite one named by row (counted from firstRow) and value index', () => {
    const D = 3, dense = new Float32Array(5000 * D);
    expect(errorText(() => checkDenseFinite(dense, D, 0))).toBe('no error');
    expect(errorText(() => checkDenseFinite(new Float32Array(0), 0, 0))).toBe('no error');
    for (const [i, v, text] of [[4, NaN, 'NaN'], [14000, Infinity, 'Infinity'], [7, -Infinity, '-Infinity']] as const) {
      const d = dense.slice();
      d[i] = v;
      d[14500] = NaN; // a later one is not the one named
      expect(errorText(() => checkDenseFinite(d, D, 10))).toBe(`INVALID_ARGUMENT: column 'dense': row ${10 + Math.floor(i / D)}, value ${i % D} is ${text}; dense values must be finite`);
    }
  });

  it('ids: written as Int32 rows at the offset given; the first outside [0, rows) named with its column', () => {
    const rows = 1000;
    const cases: [IdArray, string][] = [
      [Int32Array.from([0, 999, 5]), 'no error'],
      [Uint32Array.from([1, 2, 3]), 'no error'],
      [BigInt64Array.from([7n, 8n, 999n]), 'no error'],
      [Int32Array.from([3, -1, 1000]), "ID_OUT_OF_RANGE: column 'f': id -1 is not a row of its table (an integer in [0, 1000))"],
      [Uint32Array.from([3, 4294967295]), "ID_OUT_OF_RANGE: column 'f': id 4294967295 is not a row of its table (an integer in [0, 1000))"],
      [BigInt64Array.from([3n, 1000n]), "ID_OUT_OF_RANGE: column 'f': id 1000 is not a row of its table (an integer in [0, 1000))"],
      [BigInt64Array.from([-(1n << 62n)]), `ID_OUT_OF_RANGE: column 'f': id ${-(1n << 62n)} is not a row of its table (an integer in [0, 1000))`],
    ];
    for (const [ids, want] of cases) {
      const dst = new Int32Array(ids.length + 2).fill(-7);
      expect(errorText(() => expect(idsToRows(ids, rows, 'f', dst, 2)).toBe(ids.length))).toBe(want);
      if (want === 'no error') expect(Array.from(dst)).toEqual([-7, -7, ...Array.from(ids as ArrayLike<number | bigint>, Number)]);
    }
    // the first bad id of a long list, past the native scan's first chunk
    const long = new Int32Array(9000);
    long[8500] = 1000;
    long[8600] = -3;
    expect(errorText(() => idsToRows(long, rows, 'g', new Int32Array(9000), 0))).toMatch(/^ID_OUT_OF_RANGE: column 'g': id 1000 /);
  });
});

describe('the native column ops', () => {
  it('refuse an output too short for what they would write, leaving it as it was', () => {
    const a = loadAddon().arrow, off = Int32Array.from([0, 1, 3, 6]);
    const cases: [string, () => unknown, ArrayBufferView][] = [];
    const lengths = new Int32Array(4).fill(-9);
    cases.push(['bagLengths', () => a.bagLengths(off, 3, lengths, 2), lengths]);
    const out = new Int32Array(3).fill(-9);
    cases.push(['validBagOffsets', () => a.validBagOffsets(off, null, 0, 3, out), out]);
    const dense = new Float32Array(8).fill(-9);
    cases.push(['toFloat32', () => a.toFloat32(Int8Array.from([1, 2, 3]), 3, dense, 1, 4), dense]);
    cases.push(['toFloat32 (its last index past 2^63)', () => a.toFloat32(Int8Array.from([1, 2, 3]), 2 ** 20 + 1, dense, 1, 2 ** 53 - 1), dense]);
    const wide = new BigInt64Array(3).fill(-9n);
    cases.push(['widenIds', () => a.widenIds(Int32Array.from([1, 2, 3]), wide, 1), wide]);
    const rows = new Int32Array(3).fill(-9);
    cases.push(['idsToRows', () => a.idsToRows('f', Int32Array.from([1, 2, 3]), 10, rows, 1), rows]);
    for (const [name, call, target] of cases) {
      const before = Buffer.from(new Uint8Array(target.buffer, target.byteOffset, target.byteLength));
      expect(errorText(call), name).toMatch(/^LENGTH_MISMATCH: arrow\.\w+: \w+ is too short/);
      expect(Buffer.from(new Uint8Array(target.buffer, target.byteOffset, target.byteLength)).equals(before), name).toBe(true);
    }
    // a bag that would land outside the ids: refused, nothing written past them
    const ids = new Int32Array(2);
    expect(a.copyValidBags(off, Int32Array.from([0, 1, 3, 6]), Int32Array.from([1, 2, 3, 4, 5, 6]), ids)).toBe(false);
    expect(errorText(() => a.copyValidBags(off, Int32Array.from([0, 1]), Int32Array.from([1]), new BigInt64Array(1)))).toMatch(/^INVALID_ARGUMENT: .*one element type/);
  });
});

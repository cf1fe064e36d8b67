// arrow-decoder.test.ts — ArrowDecoder's worker thread, which loads the native addon for the Arrow
// reader's per-element work: bodies decoded there equal the samples they were written from (a naive
// walk of the columns as built: null slots empty, Int64 ids as Int32 rows), their arrays transferred back;
// a corrupt body is refused naming its column and the same worker decodes the next; a closed decoder refuses.
import { describe, it, expect, afterAll } from 'vitest';
import { Field, FixedSizeList, Float32, Int32, Int64, List, RecordBatch, Schema, Struct, Table, makeData, tableToIPC, type Data, type DataType } from 'apache-arrow';
import { ArrowDecoder } from '../../lib/serve/arrow-decoder.js';
import { isEmbshardError } from '../../lib/errors.js';
import type { ModelInputs } from '../../lib/train/inputs.js';

const B = 300, D = 2;
const inputs: ModelInputs = { sparse: ['a', 'b'], numDense: D, tableRows: [1000, 70], hash: 'modulo' };

interface Column { t: DataType; offsets: Int32Array; values: number[]; valid: boolean[] }

/** A list column: bags of 0 … 3 ids below `rows`, every fifth slot null (its offsets still spanning ids). */
function column(t: DataType, rows: number, seed: number): Column {
  const offsets = new Int32Array(B + 1), values: number[] = [], valid: boolean[] = [];
  for (let b = 0; b < B; b++) {
    const n = (b * 7 + seed) % 4;
    for (let k = 0; k < n; k++) values.push((b * 31 + k * 17 + seed) % rows);
    offsets[b + 1] = values.length;
    valid.push(b % 5 !== 2);
  }
  return { t, offsets, values, valid };
}

function listData(c: Column): Data {
  const bitmap = new Uint8Array(Math.ceil(B / 8));
  c.valid.forEach((v, i) => v && (bitmap[i >> 3]! |= 1 << (i & 7)));
  const lt = new List(new Field('item', c.t, false));
  const data = c.t instanceof Int64 ? BigInt64Array.from(c.values, BigInt) : Int32Array.from(c.values);
  return makeData({ type: lt, length: B, valueOffsets: c.offsets, nullCount: c.valid.filter((v) => !v).length, nullBitmap: bitmap, child: makeData({ type: c.t, length: c.values.length, data } as never) } as never) as Data;
}

function body(dense: Float32Array, cols: Column[]): Uint8Array {
  const ft = new FixedSizeList(D, new Field('item', new Float32(), false));
  const fields = [new Field('dense', ft, false), ...cols.map((c, f) => new Field(inputs.sparse[f]!, new List(new Field('item', c.t, false)), true))];
  const children = [makeData({ type: ft, length: B, child: makeData({ type: new Float32(), length: B * D, data: dense }) }), ...cols.map(listData)];
  return tableToIPC(new Table(new RecordBatch(new Schema(fields), makeData({ type: new Struct(fields), length: B, children, nullCount: 0 }))), 'stream');
}

describe('ArrowDecoder', () => {
  const decoder = new ArrowDecoder(20000);
  afterAll(() => decoder.close());
  const dense = Float32Array.from({ length: B * D }, (_, i) => i / 8 - 3);
  const cols = [column(new Int64(), 1000, 1), column(new Int32(), 70, 2)];

  it('decodes in its worker thread into the samples the body was written from', async () => {
    const got = await decoder.decode(body(dense, cols), inputs, 1000);
    const lengths: number[] = [], ids: number[] = [];
    for (const c of cols)
      for (let b = 0; b < B; b++) {
        const bag = c.valid[b] ? c.values.slice(c.offsets[b]!, c.offsets[b + 1]!) : [];
        lengths.push(bag.length);
        ids.push(...bag);
      }
    expect(got.size).toBe(B);
    expect(Array.from(got.dense)).toEqual(Array.from(dense));
    expect(got.sparse.features).toEqual(inputs.sparse);
    expect(Array.from(got.sparse.lengths)).toEqual(lengths);
    expect(got.sparse.ids).toBeInstanceOf(Int32Array);
    expect(Array.from(got.sparse.ids as Int32Array)).toEqual(ids);
    // transferred: each array owns its whole buffer
    for (const a of [got.dense, got.sparse.lengths, got.sparse.ids]) expect(a.byteLength).toBe(a.buffer.byteLength);
  });

  it('refuses a corrupt body naming its column, then decodes the next one', async () => {
    const bad = cols.map((c) => ({ ...c, values: [...c.values] }));
    bad[1]!.values[bad[1]!.offsets[3]!] = 70; // row 3 of 'b' is valid and holds ids
    const err = await decoder.decode(body(dense, bad), inputs, 1000).catch((e: unknown) => e);
    expect(isEmbshardError(err)).toBe(true);
    expect(`${(err as { code: string }).code}: ${(err as Error).message}`).toBe("ID_OUT_OF_RANGE: column 'b': id 70 is not a row of its table (an integer in [0, 70))");
    const nan = dense.slice();
    nan[2 * D + 1] = NaN;
    const err2 = await decoder.decode(body(nan, cols), inputs, 1000).catch((e: unknown) => e);
    expect((err2 as Error).message).toBe("column 'dense': row 2, value 1 is NaN; dense values must be finite");
    const ok = await decoder.decode(body(dense, cols), inputs, 1000);
    expect(ok.size).toBe(B);
  });

  it('a closed decoder refuses bodies', async () => {
    const d = new ArrowDecoder(20000);
    await d.close();
    const err = await d.decode(body(dense, cols), inputs, 1000).catch((e: unknown) => e);
    expect((err as { code: string }).code).toBe('DISPOSED');
  });
});

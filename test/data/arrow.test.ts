// arrow.test.ts — the Arrow path against the plain path on the same data: synthetic batches → Arrow
// (batchToArrow) → batches must be identical, zero-copy where documented; after an IPC round trip
// (fresh buffers, copies for ids) still identical; sliced RecordBatches (maxBatchSize) equal the plain
// batches' slices; hand-built tables with one-hot columns, separate dense columns and int labels.
import { describe, it, expect } from 'vitest';
import {
  Field, FixedSizeList, Float32, Int32, Int8, RecordBatch, Schema, Struct, Table, makeData, tableFromIPC, tableToIPC,
} from 'apache-arrow';
import { ArrowSource, arrowSource, batchToArrow, batchesToTable, recordBatchToBatch } from '../../lib/data/arrow.js';
import { SyntheticSource } from '../../lib/data/synthetic.js';
import { isEmbshardError } from '../../lib/errors.js';
import type { Batch } from '../../lib/data/types.js';

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

// arrow.ts — Apache Arrow RecordBatches as a BatchSource, read zero-copy from the column buffers; the
// writer of that layout; the checks of an untrusted body's columns (the server's). The layout (one
// RecordBatch = one Batch):
//   label    Float32                         (Int8/Int32/Uint8/Float64 accepted, converted: one pass)
//   dense    FixedSizeList<Float32>[D]       the [B × D] block itself (or D Float32 columns, interleaved: one pass)
//   <feat>   List<Int32 | Uint32 | Int64>     one column per sparse feature, a bag per row
//            or Int32 | Uint32 | Int64        a one-hot feature (one id per row)
//   planted  Float32, optional               synthetic data's planted probabilities
// Zero-copy: labels and dense are views of the Arrow buffers; the ids are one view when the feature
// columns' values lie back to back in one ArrayBuffer in feature order (what batchToArrow writes),
// otherwise one memcpy per feature into a fresh array (always the case after IPC, where each list's
// offsets buffer lies between two features' values). Arrow JS keeps `values`/`valueOffsets` positioned at a Data's first row
// (slice() subarrays them), so a sliced column reads values[0 …) and ids [valueOffsets[0], valueOffsets[B]).
// The per-element work (bag lengths, null slots, conversions to Float32, the interleaving of dense
// columns, the widening of 32-bit ids, the checks) runs natively on the buffers in place
// (native/data/arrow_columns.h).
import {
  Data, Field, FixedSizeList, Float32, Int32, Int64, List, RecordBatch, Schema, Struct, Table, Type, Uint32, makeData,
  type DataType,
} from 'apache-arrow';
import { EmbshardError } from '../errors.js';
import { JaggedBatch } from '../batch.js';
import type { IdArray, NativeArrowOps } from '../binding.js';
import { loadAddon } from '../native.js';
import { batchSizeOf, listOption, nonNegativeInt, type Batch, type BatchSource } from './types.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';

export interface ArrowSourceOptions {
  /** Sparse feature columns, in batch order. Default: every column but the label, dense and planted ones. */
  features?: readonly string[] | undefined;
  /** Label column. Default 'label'; null: the batches carry no label column (labels 0, for scoring). */
  label?: string | null | undefined;
  /** A FixedSizeList<Float32> column name, or a list of Float32 column names. Default 'dense'. */
  dense?: string | readonly string[] | undefined;
  /** Split larger RecordBatches into zero-copy slices of at most this many rows. */
  maxBatchSize?: number | undefined;
}

export type ArrowInput = Table | readonly RecordBatch[] | (() => Iterable<RecordBatch> | AsyncIterable<RecordBatch>);

let ops: NativeArrowOps | undefined;
function arrowOps(): NativeArrowOps {
  return (ops ??= loadAddon().arrow);
}

function col(rb: RecordBatch, name: string): Data {
  const i = rb.schema.fields.findIndex((f) => f.name === name);
  if (i < 0) throw new EmbshardError('MISSING_FEATURE', `the RecordBatch has no column '${name}'`);
  return rb.data.children[i] as Data;
}

function noNulls(d: Data, name: string): void {
  if (d.nullCount > 0) throw new EmbshardError('INVALID_ARGUMENT', `column '${name}' has ${d.nullCount} nulls; only list columns may hold nulls (empty bags)`);
}

/** The values of a number column that read as Float32 (its first d.length, or fewer when the buffer is short). */
function numberValues(d: Data, name: string): ArrayBufferView & { length: number } {
  noNulls(d, name);
  const v = d.values as unknown;
  if (d.typeId === Type.Float && v instanceof Float32Array) return v.subarray(0, d.length);
  // Float16 values are raw half-float bits (a Uint16Array): read as numbers they would be garbage
  if (d.typeId === Type.Float && !(v instanceof Float64Array))
    throw new EmbshardError('UNSUPPORTED_DTYPE', `column '${name}' must be Float32 (or Float64, or a 32-bit-or-smaller integer type); got ${String(d.type)}`);
  if ((d.typeId === Type.Int || d.typeId === Type.Float) && ArrayBuffer.isView(v) && !(v instanceof BigInt64Array) && !(v instanceof BigUint64Array) && !(v instanceof DataView))
    return (v as Int32Array).subarray(0, d.length);
  throw new EmbshardError('UNSUPPORTED_DTYPE', `column '${name}' must be Float32 (or a 32-bit-or-smaller number type); got ${String(d.type)}`);
}

/** A number column as Float32: a view of a Float32 column, else converted (NaN past a short buffer's end). */
function toFloat32(d: Data, name: string): Float32Array {
  const v = numberValues(d, name);
  if (v instanceof Float32Array) return v;
  const out = new Float32Array(d.length);
  arrowOps().toFloat32(v, d.length, out, 0, 1);
  return out;
}

interface IdView {
  ids: IdArray;
  /** lengths of the B bags, or null for one id per row */
  offsets: Int32Array | null;
}

function idView(d: Data, name: string): IdView {
  let child: Data = d, offsets: Int32Array | null = null, lo = 0, hi = d.length;
  if (d.typeId === Type.List) {
    offsets = d.valueOffsets as Int32Array;
    child = d.children[0] as Data;
    lo = offsets[0]!;
    hi = offsets[d.length]!;
  } else noNulls(d, name);
  if (child.typeId !== Type.Int) throw new EmbshardError('UNSUPPORTED_DTYPE', `column '${name}' must hold Int32, Uint32 or Int64 ids; got ${String(d.type)}`);
  if (child.nullCount > 0) throw new EmbshardError('INVALID_ARGUMENT', `column '${name}' has null ids`);
  const v = child.values as unknown;
  if (!(v instanceof Int32Array || v instanceof Uint32Array || v instanceof BigInt64Array))
    throw new EmbshardError('UNSUPPORTED_DTYPE', `column '${name}' must hold Int32, Uint32 or Int64 ids; got ${String(child.type)}`);
  if (offsets && d.nullCount > 0) return withoutNullBags(d, offsets, v);
  return { ids: v.subarray(lo, hi) as IdArray, offsets };
}

/**
 * A list column with null slots as empty bags: Arrow lets a null slot's offsets span any segment (its
 * contents are undefined), so the ids of the valid bags are copied, one copy per bag, with fresh offsets.
 */
function withoutNullBags(d: Data, offsets: Int32Array, values: Int32Array | Uint32Array | BigInt64Array): IdView {
  const B = d.length, out = new Int32Array(B + 1);
  // Data.getValid's rule: bit d.offset + b of the bitmap; no bitmap, every slot valid
  arrowOps().validBagOffsets(offsets, d.nullable ? (d.nullBitmap as Uint8Array) : null, d.offset, B, out);
  const ids = new (values.constructor as new (n: number) => typeof values)(out[B]!);
  // offsets that run backwards or past the ids can put a bag outside the ids: TypedArray.set's error
  if (!arrowOps().copyValidBags(offsets, out, values, ids)) throw new RangeError('offset is out of bounds');
  return { ids: ids as IdArray, offsets: out };
}
const ARROW_FIELDS = fieldsOf<ArrowSourceOptions>({ features: true, label: true, dense: true, maxBatchSize: true });
const ARROW_STREAM_FIELDS = [...ARROW_FIELDS, 'numDense', 'batchSize'];

/** Converts one RecordBatch to a Batch (views of its buffers wherever the layout allows). */
export function recordBatchToBatch(rb: RecordBatch, o: ArrowSourceOptions = {}): Batch {
  rejectUnknownFields(o, ARROW_FIELDS);
  const B = rb.numRows;
  if (B === 0) throw new EmbshardError('INVALID_SIZE', 'an empty RecordBatch cannot be a batch');
  const labelName = o.label === null ? undefined : (o.label ?? 'label');
  const denseSpec = o.dense ?? 'dense';
  const denseNames = typeof denseSpec === 'string' ? [denseSpec] : listOption('dense', denseSpec as readonly string[])!;
  const plantedIdx = rb.schema.fields.findIndex((f) => f.name === 'planted');
  const taken = new Set([labelName ?? 'label', ...denseNames, 'planted']);
  const features = o.features !== undefined ? listOption('features', o.features)! : rb.schema.fields.map((f) => f.name).filter((n) => !taken.has(n));
  if (features.length === 0) throw new EmbshardError('INVALID_ARGUMENT', 'the RecordBatch has no sparse feature columns');

  const labels = labelName === undefined ? new Float32Array(B) : toFloat32(col(rb, labelName), labelName);
  let dense: Float32Array;
  if (typeof denseSpec === 'string') {
    const d = col(rb, denseSpec);
    noNulls(d, denseSpec);
    if (d.typeId !== Type.FixedSizeList) throw new EmbshardError('UNSUPPORTED_DTYPE', `column '${denseSpec}' must be FixedSizeList<Float32>; got ${String(d.type)}`);
    const D = (d.type as FixedSizeList).listSize;
    const child = d.children[0] as Data;
    if (!(child.values instanceof Float32Array) || child.typeId !== Type.Float) throw new EmbshardError('UNSUPPORTED_DTYPE', `column '${denseSpec}' must hold Float32 values`);
    noNulls(child, `${denseSpec}.item`);
    dense = child.values.subarray(0, B * D);
  } else {
    const D = denseNames.length, dst = new Float32Array(B * D);
    // column j → dst[b · D + j], converted in the same pass
    denseNames.forEach((n, j) => arrowOps().toFloat32(numberValues(col(rb, n), n), B, dst, j, D));
    dense = dst;
  }

  const views = features.map((f) => idView(col(rb, f), f));
  const lengths = new Int32Array(features.length * B);
  views.forEach((v, f) => {
    if (v.offsets) arrowOps().bagLengths(v.offsets, B, lengths, f * B);
    else lengths.fill(1, f * B, (f + 1) * B);
  });
  const ids = joinIds(views.map((v) => v.ids));
  const planted = plantedIdx >= 0 && !features.includes('planted') ? toFloat32(rb.data.children[plantedIdx] as Data, 'planted') : undefined;
  const sparse = JaggedBatch.fromLengths({ features, batchSize: B, lengths, ids });
  return planted ? { dense, sparse, labels, size: B, planted } : { dense, sparse, labels, size: B };
}

/** One array of all features' ids: a view when they are adjacent in one buffer, else a copy. */
function joinIds(parts: IdArray[]): IdArray {
  const first = parts[0]!;
  const Ctor = first.constructor as { new (n: number): IdArray; BYTES_PER_ELEMENT: number };
  const same = parts.every((p) => p.constructor === first.constructor);
  if (same) {
    let contiguous = true, end = first.byteOffset + first.byteLength;
    for (let i = 1; i < parts.length && contiguous; i++) {
      const p = parts[i]!;
      contiguous = p.buffer === first.buffer && p.byteOffset === end;
      end = p.byteOffset + p.byteLength;
    }
    if (contiguous) {
      const n = parts.reduce((a, p) => a + p.length, 0);
      return new (first.constructor as new (b: ArrayBufferLike, o: number, n: number) => IdArray)(first.buffer, first.byteOffset, n);
    }
    const out = new Ctor(parts.reduce((a, p) => a + p.length, 0));
    let o = 0;
    for (const p of parts) {
      (out as Int32Array).set(p as Int32Array, o);
      o += p.length;
    }
    return out;
  }
  // mixed id types: widen everything to int64
  const out = new BigInt64Array(parts.reduce((a, p) => a + p.length, 0));
  let o = 0;
  for (const p of parts) {
    if (p instanceof BigInt64Array) out.set(p, o);
    else arrowOps().widenIds(p, out, o);
    o += p.length;
  }
  return out;
}

function idType(ids: IdArray): DataType {
  return ids instanceof BigInt64Array ? new Int64() : ids instanceof Uint32Array ? new Uint32() : new Int32();
}

/**
 * A RecordBatch in the layout above whose buffers are views of the batch's arrays (no copies; only the
 * per-feature list offsets are computed). Per-id weights are not carried.
 */
export function batchToArrow(batch: Batch): RecordBatch {
  const B = batch.size, s = batch.sparse;
  const D = batch.dense.length / B;
  const fields: Field[] = [new Field('label', new Float32(), false), new Field('dense', new FixedSizeList(D, new Field('item', new Float32(), false)), false)];
  const children: Data[] = [
    makeData({ type: new Float32(), length: B, data: batch.labels }),
    makeData({
      type: new FixedSizeList(D, new Field('item', new Float32(), false)),
      length: B,
      child: makeData({ type: new Float32(), length: B * D, data: batch.dense }),
    }),
  ];
  const all = s.offsets;
  s.features.forEach((name, f) => {
    const start = all[f * B]!, end = all[(f + 1) * B]!;
    const valueOffsets = new Int32Array(B + 1);
    for (let b = 0; b <= B; b++) valueOffsets[b] = all[f * B + b]! - start;
    const ids = s.ids.subarray(start, end) as IdArray;
    const t = idType(ids);
    const listType = new List(new Field('item', t, false));
    fields.push(new Field(name, listType, false));
    children.push(makeData({ type: listType, length: B, valueOffsets, child: makeData({ type: t, length: ids.length, data: ids } as never) }));
  });
  if (batch.planted) {
    fields.push(new Field('planted', new Float32(), false));
    children.push(makeData({ type: new Float32(), length: B, data: batch.planted }));
  }
  const schema = new Schema(fields);
  return new RecordBatch(schema, makeData({ type: new Struct(fields), length: B, children, nullCount: 0 }));
}

/** batches → one Arrow Table (each batch one RecordBatch, zero-copy). */
export function batchesToTable(batches: readonly Batch[]): Table {
  if (batches.length === 0) throw new EmbshardError('INVALID_ARGUMENT', 'batches must not be empty');
  return new Table(batches.map(batchToArrow));
}

/** Arrow RecordBatches as a BatchSource. A Table, an array or a factory function can be iterated again. */
export class ArrowSource implements BatchSource {
  readonly features: readonly string[];
  readonly numDense: number;
  readonly batchSize: number;
  private readonly opts: ArrowSourceOptions;

  constructor(
    private readonly input: ArrowInput,
    options: ArrowSourceOptions & { features: readonly string[]; numDense: number; batchSize: number },
  ) {
    rejectUnknownFields(options, ARROW_STREAM_FIELDS);
    const { numDense: _n, batchSize: _b, ...perBatch } = options; // what recordBatchToBatch reads
    this.opts = perBatch;
    const features = listOption('features', options.features);
    if (!features || features.length === 0 || features.some((f) => typeof f !== 'string' || f.length === 0))
      throw new EmbshardError('INVALID_ARGUMENT', 'features must be a non-empty array of the sparse feature column names');
    this.features = features;
    this.numDense = nonNegativeInt('numDense', options.numDense);
    this.batchSize = batchSizeOf('batchSize', options.batchSize);
    if (options.maxBatchSize !== undefined) batchSizeOf('maxBatchSize', options.maxBatchSize);
    if (!(input instanceof Table) && !Array.isArray(input) && typeof input !== 'function')
      throw new EmbshardError('INVALID_ARGUMENT', 'input must be an Arrow Table, an array of RecordBatches or a function returning an iterable of them');
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Batch> {
    const src = this.input instanceof Table ? this.input.batches : Array.isArray(this.input) ? this.input : (this.input as () => Iterable<RecordBatch> | AsyncIterable<RecordBatch>)();
    const max = this.opts.maxBatchSize ?? Infinity;
    for await (const rb of src as AsyncIterable<RecordBatch>) {
      if (rb.numRows === 0) continue;
      for (let s = 0; s < rb.numRows; s += max) {
        const part = s === 0 && rb.numRows <= max ? rb : rb.slice(s, Math.min(s + max, rb.numRows));
        yield recordBatchToBatch(part, this.opts);
      }
    }
  }
}

/**
 * An ArrowSource whose features, dense width and batch size are read from the first RecordBatch of a
 * Table or array (pass them explicitly to ArrowSource for a lazy stream).
 */
export function arrowSource(input: Table | readonly RecordBatch[], options: ArrowSourceOptions = {}): ArrowSource {
  if (!(input instanceof Table) && !Array.isArray(input)) throw new EmbshardError('INVALID_ARGUMENT', 'arrowSource: input must be an Arrow Table or an array of RecordBatches');
  const first = input instanceof Table ? input.batches[0] : input[0];
  if (!first) throw new EmbshardError('INVALID_ARGUMENT', 'the Arrow input holds no RecordBatch');
  if (typeof first !== 'object' || typeof (first as Partial<RecordBatch>).schema !== 'object' || typeof (first as Partial<RecordBatch>).data !== 'object')
    throw new EmbshardError('INVALID_ARGUMENT', 'arrowSource: input must be an Arrow Table or an array of RecordBatches');
  const b = recordBatchToBatch(first, options);
  return new ArrowSource(input, {
    ...options,
    features: b.sparse.features,
    numDense: b.dense.length / b.size,
    batchSize: Math.min(first.numRows, options.maxBatchSize ?? Infinity),
  });
}

// The checks of an untrusted Arrow body's columns (the Arrow reader trusts the counts in its metadata):
// each throws the typed error naming the column, the per-element scans native.

/** A list column's offsets: B + 1 entries within its ids, none running backwards (INVALID_ARGUMENT); other columns pass. */
export function checkListOffsets(rb: RecordBatch, name: string): void {
  const i = rb.schema.fields.findIndex((f) => f.name === name);
  const d = i < 0 ? undefined : rb.data.children[i];
  if (d?.typeId !== Type.List) return; // a missing or one-hot column: recordBatchToBatch's checks
  const off = d.valueOffsets as Int32Array | undefined, ids = (d.children[0]?.values as ArrayLike<unknown> | undefined)?.length ?? 0;
  const bad: (why: string) => never = (why) => {
    throw new EmbshardError('INVALID_ARGUMENT', `column '${name}': its list offsets ${why}; the Arrow body is corrupt`);
  };
  if (!off || off.length < d.length + 1) bad(`hold ${off?.length ?? 0} entries for ${d.length} rows`);
  if (off[0]! < 0 || off[d.length]! > ids) bad(`span [${off[0]}, ${off[d.length]}) but the column holds ${ids} ids`);
  arrowOps().checkOffsets(name, off, d.length);
}

/** Dense values [rows × D] all finite (INVALID_ARGUMENT naming column 'dense', the row counted from firstRow, and the value). */
export function checkDenseFinite(dense: Float32Array, D: number, firstRow: number): void {
  arrowOps().checkDenseFinite('dense', dense, D, firstRow);
}

/**
 * A feature's ids checked against [0, rows) (ID_OUT_OF_RANGE naming the column and the id) and written to
 * dst[at …) as Int32; returns how many.
 */
export function idsToRows(ids: IdArray, rows: number, name: string, dst: Int32Array, at: number): number {
  return arrowOps().idsToRows(name, ids, rows, dst, at);
}

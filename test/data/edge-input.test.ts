// edge-input.test.ts — damaged, mistyped and edge-case input to the readers: options of the wrong type are
// EmbshardErrors naming the field (never a TypeError), a synthetic batch too large for one typed array is
// INVALID_SIZE before anything is allocated, wide seeds do not alias, an npy labels file holding a value
// other than 0 / 1 is refused, Arrow Float16 columns are refused and null list slots are empty bags
// whatever their offsets span, and a TSV file's UTF-8 byte-order mark is not part of its first line. Each
// is checked against values written out by hand or a naive split of the same text. Raw hex values are
// 1 to 8 hex digits, whatever characters a string holds (checked against parseInt).
import { describe, it, expect } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Field, FixedSizeList, Float16, Float32, Int32, List, RecordBatch, Schema, Struct, makeData } from 'apache-arrow';
import { CriteoTsvSource } from '../../lib/data/criteo-tsv.js';
import { hashHexString } from '../../lib/data/criteo-hash.js';
import { CriteoNpySource, dayFiles } from '../../lib/data/criteo-npy.js';
import { writeNpy } from '../../lib/data/npy.js';
import { SyntheticSource } from '../../lib/data/synthetic.js';
import { ArrowSource, recordBatchToBatch } from '../../lib/data/arrow.js';
import { isEmbshardError } from '../../lib/errors.js';
import type { Batch } from '../../lib/data/types.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('edge');

/** `code: message` of what f throws (an EmbshardError is required), or 'no error'. */
function errorOf(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    if (!isEmbshardError(e)) return `untyped ${(e as Error)?.constructor?.name}: ${(e as Error)?.message}`;
    return `${e.code}: ${e.message}`;
  }
  return 'no error';
}

async function collect(src: AsyncIterable<Batch>): Promise<Batch[]> {
  const out: Batch[] = [];
  for await (const b of src) out.push(b);
  return out;
}

/** One Criteo TSV line: label, 13 integers, 26 hex values. */
function tsvLine(k: number): string {
  const ints = Array.from({ length: 13 }, (_, j) => String(k * 13 + j));
  const cats = Array.from({ length: 26 }, (_, f) => ((k * 26 + f) * 2654435761 >>> 0).toString(16));
  return [String(k % 2), ...ints, ...cats].join('\t');
}

describe('options of the wrong type', () => {
  it('are EmbshardErrors naming the field, not TypeErrors', () => {
    const file = join(tmp.dir, 'one.tsv');
    writeFileSync(file, tsvLine(0) + '\n');
    const cases: [string, () => unknown, RegExp][] = [
      ['tsv tableRows: a number', () => new CriteoTsvSource({ path: file, batchSize: 4, tableRows: 5 as never }), /^INVALID_ARGUMENT: tableRows must be an array/],
      ['tsv hasLabel: a string', () => new CriteoTsvSource({ path: file, batchSize: 4, hasLabel: 'false' as never }), /^INVALID_ARGUMENT: hasLabel must be true or false/],
      ['tsv dropLast: a number', () => new CriteoTsvSource({ path: file, batchSize: 4, dropLast: 1 as never }), /^INVALID_ARGUMENT: dropLast/],
      ['npy hashes: a number', () => new CriteoNpySource({ dir: tmp.dir, days: [0], batchSize: 4, hashes: 5 as never }), /^INVALID_ARGUMENT: hashes must be an array/],
      ['npy files.dense: a string', () => new CriteoNpySource({ files: { dense: 'a.npy', sparse: 'b.npy', labels: 'c.npy' } as never, batchSize: 4 }), /^INVALID_ARGUMENT: files\.dense must be an array/],
      ['npy files.labels: missing', () => new CriteoNpySource({ files: { dense: ['a'], sparse: ['b'] } as never, batchSize: 4 }), /^LENGTH_MISMATCH: files/],
      ['npy features: a number', () => new CriteoNpySource({ dir: tmp.dir, days: [0], batchSize: 4, features: 3 as never }), /^INVALID_ARGUMENT: features must be an array/],
      ['npy multiHot: a string', () => new CriteoNpySource({ dir: tmp.dir, days: [0], batchSize: 4, multiHot: 'yes' as never }), /^INVALID_ARGUMENT: multiHot/],
      ['synthetic cardinalities: a number', () => new SyntheticSource({ batchSize: 4, cardinalities: 5 as never }), /^INVALID_ARGUMENT: cardinalities must be an array/],
      ['synthetic hotness: an object', () => new SyntheticSource({ batchSize: 4, hotness: {} as never }), /^INVALID_ARGUMENT: hotness/],
      ['synthetic features: a number', () => new SyntheticSource({ batchSize: 4, features: 5 as never }), /^INVALID_ARGUMENT: features must be an array/],
      ['arrow features: missing', () => new ArrowSource([], { numDense: 1, batchSize: 4 } as never), /^INVALID_ARGUMENT: features/],
      ['arrow numDense: a string', () => new ArrowSource([], { numDense: 'x', batchSize: 4, features: ['a'] } as never), /^INVALID_ARGUMENT: numDense/],
    ];
    for (const [what, f, want] of cases) expect([what, errorOf(f)]).toEqual([what, expect.stringMatching(want)]);
  });
});

describe('synthetic batch sizes', () => {
  it('a batch with more ids or dense values than one typed array holds is INVALID_SIZE before any allocation', () => {
    // dlrm-benchmark: 8 tables × 100 ids per sample; 2^24 samples are 1.3e10 ids
    expect(errorOf(() => new SyntheticSource({ preset: 'dlrm-benchmark', batchSize: 1 << 24 }).batch(0))).toMatch(/^INVALID_SIZE: batchSize × ids per sample/);
    // uniform bags reach 2h − 1 ids: 2^21 samples × (2·513 − 1) ids > 2^31 − 1, while 2^21 × 513 fits
    expect(errorOf(() => new SyntheticSource({ batchSize: 1 << 21, cardinalities: [10], hotness: 513, lengths: 'uniform' }))).toMatch(/^INVALID_SIZE/);
    expect(errorOf(() => new SyntheticSource({ batchSize: 1 << 21, cardinalities: [10], hotness: 513 }))).toBe('no error');
    expect(errorOf(() => new SyntheticSource({ batchSize: 1 << 20, numDense: 1 << 12, cardinalities: [10] }))).toMatch(/^INVALID_SIZE: batchSize × numDense/);
  });
});

describe('synthetic seeds', () => {
  it('seeds past 32 bits do not alias narrower ones; seeds within them are unchanged', () => {
    const ids = (seed: number): number[] => Array.from(new SyntheticSource({ batchSize: 64, cardinalities: [5000, 1000], seed, alpha: 0 }).batch(0).sparse.ids);
    for (const [a, b] of [[0, 2 ** 32], [1, 2 ** 32 + 1], [-1, 2 ** 32 - 1], [7, 2 ** 40 + 7], [-5, -(2 ** 32) - 5]] as const)
      expect([a, b, ids(a).join() === ids(b).join()]).toEqual([a, b, false]);
    expect(new SyntheticSource({ batchSize: 1, seed: -(2 ** 31) }).cfg.seed).toBe(-(2 ** 31));
    expect(new SyntheticSource({ batchSize: 1, seed: 2 ** 31 - 1 }).cfg.seed).toBe(2 ** 31 - 1);
  });
});

describe('torchrec npy labels', () => {
  it('a label other than 0 or 1 is INVALID_ARGUMENT naming the file and row', async () => {
    const f = dayFiles(tmp.dir, 5);
    await writeNpy(f.dense, new Float32Array(4 * 2), [4, 2]);
    await writeNpy(f.sparse, Int32Array.from([1, 2, 3, 4]), [4, 1]);
    await writeNpy(f.labels, Int32Array.from([0, 1, 2, 1]), [4, 1]);
    let err: unknown;
    try {
      await collect(new CriteoNpySource({ dir: tmp.dir, days: [5], batchSize: 3 }));
    } catch (e) {
      err = e;
    }
    expect(isEmbshardError(err) && `${err.code}: ${err.message}`).toMatch(/^INVALID_ARGUMENT: .*day_5_labels\.npy: row 2 holds label 2/);
    await writeNpy(f.labels, Int32Array.from([0, 1, 1, 0]), [4, 1]);
    const ok = await collect(new CriteoNpySource({ dir: tmp.dir, days: [5], batchSize: 3 }));
    expect(ok.flatMap((b) => Array.from(b.labels))).toEqual([0, 1, 1, 0]);
  });
});

describe('Arrow columns', () => {
  const listType = new List(new Field('item', new Int32(), false));
  const denseType = new FixedSizeList(1, new Field('item', new Float32(), false));
  /** label, dense [B × 1] = 0 … B−1, and one list column `f` with the given offsets, values and validity. */
  function batch(labelType: Float16 | Float32, labels: Uint16Array | Float32Array, offsets: number[], values: number[], valid?: boolean[]): RecordBatch {
    const B = offsets.length - 1;
    const fields = [new Field('label', labelType, false), new Field('dense', denseType, false), new Field('f', listType, true)];
    let nullBitmap: Uint8Array | undefined;
    if (valid) {
      nullBitmap = new Uint8Array(Math.ceil(B / 8));
      valid.forEach((v, i) => v && (nullBitmap![i >> 3]! |= 1 << (i & 7)));
    }
    const children = [
      makeData({ type: labelType, length: B, data: labels } as never),
      makeData({ type: denseType, length: B, child: makeData({ type: new Float32(), length: B, data: Float32Array.from({ length: B }, (_, i) => i) }) }),
      makeData({
        type: listType, length: B, valueOffsets: Int32Array.from(offsets), nullCount: valid ? valid.filter((v) => !v).length : 0, nullBitmap,
        child: makeData({ type: new Int32(), length: values.length, data: Int32Array.from(values) }),
      }),
    ];
    return new RecordBatch(new Schema(fields), makeData({ type: new Struct(fields), length: B, children, nullCount: 0 }));
  }

  it('a Float16 column is UNSUPPORTED_DTYPE, not its raw half-float bits read as numbers', () => {
    const rb = batch(new Float16(), Uint16Array.from([0x3c00, 0, 0x3c00]), [0, 1, 2, 3], [5, 6, 7]); // 1, 0, 1 as halves
    expect(errorOf(() => recordBatchToBatch(rb))).toMatch(/^UNSUPPORTED_DTYPE: column 'label'.*Float16/);
  });

  it('a null list slot is an empty bag even when its offsets span ids (their contents are undefined)', () => {
    // rows: [10], null over [11, 12], [13], null over nothing, [14, 15]
    const offsets = [0, 1, 3, 4, 4, 6], values = [10, 11, 12, 13, 14, 15], valid = [true, false, true, false, true];
    const rb = batch(new Float32(), Float32Array.from([1, 0, 1, 0, 1]), offsets, values, valid);
    const b = recordBatchToBatch(rb);
    expect(Array.from(b.sparse.lengths)).toEqual([1, 0, 1, 0, 2]);
    expect(Array.from(b.sparse.ids as Int32Array)).toEqual([10, 13, 14, 15]);
    // a slice starting at the null slot: the validity bitmap is read at the slice's offset
    const s = recordBatchToBatch(rb.slice(1, 5));
    expect(Array.from(s.sparse.lengths)).toEqual([0, 1, 0, 2]);
    expect(Array.from(s.sparse.ids as Int32Array)).toEqual([13, 14, 15]);
    expect(Array.from(s.dense)).toEqual([1, 2, 3, 4]);
  });
});

describe('Criteo TSV byte-order mark', () => {
  it("a UTF-8 BOM at the start of a file is not part of its first line's label", async () => {
    const lines = [0, 1, 2].map(tsvLine);
    const plain = join(tmp.dir, 'plain.tsv'), bom = join(tmp.dir, 'bom.tsv');
    writeFileSync(plain, lines.join('\n') + '\n');
    writeFileSync(bom, Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(lines.join('\n') + '\n')]));
    for (const chunkSize of [1, 2, 4, 1 << 16]) {
      const a = new CriteoTsvSource({ path: [bom, bom], batchSize: 8, maxRows: 1000, chunkSize });
      const got = await collect(a);
      expect(a.report()!.malformed).toBe(0);
      expect(got.map((b) => b.size)).toEqual([6]);
      const want = await collect(new CriteoTsvSource({ path: [plain, plain], batchSize: 8, maxRows: 1000 }));
      expect(Array.from(got[0]!.labels)).toEqual(Array.from(want[0]!.labels));
      expect(Array.from(got[0]!.dense)).toEqual(Array.from(want[0]!.dense));
      expect(Array.from(got[0]!.sparse.ids as Int32Array)).toEqual(Array.from(want[0]!.sparse.ids as Int32Array));
      // the naive reading of the text: labels 0, 1, 0 per file, first dense column ln(1 + 13k)
      expect(Array.from(got[0]!.labels)).toEqual([0, 1, 0, 0, 1, 0]);
      expect(got[0]!.dense[13]).toBeCloseTo(Math.log1p(13), 6);
    }
    // a BOM anywhere but a file's start is still malformed
    const mid = join(tmp.dir, 'mid.tsv');
    writeFileSync(mid, Buffer.concat([Buffer.from(lines[0] + '\n'), Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(lines[1] + '\n')]));
    const m = new CriteoTsvSource({ path: mid, batchSize: 8, maxRows: 1000 });
    await collect(m);
    expect(m.report()!.issues.map((i) => [i.line, i.reason])).toEqual([[2, 'label']]);
  });
});

describe('hex strings of raw Criteo values', () => {
  it('hashHexString reads 1 to 8 hex digits and refuses every other string, whatever its characters', () => {
    const rows = 1000;
    // every single UTF-16 code unit: hex exactly for 0-9 a-f A-F, its value mod rows (the 'modulo' rule)
    for (let c = 0; c < 0x10000; c++) {
      const ch = String.fromCharCode(c);
      const want = /^[0-9a-fA-F]$/.test(ch) ? parseInt(ch, 16) % rows : -1;
      if (hashHexString(ch, 0, rows, 'modulo') !== want) expect(hashHexString(ch, 0, rows, 'modulo'), `U+${c.toString(16)}`).toBe(want);
    }
    // characters whose low byte is a hex digit are not hex ('Ł' is U+0141, 'İ' U+0130)
    for (const s of ['Ł', 'İİ', 'aŁ', '', '123456789', ' 1', '1 ', '0x1', '-1', '+1', '1.5'])
      expect(hashHexString(s, 3, rows, 'modulo'), JSON.stringify(s)).toBe(-1);
    for (const s of ['0', 'f', 'FF', 'dEaDbEeF', '7fffffff', 'ffffffff', '00000001'])
      expect(hashHexString(s, 3, rows, 'modulo'), s).toBe(parseInt(s, 16) % rows);
  });
});

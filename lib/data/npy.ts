// npy.ts — the NumPy .npy format (versions 1.0, 2.0, 3.0): read the header of a C-ordered array and
// its data row range straight into a typed array, and write one. Only the dtypes the data pipeline uses:
// little-endian float32 '<f4', int32 '<i4', int64 '<i8', uint8 '|u1'.
import { open, writeFile } from 'node:fs/promises';
import { EmbshardError } from '../errors.js';

export type NpyDtype = '<f4' | '<i4' | '<i8' | '|u1';
export type NpyArray = Float32Array | Int32Array | BigInt64Array | Uint8Array;

export interface NpyHeader {
  dtype: NpyDtype;
  shape: number[];
  /** Byte offset of the data in the file. */
  dataOffset: number;
  itemSize: number;
}

const MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // \x93NUMPY
const ITEM: Record<NpyDtype, number> = { '<f4': 4, '<i4': 4, '<i8': 8, '|u1': 1 };

/** Parses an npy header from the first bytes of a file; `name` is used in error messages. */
export function parseNpyHeader(bytes: Uint8Array, name: string): NpyHeader {
  const corrupt = (why: string): EmbshardError => new EmbshardError('INVALID_ARGUMENT', `${name}: not a usable .npy file (${why})`);
  if (bytes.length < 10 || MAGIC.some((m, i) => bytes[i] !== m)) throw corrupt('bad magic');
  const major = bytes[6]!;
  let hlen: number, start: number;
  if (major === 1) {
    hlen = bytes[8]! | (bytes[9]! << 8);
    start = 10;
  } else if (major === 2 || major === 3) {
    if (bytes.length < 12) throw corrupt('truncated header');
    hlen = (bytes[8]! | (bytes[9]! << 8) | (bytes[10]! << 16)) + bytes[11]! * 16777216;
    start = 12;
  } else throw corrupt(`unsupported version ${major}`);
  if (bytes.length < start + hlen) throw corrupt('truncated header');
  const text = Buffer.from(bytes.buffer, bytes.byteOffset + start, hlen).toString(major === 3 ? 'utf8' : 'latin1');
  const descr = /'descr'\s*:\s*'([^']*)'/.exec(text)?.[1];
  const fortran = /'fortran_order'\s*:\s*(True|False)/.exec(text)?.[1];
  const shapeText = /'shape'\s*:\s*\(([^)]*)\)/.exec(text)?.[1];
  if (descr === undefined || fortran === undefined || shapeText === undefined) throw corrupt(`unreadable header ${JSON.stringify(text.trim())}`);
  if (fortran === 'True') throw corrupt('fortran_order arrays are not supported');
  const dtype = descr === '<f4' || descr === '<i4' || descr === '<i8' || descr === '|u1' ? (descr as NpyDtype) : null;
  if (!dtype) throw corrupt(`dtype '${descr}' (expected <f4, <i4, <i8 or |u1)`);
  const shape = shapeText.split(',').map((s) => s.trim()).filter((s) => s.length > 0).map(Number);
  if (shape.some((d) => !Number.isSafeInteger(d) || d < 0)) throw corrupt(`shape (${shapeText})`);
  return { dtype, shape, dataOffset: start + hlen, itemSize: ITEM[dtype] };
}

function makeArray(dtype: NpyDtype, buf: ArrayBuffer, count: number): NpyArray {
  switch (dtype) {
    case '<f4':
      return new Float32Array(buf, 0, count);
    case '<i4':
      return new Int32Array(buf, 0, count);
    case '<i8':
      return new BigInt64Array(buf, 0, count);
    case '|u1':
      return new Uint8Array(buf, 0, count);
  }
}

type FileHandle = Awaited<ReturnType<typeof open>>;

async function readFully(fh: FileHandle, view: Uint8Array, pos: number, name: string): Promise<void> {
  let done = 0;
  while (done < view.length) {
    const { bytesRead } = await fh.read(view, done, view.length - done, pos + done);
    if (bytesRead === 0) throw new EmbshardError('IO_ERROR', `${name}: unexpected end of file`);
    done += bytesRead;
  }
}

/** Opens a file for reading, as IO_ERROR naming the path when it cannot. */
export async function openRead(path: string): Promise<FileHandle> {
  try {
    return await open(path, 'r');
  } catch (e) {
    throw new EmbshardError('IO_ERROR', `cannot open '${path}': ${(e as Error).message}`);
  }
}

/**
 * An .npy array of ndim ≥ 1 read by ranges of its first axis: a whole .npy file, or one stored
 * (uncompressed) member of an .npz archive (see npz.ts), which starts `base` bytes into the file.
 */
export class NpyFile {
  private constructor(
    /** The file, or `archive.npz:member` for an archive member. */
    readonly path: string,
    readonly header: NpyHeader,
    private readonly fh: FileHandle,
    private readonly ownsHandle: boolean,
  ) {}

  static async open(path: string): Promise<NpyFile> {
    const fh = await openRead(path);
    try {
      return await NpyFile.at(fh, 0, (await fh.stat()).size, path, true);
    } catch (e) {
      await fh.close();
      throw e;
    }
  }

  /** The array stored at bytes [base, base + size) of an open file (not closed by this object unless owns). */
  static async at(fh: FileHandle, base: number, size: number, name: string, owns = false): Promise<NpyFile> {
    const head = new Uint8Array(Math.min(4096, size));
    await readFully(fh, head, base, name);
    let h = parseNpyHeader(head, name);
    if (h.dataOffset > head.length) {
      if (h.dataOffset > size) throw new EmbshardError('INVALID_ARGUMENT', `${name}: not a usable .npy file (truncated header)`);
      const big = new Uint8Array(h.dataOffset);
      await readFully(fh, big, base, name);
      h = parseNpyHeader(big, name);
    }
    const need = h.dataOffset + h.shape.reduce((a, b) => a * b, 1) * h.itemSize;
    if (size < need) throw new EmbshardError('INVALID_ARGUMENT', `${name}: truncated .npy data (${size} bytes, header promises ${need})`);
    if (h.shape.length === 0) throw new EmbshardError('INVALID_ARGUMENT', `${name}: a 0-d .npy array has no rows`);
    return new NpyFile(name, { ...h, dataOffset: base + h.dataOffset }, fh, owns);
  }

  get rows(): number {
    return this.header.shape[0]!;
  }
  /** Elements per row (the product of the trailing dimensions). */
  get rowSize(): number {
    return this.header.shape.slice(1).reduce((a, b) => a * b, 1);
  }

  /** Rows [start, start + count) as a fresh typed array that owns its buffer. */
  async readRows(start: number, count: number): Promise<NpyArray> {
    if (start < 0 || count < 0 || start + count > this.rows)
      throw new EmbshardError('INVALID_ARGUMENT', `${this.path}: rows [${start}, ${start + count}) outside [0, ${this.rows})`);
    const n = count * this.rowSize;
    const buf = new ArrayBuffer(n * this.header.itemSize);
    await readFully(this.fh, new Uint8Array(buf), this.header.dataOffset + start * this.rowSize * this.header.itemSize, this.path);
    return makeArray(this.header.dtype, buf, n);
  }

  async close(): Promise<void> {
    if (this.ownsHandle) await this.fh.close();
  }
}

function dtypeOf(a: NpyArray): NpyDtype {
  if (a instanceof Float32Array) return '<f4';
  if (a instanceof Int32Array) return '<i4';
  if (a instanceof BigInt64Array) return '<i8';
  if (a instanceof Uint8Array) return '|u1';
  throw new EmbshardError('UNSUPPORTED_DTYPE', 'npy arrays must be Float32Array, Int32Array, BigInt64Array or Uint8Array');
}

/** The bytes of a version-1.0 .npy file holding `data` with `shape` (header padded to 64 bytes, as NumPy does). */
export function encodeNpy(data: NpyArray, shape: readonly number[]): Uint8Array {
  const dtype = dtypeOf(data);
  const count = shape.reduce((a, b) => a * b, 1);
  if (shape.some((d) => !Number.isSafeInteger(d) || d < 0) || count !== data.length)
    throw new EmbshardError('LENGTH_MISMATCH', `shape (${shape.join(', ')}) does not hold ${data.length} elements`);
  const shapeText = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
  let dict = `{'descr': '${dtype}', 'fortran_order': False, 'shape': ${shapeText}, }`;
  const pad = 64 - ((10 + dict.length + 1) % 64);
  dict += ' '.repeat(pad % 64) + '\n';
  if (dict.length > 65535) throw new EmbshardError('INVALID_ARGUMENT', 'npy header too long for version 1.0');
  const out = new Uint8Array(10 + dict.length + data.byteLength);
  out.set(MAGIC, 0);
  out[6] = 1;
  out[7] = 0;
  out[8] = dict.length & 0xff;
  out[9] = dict.length >> 8;
  out.set(Buffer.from(dict, 'latin1'), 10);
  out.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), 10 + dict.length);
  return out;
}

/** Writes `data` with `shape` to `path` as a .npy file. */
export async function writeNpy(path: string, data: NpyArray, shape: readonly number[]): Promise<void> {
  try {
    await writeFile(path, encodeNpy(data, shape));
  } catch (e) {
    if (e instanceof EmbshardError) throw e;
    throw new EmbshardError('IO_ERROR', `cannot write '${path}': ${(e as Error).message}`);
  }
}

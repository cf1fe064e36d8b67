// device-scratch.ts — the working memory of the sharded runtime's device path (device-exchange.ts): device
// arrays kept from step to step, message buffers of a wire dtype, and the two lists its kernels run from —
// strided block copies (pack / unpack) and int32 index lists (positions, inverse indices, bag offsets)
// assembled for one upload with set() and the native prefix sum, never value by value.
import { DeviceArray, type DeviceElemType } from '../device-array.js';
import { exchangeOps, type Wire } from './exchange-ops.js';

/** The CUDA addon's device exchange kernels (native/addon/device_ops.cc). */
export interface DeviceOpsAddon {
  copyDeviceBlocks(src: object, dst: object, blocks: Float64Array, srcKind: Wire, dstKind: Wire): void;
  indexDeviceRows(args: {
    src: object; srcKind: Wire; srcOffset: number; srcStride: number; dst: object; dstKind: Wire; dstOffset: number; dstStride: number; meta: object; idxAt: number;
    rows: number; cols: number; mode: 'gather' | 'scatter' | 'scatterAdd';
  }): void;
  poolDeviceRows(args: {
    rows: object; rowsAt: number; dim: number; meta: object; inverseAt: number; ids: number; offsetsAt: number; bags: number;
    weights: object | null; weightsAt: number; dst: object; stride: number; col: number;
  }): void;
  divideDeviceBags(args: { m: object; stride: number; col: number; dim: number; meta: object; lengthsAt: number; bags: number }): void;
  sumDeviceRows(args: {
    src: object; stride: number; meta: object; startAt: number; orderAt: number; rowAt: number; colAt: number; ids: number; scales: object; scalesAt: number;
    rows: number; dim: number; dst: object; dstAt: number;
  }): void;
  /** whether the first `count` f32 values of a device buffer are finite (flag: one i32 of scratch on its device) */
  allFiniteDevice(buffer: object, count: number, flag: object): boolean;
}

/** Device arrays kept from step to step, grown as a step needs more (never shrunk), and the addon's kernels. */
export class DeviceScratch {
  private readonly arrays = new Map<string, DeviceArray>();
  /** `addon`: the addon of the engine's device (its copyDeviceBlocks / poolDeviceRows) */
  constructor(private readonly device: string, readonly addon: DeviceOpsAddon) {}

  /** The array named `name` with at least `n` elements of `type` (its contents are whatever the last user left). */
  get(name: string, n: number, type: DeviceElemType = 'f32'): DeviceArray {
    let a = this.arrays.get(name);
    if (!a || a.length < n || a.type !== type) {
      a?.free();
      a = DeviceArray.alloc(type, Math.max(n, 1) + (n >> 2), { device: this.device });
      this.arrays.set(name, a);
    }
    return a;
  }

  free(): void {
    for (const a of this.arrays.values()) a.free();
    this.arrays.clear();
  }
}

/** A message buffer of `n` wire values: fp32 in an f32 array, fp16 / bf16 in a u16 one. */
export function message(scratch: DeviceScratch, name: string, n: number, wire: Wire): DeviceArray {
  return scratch.get(name, n, wire === 'fp32' ? 'f32' : 'u16');
}

/** Block lists of copyDeviceBlocks: 7 numbers per block; values read as srcKind, written as dstKind (fp32 buffers, or 16-bit wire messages). */
export class Blocks {
  private v: number[] = [];
  constructor(private readonly srcKind: Wire = 'fp32', private readonly dstKind: Wire = 'fp32') {}
  add(srcOffset: number, srcStride: number, dstOffset: number, dstStride: number, rows: number, cols: number, add: boolean): void {
    if (rows > 0 && cols > 0) this.v.push(srcOffset, srcStride, dstOffset, dstStride, rows, cols, add ? 1 : 0);
  }
  run(scratch: DeviceScratch, src: DeviceArray, dst: DeviceArray): void {
    if (this.v.length > 0) scratch.addon.copyDeviceBlocks(src.native, dst.native, Float64Array.from(this.v), this.srcKind, this.dstKind);
  }
}

/**
 * Int32 lists (positions, inverse indices, bag offsets) gathered for one upload, copied with set() and the
 * native prefix sum, never value by value; add() / addOffsets() return where a list starts.
 */
export class Indexes {
  private parts: { at: number; list: Int32Array; offsets: boolean }[] = [];
  private n = 0;
  add(list: Int32Array): number {
    this.parts.push({ at: this.n, list, offsets: false });
    return (this.n += list.length) - list.length;
  }
  /** The bags' first ids for bag `lengths` (lengths.length + 1 values). */
  addOffsets(lengths: Int32Array): number {
    this.parts.push({ at: this.n, list: lengths, offsets: true });
    return (this.n += lengths.length + 1) - lengths.length - 1;
  }
  async upload(scratch: DeviceScratch, name: string): Promise<DeviceArray> {
    const host = new Int32Array(this.n);
    for (const p of this.parts) {
      if (p.offsets) exchangeOps().bagOffsets(p.list, host, p.at);
      else host.set(p.list, p.at);
    }
    const d = scratch.get(name, this.n, 'i32');
    if (this.n > 0) await d.write(host, 0);
    return d;
  }
}

/** One feature's ids in a RowSums job: how to read each id's gradient (grad_terms' inputs) and the column it starts at. */
export interface SumPart {
  /** the part's bag lengths (its ids in bag order) */
  lengths: Int32Array;
  weights: Float32Array | null;
  /** the full bags' lengths (mean pooling) */
  fullLen: Int32Array | null;
  mean: boolean;
  /** sequence features: each id's row of the gradient (no weights, no scale) */
  seqPos: Int32Array | null;
  col: number;
}

/**
 * Gradient sums of distinct rows in device memory (sumDeviceRows), job by job: each distinct row's
 * contributions in id order, the sum the host's gradUnique makes. The index lists (each row's ids, each
 * id's gradient row, column and scale) are built natively on the host from the step's routing and
 * uploaded once for all jobs; the gradient values never leave the device.
 */
export class RowSums {
  private jobs: { src: DeviceArray; stride: number; inverse: Int32Array; U: number; dim: number; dst: DeviceArray; dstAt: number; parts: SumPart[] }[] = [];
  /** `inverse`: every id's distinct row, the parts' ids back to back; `U` distinct rows of `dim` go to dst from dstAt. */
  add(src: DeviceArray, stride: number, inverse: Int32Array, U: number, dim: number, dst: DeviceArray, dstAt: number, parts: SumPart[]): void {
    if (U > 0 && dim > 0) this.jobs.push({ src, stride, inverse, U, dim, dst, dstAt, parts });
  }
  async run(scratch: DeviceScratch): Promise<void> {
    if (this.jobs.length === 0) return;
    const K = exchangeOps();
    let nMeta = 0, nScales = 0;
    for (const j of this.jobs) (nMeta += j.U + 1 + 3 * j.inverse.length), (nScales += j.inverse.length);
    const meta = new Int32Array(nMeta), scales = new Float32Array(nScales);
    const at: { startAt: number; orderAt: number; rowAt: number; colAt: number; scalesAt: number }[] = [];
    let m = 0, sc = 0;
    for (const j of this.jobs) {
      const n = j.inverse.length;
      const a = { startAt: m, orderAt: m + j.U + 1, rowAt: m + j.U + 1 + n, colAt: m + j.U + 1 + 2 * n, scalesAt: sc };
      K.groupRows(j.inverse, j.U, meta, a.startAt, meta, a.orderAt);
      let off = 0;
      for (const p of j.parts) {
        const ids = K.gradTerms(p.lengths, p.weights, p.fullLen, p.mean, p.seqPos, meta, a.rowAt + off, scales, a.scalesAt + off);
        meta.fill(p.col, a.colAt + off, a.colAt + off + ids);
        off += ids;
      }
      at.push(a);
      m += j.U + 1 + 3 * n;
      sc += n;
    }
    const dMeta = scratch.get('sumMeta', nMeta, 'i32'), dScales = scratch.get('sumScales', nScales);
    await dMeta.write(meta, 0);
    if (nScales > 0) await dScales.write(scales, 0);
    this.jobs.forEach((j, k) =>
      scratch.addon.sumDeviceRows({ src: j.src.native, stride: j.stride, meta: dMeta.native, ...at[k]!, ids: j.inverse.length, scales: dScales.native, rows: j.U, dim: j.dim, dst: j.dst.native, dstAt: j.dstAt }),
    );
  }
}

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

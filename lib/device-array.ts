// device-array.ts — DeviceArray: a typed array in a GPU's memory (the CUDA addon's DeviceArray,
// native/addon/device_array.cc), made zeroed or from host data, written and read back off the event loop,
// and handed to the NCCL group's device collectives (allToAllDevice, allGatherDevice, allReduceDevice)
// with no host staging. Its memory is freed by free() (or with the object), and a collective or copy in
// flight keeps it until that call settles.
import { resolveBackend } from './backends.js';
import { EmbshardError } from './errors.js';
import { fieldsOf, rejectUnknownFields } from './fields.js';

/** Element types of a DeviceArray: those the process groups reduce, and u16 (fp16 / bf16 wire values, moved only). */
export type DeviceElemType = 'f32' | 'f64' | 'i32' | 'i64' | 'u16';
/** The host typed array of each element type. */
export type DeviceHostArray = Float32Array | Float64Array | Int32Array | BigInt64Array | Uint16Array;

const HOST: Record<DeviceElemType, { new (n: number): DeviceHostArray; readonly BYTES_PER_ELEMENT: number }> = {
  f32: Float32Array,
  f64: Float64Array,
  i32: Int32Array,
  i64: BigInt64Array,
  u16: Uint16Array,
};

/** @internal the native object (type-tagged: the group bindings recognise it). */
export interface NativeDeviceArray {
  readonly device: number;
  readonly length: number;
  readonly type: DeviceElemType;
  readonly freed: boolean;
  upload(src: DeviceHostArray, offset: number): Promise<void>;
  download(dst: DeviceHostArray, offset: number): Promise<void>;
  zero(offset: number, count: number): void;
  free(): void;
}

interface DeviceArrayAddon {
  DeviceArray?: new (device: number, type: string, length: number) => NativeDeviceArray;
}

export interface DeviceArrayOptions {
  /** 'cuda:N' (default 'cuda:0'). */
  device?: string;
}
const OPTION_FIELDS = fieldsOf<DeviceArrayOptions>({ device: true });

function typeOf(a: unknown): DeviceElemType | undefined {
  if (a instanceof Float32Array) return 'f32';
  if (a instanceof Float64Array) return 'f64';
  if (a instanceof Int32Array) return 'i32';
  if (a instanceof BigInt64Array) return 'i64';
  if (a instanceof Uint16Array) return 'u16';
  return undefined;
}

export class DeviceArray {
  /** @internal */
  readonly native: NativeDeviceArray;

  private constructor(native: NativeDeviceArray) {
    this.native = native;
  }

  /** `length` zeroed elements of `type` on the device (BACKEND_UNAVAILABLE without it). */
  static alloc(type: DeviceElemType, length: number, options: DeviceArrayOptions = {}): DeviceArray {
    rejectUnknownFields(options, OPTION_FIELDS, 'DeviceArray options'); // also: an object at all
    if (typeof type !== 'string' || !Object.hasOwn(HOST, type)) throw new EmbshardError('INVALID_ARGUMENT', `DeviceArray: type must be one of ${Object.keys(HOST).join(', ')} (got '${String(type)}')`);
    if (!Number.isSafeInteger(length) || length < 0) throw new EmbshardError('INVALID_ARGUMENT', `DeviceArray: length must be a non-negative integer (got ${String(length)})`);
    const device = options.device ?? 'cuda:0';
    const m = typeof device === 'string' ? /^cuda:(\d+)$/.exec(device) : null;
    if (!m) throw new EmbshardError('INVALID_CONFIG', `DeviceArray options.device must be 'cuda:N' (got '${String(device)}')`);
    const addon = resolveBackend(device) as unknown as DeviceArrayAddon; // BACKEND_UNAVAILABLE with the reason
    if (!addon.DeviceArray) throw new EmbshardError('BACKEND_UNAVAILABLE', 'DeviceArray: this addon has no device arrays');
    return new DeviceArray(new addon.DeviceArray(Number(m[1]), type, length));
  }

  /** A device copy of `data` (its type sets the element type). */
  static async from(data: DeviceHostArray, options: DeviceArrayOptions = {}): Promise<DeviceArray> {
    const type = typeOf(data);
    if (!type) throw new EmbshardError('INVALID_ARGUMENT', 'DeviceArray.from: data must be a Float32Array, Float64Array, Int32Array, BigInt64Array or Uint16Array');
    const a = DeviceArray.alloc(type, data.length, options);
    await a.write(data);
    return a;
  }

  get type(): DeviceElemType {
    return this.native.type;
  }
  get length(): number {
    return this.native.length;
  }
  get byteLength(): number {
    return this.length * HOST[this.type].BYTES_PER_ELEMENT;
  }
  /** 'cuda:N' */
  get device(): string {
    return `cuda:${this.native.device}`;
  }
  get freed(): boolean {
    return this.native.freed;
  }

  /** Copies `data` (of this array's type) to elements [offset, offset + data.length). */
  write(data: DeviceHostArray, offset = 0): Promise<void> {
    return this.native.upload(data, offset);
  }

  /** Elements [offset, offset + count) (default: from offset to the end) as a new host array. */
  async read(offset = 0, count?: number): Promise<DeviceHostArray> {
    if (!Number.isSafeInteger(offset) || offset < 0 || offset > this.length)
      throw new EmbshardError('INVALID_ARGUMENT', `DeviceArray.read: offset must be an integer in [0, ${this.length}] (got ${String(offset)})`);
    const n = count ?? this.length - offset;
    if (!Number.isSafeInteger(n) || n < 0) throw new EmbshardError('INVALID_ARGUMENT', `DeviceArray.read: count must be a non-negative integer (got ${String(count)})`);
    const out = new HOST[this.type](n);
    await this.native.download(out, offset);
    return out;
  }

  /** Copies elements [offset, offset + into.length) into `into` (a typed array of this array's type). */
  readInto(into: DeviceHostArray, offset = 0): Promise<void> {
    return this.native.download(into, offset);
  }

  /** Sets elements [offset, offset + count) (default: to the end) to zero; done when it returns. */
  zero(offset = 0, count?: number): void {
    this.native.zero(offset, count ?? this.length - offset);
  }

  /** Gives the memory back (once no call still uses it); the array is unusable afterwards. */
  free(): void {
    this.native.free();
  }
}

/** Element bytes of a DeviceArray's type. */
export function deviceElemBytes(type: DeviceElemType): number {
  return HOST[type].BYTES_PER_ELEMENT;
}

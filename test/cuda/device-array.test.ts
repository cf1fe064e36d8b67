// DeviceArray: a typed array in GPU memory. Where a CUDA device exists (a GPU, or the CUDA emulation
// under `npm run test:cuda-emu`) every element type round-trips exactly, writes and reads land at their
// offsets, bad arguments are refused with typed errors before anything is copied, and a copy in flight
// keeps the memory of an array freed under it. Without a device, making one is BACKEND_UNAVAILABLE.
import { describe, it, expect } from 'vitest';
import { cudaBackend } from '../../lib/backends.js';
import { DeviceArray } from '../../lib/device-array.js';

const gpu = cudaBackend().available;

describe('DeviceArray', () => {
  it(gpu ? 'with a CUDA device, alloc makes an array there' : 'without a CUDA device, alloc and from reject with BACKEND_UNAVAILABLE', async () => {
    if (gpu) {
      const a = DeviceArray.alloc('f32', 4);
      expect([a.device, a.length, a.freed]).toEqual(['cuda:0', 4, false]);
      a.free();
      return;
    }
    expect(() => DeviceArray.alloc('f32', 4)).toThrow(expect.objectContaining({ code: 'BACKEND_UNAVAILABLE' }));
    await expect(DeviceArray.from(Float32Array.from([1]))).rejects.toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
  });

  it('options are checked before any device is touched', () => {
    expect(() => DeviceArray.alloc('f32', 4, { device: 'cpu' })).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG' }));
    expect(() => DeviceArray.alloc('f32', 4, { devcie: 'cuda:0' } as never)).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringContaining('devcie') }));
    expect(() => DeviceArray.alloc('u8' as never, 4)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => DeviceArray.alloc('f32', -1)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });

  describe.runIf(gpu)('on cuda:0', () => {
    it('every element type round-trips exactly; a new array reads as zeros', async () => {
      const f32 = Float32Array.from([1.5, -0, Number.MIN_VALUE, 3.4e38, -7.25]);
      const f64 = Float64Array.from([Math.PI, -1e-300, 2 ** 60 + 2 ** 8]);
      const i32 = Int32Array.from([-(2 ** 31), 0, 2 ** 31 - 1, 17]);
      const i64 = BigInt64Array.from([-(2n ** 63n), 0n, 2n ** 63n - 1n]);
      const u16 = Uint16Array.from([0, 1, 0x3c00, 0xffff]);
      for (const src of [f32, f64, i32, i64, u16]) {
        const a = await DeviceArray.from(src);
        expect(a.length).toBe(src.length);
        expect(a.byteLength).toBe(src.byteLength);
        expect(a.device).toBe('cuda:0');
        const back = await a.read();
        expect(back.constructor).toBe(src.constructor);
        expect(Array.from(back as ArrayLike<unknown>)).toEqual(Array.from(src as ArrayLike<unknown>));
        if (src === f32) expect(Object.is((back as Float32Array)[1], -0)).toBe(true);
        a.free();
      }
      const z = DeviceArray.alloc('i64', 6);
      expect(Array.from(await z.read())).toEqual([0n, 0n, 0n, 0n, 0n, 0n]);
      z.free();
    });

    it('writes and reads land at their offsets; overruns, wrong host types and freed arrays are refused', async () => {
      const a = DeviceArray.alloc('f32', 8);
      await a.write(Float32Array.from([1, 2, 3]), 4);
      expect(Array.from(await a.read())).toEqual([0, 0, 0, 0, 1, 2, 3, 0]);
      expect(Array.from(await a.read(5, 2))).toEqual([2, 3]);
      expect(Array.from(await a.read(8))).toEqual([]);
      expect(() => a.write(Float32Array.from([1, 2]), 7)).toThrow(expect.objectContaining({ code: 'LENGTH_MISMATCH' }));
      await expect(a.read(6, 3)).rejects.toMatchObject({ code: 'LENGTH_MISMATCH' });
      expect(() => a.write(Float64Array.from([1]) as never)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
      // nothing was written by the refused calls
      expect(Array.from(await a.read())).toEqual([0, 0, 0, 0, 1, 2, 3, 0]);
      a.free();
      expect(a.freed).toBe(true);
      await expect(a.read()).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      expect(() => a.write(Float32Array.from([1]))).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    });

    it('a copy in flight keeps the memory of an array freed under it', async () => {
      const n = 1 << 20;
      const src = Float32Array.from({ length: n }, (_, i) => i * 0.5);
      const a = await DeviceArray.from(src);
      const reading = a.read();
      a.free();
      const back = await reading;
      expect(back.length).toBe(n);
      expect((back as Float32Array)[n - 1]).toBe((n - 1) * 0.5);
      expect((back as Float32Array)[12345]).toBe(12345 * 0.5);
    });
  });
});

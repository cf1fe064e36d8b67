// The scratch pool of a sharded collection's steps (lib/sharded/scratch.ts): a phase's views come back
// zeroed, large buffers are reused by the next phase (best fit), a failed phase's buffers are not, and
// small requests are plain new buffers.
import { describe, it, expect } from 'vitest';
import { ScratchPool } from '../../lib/sharded/scratch.js';

describe('ScratchPool', () => {
  it('hands the next phase the same large buffer, zeroed over the requested length', () => {
    const s = new ScratchPool();
    const a = s.f32(100_000);
    expect(a.length).toBe(100_000);
    a.fill(7);
    s.end(true);
    const b = s.f32(90_000);
    expect(b.buffer).toBe(a.buffer);
    expect(b.length).toBe(90_000);
    expect(b.every((x) => x === 0)).toBe(true);
    // a wire view of 16-bit words over a kept buffer, zeroed too
    b.fill(3);
    s.end(true);
    const w = s.wire('bf16', 150_000);
    expect(w).toBeInstanceOf(Uint16Array);
    expect(w.buffer).toBe(a.buffer);
    expect(w.every((x) => x === 0)).toBe(true);
  });

  it('takes the smallest kept buffer that fits, and a new one while the kept ones are taken', () => {
    const s = new ScratchPool();
    const big = s.f32(400_000), small = s.f32(40_000);
    s.end(true);
    const x = s.f32(30_000);
    expect(x.buffer).toBe(small.buffer);
    const y = s.f32(30_000);
    expect(y.buffer).toBe(big.buffer);
    const z = s.f32(30_000);
    expect(z.buffer).not.toBe(big.buffer);
    expect(z.buffer).not.toBe(small.buffer);
  });

  it('copyOf is a copy in a scratch buffer', () => {
    const s = new ScratchPool();
    const src = Float32Array.from({ length: 50_000 }, (_, i) => i * 0.5);
    const c = s.copyOf(src);
    expect(c).toEqual(src);
    c[0] = 99;
    expect(src[0]).toBe(0);
  });

  it('drops the buffers of a failed phase, and everything on clear()', () => {
    const s = new ScratchPool();
    const a = s.f32(100_000);
    s.end(false);
    const b = s.f32(100_000);
    expect(b.buffer).not.toBe(a.buffer);
    s.end(true);
    s.clear();
    expect(s.f32(100_000).buffer).not.toBe(b.buffer);
  });

  it('small requests are plain new buffers, never kept', () => {
    const s = new ScratchPool();
    const a = s.f32(100);
    s.end(true);
    expect(s.f32(100).buffer).not.toBe(a.buffer);
  });
});

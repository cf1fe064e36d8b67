/**
 * scratch.ts — the working memory of a sharded collection's steps, kept from step to step.
 *
 * A step's temporaries (wire messages, unique rows, partial sums, the gradients handed to the engine) are
 * megabytes each. Allocated fresh, every one of them costs a zero fill and, once the allocator has handed
 * the pages back to the system, a page fault per page: more than the work done in it. Here they are views
 * of buffers that survive the step. A phase (one forward or one backward: a collection's call queue never
 * runs two at once) takes zeroed views with `f32` / `wire` and hands them all back with `end()`; a phase
 * that failed drops its buffers instead (a collective it abandoned may still hold one).
 */
import type { Wire, WireArray } from './exchange-ops.js';

/** Buffers kept between phases: at most this many, and at most this many bytes (the oldest go first). */
const MAX_KEPT = 64;
const MAX_KEPT_BYTES = 1 << 30;
/** Smaller requests get a plain new buffer: V8 makes those cheaply. */
const MIN_BYTES = 64 << 10;
const PAGE = 4096;

export class ScratchPool {
  private kept: ArrayBuffer[] = []; // free, oldest first
  private taken: ArrayBuffer[] = []; // handed out in the current phase

  /** A zeroed Float32Array of `n` elements, valid until `end()`. */
  f32(n: number): Float32Array {
    return new Float32Array(this.take(n * 4), 0, n);
  }

  /** A zeroed wire array (fp32, or 16-bit words for fp16 / bf16) of `n` elements, valid until `end()`. */
  wire(wire: Wire, n: number): WireArray {
    return wire === 'fp32' ? this.f32(n) : new Uint16Array(this.take(n * 2), 0, n);
  }

  /** A zeroed copy of `src`, valid until `end()`. */
  copyOf(src: Float32Array): Float32Array {
    const a = this.f32(src.length);
    a.set(src);
    return a;
  }

  /**
   * Ends the phase. `ok`: its buffers are kept for the next phases (the longest kept go when over the
   * limits); otherwise they are dropped.
   */
  end(ok: boolean): void {
    const back = this.taken;
    this.taken = [];
    if (!ok) return;
    this.kept.push(...back);
    let bytes = this.kept.reduce((a, b) => a + b.byteLength, 0);
    let drop = 0;
    while (drop < this.kept.length && (this.kept.length - drop > MAX_KEPT || bytes > MAX_KEPT_BYTES)) bytes -= this.kept[drop++]!.byteLength;
    if (drop > 0) this.kept.splice(0, drop);
  }

  /** Drops every kept buffer. */
  clear(): void {
    this.kept = [];
    this.taken = [];
  }

  // the smallest kept buffer of at least `bytes` (zeroed up to `bytes`), else a new one with an eighth to
  // spare, so that the next step's slightly larger request still fits
  private take(bytes: number): ArrayBuffer {
    if (bytes < MIN_BYTES) return new ArrayBuffer(bytes);
    let best = -1;
    for (let i = 0; i < this.kept.length; i++) {
      const len = this.kept[i]!.byteLength;
      if (len >= bytes && (best < 0 || len < this.kept[best]!.byteLength)) best = i;
    }
    let buf: ArrayBuffer;
    if (best >= 0) {
      buf = this.kept.splice(best, 1)[0]!;
      new Uint8Array(buf, 0, bytes).fill(0);
    } else {
      buf = new ArrayBuffer(Math.max(PAGE, Math.ceil((bytes * 9) / 8 / PAGE) * PAGE));
    }
    this.taken.push(buf);
    return buf;
  }
}

// device-outputs.ts — the device arrays an EmbeddingCollection on a GPU writes its forwardOnDevice outputs
// into: f32 arrays on the collection's device, handed out per length and taken back when a backward has
// consumed an output (or it is released), so a training loop reuses the same few allocations instead of
// allocating device memory every step.
import { DeviceArray } from './device-array.js';

export class DeviceOutputs {
  private readonly free = new Map<number, DeviceArray[]>();
  /** the arrays this pool made: only those come back to it */
  private readonly made = new WeakSet<DeviceArray>();

  constructor(private readonly device: string) {}

  /** An f32 device array of `length` elements (at least one, so an empty output still has a buffer). */
  take(length: number): DeviceArray {
    const n = Math.max(1, length);
    const a = this.free.get(n)?.pop();
    if (a && !a.freed) return a;
    const fresh = DeviceArray.alloc('f32', n, { device: this.device });
    this.made.add(fresh);
    return fresh;
  }

  /** Takes arrays back for later outputs (nulls, and arrays this pool did not make, skipped). */
  give(...arrays: (DeviceArray | null)[]): void {
    for (const a of arrays) {
      if (!a || a.freed || !this.made.has(a)) continue;
      const list = this.free.get(a.length) ?? [];
      if (!list.includes(a)) list.push(a);
      this.free.set(a.length, list);
    }
  }

  /** Frees every array held for reuse. */
  dispose(): void {
    for (const list of this.free.values()) for (const a of list) a.free();
    this.free.clear();
  }
}

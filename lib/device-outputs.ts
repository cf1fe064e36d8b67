// device-outputs.ts — forward outputs and gradients kept in GPU memory (EmbeddingCollection and
// ShardedEmbeddingCollection on 'cuda:N'): their types, the check of a backward's device gradients, and
// the pool of f32 arrays the outputs are written into, handed out per length and taken back when a
// backward has consumed an output (or it is released), so a training loop reuses the same few
// allocations instead of allocating device memory every step.
import type { JaggedBatch } from './batch.js';
import { DeviceArray } from './device-array.js';
import { EmbshardError } from './errors.js';

/**
 * A forwardOnDevice result: the outputs in the memory of the collection's GPU. `backward(out, …)` consumes
 * it like a host output: afterwards its arrays belong to the collection again (the next forwardOnDevice
 * writes into them); pass `{ keepOutput: true }` to keep them until `release(out)`.
 */
export interface DeviceForwardOutput {
  /** f32 [batchSize × pooledDim], features in `pooledFeatures` order (at least one element) */
  pooled: DeviceArray;
  /** f32, the sequence features' values back to back in `sequenceFeatures` order, each [Σ lengths × dim] (at least one element) */
  sequences: DeviceArray;
  /** the batch this output was computed from */
  batch: JaggedBatch;
}

/** Gradients in the memory of the collection's GPU, laid out as a DeviceForwardOutput's arrays (f32). */
export interface DeviceGradients {
  /** [batchSize × pooledDim]; required when the collection has pooled features */
  pooled?: DeviceArray;
  /** the sequence features' gradients back to back; required when it has sequence features */
  sequences?: DeviceArray;
}

/**
 * A backward's device gradients (either entry a DeviceArray), checked before anything runs: both present
 * where the batch has such values (a one-element placeholder from `pool` otherwise), f32, on `device`, and
 * at least as long as the batch's outputs (`need`). undefined for host gradients.
 */
export function deviceGradients(grads: object, need: { pooled: number; sequences: number }, device: string, pool: DeviceOutputs): { pooled: DeviceArray; sequences: DeviceArray } | undefined {
  const g = grads as DeviceGradients;
  if (!(g.pooled instanceof DeviceArray) && !(g.sequences instanceof DeviceArray)) return undefined;
  const pick = (v: unknown, field: 'pooled' | 'sequences'): DeviceArray => {
    if (v === undefined && need[field] === 0) return pool.take(0);
    if (!(v instanceof DeviceArray)) throw new EmbshardError('GRAD_SIZE_MISMATCH', `gradients.${field} must be a DeviceArray (the other gradient is one)`);
    if (v.type !== 'f32') throw new EmbshardError('GRAD_SIZE_MISMATCH', `gradients.${field} must hold f32 elements (got ${v.type})`);
    if (v.device !== device) throw new EmbshardError('INVALID_ARGUMENT', `gradients.${field} is on ${v.device}, the collection on ${device}`);
    if (v.length < need[field]) throw new EmbshardError('GRAD_SIZE_MISMATCH', `gradients.${field} has ${v.length} elements; the batch needs ${need[field]}`);
    return v;
  };
  return { pooled: pick(g.pooled, 'pooled'), sequences: pick(g.sequences, 'sequences') };
}

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

// batch-message.ts — a Batch as a structured-clone message whose typed arrays travel by transfer: every array
// that does not own its whole ArrayBuffer is copied first (transferring a shared buffer would detach
// the other views), each buffer is listed once.
import { JaggedBatch } from '../batch.js';
import type { IdArray } from '../binding.js';
import type { Batch } from './types.js';

export interface BatchMessage {
  size: number;
  dense: Float32Array;
  labels: Float32Array;
  planted?: Float32Array | undefined;
  features: string[];
  lengths: Int32Array;
  ids: IdArray;
  weights?: Float32Array | undefined;
}

/** `a`, or a copy of it when it does not own its whole (unshared) buffer: a view whose buffer can be transferred. */
export function owned<T extends ArrayBufferView>(a: T): T {
  return a.byteOffset === 0 && a.byteLength === a.buffer.byteLength && !(a.buffer instanceof SharedArrayBuffer)
    ? a
    : ((a as unknown as { slice(): T }).slice());
}

export function batchTransfer(b: Batch): { message: BatchMessage; transfer: ArrayBuffer[] } {
  const s = b.sparse;
  const message: BatchMessage = {
    size: b.size,
    dense: owned(b.dense),
    labels: owned(b.labels),
    planted: b.planted ? owned(b.planted) : undefined,
    features: [...s.features],
    lengths: owned(s.lengths),
    ids: owned(s.ids),
    weights: s.weights ? owned(s.weights) : undefined,
  };
  const bufs = new Set<ArrayBuffer>();
  for (const a of [message.dense, message.labels, message.planted, message.lengths, message.ids, message.weights])
    if (a) bufs.add(a.buffer as ArrayBuffer);
  return { message, transfer: [...bufs] };
}

export function batchFromMessage(m: BatchMessage): Batch {
  const sparse = JaggedBatch.fromLengths({ features: m.features, batchSize: m.size, lengths: m.lengths, ids: m.ids, weights: m.weights });
  const b: Batch = { dense: m.dense, sparse, labels: m.labels, size: m.size };
  if (m.planted) b.planted = m.planted;
  return b;
}

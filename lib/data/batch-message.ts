// batch-message.ts — a Batch (or a prediction's samples: a batch without labels, what the server's Arrow
// decoding worker sends back) as a structured-clone message whose typed arrays travel by transfer: every
// array that does not own its whole ArrayBuffer is copied first (transferring a shared buffer would detach
// the other views), each buffer is listed once.
import { JaggedBatch } from '../batch.js';
import type { IdArray } from '../binding.js';
import type { Batch } from './types.js';

/** A batch's samples without labels: dense features and sparse ids. */
export type Samples = Pick<Batch, 'dense' | 'sparse' | 'size'>;

export interface SamplesMessage {
  size: number;
  dense: Float32Array;
  features: string[];
  lengths: Int32Array;
  ids: IdArray;
  weights?: Float32Array | undefined;
}

export interface BatchMessage extends SamplesMessage {
  labels: Float32Array;
  planted?: Float32Array | undefined;
}

/** `a`, or a copy of it when it does not own its whole (unshared) buffer: a view whose buffer can be transferred. */
export function owned<T extends ArrayBufferView>(a: T): T {
  return a.byteOffset === 0 && a.byteLength === a.buffer.byteLength && !(a.buffer instanceof SharedArrayBuffer)
    ? a
    : ((a as unknown as { slice(): T }).slice());
}

/** The buffers of a message's arrays, each once. */
function buffersOf(arrays: readonly (ArrayBufferView | undefined)[]): ArrayBuffer[] {
  const bufs = new Set<ArrayBuffer>();
  for (const a of arrays) if (a) bufs.add(a.buffer as ArrayBuffer);
  return [...bufs];
}

function samplesMessage(b: Samples): SamplesMessage {
  const s = b.sparse;
  return {
    size: b.size,
    dense: owned(b.dense),
    features: [...s.features],
    lengths: owned(s.lengths),
    ids: owned(s.ids),
    weights: s.weights ? owned(s.weights) : undefined,
  };
}

export function samplesTransfer(b: Samples): { message: SamplesMessage; transfer: ArrayBuffer[] } {
  const message = samplesMessage(b);
  return { message, transfer: buffersOf([message.dense, message.lengths, message.ids, message.weights]) };
}

export function batchTransfer(b: Batch): { message: BatchMessage; transfer: ArrayBuffer[] } {
  const message: BatchMessage = { ...samplesMessage(b), labels: owned(b.labels), planted: b.planted ? owned(b.planted) : undefined };
  return { message, transfer: buffersOf([message.dense, message.labels, message.planted, message.lengths, message.ids, message.weights]) };
}

export function samplesFromMessage(m: SamplesMessage): Samples {
  const sparse = JaggedBatch.fromLengths({ features: m.features, batchSize: m.size, lengths: m.lengths, ids: m.ids, weights: m.weights });
  return { dense: m.dense, sparse, size: m.size };
}

export function batchFromMessage(m: BatchMessage): Batch {
  const b: Batch = { ...samplesFromMessage(m), labels: m.labels };
  if (m.planted) b.planted = m.planted;
  return b;
}

// take.ts — chosen samples of a batch, by index, as a new batch: their bags (ids, weights), dense
// features, labels and planted scores follow them (one typed-array copy per bag or row). Used for a rank's
// share of a Herald global batch and for the samples of a range (sample-range.ts).
import { JaggedBatch } from '../batch.js';
import type { IdArray } from '../binding.js';
import type { Batch } from './types.js';

/** The bags of samples `idx` (batch indices, in the order given) of every feature of `g`. */
export function takeSparse(g: JaggedBatch, idx: Int32Array): JaggedBatch {
  const G = g.batchSize, B = idx.length, F = g.features.length, off = g.offsets;
  const lengths = new Int32Array(F * B);
  let total = 0;
  for (let f = 0; f < F; f++)
    for (let k = 0; k < B; k++) {
      const n = g.lengths[f * G + idx[k]!]!;
      lengths[f * B + k] = n;
      total += n;
    }
  const Ctor = g.ids.constructor as new (n: number) => IdArray;
  const ids = new Ctor(total);
  const weights = g.weights ? new Float32Array(total) : undefined;
  let o = 0;
  for (let f = 0; f < F; f++)
    for (let k = 0; k < B; k++) {
      const b = f * G + idx[k]!, s = off[b]!, e = off[b + 1]!;
      if (e === s) continue;
      (ids as unknown as { set(a: ArrayLike<number | bigint>, o: number): void }).set(g.ids.subarray(s, e) as ArrayLike<number | bigint>, o);
      if (weights) weights.set(g.weights!.subarray(s, e), o);
      o += e - s;
    }
  return JaggedBatch.fromLengths({ features: g.features, batchSize: B, lengths, ids, weights });
}

/** Rows `idx` of a [n × width] sample-major array. */
export function takeRows(a: Float32Array, width: number, idx: Int32Array): Float32Array {
  const out = new Float32Array(idx.length * width);
  for (let k = 0; k < idx.length; k++) {
    const i = idx[k]!;
    out.set(a.subarray(i * width, (i + 1) * width), k * width);
  }
  return out;
}

/** The whole training batch of samples `idx`, with `sparse` already taken. */
export function takeBatch(b: Batch, idx: Int32Array, sparse: JaggedBatch): Batch {
  const nd = b.dense.length / b.size;
  const out: Batch = { dense: takeRows(b.dense, nd, idx), sparse, labels: takeRows(b.labels, 1, idx), size: idx.length };
  if (b.planted) out.planted = takeRows(b.planted, 1, idx);
  return out;
}

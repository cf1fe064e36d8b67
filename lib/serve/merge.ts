// merge.ts — requests joined into one micro-batch (samples in arrival order, one forward for all) and
// the batch's probabilities handed back per request. Copies are whole feature ranges (one set() per
// feature per request), never per id.
import { JaggedBatch } from '../batch.js';
import type { PredictBatch } from '../train/trainer.js';

/** Several batches of the same features → one (samples in order). */
export function concatBatches(parts: readonly PredictBatch[]): PredictBatch {
  if (parts.length === 1) return parts[0]!;
  const features = parts[0]!.sparse.features, F = features.length;
  const B = parts.reduce((s, p) => s + p.size, 0);
  const D = parts[0]!.dense.length / parts[0]!.size;
  const dense = new Float32Array(B * D);
  const lengths = new Int32Array(F * B);
  const ids = new Int32Array(parts.reduce((s, p) => s + p.sparse.ids.length, 0));
  let db = 0;
  for (const p of parts) {
    dense.set(p.dense, db * D);
    db += p.size;
  }
  let io = 0;
  for (let f = 0; f < F; f++) {
    let b0 = 0;
    for (const p of parts) {
      const n = p.size, off = p.sparse.offsets;
      lengths.set(p.sparse.lengths.subarray(f * n, (f + 1) * n), f * B + b0);
      const lo = off[f * n]!, hi = off[(f + 1) * n]!;
      ids.set((p.sparse.ids as Int32Array).subarray(lo, hi), io);
      io += hi - lo;
      b0 += n;
    }
  }
  return { dense, sparse: JaggedBatch.fromLengths({ features, batchSize: B, lengths, ids }), size: B };
}

/** The probabilities of a merged batch split back into one array per part (copies, so parts outlive the batch). */
export function splitResults(p: Float32Array, sizes: readonly number[]): Float32Array[] {
  const out: Float32Array[] = [];
  let o = 0;
  for (const n of sizes) {
    out.push(p.slice(o, o + n));
    o += n;
  }
  return out;
}

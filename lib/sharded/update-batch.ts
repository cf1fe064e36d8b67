// update-batch.ts — the batch of a rank's one optimizer step at the end of a sharded backward. It is the
// forward's owner batch (owner.ts) with the synced rows in place of the rank's own lookups: rb and ub
// features keep every source's ids as looked up; each dp table's and replicated tier's update feature
// ('upd') and each node tier's ('nodeupd') gets one bag of its synced rows; the rank's own lookups ('loc')
// and the node-tier lookups ('node') get empty bags (their gradients reach the rows through the syncs).
import type { NativeBatch } from '../binding.js';
import { concat } from './arrays.js';
import type { LocalLayout } from './local-layout.js';

export interface UpdateBatch<R> {
  batch: NativeBatch;
  /** ids of each local feature in the update batch */
  counts: number[];
  /** per local feature: the synced rows it updates ('upd' and 'nodeupd' features with rows), else undefined */
  synced: (R | undefined)[];
}

/**
 * The update batch from the owner batch (`featIds`: each local feature's ids in it, `Btot` bags per
 * feature) and the synced rows of every replicated table and node tier, by plan table index.
 */
export function updateBatch<R extends { ids: BigInt64Array }>(
  L: LocalLayout, owner: NativeBatch, featIds: readonly number[], Btot: number, replicated: ReadonlyMap<number, R>, node: ReadonlyMap<number, R>,
): UpdateBatch<R> {
  const lengths = owner.lengths.slice();
  const idsParts: BigInt64Array[] = [], wParts: Float32Array[] = [];
  const counts: number[] = [];
  const synced: (R | undefined)[] = [];
  let io = 0;
  L.localFeatures.forEach((lf, i) => {
    const n = featIds[i]!;
    const ownIds = owner.ids.subarray(io, io + n) as BigInt64Array;
    const ownW = owner.weights ? owner.weights.subarray(io, io + n) : null;
    io += n;
    counts.push(0);
    synced.push(undefined);
    if (lf.kind === 'rb' || lf.kind === 'ub') {
      counts[i] = n;
      idsParts.push(ownIds);
      if (ownW) wParts.push(ownW);
      return;
    }
    lengths.fill(0, i * Btot, (i + 1) * Btot);
    const rows = lf.kind === 'upd' ? replicated.get(lf.t) : lf.kind === 'nodeupd' ? node.get(lf.t) : undefined;
    if (rows && rows.ids.length > 0) {
      lengths[i * Btot] = counts[i] = rows.ids.length;
      idsParts.push(rows.ids);
      if (owner.weights) wParts.push(new Float32Array(rows.ids.length).fill(1));
      synced[i] = rows;
    }
  });
  const batch: NativeBatch = { batchSize: Btot, features: owner.features, lengths, ids: concat(idsParts, BigInt64Array), ...(owner.weights ? { weights: concat(wParts, Float32Array) } : {}) };
  return { batch, counts, synced };
}

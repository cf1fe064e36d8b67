// owner.ts — the owner side of a sharded step: the batch of a rank's one engine call per phase (every
// source's bags for the rank's shards and tiers, source order, with the rank's own dp / replicated-tier
// lookups in the first bags), and where each source's ids sit in it.
import type { NativeBatch } from '../binding.js';
import { concat } from './arrays.js';
import type { Received } from './input-exchange.js';
import type { LocalLayout, Segment } from './local-layout.js';
import { part, type SegView } from './routing.js';

export interface OwnerBatch {
  batch: NativeBatch;
  /** per local feature, per source rank: offset of the source's ids in the feature */
  idOff: number[][];
  /** ids of each local feature in the batch */
  featIds: number[];
}

/**
 * The batch of this rank's one engine call per phase: rb features with every source's bags (source
 * order), ub / node features with one bag of every source's ids, and this rank's own lookups (dp tables,
 * replicated tiers: `loc` features) in the first B of the Btot bags.
 */
export function ownerBatch(L: LocalLayout, recv: Received[], Btot: number, segs: Map<string, SegView>, B: number, weighted: boolean): OwnerBatch {
  const W = L.W;
  const F = L.localFeatures.length;
  const lengths = new Int32Array(F * Btot);
  const ids: BigInt64Array[] = [], w: Float32Array[] = [];
  const anyW = weighted || recv.some((x) => x.hasW);
  const idOff: number[][] = [];
  const featIds: number[] = [];
  const find = (p: number, pred: (s: Segment) => boolean) => recv[p]!.entries.find((en) => pred(en.seg));
  L.localFeatures.forEach((lf, i) => {
    if (lf.kind === 'loc') {
      const own = part(segs.get(lf.f!)!, 0, B);
      lengths.set(own.lengths, i * Btot);
      ids.push(own.ids);
      if (anyW) w.push(own.weights ?? new Float32Array(own.n).fill(1));
      idOff.push([]);
      featIds.push(own.n);
      return;
    }
    const offs: number[] = [];
    let n = 0;
    let bag = i * Btot;
    for (let p = 0; p < W; p++) {
      offs.push(n);
      let en: Received['entries'][number] | undefined;
      if (lf.kind === 'rb') en = find(p, (s) => s.kind === 'rb' && s.f === lf.f && s.g === lf.g);
      else if (lf.kind === 'ub') en = find(p, (s) => s.kind === 'ub' && s.t === lf.t && s.g === lf.g);
      else if (lf.kind === 'node') en = find(p, (s) => s.kind === 'node' && s.t === lf.t);
      if (lf.kind === 'rb') {
        if (en) lengths.set(en.lengths!, bag);
        bag += recv[p]!.B;
      } else if (en) lengths[i * Btot] += en.ids.length;
      if (!en) continue;
      ids.push(en.ids);
      n += en.ids.length;
      if (anyW) w.push(en.weights ?? new Float32Array(en.ids.length).fill(1));
    }
    idOff.push(offs);
    featIds.push(n);
  });
  const batch: NativeBatch = { batchSize: Btot, features: L.localFeatures.map((f) => f.name), lengths, ids: concat(ids, BigInt64Array) };
  if (anyW) batch.weights = concat(w, Float32Array);
  return { batch, idOff, featIds };
}

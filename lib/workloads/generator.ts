// generator.ts — seeded batch generators: one local JaggedBatch per rank for a workload, ids drawn from each
// table's Zipf access model (lib/random/zipf.ts; optionally scattered by a random permutation of the
// table's ids, permutation.ts), bag sizes from the workload's bag laws. The same
// (seed, step, rank) always gives the same batch.
import { JaggedBatch } from '../batch.js';
import { EmbshardError } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { Rng } from '../random/rng.js';
import type { Workload } from './presets.js';
import { ZipfSampler } from '../random/zipf.js';
import { idPermutation } from './permutation.js';

export interface GenerateOptions {
  /** local batch size of each rank */
  batchSize: number;
  seed?: number;
  /** iteration number (a separate stream per step) */
  step?: number;
  /** id array type (default Int32Array; 'int64' gives BigInt64Array) */
  idType?: 'int32' | 'int64';
  /**
   * Scatter every table's ids by a random permutation of this seed (permutation.ts), as hashed ids are:
   * the hottest ids are then anywhere in the table. Default: ids are Zipf ranks (row 0 hottest).
   */
  permuteIds?: number;
}

const GENERATE_FIELDS = fieldsOf<GenerateOptions>({ batchSize: true, seed: true, step: true, idType: true, permuteIds: true });

/** Rank `rank`'s local batch of one step. */
export function generateBatch(w: Workload, rank: number, opts: GenerateOptions): JaggedBatch {
  rejectUnknownFields(opts, GENERATE_FIELDS);
  const B = opts.batchSize;
  if (!Number.isSafeInteger(B) || B <= 0) throw new EmbshardError('INVALID_SIZE', `batchSize must be a positive integer (got ${B})`);
  const seed = opts.seed ?? 0, step = opts.step ?? 0;
  const rng = new Rng(seed, step * 1_000_003 + rank);
  const features: string[] = [];
  const samplers: ZipfSampler[] = [];
  const perms: (Int32Array | null)[] = [];
  if (opts.permuteIds !== undefined && !Number.isSafeInteger(opts.permuteIds)) throw new EmbshardError('INVALID_ARGUMENT', `permuteIds must be an integer seed (got ${String(opts.permuteIds)})`);
  w.tables.forEach((t, ti) => {
    const s = new ZipfSampler(t.rows, t.access?.zipf ?? 0);
    const perm = opts.permuteIds === undefined ? null : idPermutation(t.rows, opts.permuteIds, ti);
    for (const f of t.features ?? [t.name]) {
      features.push(f);
      samplers.push(s);
      perms.push(perm);
    }
  });
  const F = features.length;
  const lengths = new Int32Array(F * B);
  let total = 0;
  for (let f = 0; f < F; f++) {
    const bag = w.bags[features[f]!];
    if (!bag) throw new EmbshardError('INVALID_CONFIG', `workload '${w.name}' has no bag law for feature '${features[f]}'`);
    for (let b = 0; b < B; b++) {
      const n = bag.kind === 'fixed' ? bag.n : rng.int(1, Math.max(1, 2 * bag.mean - 1));
      lengths[f * B + b] = n;
      total += n;
    }
  }
  const ids32 = new Int32Array(total);
  let o = 0;
  for (let f = 0; f < F; f++) {
    let n = 0;
    for (let b = 0; b < B; b++) n += lengths[f * B + b]!;
    samplers[f]!.fill(rng, ids32, o, n);
    const perm = perms[f];
    if (perm) for (let i = o; i < o + n; i++) ids32[i] = perm[ids32[i]!]!;
    o += n;
  }
  const ids = opts.idType === 'int64' ? BigInt64Array.from(ids32, (x) => BigInt(x)) : ids32;
  return JaggedBatch.fromLengths({ features, batchSize: B, lengths, ids });
}

/** One local batch per rank for `worldSize` ranks. */
export function generateBatches(w: Workload, worldSize: number, opts: GenerateOptions): JaggedBatch[] {
  return Array.from({ length: worldSize }, (_, r) => generateBatch(w, r, opts));
}

// generator.ts — seeded batch generators: one local JaggedBatch per rank for a workload, ids drawn from each
// table's Zipf access model (lib/random/zipf.ts; optionally scattered by a random permutation of the
// table's ids, permutation.ts), bag sizes from the workload's bag laws. The same
// (seed, step, rank) always gives the same batch.
import { JaggedBatch } from '../batch.js';
import { EmbshardError, type ErrorCode } from '../errors.js';
import { MAX_BATCH_SIZE } from '../data/types.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { Rng } from '../random/rng.js';
import type { BagSpec, Workload } from './presets.js';
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

/** The largest id an Int32Array holds: tables with more rows need idType 'int64'. */
const INT32_MAX = 2 ** 31 - 1;

function badArg(field: string, msg: string, v: unknown, code: ErrorCode = 'INVALID_ARGUMENT'): never {
  throw new EmbshardError(code, `${field}: ${msg} (got ${typeof v === 'string' ? JSON.stringify(v) : String(v)})`, { path: field });
}

/** Validates a workload's bag law of `feature`: 'fixed' n a non-negative integer, 'uniform' mean ≥ 1. */
function bagOf(w: Workload, feature: string): BagSpec {
  const bag = Object.hasOwn(w.bags, feature) ? w.bags[feature] : undefined;
  if (!bag) throw new EmbshardError('INVALID_CONFIG', `workload '${w.name}' has no bag law for feature '${feature}'`, { path: `bags.${feature}` });
  const path = `bags.${feature}`;
  if (bag.kind === 'fixed') {
    if (!(Number.isSafeInteger(bag.n) && bag.n >= 0 && bag.n <= INT32_MAX)) badArg(`${path}.n`, 'must be a non-negative integer', bag.n, 'INVALID_CONFIG');
  } else if (bag.kind === 'uniform') {
    if (!(typeof bag.mean === 'number' && bag.mean >= 1 && bag.mean <= INT32_MAX)) badArg(`${path}.mean`, 'must be a number ≥ 1', bag.mean, 'INVALID_CONFIG');
  } else badArg(`${path}.kind`, "must be 'fixed' or 'uniform'", (bag as { kind: unknown }).kind, 'INVALID_CONFIG');
  return bag;
}

/** Rank `rank`'s local batch of one step. */
export function generateBatch(w: Workload, rank: number, opts: GenerateOptions): JaggedBatch {
  rejectUnknownFields(opts, GENERATE_FIELDS);
  const B = opts.batchSize;
  if (!Number.isSafeInteger(B) || B <= 0) throw new EmbshardError('INVALID_SIZE', `batchSize must be a positive integer (got ${B})`);
  if (B > MAX_BATCH_SIZE) throw new EmbshardError('INVALID_SIZE', `batchSize must be at most ${MAX_BATCH_SIZE} samples (got ${B})`);
  if (!(Number.isSafeInteger(rank) && rank >= 0)) badArg('rank', 'must be a non-negative integer', rank);
  if (opts.seed !== undefined && !Number.isSafeInteger(opts.seed)) badArg('seed', 'must be an integer', opts.seed);
  if (opts.step !== undefined && !(Number.isSafeInteger(opts.step) && opts.step >= 0)) badArg('step', 'must be a non-negative integer', opts.step);
  if (opts.idType !== undefined && opts.idType !== 'int32' && opts.idType !== 'int64') badArg('idType', "must be 'int32' or 'int64'", opts.idType);
  const seed = opts.seed ?? 0, step = opts.step ?? 0;
  const rng = new Rng(seed, step * 1_000_003 + rank);
  const features: string[] = [];
  const samplers: ZipfSampler[] = [];
  const perms: (Int32Array | null)[] = [];
  if (opts.permuteIds !== undefined && !Number.isSafeInteger(opts.permuteIds)) throw new EmbshardError('INVALID_ARGUMENT', `permuteIds must be an integer seed (got ${String(opts.permuteIds)})`);
  const wide = w.tables.some((t) => t.rows > INT32_MAX);
  if (wide && opts.idType !== 'int64') {
    const t = w.tables.find((x) => x.rows > INT32_MAX)!;
    badArg('idType', `table '${t.name}' has ${t.rows} rows, more than an Int32Array id holds: use 'int64'`, opts.idType ?? 'int32');
  }
  w.tables.forEach((t, ti) => {
    const s = new ZipfSampler(t.rows, t.access?.zipf ?? 0);
    if (opts.permuteIds !== undefined && t.rows > INT32_MAX) badArg('permuteIds', `table '${t.name}' has ${t.rows} rows, more than a permutation is built for (${INT32_MAX})`, opts.permuteIds);
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
    const bag = bagOf(w, features[f]!);
    for (let b = 0; b < B; b++) {
      const n = bag.kind === 'fixed' ? bag.n : rng.int(1, Math.max(1, 2 * bag.mean - 1));
      lengths[f * B + b] = n;
      total += n;
    }
  }
  // ids of tables past 2^31 − 1 rows are drawn as doubles (exact below 2^53), then widened to int64
  const ids32 = wide ? new Float64Array(total) : new Int32Array(total);
  let o = 0;
  for (let f = 0; f < F; f++) {
    let n = 0;
    for (let b = 0; b < B; b++) n += lengths[f * B + b]!;
    samplers[f]!.fill(rng, ids32, o, n);
    const perm = perms[f];
    if (perm) for (let i = o; i < o + n; i++) ids32[i] = perm[ids32[i]!]!;
    o += n;
  }
  const ids = opts.idType === 'int64' ? BigInt64Array.from(ids32, (x) => BigInt(x)) : (ids32 as Int32Array);
  return JaggedBatch.fromLengths({ features, batchSize: B, lengths, ids });
}

/** One local batch per rank for `worldSize` ranks. */
export function generateBatches(w: Workload, worldSize: number, opts: GenerateOptions): JaggedBatch[] {
  if (!(Number.isSafeInteger(worldSize) && worldSize > 0)) badArg('worldSize', 'must be a positive integer', worldSize);
  return Array.from({ length: worldSize }, (_, r) => generateBatch(w, r, opts));
}

// synthetic.ts — the seeded synthetic Criteo-like source: Zipf-skewed ids over the Criteo (or any)
// cardinalities, fixed or variable multi-hot bags, count-like dense features, and labels drawn from the
// planted model of planted.ts, so the best reachable AUC is known (batch.planted, plantedAUC()).
//
// Determinism: every value is a pure function of (seed, global sample index), so a sample is the same
// whatever the batch size, rank count, prefetch depth or thread that produced it. Global batch k of a run
// with worldSize ranks covers samples [sampleOffset + k·B·W, + B·W); rank r takes the r-th slice of B.
//
// Per bag (sample i, feature f): key = hash(seed_f, i); its length is draw 2^20 of that key ('uniform':
// 1 + ⌊u·(2h−1)⌋, mean h; 'fixed': h); id k of the bag is: u = draw k, rank = zipfRank(u) over the feature's
// cardinality N_f, raw = scatter(rank) ∈ [0, N_f) (the identity with scatter: false), id = raw mod rows_f where rows_f = min(N_f, maxRows)
// (the `--max-ind-range` hashing of DLRM). Hidden scores belong to the final ids, so a model with rows_f
// rows can represent the planted model exactly. With `sessions` (synthetic-sessions.ts) a session field's
// bag key is its session's instead of the sample's, so the samples of a session repeat those bags.
//
// The constants (Zipf spans, scatters, planted coefficients) are computed here once; the per-value work of a
// batch runs natively (native/data/synthetic_batch.cc, the same hashes and double arithmetic in the same
// order), on the calling thread.
import { EmbshardError } from '../errors.js';
import { loadAddon } from '../native.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { JaggedBatch } from '../batch.js';
import {
  CAT_FEATURE_NAMES,
  CRITEO_1TB_CARDINALITIES,
  CRITEO_KAGGLE_CARDINALITIES,
  DLRM_BENCHMARK,
  MLPERF_DCNV2_CARDINALITIES,
  MLPERF_DCNV2_MULTI_HOT,
  NUM_DENSE,
} from './criteo.js';
import { PlantedModel, resolvePlanted, type PlantedConfig, type PlantedOptions } from './planted.js';
import { auc, expectedAUC } from './metrics.js';
import { hash2 } from '../random/rng.js';
import { batchSizeOf, featureNamesOption, listOption, positiveInt, nonNegativeInt, type Batch, type BatchSource } from './types.js';
import { makeScatter, scatter, zipfParams, zipfRankProbability, type Scatter, type ZipfParams } from '../random/zipf.js';
import { resolveSessions, SessionModel, type SessionConfig, type SessionOptions } from './synthetic-sessions.js';

export type SyntheticPreset = 'criteo-kaggle' | 'criteo-1tb' | 'mlperf-dcnv2' | 'dlrm-benchmark';

export interface SyntheticOptions {
  /** Samples per batch (per rank). */
  batchSize: number;
  /** Cardinalities, hotness and dense count to start from. Default 'criteo-kaggle'. */
  preset?: SyntheticPreset | undefined;
  /** Rows per feature (one table per feature), overriding the preset's. */
  cardinalities?: readonly number[] | undefined;
  /** Feature names (default cat_0 … or t0 … for dlrm-benchmark). */
  features?: readonly string[] | undefined;
  /** Cap on table rows: ids are drawn over the full cardinality and hashed (mod) into min(N, maxRows). */
  maxRows?: number | undefined;
  /** Mean ids per bag: one number for all features, or one per feature. Preset default. */
  hotness?: number | readonly number[] | undefined;
  /** 'fixed': every bag has exactly h ids; 'uniform': 1 … 2h−1 ids, uniformly. Default 'fixed'. */
  lengths?: 'fixed' | 'uniform' | undefined;
  /** Dense features per sample. Preset default (13). */
  numDense?: number | undefined;
  /** Zipf exponent of id popularity (0 = uniform). Default 1.1, HugeCTR/EMBark's benchmark setting. */
  alpha?: number | undefined;
  /**
   * true: hot ranks are scattered over the table by a seeded bijection (as hashed ids are); false: rank r
   * is id r, hottest = row 0 (the planner's access model in lib/plan). Default true.
   */
  scatter?: boolean | undefined;
  /** Default 0. */
  seed?: number | undefined;
  /** Batches per epoch; omitted = endless. */
  numBatches?: number | undefined;
  /** Global index of the first sample. Default 0 (use another offset for a held-out set). */
  sampleOffset?: number | undefined;
  rank?: number | undefined;
  worldSize?: number | undefined;
  planted?: PlantedOptions | undefined;
  /** Session locality (synthetic-sessions.ts): samples of one session repeat its session fields' bags. Default: none (i.i.d. samples). */
  sessions?: SessionOptions | undefined;
}

/** The fully resolved, JSON-serializable configuration (what a worker thread receives). */
export interface SyntheticConfig {
  batchSize: number;
  features: string[];
  cardinalities: number[];
  tableRows: number[];
  hotness: number[];
  lengths: 'fixed' | 'uniform';
  numDense: number;
  alpha: number;
  scatter: boolean;
  seed: number;
  numBatches: number | null;
  sampleOffset: number;
  rank: number;
  worldSize: number;
  planted: PlantedConfig;
  sessions: SessionConfig | null;
}

const SYNTHETIC_FIELDS = fieldsOf<SyntheticOptions>({
  batchSize: true, preset: true, cardinalities: true, features: true, maxRows: true, hotness: true, lengths: true, numDense: true,
  alpha: true, scatter: true, seed: true, numBatches: true, sampleOffset: true, rank: true, worldSize: true, planted: true, sessions: true,
});

const MAX_ROWS = 0x7fffffff; // ids are Int32
const MAX_BATCH_VALUES = 0x7fffffff; // ids (or dense values) of one batch

function presetDefaults(p: SyntheticPreset): { cards: readonly number[]; hot: readonly number[]; numDense: number; features: readonly string[] } {
  switch (p) {
    case 'criteo-kaggle':
      return { cards: CRITEO_KAGGLE_CARDINALITIES, hot: CRITEO_KAGGLE_CARDINALITIES.map(() => 1), numDense: NUM_DENSE, features: CAT_FEATURE_NAMES };
    case 'criteo-1tb':
      return { cards: CRITEO_1TB_CARDINALITIES, hot: CRITEO_1TB_CARDINALITIES.map(() => 1), numDense: NUM_DENSE, features: CAT_FEATURE_NAMES };
    case 'mlperf-dcnv2':
      return { cards: MLPERF_DCNV2_CARDINALITIES, hot: MLPERF_DCNV2_MULTI_HOT, numDense: NUM_DENSE, features: CAT_FEATURE_NAMES };
    case 'dlrm-benchmark': {
      const t = DLRM_BENCHMARK.tables;
      return {
        cards: Array.from({ length: t }, () => DLRM_BENCHMARK.rows),
        hot: Array.from({ length: t }, () => DLRM_BENCHMARK.hotness),
        numDense: DLRM_BENCHMARK.numDense,
        features: Array.from({ length: t }, (_, i) => `t${i}`),
      };
    }
    default:
      throw new EmbshardError('INVALID_CONFIG', `preset must be one of criteo-kaggle, criteo-1tb, mlperf-dcnv2, dlrm-benchmark (got ${String(p)})`);
  }
}

/**
 * The 32-bit key of a seed: a seed in [−2^31, 2^31) is itself; a wider one mixes its high and low words, so
 * distinct seeds do not alias (2^32 + 1 and 1 give different data).
 */
function seed32(seed: number): number {
  if (seed >= -0x80000000 && seed < 0x80000000) return seed;
  const hi = Math.floor(seed / 0x100000000), lo = seed - hi * 0x100000000;
  return hash2(hash2(0x5eed, hi | 0), lo >>> 0) | 0;
}

/** Validates options and resolves every default; throws EmbshardError naming the bad field. */
export function resolveSynthetic(o: SyntheticOptions): SyntheticConfig {
  if (o === null || typeof o !== 'object') throw new EmbshardError('INVALID_ARGUMENT', 'synthetic options must be an object');
  rejectUnknownFields(o, SYNTHETIC_FIELDS);
  const batchSize = batchSizeOf('batchSize', o.batchSize);
  const pre = presetDefaults(o.preset ?? 'criteo-kaggle');
  const cards = listOption('cardinalities', o.cardinalities) ?? [...pre.cards];
  if (cards.length === 0) throw new EmbshardError('INVALID_CONFIG', 'cardinalities must not be empty');
  cards.forEach((c, f) => positiveInt(`cardinalities[${f}]`, c));
  const F = cards.length;
  const features = featureNamesOption('features', o.features) ?? (o.cardinalities ? Array.from({ length: F }, (_, i) => `cat_${i}`) : [...pre.features]);
  if (features.length !== F) throw new EmbshardError('LENGTH_MISMATCH', `features has ${features.length} names but there are ${F} cardinalities`);
  const maxRows = o.maxRows === undefined ? MAX_ROWS : positiveInt('maxRows', o.maxRows);
  if (maxRows > MAX_ROWS) throw new EmbshardError('INVALID_SIZE', `maxRows must be at most 2^31 − 1 (got ${maxRows})`);
  const tableRows = cards.map((c) => Math.min(c, maxRows));
  let hotness: number[];
  if (o.hotness === undefined) hotness = o.cardinalities && !o.preset ? cards.map(() => 1) : [...pre.hot];
  else if (typeof o.hotness === 'number') hotness = cards.map(() => o.hotness as number);
  else if (Array.isArray(o.hotness)) hotness = [...o.hotness];
  else throw new EmbshardError('INVALID_ARGUMENT', `hotness must be a number or an array of one per feature (got ${typeof o.hotness})`);
  if (hotness.length !== F) throw new EmbshardError('LENGTH_MISMATCH', `hotness has ${hotness.length} entries but there are ${F} features`);
  hotness.forEach((h, f) => positiveInt(`hotness[${f}]`, h));
  const lengths = o.lengths ?? 'fixed';
  if (lengths !== 'fixed' && lengths !== 'uniform') throw new EmbshardError('INVALID_ARGUMENT', `lengths must be 'fixed' or 'uniform' (got ${String(lengths)})`);
  const numDense = o.numDense === undefined ? pre.numDense : nonNegativeInt('numDense', o.numDense);
  // a batch's arrays are allocated natively in one piece: refuse sizes no typed array can hold up front
  const maxIds = batchSize * hotness.reduce((a, h) => a + (lengths === 'uniform' ? 2 * h - 1 : h), 0);
  if (maxIds > MAX_BATCH_VALUES)
    throw new EmbshardError('INVALID_SIZE', `batchSize × ids per sample (${batchSize} × ${maxIds / batchSize}) is ${maxIds} ids per batch; at most 2^31 − 1 fit one batch (lower batchSize or hotness)`);
  if (batchSize * numDense > MAX_BATCH_VALUES)
    throw new EmbshardError('INVALID_SIZE', `batchSize × numDense (${batchSize} × ${numDense}) is more than 2^31 − 1 dense values per batch`);
  const alpha = o.alpha ?? 1.1;
  if (typeof alpha !== 'number' || !Number.isFinite(alpha) || alpha < 0 || alpha > 10)
    throw new EmbshardError('INVALID_ARGUMENT', `alpha must be a number in [0, 10] (got ${String(alpha)})`);
  const scatter = o.scatter ?? true;
  if (typeof scatter !== 'boolean') throw new EmbshardError('INVALID_ARGUMENT', `scatter must be a boolean (got ${String(scatter)})`);
  const seed = o.seed ?? 0;
  if (!Number.isSafeInteger(seed)) throw new EmbshardError('INVALID_ARGUMENT', `seed must be an integer (got ${String(seed)})`);
  const numBatches = o.numBatches === undefined ? null : positiveInt('numBatches', o.numBatches);
  const sampleOffset = o.sampleOffset === undefined ? 0 : nonNegativeInt('sampleOffset', o.sampleOffset);
  const worldSize = o.worldSize === undefined ? 1 : positiveInt('worldSize', o.worldSize);
  const rank = o.rank === undefined ? 0 : nonNegativeInt('rank', o.rank);
  if (rank >= worldSize) throw new EmbshardError('INVALID_ARGUMENT', `rank ${rank} must be below worldSize ${worldSize}`);
  return {
    batchSize, features, cardinalities: cards, tableRows, hotness, lengths, numDense, alpha, scatter, seed: seed32(seed),
    numBatches, sampleOffset, rank, worldSize, planted: resolvePlanted(o.planted), sessions: resolveSessions(o.sessions),
  };
}

/** Counts below this take ln(1 + k) from the spec's table (as TypeScript computes it). */
const LOG1P_TABLE = 16384;

interface SynthAddon {
  batch(spec: Float64Array, first: number, batchSize: number): { lengths: Int32Array; ids: Int32Array; dense: Float32Array; labels: Float32Array; planted: Float32Array };
}
let synthCached: SynthAddon | undefined;
function synthAddon(): SynthAddon {
  return (synthCached ??= (loadAddon() as unknown as { synth: SynthAddon }).synth);
}

interface FeaturePlan {
  zipf: ZipfParams;
  scatter: Scatter;
  rows: number;
  key: number;
  hot: number;
}

/** Generates batches of one resolved configuration; holds only O(features) precomputed constants. */
export class SyntheticGenerator {
  readonly model: PlantedModel;
  private readonly plans: FeaturePlan[];
  private readonly sessions: SessionModel | null;
  private readonly denseKey: number;
  private readonly labelKey: number;
  /**
   * bias − Σ_f c_f · h_f · Σ_{r < 4096} P(r) z_f(id(r)): the hottest rows' scores recur in nearly every bag,
   * so their expectation is taken out of the logit, keeping the click rate near sigmoid(bias)'s neighbourhood
   * whatever the seed (a constant, so the model stays exactly representable).
   */
  readonly logitOffset: number;
  private readonly spec: Float64Array;

  constructor(readonly cfg: SyntheticConfig) {
    this.model = new PlantedModel(cfg.seed, cfg.hotness, cfg.numDense, cfg.planted);
    this.plans = cfg.cardinalities.map((n, f) => ({
      zipf: zipfParams(n, cfg.alpha),
      scatter: cfg.scatter ? makeScatter(n, cfg.seed, f) : { n, a: 1, c: 0 },
      rows: cfg.tableRows[f]!,
      key: hash2(cfg.seed, 0x100 + f),
      hot: cfg.hotness[f]!,
    }));
    this.sessions = cfg.sessions ? new SessionModel(cfg.sessions, cfg.seed, cfg.features.length) : null;
    this.denseKey = hash2(cfg.seed, 0xde);
    this.labelKey = hash2(cfg.seed, 0x1abe1);
    let off = cfg.planted.bias;
    this.plans.forEach((p, f) => {
      const n = p.zipf.n, head = Math.min(n, 4096);
      let mu = 0;
      for (let r = 0; r < head; r++) {
        const raw = scatter(p.scatter, r);
        mu += zipfRankProbability(n, p.zipf.alpha, r) * this.model.hiddenScore(f, raw % p.rows);
      }
      off -= this.model.sparseCoef[f]! * p.hot * mu;
    });
    this.logitOffset = off;
    this.spec = this.packSpec();
  }

  /** Global index of sample b of local batch k. */
  sampleIndex(k: number, b: number): number {
    const c = this.cfg;
    return c.sampleOffset + (k * c.worldSize + c.rank) * c.batchSize + b;
  }

  /** Local batch k (0-based) of this rank. Pure: the same k always gives the same batch. */
  batch(k: number): Batch {
    const c = this.cfg;
    const B = c.batchSize;
    const first = this.sampleIndex(k, 0);
    if (!Number.isSafeInteger(first + B)) throw new EmbshardError('INVALID_ARGUMENT', `batch ${k} is past the last addressable sample`);
    const { lengths, ids, dense, labels, planted } = synthAddon().batch(this.spec, first, B);
    const sparse = JaggedBatch.fromLengths({ features: c.features, batchSize: B, lengths, ids });
    return { dense, sparse, labels, size: B, planted };
  }

  /**
   * The constants of every value's formula, packed for the native generator (native/data/synthetic_batch.h):
   * a header, 12 values per feature, the dense coefficients, means and ln q, and ln(1 + k) for small counts k.
   */
  private packSpec(): Float64Array {
    const c = this.cfg, m = this.model, F = c.features.length, D = c.numDense, s = this.sessions;
    const head = [F, D, LOG1P_TABLE, c.lengths === 'fixed' ? 1 : 0, m.key >>> 0, this.logitOffset, this.denseKey >>> 0, this.labelKey >>> 0,
      s ? s.cfg.concurrent : 0, s ? s.window : 0, s ? s.slotKey >>> 0 : 0, s ? s.offsetKey >>> 0 : 0];
    const out = new Float64Array(head.length + 12 * F + 3 * D + LOG1P_TABLE);
    out.set(head);
    let o = head.length;
    this.plans.forEach((p, f) => {
      const z = p.zipf;
      out.set([p.key >>> 0, p.hot, z.alpha === 1 ? 1 : 0, z.span, z.inv, z.n, p.scatter.a, p.scatter.c, p.rows, m.sparseCoef[f]!,
        s?.sessionField[f] ? 1 : 0, s ? s.bagKeys[f]! >>> 0 : 0], o);
      o += 12;
    });
    out.set(m.denseCoef, o);
    out.set(m.denseMean, o + D);
    for (let j = 0; j < D; j++) out[o + 2 * D + j] = Math.log(m.denseQ[j]!);
    o += 3 * D;
    for (let k = 0; k < LOG1P_TABLE; k++) out[o + k] = Math.log1p(k);
    return out;
  }
}

/** The synthetic BatchSource: batch k of an epoch is generator.batch(k); endless unless numBatches. */
export class SyntheticSource implements BatchSource {
  readonly cfg: SyntheticConfig;
  readonly generator: SyntheticGenerator;

  constructor(readonly options: SyntheticOptions) {
    this.cfg = resolveSynthetic(options);
    this.generator = new SyntheticGenerator(this.cfg);
  }

  get features(): readonly string[] {
    return this.cfg.features;
  }
  get numDense(): number {
    return this.cfg.numDense;
  }
  get batchSize(): number {
    return this.cfg.batchSize;
  }
  get tableRows(): readonly number[] {
    return this.cfg.tableRows;
  }
  get numBatches(): number | undefined {
    return this.cfg.numBatches ?? undefined;
  }
  get endless(): boolean {
    return this.cfg.numBatches === null;
  }

  batch(k: number): Batch {
    return this.generator.batch(k);
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Batch> {
    const n = this.cfg.numBatches ?? Infinity;
    for (let k = 0; k < n; k++) yield this.generator.batch(k);
  }
}

/** Shorthand for new SyntheticSource(options). */
export function syntheticSource(options: SyntheticOptions): SyntheticSource {
  return new SyntheticSource(options);
}

function concatField(batches: readonly Batch[], pick: (b: Batch) => Float32Array | undefined, what: string): Float32Array {
  let n = 0;
  for (const b of batches) {
    const a = pick(b);
    if (!a) throw new EmbshardError('INVALID_ARGUMENT', `a batch has no ${what} (only synthetic batches carry planted probabilities)`);
    n += a.length;
  }
  const out = new Float32Array(n);
  let o = 0;
  for (const b of batches) {
    const a = pick(b)!;
    out.set(a, o);
    o += a.length;
  }
  return out;
}

/**
 * The planted model's AUC on synthetic batches: `realized` against the drawn labels (the best AUC any
 * model can score on exactly these batches, up to ties) and `expected`, its expectation over the label
 * draws (the population value the realized one scatters around, ±~1/√n).
 */
export function plantedAUC(batches: readonly Batch[]): { realized: number; expected: number; samples: number } {
  const p = concatField(batches, (b) => b.planted, 'planted probabilities');
  const y = concatField(batches, (b) => b.labels, 'labels');
  return { realized: auc(p, y), expected: expectedAUC(p, p), samples: p.length };
}

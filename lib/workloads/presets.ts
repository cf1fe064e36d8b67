// presets.ts — workload presets for the planner and its bench: MLPerf DLRM-DCNv2, Criteo Kaggle, synthetic
// models shaped like EMBark's T180 / T200 / T510 (table count, total parameters, Σ hotness and dims counted
// from NVIDIA HugeCTR's benchmarks/embedding_collection/benchmark.sh and dataset/*.py), and a skewed
// sequence workload for the hot-row tiers. The Criteo presets take their cardinalities and feature names
// from lib/data/criteo.ts.
import { EmbshardError } from '../errors.js';
import type { TableSpec } from '../plan/types.js';
import { Rng } from '../random/rng.js';
import { CAT_FEATURE_NAMES, CRITEO_KAGGLE_CARDINALITIES, MLPERF_DCNV2_CARDINALITIES, MLPERF_DCNV2_MULTI_HOT } from '../data/criteo.js';

/** How many ids a bag of a feature holds: exactly `n`, or uniform in [1, 2·mean − 1]. */
export type BagSpec = { kind: 'fixed'; n: number } | { kind: 'uniform'; mean: number };

export interface Workload {
  readonly name: string;
  readonly description: string;
  readonly source: string;
  /** planner table specs (poolingFactors = mean bag sizes, access = the generator's Zipf exponent) */
  readonly tables: readonly TableSpec[];
  /** bag-size law per feature */
  readonly bags: Readonly<Record<string, BagSpec>>;
}

/** Keys in EMBark's benchmark are Zipf α = 1.1 (HugeCTR benchmarks/embedding_collection). */
const ALPHA = 1.1;

/**
 * One table per Criteo feature, named as the data sources name the features (cat_0 … cat_25), so a plan
 * made from a workload reads the batches of lib/data.
 */
function criteoTables(rows: readonly number[], hot: readonly number[], dim: number, optimizer: TableSpec['optimizer']): { tables: TableSpec[]; bags: Record<string, BagSpec> } {
  const tables: TableSpec[] = [];
  const bags: Record<string, BagSpec> = {};
  rows.forEach((r, i) => {
    const name = CAT_FEATURE_NAMES[i]!;
    tables.push({ name, rows: r, dim, dtype: 'fp32', pooling: 'sum', features: [name], optimizer, poolingFactors: [hot[i]!], access: { zipf: ALPHA } });
    bags[name] = { kind: 'fixed', n: hot[i]! };
  });
  return { tables, bags };
}

/**
 * A synthetic model with `count` tables whose Σ rows·dim equals `params` and whose bag sizes sum to
 * `hotness`: rows log-uniform over four decades before scaling, bag sizes log-uniform in [1, 8·mean]
 * before scaling, dims drawn from `dims`; seeded, so the same every time.
 */
function synthetic(name: string, count: number, params: number, hotness: number, dims: number[], seed: number): { tables: TableSpec[]; bags: Record<string, BagSpec> } {
  const rng = new Rng(seed);
  const dim = Array.from({ length: count }, () => dims[rng.int(0, dims.length - 1)]!);
  const w = Array.from({ length: count }, () => Math.exp(Math.log(1e4) + rng.float() * Math.log(1e4)));
  const h = Array.from({ length: count }, () => Math.exp(rng.float() * Math.log(8 * (hotness / count))));
  const scaleRows = params / w.reduce((s, x, i) => s + x * dim[i]!, 0);
  const rows = w.map((x) => Math.max(16, Math.round(x * scaleRows)));
  // fix the last table so Σ rows·dim hits params (to within one row)
  const rest = rows.slice(0, -1).reduce((s, r, i) => s + r * dim[i]!, 0);
  rows[count - 1] = Math.max(16, Math.round((params - rest) / dim[count - 1]!));
  const hs = h.reduce((a, b) => a + b, 0);
  const hot = h.map((x) => Math.max(1, Math.round((x * hotness) / hs)));
  let diff = hotness - hot.reduce((a, b) => a + b, 0);
  for (let i = 0; diff !== 0; i = (i + 1) % count) {
    if (diff > 0) {
      hot[i]!++;
      diff--;
    } else if (hot[i]! > 1) {
      hot[i]!--;
      diff++;
    }
  }
  const tables: TableSpec[] = [];
  const bags: Record<string, BagSpec> = {};
  for (let i = 0; i < count; i++) {
    const n = `${name}_${i}`;
    tables.push({ name: n, rows: rows[i]!, dim: dim[i]!, dtype: 'fp32', pooling: 'sum', features: [n], optimizer: 'sgd', poolingFactors: [hot[i]!], access: { zipf: ALPHA } });
    bags[n] = { kind: 'fixed', n: hot[i]! };
  }
  return { tables, bags };
}

function seqSkewed(): { tables: TableSpec[]; bags: Record<string, BagSpec> } {
  const spec = (name: string, rows: number, dim: number, alpha: number, feats: [string, number][], pooling: TableSpec['pooling'] = 'none'): TableSpec => ({
    name,
    rows,
    dim,
    dtype: 'fp32',
    pooling,
    features: feats.map((f) => f[0]),
    optimizer: 'rowwise_adagrad',
    poolingFactors: feats.map((f) => f[1]),
    access: { zipf: alpha },
  });
  const tables = [
    spec('items', 20_000_000, 128, 1.2, [['item_history', 256], ['item_candidate', 1]]),
    spec('creators', 5_000_000, 128, 1.15, [['creator_history', 128]]),
    spec('categories', 200_000, 64, 1.2, [['category_history', 256]]),
    spec('queries', 10_000_000, 64, 1.1, [['query_history', 64]]),
    spec('users', 50_000_000, 128, 1.1, [['user_id', 1]], 'sum'),
  ];
  const bags: Record<string, BagSpec> = {
    item_history: { kind: 'uniform', mean: 256 },
    item_candidate: { kind: 'fixed', n: 1 },
    creator_history: { kind: 'uniform', mean: 128 },
    category_history: { kind: 'uniform', mean: 256 },
    query_history: { kind: 'uniform', mean: 64 },
    user_id: { kind: 'fixed', n: 1 },
  };
  return { tables, bags };
}

const builders: Record<string, () => Workload> = {
  'dlrm-dcnv2': () => ({
    name: 'dlrm-dcnv2',
    description: 'MLPerf DLRM-DCNv2: 26 tables (Criteo 1TB capped at 40M rows), multi-hot Σ 214, dim 128, Adagrad, Zipf 1.1',
    source: 'mlcommons/training recommendation_v2 README (cardinalities, multi-hot sizes); EMBark benchmark keys Zipf α = 1.1',
    ...criteoTables(MLPERF_DCNV2_CARDINALITIES, MLPERF_DCNV2_MULTI_HOT, 128, 'adagrad'),
  }),
  'criteo-kaggle': () => ({
    name: 'criteo-kaggle',
    description: 'Criteo Kaggle DAC: 26 one-hot tables (33.8M rows), dim 16, SGD, Zipf 1.1',
    source: 'Criteo Kaggle cardinalities (mlcommons inference DLRM backend); dim 16 from dlrm_s_criteo_kaggle.sh',
    ...criteoTables(CRITEO_KAGGLE_CARDINALITIES, CRITEO_KAGGLE_CARDINALITIES.map(() => 1), 16, 'sgd'),
  }),
  t180: () => ({
    name: 't180',
    description: 'EMBark T180-shaped: 177 tables, 66.3B parameters, Σ hotness 14,450, dims 32–256, SGD, Zipf 1.1',
    source: 'HugeCTR benchmarks/embedding_collection 180table_70B_hotness80 aggregates; per-table shapes synthetic',
    ...synthetic('t180', 177, 66.3e9, 14450, [32, 64, 128, 256], 180),
  }),
  t200: () => ({
    name: 't200',
    description: 'EMBark T200-shaped: 200 tables, 103.9B parameters, Σ hotness 4,550, dims 64/128, SGD, Zipf 1.1',
    source: 'HugeCTR benchmarks/embedding_collection 200table_100B_hotness20 aggregates; per-table shapes synthetic',
    ...synthetic('t200', 200, 103.9e9, 4550, [64, 128], 200),
  }),
  t510: () => ({
    name: 't510',
    description: 'EMBark T510-shaped: 510 tables, 114.6B parameters, Σ hotness 2,670, dim 128, SGD, Zipf 1.1',
    source: 'HugeCTR benchmarks/embedding_collection 510table_110B_hotness5 aggregates; per-table shapes synthetic',
    ...synthetic('t510', 510, 114.6e9, 2670, [128], 510),
  }),
  'seq-skewed': () => ({
    name: 'seq-skewed',
    description: 'Skewed sequence model: 5 tables, histories of 64–256 ids (pooling none), Zipf 1.1–1.2, row-wise Adagrad',
    source: 'shaped after the sequence DLRMs of FlexShard (Sethi et al., arXiv 2301.02959); sizes chosen here',
    ...seqSkewed(),
  }),
};

export const WORKLOAD_NAMES: readonly string[] = Object.keys(builders);

/** A workload preset by name (INVALID_CONFIG naming the known ones otherwise). */
export function workload(name: string): Workload {
  const b = Object.hasOwn(builders, name) ? builders[name] : undefined;
  if (!b) throw new EmbshardError('INVALID_CONFIG', `model: unknown workload '${name}' (known: ${WORKLOAD_NAMES.join(', ')})`);
  return b();
}

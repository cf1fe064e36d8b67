// criteo.ts — the Criteo / MLPerf workload constants: feature names, table cardinalities of the Kaggle
// and Terabyte variants, the MLPerf DLRM-DCNv2 multi-hot sizes and the DLRM benchmark shape, in the raw
// column order C1…C26 of the Criteo files. Sources: the Kaggle and capped Terabyte sets from the MLCommons
// inference DLRM backend, the DCNv2 caps and multi-hot sizes from the mlcommons/training
// recommendation_v2 README, the uncapped Terabyte counts as published with the dataset's loaders.
// Every part of the package (data sources, planner workloads) names the features cat_0 … cat_25.

export const NUM_DENSE = 13;
export const NUM_SPARSE = 26;

/** Sparse feature names in column order: cat_0 … cat_25 (torchrec's DEFAULT_CAT_NAMES). */
export const CAT_FEATURE_NAMES: readonly string[] = Object.freeze(Array.from({ length: NUM_SPARSE }, (_, i) => `cat_${i}`));
/** Dense feature names in column order: int_0 … int_12. */
export const DENSE_FEATURE_NAMES: readonly string[] = Object.freeze(Array.from({ length: NUM_DENSE }, (_, i) => `int_${i}`));

/** Criteo Kaggle Display Advertising Challenge (7 days, 45,840,617 samples); Σ = 33,762,577. */
export const CRITEO_KAGGLE_CARDINALITIES: readonly number[] = Object.freeze([
  1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992, 5461306, 10, 5652, 2173, 4,
  7046547, 18, 15, 286181, 105, 142572,
]);

/** Criteo 1TB Click Logs, distinct ids without any cap; Σ = 882,774,559. */
export const CRITEO_1TB_CARDINALITIES: readonly number[] = Object.freeze([
  227605432, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 130229467, 3067956, 405282, 10, 2209, 11938, 155, 4, 976, 14,
  292775614, 40790948, 187188510, 590152, 12973, 108, 36,
]);

/** Criteo 1TB hashed with --max-ind-range=40M (MLPerf DLRM v1); Σ = 187,767,399. */
export const CRITEO_1TB_40M_CARDINALITIES: readonly number[] = Object.freeze([
  39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951, 2953546, 403346, 10, 2208, 11938, 155, 4, 976, 14,
  39979771, 25641295, 39664984, 585935, 12972, 108, 36,
]);

/** MLPerf DLRM-DCNv2 (mlcommons/training recommendation_v2): 1TB capped at 40M rows; Σ = 204,184,588. */
export const MLPERF_DCNV2_CARDINALITIES: readonly number[] = Object.freeze([
  40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209, 11938, 155, 4, 976, 14,
  40000000, 40000000, 40000000, 590152, 12973, 108, 36,
]);

/** MLPerf DLRM-DCNv2 multi-hot sizes (ids per bag, per feature); Σ = 214. */
export const MLPERF_DCNV2_MULTI_HOT: readonly number[] = Object.freeze([
  3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1,
]);

/** facebookresearch/dlrm bench/dlrm_s_benchmark.sh: 8 tables × 1M rows, 100 ids per bag, batch 2048. */
export const DLRM_BENCHMARK = Object.freeze({ tables: 8, rows: 1_000_000, hotness: 100, batchSize: 2048, dim: 64, numDense: 512 });

/** Click-through rate of Criteo Kaggle's training set (≈ 25.6 % positives), for synthetic defaults. */
export const CRITEO_KAGGLE_CTR = 0.256;

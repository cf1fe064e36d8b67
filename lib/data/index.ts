// index.ts — the data pipeline's public surface: batches and sources, the Criteo constants, synthetic
// planted-model data, Criteo TSV, torchrec binary (npy) days, Arrow, prefetching, held-out sample ranges, whole batches only,
// the Criteo categorical hash, and metrics.
export * from './types.js';
export * from './criteo.js';
export { SyntheticSource, SyntheticGenerator, syntheticSource, resolveSynthetic, plantedAUC } from './synthetic.js';
export type { SyntheticOptions, SyntheticConfig, SyntheticPreset } from './synthetic.js';
export type { PlantedOptions, PlantedConfig } from './planted.js';
export { zipfRankProbability } from '../random/zipf.js';
export { CriteoTsvSource, CriteoTsvParser, criteoTsvSource, resolveCriteoTsv } from './criteo-tsv.js';
export type { CriteoTsvOptions, CriteoTsvConfig } from './criteo-tsv.js';
export { CriteoNpySource, criteoNpySource, writeCriteoNpyDay, dayFiles, rankRowRange } from './criteo-npy.js';
export type { CriteoNpyOptions } from './criteo-npy.js';
export { NpyFile, encodeNpy, writeNpy, parseNpyHeader } from './npy.js';
export type { NpyDtype, NpyArray, NpyHeader } from './npy.js';
export { ArrowSource, arrowSource, batchToArrow, batchesToTable, recordBatchToBatch } from './arrow.js';
export type { ArrowSourceOptions, ArrowInput } from './arrow.js';
export { MAX_PREFETCH_DEPTH, PrefetchSource, prefetch } from './prefetch.js';
export type { PrefetchOptions } from './prefetch.js';
export { WorkerSource, workerSource } from './worker-source.js';
export type { WorkerSourceOptions } from './worker-source.js';
export { openSource } from './specs.js';
export type { SourceSpec } from './specs.js';
export { auc, expectedAUC, logloss, loglossFromLogits } from './metrics.js';
export { SampleRangeSource, heldOutSplit, countSamples, sliceBatch } from './sample-range.js';
export { FullBatchesSource, fullBatches } from './full-batches.js';
export type { HeldOutSplit } from './sample-range.js';
export { hashCategorical, hashHexString, categoricalSalt } from './criteo-hash.js';
export type { CategoricalHash } from './criteo-hash.js';

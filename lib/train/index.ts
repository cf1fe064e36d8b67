// index.ts — the training API: Trainer, DenseModel and presets, schedules, embedding helpers.
export { Trainer } from './trainer.js';
export type { TrainerOptions, StepMetrics, StepTimes, EvalResult, GradientGroup } from './trainer.js';
export { DenseModel, PRESETS, isPresetName, parseLayers, resolveDenseSpec } from './dense.js';
export type { DenseBuffer, DenseModelSpec, DenseModelOptions, DenseOptimizerConfig, PresetName } from './dense.js';
export { lrFactor, resolveSchedule } from './schedule.js';
export type { LrSchedule, ResolvedSchedule } from './schedule.js';
export { embeddingsFor } from './embeddings.js';
export type { EmbeddingModule, EmbeddingOutput, TablesForOptions } from './embeddings.js';
export { readTrainerCheckpoint, writeTrainerCheckpoint } from './checkpoint.js';
export { RankSplitSource, rankBatchIndices, rankSplit } from './rank-split.js';

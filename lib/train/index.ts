// index.ts — the training API: Trainer, DenseModel and presets, schedules, embedding helpers.
export { Trainer } from './trainer.js';
export type { TrainerOptions, TrainerLoadOptions, StepMetrics, StepTimes, EvalResult, EvaluateOptions, GradientGroup, PredictBatch, FitOptions, FitResult, FitStep } from './trainer.js';
export { resolveInputs } from './inputs.js';
export type { ModelInputs } from './inputs.js';
export { DenseModel, PRESETS, isPrecision, isPresetName, parseLayers, resolveDenseSpec } from './dense.js';
export type { Precision, GemmBackendName, GemmInfo } from './binding.js';
export type { DenseBuffer, DenseModelSpec, DenseModelOptions, DenseOptimizerConfig, PresetName } from './dense.js';
export { lrFactor, resolveSchedule } from './schedule.js';
export type { LrSchedule, ResolvedSchedule } from './schedule.js';
export { embeddingsFor } from './embeddings.js';
export type { EmbeddingModule, EmbeddingOutput, TablesForOptions } from './embeddings.js';
export { readTrainerCheckpoint, writeTrainerCheckpoint } from './checkpoint.js';
export { RankSplitSource, rankBatchIndices, rankSplit } from './rank-split.js';

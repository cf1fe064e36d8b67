// index.ts — the public API of embshard.
export { EmbeddingCollection } from './collection.js';
export type { ForwardOutput, Gradients, BackwardOptions, BackwardResult, SequenceOutput, FeatureInfo, DeviceForwardOutput, DeviceGradients } from './collection.js';
export type { CollectionConfig, TableConfig, OptimizerConfig, InitConfig } from './config.js';
export type { StorageConfig, DiskStorage, MemoryStorage, CachePolicy } from './storage/config.js';
export type { DiskTableStats } from './storage/stats.js';
export { JaggedBatch } from './batch.js';
export type { JaggedBatchInit } from './batch.js';
export { EmbshardError, ErrorCodes, isEmbshardError } from './errors.js';
export type { ErrorCode } from './errors.js';
export { backends } from './backends.js';
export { DeviceArray } from './device-array.js';
export type { DeviceArrayOptions, DeviceElemType, DeviceHostArray } from './device-array.js';
export type { DType, Pooling, OptimizerType, IdArray } from './binding.js';
// the other layers, also reachable as embshard/plan, embshard/sharded, embshard/train, embshard/data
export { Trainer } from './train/index.js';
export { ShardPlan, planShards } from './plan/index.js';
export { ShardedEmbeddingCollection, createInProcessGroups, createMpiGroup } from './sharded/index.js';
export { HeraldEmbeddingCollection, HeraldScheduler } from './herald/index.js';

// index.ts — the public API of sharded training across ranks (`embshard/sharded`): process groups, the
// sharded collection, table gathers and resharding checkpoints.
export { ProcessGroup, createInProcessGroups, createMpiGroup, createNcclGroup, localDevice, mpiAvailable, zeroTraffic } from './group.js';
export type { AllReduceOptions, CollectiveKind, GroupStats, KindStats, CollectiveOptions, GroupOptions, InProcessOptions, NcclOptions, ReduceOp, TrafficCounters, CommArray, CommTime, DeviceBuffer } from './group.js';
export { CommClock } from './comm-clock.js';
export { ShardedEmbeddingCollection, collectionConfigOf } from './sharded.js';
export type { ShardedConfig, ShardedForwardOutput } from './sharded.js';
export { gatherTable, saveSharded, loadSharded } from './reshard.js';

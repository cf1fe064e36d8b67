// types.ts — the planner's public data types: table specs (the EmbeddingCollection table config plus
// planner fields), access statistics, topologies, shards, hot-row tiers and per-rank traffic counters.
import type { DType, OptimizerType, Pooling } from '../binding.js';
import type { DynamicAdmission, DynamicDefault, Eviction } from '../storage/dynamic-config.js';

export type { DType, OptimizerType, Pooling };

/** Embedding cluster of a table (EMBark): replicated, model-parallel reduce-before-send, model-parallel unique-based. */
export type Cluster = 'dp' | 'rb' | 'ub';
export const CLUSTERS: readonly Cluster[] = ['dp', 'rb', 'ub'];

/**
 * How often each row is looked up, in row space (after the table's hot-id remap, when it has `hotIds`).
 * Hot rows are the lowest row ids: Zipf rank k (1-based) is row id k − 1,
 * and row i is drawn with probability F(i + 1) − F(i), F(x) = ((x + 1)^(1−α) − 1) / ((rows + 1)^(1−α) − 1)
 * (the inverse-CDF sampler of NVIDIA's synthetic Criteo generator; α = 0 is uniform, α = 1 uses logs).
 * `top` (from profileAccess) overrides the head: row i < counts.length has probability counts[i] / total,
 * and the remaining mass follows the Zipf shape over rows ≥ counts.length. `tail: 'shuffled'` (what a
 * profile of remapped ids gives): the tail's rows carry the Zipf shape's probabilities in an unknown order,
 * so a row range of the tail holds its share of the tail's rows' mass and of their expected distinct hits.
 */
export interface AccessStats {
  zipf?: number;
  top?: { counts: number[]; total: number };
  /** default 'ordered' (tail row i is tail rank i) */
  tail?: 'ordered' | 'shuffled';
}

/** A table as the EmbeddingCollection config names it, plus what the planner needs to cost it. */
export interface TableSpec {
  name: string;
  rows: number;
  dim: number;
  /** storage dtype (default fp32) */
  dtype?: DType;
  /** default 'sum' */
  pooling?: Pooling;
  /** the features that look this table up (default [name]) */
  features?: string[];
  /** default 'sgd'; decides the optimizer-state bytes */
  optimizer?: OptimizerType;
  /** mean ids per bag, one per feature (default 1 each): the hotness */
  poolingFactors?: number[];
  /** features carry per-id weights (default false) */
  weighted?: boolean;
  /** default uniform */
  access?: AccessStats;
  /**
   * The table's measured hot ids, hottest first (profileAccess): they are stored as rows 0 … K−1, so the
   * hot-row tiers hold them whatever their ids (lib/plan/remap.ts; `access` is then in row space).
   */
  hotIds?: number[];
}

/**
 * A dynamic table as a plan names it (the EmbeddingCollection config's rows: 'dynamic' fields, without
 * spill): keyed by raw 64-bit ids, `capacity` rows held over all its shards, sharded by id hash
 * (docs/storage.md). The planner sizes it by its capacity.
 */
export type DynamicTableSpec = Omit<TableSpec, 'rows' | 'hotIds'> & {
  rows: 'dynamic';
  capacity: number;
  /** sightings before admission (each shard counts the ids it owns) */
  admission?: DynamicAdmission;
  /** 'lru' (default) or 'lfu' */
  eviction?: Eviction;
};

/** Any table spec a plan takes. */
export type PlanTableSpec = TableSpec | DynamicTableSpec;

/** A dynamic table's id-map settings in a plan (every shard applies them to its own ids). */
export interface DynamicPlan {
  /** rows held over all shards (the table's `rows` in the planner's arithmetic) */
  readonly capacity: number;
  readonly minCount: number;
  /** candidate ids tracked over all shards (each shard tracks its share) */
  readonly candidates: number;
  readonly eviction: Eviction;
  /** what ids without a row read: 'zero', or 'hashed' (their init row, computed where the id's shard lives) */
  readonly default: DynamicDefault;
}

/** A validated table spec with every default filled in. */
export interface Table {
  readonly name: string;
  /** rows (a dynamic table: its capacity) */
  readonly rows: number;
  readonly dim: number;
  readonly dtype: DType;
  readonly pooling: Pooling;
  readonly features: readonly string[];
  readonly optimizer: OptimizerType;
  readonly poolingFactors: readonly number[];
  readonly weighted: boolean;
  readonly access: AccessStats;
  /** the hot-id remap's ids (empty: ids are rows) */
  readonly hotIds: readonly number[];
  /** present on dynamic tables (rows: 'dynamic'): ids are raw 64-bit values, rows are placed by id hash */
  readonly dynamic?: DynamicPlan;
}

/** A cluster of ranks: how many, how they group into nodes, and what each rank has. */
export interface Topology {
  /** preset name or 'custom' */
  readonly name: string;
  readonly worldSize: number;
  readonly ranksPerNode: number;
  /** device memory of one rank */
  readonly deviceMemoryBytes: number;
  /** what the planner may fill with embeddings on one rank */
  readonly memoryLimitBytes: number;
  /** per rank, bytes/s */
  readonly hbmBandwidth: number;
  /** per rank and direction, bytes/s */
  readonly intraNodeBandwidth: number;
  /** per rank and direction, bytes/s */
  readonly interNodeBandwidth: number;
}

/** A 3D shard: a row range × column range of one table, placed on one rank. Ranges are half-open. */
export interface Shard {
  readonly table: string;
  readonly rows: readonly [number, number];
  readonly cols: readonly [number, number];
  readonly rank: number;
}

/**
 * FlexShard-style hot-row tiers of an rb / ub table (row counts from the hottest row, i.e. row 0; with
 * `hotIds` row i is the i-th hottest id):
 * rows [0, replicated) live on every rank; rows [replicated, replicated + node) live once per node, row k of
 * the tier on local rank k mod ranksPerNode; the shards tile the remaining rows [replicated + node, rows).
 */
export interface HotTiers {
  readonly replicated: number;
  readonly node: number;
}

/** Wire dtypes of the embedding values (forward) and gradients (backward). */
export interface WireDtypes {
  readonly forward: DType;
  readonly backward: DType;
}

/** Byte counters of one direction of one step (docs/wire-protocol.md §Counters). */
export interface DirectionCounters {
  sentIntra: number;
  sentInter: number;
  recvIntra: number;
  recvInter: number;
  local: number;
}

export interface RankCounters {
  forward: DirectionCounters;
  backward: DirectionCounters;
}

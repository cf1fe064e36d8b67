// config.ts — the user-facing collection config, its defaults, and its translation into the native
// config. Validation here gives EmbshardError codes naming the bad field before any memory is allocated.
import { EmbshardError } from './errors.js';
import { fieldsOf, rejectUnknownFields } from './fields.js';
import { optimizerValues } from './optimizer-values.js';
import type { DType, NativeCollectionConfig, NativeInit, OptimizerType, Pooling } from './binding.js';
import { resolveStorage, type ResolvedStorage, type StorageConfig } from './storage/config.js';
import { dynamicFieldsOf, resolveDynamic, type DynamicTableFields, type ResolvedDynamic } from './storage/dynamic-config.js';

export type InitConfig =
  | { type: 'uniform'; low?: number; high?: number }
  | { type: 'normal'; mean?: number; std?: number }
  | { type: 'constant'; value: number };

export interface TableConfig extends DynamicTableFields {
  name: string;
  /** rows of ids 0 … rows-1, or 'dynamic': any 64-bit id, `capacity` rows held (lib/storage/dynamic-config.ts) */
  rows: number | 'dynamic';
  dim: number;
  /** default 'sum' */
  pooling?: Pooling;
  /** features that look up this table (a shared table has several); default [name] */
  features?: string[];
  /** storage dtype; math is fp32. default 'fp32' */
  dtype?: DType;
  /** out-of-range ids: 'error' (default) or 'modulo' */
  idPolicy?: 'error' | 'modulo';
  /** default uniform ±1/√rows */
  init?: InitConfig;
  /** where rows and optimizer state live: memory (default) or a file with a RAM cache (docs/storage.md) */
  storage?: StorageConfig;
}

export interface OptimizerConfig {
  type: OptimizerType;
  lr: number;
  /** default 1e-8 */
  eps?: number;
  /** adam, default 0.9 */
  beta1?: number;
  /** adam, default 0.999 */
  beta2?: number;
  /** adds wd·w to the gradient of rows in the batch; default 0 */
  weightDecay?: number;
  /** stochastic rounding of fp16/bf16 updates; default false */
  stochasticRounding?: boolean;
  /** NaN/Inf in gradients: 'error' (default, nothing changes) or 'skip' (the step is skipped) */
  nonFinite?: 'error' | 'skip';
}

export interface CollectionConfig {
  tables: TableConfig[];
  /** default { type: 'sgd', lr: 0.01 } */
  optimizer?: OptimizerConfig;
  /** 'cpu' (default) or 'cuda:N' */
  device?: string;
  /** seed of the deterministic initialisation; default 0 */
  seed?: number;
}

/** A table config with every default filled in. */
export type ResolvedTable = Required<Omit<TableConfig, 'init' | 'rows' | 'storage' | keyof DynamicTableFields>> & {
  /** a dynamic table: its capacity */
  rows: number;
  init: InitConfig;
  storage: ResolvedStorage;
  /** present on dynamic tables only */
  dynamic?: ResolvedDynamic;
};
export type ResolvedOptimizer = Required<OptimizerConfig>;

export interface ResolvedConfig {
  tables: ResolvedTable[];
  optimizer: ResolvedOptimizer;
  device: string;
  seed: number;
}

/** The storage dtypes, poolings and optimizers a table can have (the planner validates with the same lists). */
export const DTYPES: readonly DType[] = ['fp32', 'fp16', 'bf16'];
export const POOLINGS: readonly Pooling[] = ['sum', 'mean', 'none'];
export const OPTIMIZERS: readonly OptimizerType[] = ['sgd', 'adagrad', 'rowwise_adagrad', 'adam'];

const COLLECTION_FIELDS = fieldsOf<CollectionConfig>({ tables: true, optimizer: true, device: true, seed: true });
const TABLE_FIELDS = fieldsOf<TableConfig>({
  name: true, rows: true, dim: true, pooling: true, features: true, dtype: true, idPolicy: true, init: true, storage: true, capacity: true, admission: true, eviction: true, spill: true,
});
const OPTIMIZER_FIELDS = fieldsOf<OptimizerConfig>({
  type: true, lr: true, eps: true, beta1: true, beta2: true, weightDecay: true, stochasticRounding: true, nonFinite: true,
});
const INIT_FIELDS: Record<InitConfig['type'], readonly string[]> = {
  uniform: fieldsOf<Extract<InitConfig, { type: 'uniform' }>>({ type: true, low: true, high: true }),
  normal: fieldsOf<Extract<InitConfig, { type: 'normal' }>>({ type: true, mean: true, std: true }),
  constant: fieldsOf<Extract<InitConfig, { type: 'constant' }>>({ type: true, value: true }),
};

function bad(code: 'INVALID_CONFIG' | 'INVALID_SIZE', msg: string): never {
  throw new EmbshardError(code, msg);
}

export function resolveConfig(config: CollectionConfig): ResolvedConfig {
  if (typeof config !== 'object' || config === null) bad('INVALID_CONFIG', 'the collection config must be an object');
  rejectUnknownFields(config, COLLECTION_FIELDS);
  if (!Array.isArray(config.tables) || config.tables.length === 0) bad('INVALID_CONFIG', 'tables must be a non-empty array');
  const names = new Set<string>();
  const featureOwner = new Map<string, string>();
  const tables = config.tables.map((t, i): ResolvedTable => {
    const where = `tables[${i}]`;
    if (typeof t !== 'object' || t === null) bad('INVALID_CONFIG', `${where} must be an object`);
    rejectUnknownFields(t, TABLE_FIELDS, where);
    if (typeof t.name !== 'string' || t.name.length === 0) bad('INVALID_CONFIG', `${where}.name must be a non-empty string`);
    if (names.has(t.name)) bad('INVALID_CONFIG', `two tables are named '${t.name}'`);
    names.add(t.name);
    const dynamic = resolveDynamic(t, where, t.name);
    const rows = dynamic ? dynamic.capacity : t.rows;
    if (typeof rows !== 'number' || !Number.isSafeInteger(rows) || rows < 1 || rows > 2 ** 40)
      bad('INVALID_SIZE', `table '${t.name}': rows must be an integer in [1, 2^40] or 'dynamic' (got ${String(t.rows)})`);
    if (!Number.isSafeInteger(t.dim) || t.dim < 1 || t.dim > 65536)
      bad('INVALID_SIZE', `table '${t.name}': dim must be an integer in [1, 65536] (got ${t.dim})`);
    const dtype = t.dtype ?? 'fp32';
    if (!DTYPES.includes(dtype))
      throw new EmbshardError('UNSUPPORTED_DTYPE', `table '${t.name}': dtype '${String(dtype)}' is not fp32 | fp16 | bf16`);
    const pooling = t.pooling ?? 'sum';
    if (!POOLINGS.includes(pooling)) bad('INVALID_CONFIG', `table '${t.name}': pooling must be sum | mean | none`);
    const idPolicy = t.idPolicy ?? 'error';
    if (idPolicy !== 'error' && idPolicy !== 'modulo') bad('INVALID_CONFIG', `table '${t.name}': idPolicy must be 'error' or 'modulo'`);
    if (dynamic && idPolicy !== 'error') bad('INVALID_CONFIG', `${where}.idPolicy: table '${t.name}' is dynamic: every 64-bit id is valid, idPolicy does not apply`);
    const features = t.features ?? [t.name];
    if (!Array.isArray(features) || features.length === 0 || features.some((f) => typeof f !== 'string' || f.length === 0))
      bad('INVALID_CONFIG', `table '${t.name}': features must be a non-empty array of names`);
    for (const f of features) {
      const prev = featureOwner.get(f);
      if (prev !== undefined)
        throw new EmbshardError(
          'DUPLICATE_FEATURE',
          prev === t.name ? `feature '${f}' is listed twice for table '${t.name}'` : `feature '${f}' is mapped to two tables: '${prev}' and '${t.name}'`,
        );
      featureOwner.set(f, t.name);
    }
    const bound = 1 / Math.sqrt(rows);
    const init: InitConfig = t.init ?? { type: 'uniform', low: -bound, high: bound };
    if (typeof init !== 'object' || init === null || !Object.hasOwn(INIT_FIELDS, init.type))
      bad('INVALID_CONFIG', `table '${t.name}': init.type must be uniform | normal | constant`);
    rejectUnknownFields(init, INIT_FIELDS[init.type], `${where}.init`);
    const storage = resolveStorage(t.storage, where);
    if (dynamic && storage.kind === 'disk')
      bad('INVALID_CONFIG', `${where}.storage: table '${t.name}' is dynamic; its rows live in memory (disk storage takes tables with numeric rows)`);
    return { name: t.name, rows, dim: t.dim, pooling, features: [...features], dtype, idPolicy, init, storage, ...(dynamic ? { dynamic } : {}) };
  });
  const o = config.optimizer ?? { type: 'sgd', lr: 0.01 };
  rejectUnknownFields(o, OPTIMIZER_FIELDS, 'optimizer'); // also: an object at all
  if (!OPTIMIZERS.includes(o.type))
    throw new EmbshardError('UNSUPPORTED_OPTIMIZER', `optimizer '${String(o.type)}' is not sgd | adagrad | rowwise_adagrad | adam`);
  const optimizer: ResolvedOptimizer = {
    type: o.type,
    ...optimizerValues(o, 'optimizer'),
    stochasticRounding: o.stochasticRounding ?? false,
    nonFinite: o.nonFinite ?? 'error',
  };
  if (o.stochasticRounding !== undefined && typeof o.stochasticRounding !== 'boolean')
    bad('INVALID_CONFIG', `optimizer.stochasticRounding must be a boolean (got ${String(o.stochasticRounding)})`);
  if (optimizer.nonFinite !== 'error' && optimizer.nonFinite !== 'skip') bad('INVALID_CONFIG', "optimizer.nonFinite must be 'error' or 'skip'");
  if (optimizer.stochasticRounding && tables.some((t) => t.storage.kind === 'disk'))
    bad('INVALID_CONFIG', "optimizer.stochasticRounding is not supported with disk-backed tables (storage.kind 'disk')");
  const device = config.device ?? 'cpu';
  if (typeof device !== 'string') bad('INVALID_CONFIG', 'device must be a string');
  const seed = config.seed ?? 0;
  if (!Number.isSafeInteger(seed) || seed < 0) bad('INVALID_CONFIG', 'seed must be a non-negative integer');
  return { tables, optimizer, device, seed };
}

export function nativeInit(init: InitConfig, rows: number): NativeInit {
  const bound = 1 / Math.sqrt(rows);
  switch (init.type) {
    case 'uniform':
      return { kind: 'uniform', a: init.low ?? -bound, b: init.high ?? bound };
    case 'normal':
      return { kind: 'normal', a: init.mean ?? 0, b: init.std ?? bound };
    case 'constant':
      return { kind: 'constant', a: init.value, b: 0 };
  }
}

export function toNativeConfig(c: ResolvedConfig, initialize: boolean): NativeCollectionConfig {
  const features = c.tables.flatMap((t, i) => t.features.map((name) => ({ name, table: i, pooling: t.pooling })));
  return {
    // a dynamic table's slot table has one more row: the sink (see lib/storage/dynamic.ts)
    tables: c.tables.map((t) => ({ name: t.name, rows: t.dynamic ? t.rows + 1 : t.rows, dim: t.dim, dtype: t.dtype, idPolicy: t.idPolicy, init: nativeInit(t.init, t.rows) })),
    features,
    optimizer: { ...c.optimizer },
    seed: c.seed,
    initialize,
  };
}

/** The config that builds `c` again (a checkpoint keeps the resolved form; a dynamic table's is rows: 'dynamic'). */
export function configOf(c: ResolvedConfig): CollectionConfig {
  return { ...c, tables: c.tables.map(({ dynamic, ...t }) => (dynamic ? { ...t, ...dynamicFieldsOf(dynamic) } : t)) };
}

/** Optimizer-state floats per row (0 sgd, dim adagrad, 1 rowwise_adagrad, 2·dim adam). */
export function stateWidth(opt: OptimizerType, dim: number): number {
  return opt === 'sgd' ? 0 : opt === 'adagrad' ? dim : opt === 'rowwise_adagrad' ? 1 : 2 * dim;
}

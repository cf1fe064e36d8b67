// tables.ts — validates planner table specs and fills their defaults; derived per-table sizes (bytes per
// row, optimizer state, ids per sample) used by the cost model, the traffic counter and the memory check.
import { EmbshardError, type ErrorCode } from '../errors.js';
import { DTYPES, OPTIMIZERS, POOLINGS } from '../config.js';
import { rejectUnknownFields } from '../fields.js';
import { DTYPE_BYTES, OPTIMIZER_STATE } from './constants.js';
import { IdRemap } from './remap.js';
import { shown } from '../shown.js';
import { resolveDynamic } from '../storage/dynamic-config.js';
import { DYNAMIC_MAP_ROW_BYTES } from './constants.js';
import type { AccessStats, DynamicPlan, Table, TableSpec } from './types.js';


function bad(code: ErrorCode, path: string, msg: string): never {
  throw new EmbshardError(code, `${path}: ${msg}`, { path });
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Validates access statistics; `path` names the field in errors. */
export function normalizeAccess(v: unknown, path: string, code: ErrorCode = 'INVALID_CONFIG'): AccessStats {
  if (v === undefined) return {};
  if (!isObject(v)) bad(code, path, 'must be an object { zipf?, top?, tail? }');
  const out: AccessStats = {};
  if (v.zipf !== undefined) {
    if (typeof v.zipf !== 'number' || !Number.isFinite(v.zipf) || v.zipf < 0 || v.zipf > 10)
      bad(code, `${path}.zipf`, `must be a number in [0, 10] (got ${shown(v.zipf)})`);
    out.zipf = v.zipf;
  }
  if (v.top !== undefined) {
    const t = v.top;
    if (!isObject(t)) bad(code, `${path}.top`, 'must be an object { counts, total }');
    rejectUnknownFields(t, ['counts', 'total'], `${path}.top`, code);
    if (!Array.isArray(t.counts) || t.counts.some((c) => typeof c !== 'number' || !Number.isFinite(c) || c < 0))
      bad(code, `${path}.top.counts`, 'must be an array of non-negative numbers');
    const counts = t.counts as number[];
    const sum = counts.reduce((a, b) => a + b, 0);
    if (typeof t.total !== 'number' || !Number.isFinite(t.total) || t.total <= 0 || t.total < sum * (1 - 1e-9))
      bad(code, `${path}.top.total`, `must be a positive number ≥ the sum of counts (${sum}; counts may be fractional, as a profile smooths small ones)`);
    out.top = { counts: [...counts], total: t.total };
  }
  if (v.tail !== undefined) {
    if (v.tail !== 'ordered' && v.tail !== 'shuffled') bad(code, `${path}.tail`, `must be 'ordered' | 'shuffled' (got ${shown(v.tail)})`);
    out.tail = v.tail;
  }
  rejectUnknownFields(v, ['zipf', 'top', 'tail'], path, code);
  return out;
}

/**
 * Validates one table spec (JSON-like input) and returns it with defaults filled in. Errors are
 * EmbshardError INVALID_CONFIG (UNSUPPORTED_DTYPE / UNSUPPORTED_OPTIMIZER for those fields) naming the field
 * as `path.field`.
 */
export function normalizeTable(input: unknown, path = 'table', code: ErrorCode = 'INVALID_CONFIG'): Table {
  if (!isObject(input)) bad(code, path, 'must be an object');
  let v: Record<string, unknown> = input;
  if (typeof v.name !== 'string' || v.name.length === 0) bad(code, `${path}.name`, 'must be a non-empty string');
  const name = v.name;
  const dynamic = dynamicOf(v, path, name, code);
  if (dynamic) {
    const { capacity: _c, admission: _a, eviction: _e, dynamic: _d, ...rest } = v;
    v = { ...rest, rows: dynamic.capacity };
  }
  if (!Number.isSafeInteger(v.rows) || (v.rows as number) <= 0)
    bad(code, `${path}.rows`, `must be a positive integer or 'dynamic' (got ${shown(v.rows)})`);
  if (!Number.isSafeInteger(v.dim) || (v.dim as number) <= 0 || (v.dim as number) > 65536)
    bad(code, `${path}.dim`, `must be an integer in [1, 65536] (got ${shown(v.dim)})`);
  const dtype = v.dtype ?? 'fp32';
  if (!DTYPES.includes(dtype as never))
    bad(code === 'INVALID_CONFIG' ? 'UNSUPPORTED_DTYPE' : code, `${path}.dtype`, `must be one of ${DTYPES.join(' | ')} (got ${shown(dtype)})`);
  const pooling = v.pooling ?? 'sum';
  if (!POOLINGS.includes(pooling as never)) bad(code, `${path}.pooling`, `must be one of ${POOLINGS.join(' | ')} (got ${shown(pooling)})`);
  const optimizer = v.optimizer ?? 'sgd';
  if (!OPTIMIZERS.includes(optimizer as never))
    bad(code === 'INVALID_CONFIG' ? 'UNSUPPORTED_OPTIMIZER' : code, `${path}.optimizer`, `must be one of ${OPTIMIZERS.join(' | ')} (got ${shown(optimizer)})`);
  const features = v.features ?? [name];
  if (!Array.isArray(features) || features.length === 0 || features.some((f) => typeof f !== 'string' || f.length === 0))
    bad(code, `${path}.features`, 'must be a non-empty array of non-empty strings');
  if (new Set(features).size !== features.length) bad(code, `${path}.features`, 'lists a feature twice');
  const pf = v.poolingFactors ?? features.map(() => 1);
  if (!Array.isArray(pf) || pf.length !== features.length)
    bad(code, `${path}.poolingFactors`, `must be an array with one entry per feature (${features.length})`);
  pf.forEach((p, i) => {
    if (typeof p !== 'number' || !Number.isFinite(p) || p < 0) bad(code, `${path}.poolingFactors[${i}]`, `must be a number ≥ 0 (got ${shown(p)})`);
  });
  if (v.weighted !== undefined && typeof v.weighted !== 'boolean') bad(code, `${path}.weighted`, 'must be a boolean');
  let access = normalizeAccess(v.access, `${path}.access`, code);
  if (dynamic) {
    // ids land on rows by hash: a row range holds its share of the ids whatever their skew ('shuffled')
    if (access.top) bad(code, `${path}.access.top`, `table '${name}' is dynamic: its rows are placed by id hash, so there are no hot rows to count`);
    if (access.tail === 'ordered') bad(code, `${path}.access.tail`, `table '${name}' is dynamic: its ids land on rows by hash ('shuffled')`);
    access = { ...access, tail: 'shuffled' };
    if (v.hotIds !== undefined && !(Array.isArray(v.hotIds) && v.hotIds.length === 0)) bad(code, `${path}.hotIds`, `table '${name}' is dynamic: a hot-id remap needs ids that are rows`);
  }
  if (access.top && access.top.counts.length > (v.rows as number)) bad(code, `${path}.access.top.counts`, 'has more entries than the table has rows');
  const hotIds = v.hotIds === undefined ? [] : new IdRemap(v.rows as number, v.hotIds as number[], `${path}.hotIds`, code).hot;
  const known = ['name', 'rows', 'dim', 'dtype', 'pooling', 'features', 'optimizer', 'poolingFactors', 'weighted', 'access', 'hotIds'];
  rejectUnknownFields(v, known, path, code);
  return Object.freeze({
    ...(dynamic ? { dynamic } : {}),
    name,
    rows: v.rows as number,
    dim: v.dim as number,
    dtype: dtype as Table['dtype'],
    pooling: pooling as Table['pooling'],
    features: Object.freeze([...(features as string[])]),
    optimizer: optimizer as Table['optimizer'],
    poolingFactors: Object.freeze([...(pf as number[])]),
    weighted: (v.weighted as boolean | undefined) ?? false,
    access,
    hotIds,
  });
}

const DYNAMIC_SPEC_FIELDS = ['capacity', 'admission', 'eviction'];

/** The dynamic settings of a spec with rows: 'dynamic' (its fields validated as a collection's; no spill), else undefined. */
function dynamicOf(v: Record<string, unknown>, path: string, name: string, code: ErrorCode): DynamicPlan | undefined {
  if (v.rows !== 'dynamic' && v.dynamic !== undefined) {
    // an already validated Table (its rows are the capacity): its settings checked again as a spec's
    const d = v.dynamic as Record<string, unknown>;
    if (!isObject(d)) bad(code, `${path}.dynamic`, 'must be an object { capacity, minCount, candidates, eviction, default }');
    rejectUnknownFields(d, ['capacity', 'minCount', 'candidates', 'eviction', 'default'], `${path}.dynamic`, code);
    if (d.capacity !== v.rows) bad(code, `${path}.dynamic.capacity`, `must equal rows (${shown(v.rows)})`);
    return dynamicOf({ name, rows: 'dynamic', capacity: d.capacity, admission: { minCount: d.minCount, candidates: d.candidates, default: d.default }, eviction: d.eviction }, path, name, code);
  }
  if (v.rows !== 'dynamic') {
    for (const k of DYNAMIC_SPEC_FIELDS) if (Object.hasOwn(v, k)) bad(code, `${path}.${k}`, `table '${name}' has ${k} only with rows: 'dynamic'`);
    return undefined;
  }
  if (Object.hasOwn(v, 'spill')) bad(code, `${path}.spill`, `table '${name}': where a dynamic table's shards spill is the sharded collection's setting (ShardedConfig.spill), not the plan's`);
  let d;
  try {
    d = resolveDynamic(v as { rows: unknown }, path, name)!;
  } catch (e) {
    if (!(e instanceof EmbshardError) || code === e.code) throw e;
    const field = typeof e.details?.path === 'string' ? e.details.path : path;
    throw new EmbshardError(code, e.message, { path: field });
  }
  return Object.freeze({ capacity: d.capacity, minCount: d.minCount, candidates: d.candidates, eviction: d.eviction, default: d.default });
}

/** Validates a list of table specs: unique table names, each feature mapped to one table. */
export function normalizeTables(v: unknown, path = 'tables', code: ErrorCode = 'INVALID_CONFIG'): Table[] {
  if (!Array.isArray(v) || v.length === 0) bad(code, path, 'must be a non-empty array of tables');
  const tables = v.map((t, i) => normalizeTable(t, `${path}[${i}]`, code));
  const names = new Set<string>();
  const feats = new Map<string, string>();
  tables.forEach((t, i) => {
    if (names.has(t.name)) bad(code, `${path}[${i}].name`, `table name '${t.name}' is used twice`);
    names.add(t.name);
    t.features.forEach((f, j) => {
      const other = feats.get(f);
      if (other !== undefined)
        bad(code === 'INVALID_CONFIG' ? 'DUPLICATE_FEATURE' : code, `${path}[${i}].features[${j}]`, `feature '${f}' already maps to table '${other}'`);
      feats.set(f, t.name);
    });
  });
  return tables;
}

/** Bytes of one table element. */
export function elemBytes(t: Table): number {
  return DTYPE_BYTES[t.dtype];
}

/** Bytes one row slice `cols` wide takes on a rank, optimizer state included. */
export function rowBytes(t: Table, cols: number): number {
  const s = OPTIMIZER_STATE[t.optimizer];
  return cols * (DTYPE_BYTES[t.dtype] + s.perElement) + s.perRow;
}

/** HBM bytes of one row update (read + write of the row slice and its optimizer state). */
export function rowUpdateBytes(t: Table, cols: number): number {
  return 2 * rowBytes(t, cols);
}

/** Memory one row slice `cols` wide takes on a rank: rowBytes plus, for a dynamic table, its id map's share. */
export function heldRowBytes(t: Table, cols: number): number {
  return rowBytes(t, cols) + (t.dynamic ? DYNAMIC_MAP_ROW_BYTES : 0);
}

/** Whole-table bytes with optimizer state (and a dynamic table's id map). */
export function tableBytes(t: Table): number {
  return t.rows * heldRowBytes(t, t.dim);
}

/** Mean ids per sample, over all features of the table. */
export function idsPerSample(t: Table): number {
  let s = 0;
  for (const p of t.poolingFactors) s += p;
  return s;
}

// dynamic-config.ts — the config of a dynamic table (`rows: 'dynamic'`, keyed by raw 64-bit ids): its
// fields, their validation (INVALID_CONFIG / INVALID_SIZE naming the field, before anything is built) and
// the resolved form a collection and its checkpoints keep.
import { EmbshardError } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { shown } from '../shown.js';

export type Eviction = 'lru' | 'lfu';

/** What ids without a row read: zero, or their own init row (a pure function of seed, table and id). */
export type DynamicDefault = 'zero' | 'hashed';

export interface DynamicAdmission {
  /** sightings before an id gets a row; default 1 (admitted at first sight) */
  minCount?: number;
  /** candidate ids whose sightings are counted (the one seen longest ago is forgotten first); default capacity */
  candidates?: number;
  /**
   * What an id without a row (not yet admitted, or not admitted because every row was in use) reads:
   * 'zero' (default) or 'hashed', the init row it gets when admitted (so its value does not jump then).
   * Either way it receives no update.
   */
  default?: DynamicDefault;
}

/** The fields a table config has only when `rows` is 'dynamic'. */
export interface DynamicTableFields {
  /** rows held in memory (with their optimizer state) */
  capacity?: number;
  admission?: DynamicAdmission;
  /** which row makes room when the table is full: 'lru' (default) or 'lfu' */
  eviction?: Eviction;
  /** evicted rows (values and optimizer state) go to a spill file in this folder and come back on re-admission */
  spill?: DynamicSpill;
}

export interface DynamicSpill {
  /** an existing, writable folder: the spill file `spill-<table index>.bin` is created (truncated) in it */
  path: string;
}

export interface ResolvedDynamic {
  capacity: number;
  minCount: number;
  candidates: number;
  default: DynamicDefault;
  eviction: Eviction;
  spill?: DynamicSpill;
}

/** The most rows a dynamic table can hold (slots are 32-bit; one more is the sink). */
export const MAX_DYNAMIC_CAPACITY = 2 ** 31 - 2;

const DYNAMIC_KEYS = fieldsOf<DynamicTableFields>({ capacity: true, admission: true, eviction: true, spill: true });
const SPILL_FIELDS = fieldsOf<DynamicSpill>({ path: true });
const ADMISSION_FIELDS = fieldsOf<DynamicAdmission>({ minCount: true, candidates: true, default: true });

function bad(code: 'INVALID_CONFIG' | 'INVALID_SIZE', msg: string, path: string): never {
  throw new EmbshardError(code, msg, { path });
}

/**
 * Checks the dynamic fields of table config `t` (at `where`, named `name`): with `rows: 'dynamic'` returns
 * them resolved; with a numeric `rows` rejects any of them; undefined for a plain table.
 */
export function resolveDynamic(t: { rows: unknown } & DynamicTableFields, where: string, name: string): ResolvedDynamic | undefined {
  if (t.rows !== 'dynamic') {
    for (const k of DYNAMIC_KEYS)
      if (Object.hasOwn(t, k)) bad('INVALID_CONFIG', `${where}.${k}: table '${name}' has ${k} only with rows: 'dynamic'`, `${where}.${k}`);
    return undefined;
  }
  const c = t.capacity;
  if (c === undefined) bad('INVALID_CONFIG', `${where}.capacity: table '${name}' is dynamic and needs a capacity (rows held in memory)`, `${where}.capacity`);
  if (!Number.isSafeInteger(c) || c < 1 || c > MAX_DYNAMIC_CAPACITY)
    bad('INVALID_SIZE', `${where}.capacity: table '${name}': capacity must be an integer in [1, 2^31 - 2] (got ${shown(c)})`, `${where}.capacity`);
  const a = t.admission ?? { minCount: 1 };
  if (typeof a !== 'object' || a === null) bad('INVALID_CONFIG', `${where}.admission must be an object`, `${where}.admission`);
  rejectUnknownFields(a, ADMISSION_FIELDS, `${where}.admission`);
  const minCount = a.minCount ?? 1;
  if (!Number.isSafeInteger(minCount) || minCount < 1 || minCount > 2 ** 31 - 1)
    bad('INVALID_CONFIG', `${where}.admission.minCount must be an integer >= 1 (got ${shown(a.minCount)})`, `${where}.admission.minCount`);
  const candidates = a.candidates ?? c;
  if (!Number.isSafeInteger(candidates) || candidates < 1 || candidates > MAX_DYNAMIC_CAPACITY)
    bad('INVALID_CONFIG', `${where}.admission.candidates must be an integer in [1, 2^31 - 2] (got ${shown(candidates)})`, `${where}.admission.candidates`);
  const def = a.default ?? 'zero';
  if (def !== 'zero' && def !== 'hashed') bad('INVALID_CONFIG', `${where}.admission.default must be 'zero' or 'hashed' (got ${shown(def)})`, `${where}.admission.default`);
  const eviction = t.eviction ?? 'lru';
  if (eviction !== 'lru' && eviction !== 'lfu') bad('INVALID_CONFIG', `${where}.eviction must be 'lru' or 'lfu' (got ${shown(eviction)})`, `${where}.eviction`);
  const sp = t.spill === undefined ? undefined : resolveSpill(t.spill, `${where}.spill`);
  return { capacity: c, minCount, candidates, default: def, eviction, ...(sp ? { spill: sp } : {}) };
}

/** Checks a `spill` field at `where` (a table's, or a sharded collection's): an object { path } naming a folder. */
export function resolveSpill(sp: unknown, where: string): DynamicSpill {
  if (typeof sp !== 'object' || sp === null) bad('INVALID_CONFIG', `${where} must be an object { path }`, where);
  rejectUnknownFields(sp, SPILL_FIELDS, where);
  const path = (sp as { path?: unknown }).path;
  if (typeof path !== 'string' || path === '') bad('INVALID_CONFIG', `${where}.path must be a non-empty string (a folder)`, `${where}.path`);
  return { path };
}

/** The table-config fields that rebuild a resolved dynamic table (checkpoints keep the resolved form). */
export function dynamicFieldsOf(d: ResolvedDynamic): { rows: 'dynamic' } & Required<Omit<DynamicTableFields, 'spill'>> & Pick<DynamicTableFields, 'spill'> {
  return { rows: 'dynamic', capacity: d.capacity, admission: { minCount: d.minCount, candidates: d.candidates, default: d.default ?? 'zero' }, eviction: d.eviction, ...(d.spill ? { spill: d.spill } : {}) };
}

/** The same tables with every spilling dynamic table's spill folder replaced by `path` (loading a checkpoint elsewhere). */
export function withSpillPath<T extends { dynamic?: ResolvedDynamic }>(tables: readonly T[], path: string): T[] {
  if (typeof path !== 'string' || path === '') throw new EmbshardError('INVALID_ARGUMENT', 'options.spillPath must be a non-empty string (a folder)');
  return tables.map((t) => (t.dynamic?.spill ? { ...t, dynamic: { ...t.dynamic, spill: { path } } } : t));
}

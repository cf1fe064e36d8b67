// storage/config.ts — where a table lives: `{ kind: 'memory' }` (default) or `{ kind: 'disk', path,
// cacheBytes, policy }` (rows and optimizer state in a file under `path`, a RAM cache of at most
// `cacheBytes`). Validation (INVALID_CONFIG naming the field) and the native storage argument.
import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { EmbshardError } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';

export type CachePolicy = 'lru' | 'lfu';

export interface MemoryStorage {
  kind: 'memory';
}

export interface DiskStorage {
  kind: 'disk';
  /** folder of the table files (created if missing); each disk-backed table has `<path>/<table>.embtable` */
  path: string;
  /** bytes of RAM for the table's cache: rows, optimizer state and 32 bytes of bookkeeping per slot */
  cacheBytes: number;
  /** eviction policy of the set-associative cache; default 'lru' */
  policy?: CachePolicy;
}

export type StorageConfig = MemoryStorage | DiskStorage;
export type ResolvedStorage = MemoryStorage | Required<DiskStorage>;

/** What the native engine takes per table: null (memory) or the table file and cache settings. */
export type NativeStorage = { file: string; cacheBytes: number; policy: CachePolicy } | null;

const MEMORY_FIELDS = fieldsOf<MemoryStorage>({ kind: true });
const DISK_FIELDS = fieldsOf<DiskStorage>({ kind: true, path: true, cacheBytes: true, policy: true });

function bad(msg: string): never {
  throw new EmbshardError('INVALID_CONFIG', msg);
}

/** Validates a table's `storage` field (`where` names the table, e.g. `tables[2]`). */
export function resolveStorage(s: StorageConfig | undefined, where: string): ResolvedStorage {
  if (s === undefined) return { kind: 'memory' };
  if (typeof s !== 'object' || s === null) bad(`${where}.storage must be an object`);
  if (s.kind === 'memory') {
    rejectUnknownFields(s, MEMORY_FIELDS, `${where}.storage`);
    return { kind: 'memory' };
  }
  if (s.kind !== 'disk') bad(`${where}.storage.kind must be 'memory' or 'disk'`);
  rejectUnknownFields(s, DISK_FIELDS, `${where}.storage`);
  if (typeof s.path !== 'string' || s.path.length === 0) bad(`${where}.storage.path must be a non-empty string`);
  if (!Number.isSafeInteger(s.cacheBytes) || s.cacheBytes < 1) bad(`${where}.storage.cacheBytes must be a positive integer`);
  const policy = s.policy ?? 'lru';
  if (policy !== 'lru' && policy !== 'lfu') bad(`${where}.storage.policy must be 'lru' or 'lfu'`);
  return { kind: 'disk', path: resolve(s.path), cacheBytes: s.cacheBytes, policy };
}

/** The file of a disk-backed table (its name made safe as a file name). */
export function tableFile(dir: string, table: string): string {
  return join(dir, `${encodeURIComponent(table)}.embtable`);
}

/** The native storage argument: one entry per table, or undefined when every table is in memory. */
export function nativeStorage(tables: readonly { name: string; storage: ResolvedStorage }[]): NativeStorage[] | undefined {
  if (!tables.some((t) => t.storage.kind === 'disk')) return undefined;
  return tables.map((t) =>
    t.storage.kind === 'disk' ? { file: tableFile(t.storage.path, t.name), cacheBytes: t.storage.cacheBytes, policy: t.storage.policy } : null,
  );
}

/** Creates the folders of the disk-backed tables; IO_ERROR naming storage.path when one cannot be made. */
export function makeStorageDirs(tables: readonly { name: string; storage: ResolvedStorage }[]): void {
  for (const t of tables) {
    if (t.storage.kind !== 'disk') continue;
    try {
      mkdirSync(t.storage.path, { recursive: true });
    } catch (e) {
      throw new EmbshardError('IO_ERROR', `table '${t.name}': storage.path '${t.storage.path}' cannot be created: ${(e as Error).message}`);
    }
  }
}

/** The same tables with every disk-backed table's folder replaced by `path` (loading a checkpoint elsewhere). */
export function withStoragePath<T extends { storage: ResolvedStorage }>(tables: readonly T[], path: string): T[] {
  return tables.map((t) => (t.storage.kind === 'disk' ? { ...t, storage: { ...t.storage, path: resolve(path) } } : t));
}

// fields.ts — the one check that a config object holds only fields its reader knows. Every config of the
// public API (collection, table, optimizer, Trainer, data sources, groups, planner options, plan files)
// calls it, so a typo (`tables[0].poolng`) or an unsupported option (`optimizer.momentum`) is an error
// naming the field instead of a setting that silently vanishes.
import { EmbshardError, type ErrorCode } from './errors.js';

/**
 * The field names of config type `T`, written as `{ field: true, … }`: the compiler rejects a list that
 * misses a field of `T` or names one `T` does not have, so the list cannot drift from the type.
 */
export function fieldsOf<T>(fields: { readonly [K in keyof Required<T>]: true }): readonly string[] {
  return Object.freeze(Object.keys(fields));
}

/**
 * Throws `code` (INVALID_CONFIG by default) naming the first own field of `o` that is not in `known`, or
 * when `o` is not an object at all; `path` is where `o` sits in the caller's config (`tables[0]`,
 * `optimizer`; '' for the root).
 */
export function rejectUnknownFields(o: object, known: readonly string[], path = '', code: ErrorCode = 'INVALID_CONFIG'): void {
  if (typeof o !== 'object' || o === null || Array.isArray(o))
    throw new EmbshardError(code, `${path === '' ? 'the config' : path} must be an object (got ${o === null ? 'null' : Array.isArray(o) ? 'an array' : typeof o})`, { path });
  for (const k of Object.keys(o)) {
    if (known.includes(k)) continue;
    const field = path === '' ? k : `${path}.${k}`;
    throw new EmbshardError(code, `${field}: unknown field (known: ${known.join(', ')})`, { path: field });
  }
}

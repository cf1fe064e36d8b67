// inputs.ts — what a trained model expects as input, saved with its checkpoint so prediction and serving
// can rebuild requests without the training command line: the sparse feature names in the order the
// model pools them, the dense width, each feature's table rows, and how a raw categorical value (a
// Criteo-style hex string) becomes a row (lib/data/criteo-hash.ts).
import { EmbshardError } from '../errors.js';
import type { CategoricalHash } from '../data/criteo-hash.js';
import type { DenseModelSpec } from './dense.js';
import type { EmbeddingModule } from './embeddings.js';

export interface ModelInputs {
  /** Sparse feature names, in the model's pooled order. */
  sparse: string[];
  /** Dense features per sample. */
  numDense: number;
  /** Rows of each sparse feature's table: ids are in [0, rows). */
  tableRows: number[];
  /** How a raw categorical value becomes a row (Criteo TSV reader's rule). */
  hash: CategoricalHash;
}

const KEYS = new Set(['sparse', 'numDense', 'tableRows', 'hash']);

/**
 * Rows per pooled feature of a module that lists its tables (an EmbeddingCollection); undefined otherwise,
 * and for dynamic tables (rows: 'dynamic'), whose ids are any 64-bit value.
 */
function rowsOf(emb: EmbeddingModule): number[] | undefined {
  const tables = (emb as { tables?: readonly { rows: number; features: readonly string[]; dynamic?: unknown }[] }).tables;
  if (!Array.isArray(tables) || tables.some((t) => t.dynamic)) return undefined;
  return emb.pooledFeatures.map((f) => tables.find((t) => t.features.includes(f))?.rows ?? NaN);
}

/**
 * The inputs of a model: `given` checked against the embeddings and dense spec, or derived from them
 * (modulo hashing) when not given. Undefined when nothing can be derived (a sharded module).
 */
export function resolveInputs(given: ModelInputs | undefined, emb: EmbeddingModule, spec: DenseModelSpec, code: 'INVALID_CONFIG' | 'CHECKPOINT_CORRUPT' = 'INVALID_CONFIG'): ModelInputs | undefined {
  const rows = rowsOf(emb);
  if (given === undefined)
    return rows && rows.every(Number.isSafeInteger) ? { sparse: [...emb.pooledFeatures], numDense: spec.denseIn, tableRows: rows, hash: 'modulo' } : undefined;
  const bad = (msg: string): never => {
    throw new EmbshardError(code, `inputs.${msg}`);
  };
  if (given === null || typeof given !== 'object') bad('inputs must be an object');
  for (const k of Object.keys(given)) if (!KEYS.has(k)) bad(`${k}: unknown field (known: ${[...KEYS].join(', ')})`);
  if (!Array.isArray(given.sparse) || given.sparse.join('\u0000') !== emb.pooledFeatures.join('\u0000'))
    bad(`sparse [${String(given.sparse)}] must be the embeddings' pooled features [${emb.pooledFeatures.join(', ')}] in order`);
  if (given.numDense !== spec.denseIn) bad(`numDense (${String(given.numDense)}) must equal the model's dense input width ${spec.denseIn}`);
  if (!Array.isArray(given.tableRows) || given.tableRows.length !== given.sparse.length || !given.tableRows.every((r) => Number.isSafeInteger(r) && r > 0))
    bad(`tableRows must hold one positive integer per sparse feature`);
  if (rows && rows.some((r, f) => r !== given.tableRows[f])) bad(`tableRows [${given.tableRows.join(', ')}] differ from the tables' rows [${rows.join(', ')}]`);
  if (given.hash !== 'modulo' && given.hash !== 'murmur') bad(`hash must be 'modulo' or 'murmur' (got ${String(given.hash)})`);
  return { sparse: [...given.sparse], numDense: given.numDense, tableRows: [...given.tableRows], hash: given.hash };
}

// helpers.ts — builds a native EmbeddingCollection and the naive Oracle over the same initial tables,
// and random jagged batches (empty bags, duplicate ids within and across bags, optional weights); bit-exact
// comparison of arrays and the code of a typed error, shared by the CPU and CUDA suites.
import { expect } from 'vitest';
import { EmbeddingCollection, EmbshardError, JaggedBatch } from '../../lib/index.js';
import type { CollectionConfig, TableConfig, OptimizerConfig } from '../../lib/index.js';
import { Oracle, type OBatch, type OFeature, type OTable } from './oracle.js';

export function pair(tables: TableConfig[], optimizer: OptimizerConfig, seed = 7, device = 'cpu'): { ec: EmbeddingCollection; oracle: Oracle } {
  const config: CollectionConfig = { tables, optimizer, seed, device };
  const ec = new EmbeddingCollection(config);
  const otables: OTable[] = tables.map((t) => {
    const all = BigInt64Array.from({ length: t.rows }, (_, i) => BigInt(i));
    const w = Float64Array.from(ec.readRows(t.name, all));
    const nState = optimizer.type === 'adam' ? 2 : optimizer.type === 'sgd' ? 0 : 1;
    const per = optimizer.type === 'rowwise_adagrad' ? t.rows : t.rows * t.dim;
    return { rows: t.rows, dim: t.dim, dtype: t.dtype ?? 'fp32', w, state: Array.from({ length: nState }, () => new Float64Array(per)) };
  });
  const features: OFeature[] = [];
  tables.forEach((t, i) => (t.features ?? [t.name]).forEach((name) => features.push({ name, table: i, pooling: t.pooling ?? 'sum' })));
  const o = ec.config.optimizer;
  return { ec, oracle: new Oracle(otables, features, { type: o.type, lr: Math.fround(o.lr), eps: Math.fround(o.eps), beta1: Math.fround(o.beta1), beta2: Math.fround(o.beta2), weightDecay: Math.fround(o.weightDecay) }) };
}

export interface RandomBatchOptions {
  B: number;
  maxLen: number;
  weights?: boolean;
  idType?: 'i64' | 'i32' | 'u32';
  /** shuffle the feature order of the batch */
  shuffle?: boolean;
}

/** A random batch over all features of the collection; ids drawn from a small range so duplicates occur. */
export function randomBatch(ec: EmbeddingCollection, r: () => number, opt: RandomBatchOptions): { batch: JaggedBatch; ob: OBatch } {
  const feats = ec.featureInfo.map((f) => f.name);
  if (opt.shuffle) feats.sort(() => r() - 0.5);
  const B = opt.B;
  const lengths = new Int32Array(feats.length * B);
  const ids: number[] = [];
  for (let s = 0; s < feats.length; s++) {
    const table = ec.tables.find((t) => t.name === ec.featureInfo.find((f) => f.name === feats[s])!.table)!;
    const hot = Math.max(1, Math.min(table.rows, 5));
    for (let b = 0; b < B; b++) {
      const len = Math.floor(r() * (opt.maxLen + 1)); // 0 .. maxLen: empty bags occur
      lengths[s * B + b] = len;
      for (let k = 0; k < len; k++) ids.push(r() < 0.5 ? Math.floor(r() * hot) : Math.floor(r() * table.rows));
    }
  }
  const weights = opt.weights ? Float32Array.from(ids, () => Math.fround(r() * 2 - 0.5)) : undefined;
  const idArr =
    opt.idType === 'i32' ? Int32Array.from(ids) : opt.idType === 'u32' ? Uint32Array.from(ids) : BigInt64Array.from(ids, (x) => BigInt(x));
  const batch = JaggedBatch.fromLengths({ features: feats, batchSize: B, lengths, ids: idArr, weights });
  return { batch, ob: { B, features: feats, lengths, ids, weights } };
}

export function randomGrads(ec: EmbeddingCollection, ob: OBatch, r: () => number): { pooled: Float32Array; sequences: Record<string, Float32Array>; seqMap: Map<string, Float32Array> } {
  const pooled = Float32Array.from({ length: ob.B * ec.pooledDim }, () => r() * 2 - 1);
  const sequences: Record<string, Float32Array> = {};
  for (const f of ec.featureInfo) {
    if (f.pooling !== 'none') continue;
    const slot = ob.features.indexOf(f.name);
    let n = 0;
    for (let b = 0; b < ob.B; b++) n += ob.lengths[slot * ob.B + b]!;
    sequences[f.name] = Float32Array.from({ length: n * f.dim }, () => r() * 2 - 1);
  }
  return { pooled, sequences, seqMap: new Map(Object.entries(sequences)) };
}

export function allRows(ec: EmbeddingCollection, table: string): Float32Array {
  const t = ec.tables.find((x) => x.name === table)!;
  return ec.readRows(table, BigInt64Array.from({ length: t.rows }, (_, i) => BigInt(i)));
}

export function snapshot(ec: EmbeddingCollection): Float32Array[] {
  return ec.tables.flatMap((t) => {
    const ids = BigInt64Array.from({ length: t.rows }, (_, i) => BigInt(i));
    return [ec.readRows(t.name, ids), ec.readState(t.name, ids)];
  });
}

/** null when a and b hold the same bits; otherwise where and how they differ. */
export function bitDiff(a: Float32Array, b: Float32Array): string | null {
  if (a.length !== b.length) return `lengths ${a.length} vs ${b.length}`;
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return `index ${i}: ${a[i]} vs ${b[i]}`;
  return null;
}

/** Arrays pairwise bit for bit equal. */
export function expectSameBits(a: Float32Array[], b: Float32Array[], what: string): void {
  expect(a.length).toBe(b.length);
  a.forEach((x, i) => expect(bitDiff(x, b[i]!), `${what} [${i}]`).toBeNull());
}

/** The code of the EmbshardError `fn` throws or rejects with ('no error' when none). */
export async function codeOf(fn: () => unknown): Promise<string> {
  try {
    await fn();
  } catch (e) {
    expect(e).toBeInstanceOf(EmbshardError);
    return (e as EmbshardError).code;
  }
  return 'no error';
}

/** Row ids 0 … n−1. */
export const ids = (n: number) => BigInt64Array.from({ length: n }, (_, i) => BigInt(i));

/** Tables of odd widths (1, 3, 7, 17, 130, 1000), a one-row table, mean and sequence pooling, shared tables: the odd-configuration suites' collection. */
export function oddTables(dtype: 'fp32' | 'fp16' | 'bf16'): TableConfig[] {
  return [
    { name: 'one', rows: 1, dim: 7, dtype },
    { name: 'w1', rows: 5, dim: 1, pooling: 'mean', features: ['w1a', 'w1b'], dtype },
    { name: 'w17', rows: 40, dim: 17, dtype },
    { name: 'w130', rows: 9, dim: 130, pooling: 'mean', dtype },
    { name: 'w1000', rows: 3, dim: 1000, dtype },
    { name: 'seq3', rows: 6, dim: 3, pooling: 'none', features: ['s3a', 's3b'], dtype },
  ];
}

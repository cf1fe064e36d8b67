// dynamic-case.ts — one case of a dynamic table against the naive map (dynamic-oracle.ts) and the naive
// math (test/embedding/oracle.ts): multi-step training, forward outputs checked every step, then rows,
// state, held ids and stats; shared by dynamic.test.ts and dynamic-default.test.ts.
import { expect } from 'vitest';
import { EmbeddingCollection, JaggedBatch } from '../../lib/index.js';
import type { OptimizerConfig } from '../../lib/index.js';
import { Oracle, rng, worst, type OBatch, type OTable, type Pool } from '../embedding/oracle.js';
import { NaiveDynamicMap, initRow, type NaiveSpec } from './dynamic-oracle.js';

const DIM = 4;
const SEED = 3;
const LOW = -0.5, HIGH = 0.5;

export interface Case {
  opt: OptimizerConfig;
  pooling: Pool;
  dtype: 'fp32' | 'fp16' | 'bf16';
  spec: NaiveSpec;
  zipf: boolean;
  weights: boolean;
  device?: string;
  /** a folder for the table's spill file (spec.spill must then be true) */
  spillDir?: string;
  /** admission.default 'hashed': ids without a row read their init row (and get no update) */
  hashed?: boolean;
}

/** A pool of distinct raw 64-bit ids (any bit pattern, negative as BigInt64 included). */
function idPool(r: () => number, n: number): bigint[] {
  const s = new Set<bigint>();
  while (s.size < n) s.add(BigInt.asIntN(64, (BigInt(Math.floor(r() * 2 ** 32)) << 32n) | BigInt(Math.floor(r() * 2 ** 32))));
  return [...s];
}

export function dynamicPair(c: Case) {
  const ec = new EmbeddingCollection({
    tables: [
      {
        name: 'dyn', rows: 'dynamic', capacity: c.spec.capacity, dim: DIM, pooling: c.pooling, features: ['a', 'b'], dtype: c.dtype,
        init: { type: 'uniform', low: LOW, high: HIGH }, admission: { minCount: c.spec.minCount, candidates: c.spec.candidates, ...(c.hashed ? { default: 'hashed' as const } : {}) }, eviction: c.spec.eviction,
        ...(c.spillDir ? { spill: { path: c.spillDir } } : {}),
      },
      { name: 's', rows: 10, dim: 3, pooling: 'sum' },
    ],
    optimizer: c.opt,
    seed: SEED,
    device: c.device ?? 'cpu',
  });
  const U = 2000; // oracle rows: every admission takes a fresh one; row 0 is the sink
  const nState = c.opt.type === 'adam' ? 2 : c.opt.type === 'sgd' ? 0 : 1;
  const per = (rows: number, dim: number) => (c.opt.type === 'rowwise_adagrad' ? rows : rows * dim);
  const dyn: OTable = { rows: U, dim: DIM, dtype: c.dtype, w: new Float64Array(U * DIM), state: Array.from({ length: nState }, () => new Float64Array(per(U, DIM))) };
  const sIds = BigInt64Array.from({ length: 10 }, (_, i) => BigInt(i));
  const st: OTable = { rows: 10, dim: 3, dtype: 'fp32', w: Float64Array.from(ec.readRows('s', sIds)), state: Array.from({ length: nState }, () => new Float64Array(per(10, 3))) };
  const o = ec.config.optimizer;
  const oracle = new Oracle([dyn, st], [{ name: 'a', table: 0, pooling: c.pooling }, { name: 'b', table: 0, pooling: c.pooling }, { name: 's', table: 1, pooling: 'sum' }], {
    type: o.type, lr: Math.fround(o.lr), eps: Math.fround(o.eps), beta1: Math.fround(o.beta1), beta2: Math.fround(o.beta2), weightDecay: Math.fround(o.weightDecay),
  });
  const naive = new NaiveDynamicMap(c.spec);
  let next = 1;
  const newRow = (id: bigint) => {
    const row = next++;
    initRow(dyn.w, row, DIM, c.dtype, LOW, HIGH, SEED, 0, id);
    return row;
  };
  // hashed default: every step, each id without a row reads a scratch oracle row (from the top down)
  // holding its init row; whatever the backward does to it is dropped by refilling it next step
  const defaultRows = (ids: readonly bigint[], rows: number[]) => {
    const at = new Map<bigint, number>();
    rows.forEach((row, k) => {
      if (row !== 0) return;
      const id = ids[k]!;
      if (!at.has(id)) {
        at.set(id, U - 1 - at.size);
        initRow(dyn.w, at.get(id)!, DIM, c.dtype, LOW, HIGH, SEED, 0, id);
      }
      rows[k] = at.get(id)!;
    });
  };
  return { ec, oracle, naive, newRow, defaultRows };
}

/** A batch with features in a shuffled order; a/b ids from the pool (uniform or Zipf-like), s ids 0..9. */
export function dynBatch(r: () => number, pool: bigint[], c: Case, B: number, maxLen: number) {
  const feats = ['a', 'b', 's'].sort(() => r() - 0.5);
  const lengths = new Int32Array(feats.length * B);
  const ids: bigint[] = [];
  for (let s = 0; s < feats.length; s++)
    for (let b = 0; b < B; b++) {
      const len = Math.floor(r() * (maxLen + 1));
      lengths[s * B + b] = len;
      for (let k = 0; k < len; k++) {
        if (feats[s] === 's') ids.push(BigInt(Math.floor(r() * 10)));
        else ids.push(pool[c.zipf ? Math.min(pool.length - 1, Math.floor(Math.pow(r(), 3) * pool.length)) : Math.floor(r() * pool.length)]!);
      }
    }
  const weights = c.weights ? Float32Array.from(ids, () => Math.fround(r() * 2 - 0.5)) : undefined;
  const batch = JaggedBatch.fromLengths({ features: feats, batchSize: B, lengths, ids: BigInt64Array.from(ids), weights });
  return { batch, feats, lengths, ids, weights };
}

/** Positions of the dynamic features' ids in batch order. */
function dynPositions(feats: string[], lengths: Int32Array, B: number): number[] {
  const pos: number[] = [];
  let at = 0;
  feats.forEach((f, s) => {
    let len = 0;
    for (let b = 0; b < B; b++) len += lengths[s * B + b]!;
    if (f !== 's') for (let i = at; i < at + len; i++) pos.push(i);
    at += len;
  });
  return pos;
}

function resetSink(oracle: Oracle): void {
  const t = oracle.tables[0]!;
  t.w.fill(0, 0, t.dim);
  for (const s of t.state) s.fill(0, 0, s.length === t.rows ? 1 : t.dim);
}

/** Runs `steps` training steps, checking forward outputs and then rows, state, held ids and stats. */
export async function runCase(c: Case, caseSeed: number, steps: number): Promise<void> {
  const r = rng(caseSeed);
  const pool = idPool(r, 120);
  const { ec, oracle, naive, newRow, defaultRows } = dynamicPair(c);
  try {
    for (let step = 0; step < steps; step++) {
      const B = 5;
      const { batch, feats, lengths, ids, weights } = dynBatch(r, pool, c, B, 4);
      const pos = dynPositions(feats, lengths, B);
      const rows = naive.translate(pos.map((i) => ids[i]!), newRow);
      if (c.hashed) defaultRows(pos.map((i) => ids[i]!), rows);
      const oIds = ids.map((x) => Number(x));
      pos.forEach((i, k) => (oIds[i] = rows[k]!));
      const ob: OBatch = { B, features: feats, lengths, ids: oIds, weights };
      const out = await ec.forward(batch);
      const ref = oracle.forward(ob);
      const tol = c.dtype === 'fp32' ? [2e-5, 1e-6] : [2e-3, 1e-4]; // the engine tests' multi-step tolerances
      expect(worst(out.pooled, ref.pooled, tol[0]!, tol[1]!), `step ${step} pooled`).toBeLessThanOrEqual(1);
      for (const f of Object.keys(out.sequences)) expect(worst(out.sequences[f]!.values, ref.seq.get(f)!, tol[0]!, tol[1]!), `step ${step} seq ${f}`).toBeLessThanOrEqual(1);
      const gP = Float32Array.from({ length: B * ec.pooledDim }, () => r() * 2 - 1);
      const gS: Record<string, Float32Array> = {};
      for (const f of ec.sequenceFeatures) gS[f] = Float32Array.from({ length: out.sequences[f]!.values.length }, () => r() * 2 - 1);
      await ec.backward(out, { pooled: gP, sequences: gS });
      oracle.backward(ob, gP, new Map(Object.entries(gS)));
      resetSink(oracle);

      // the naive map: same held ids, same counters
      const held = [...ec.heldIds('dyn')].sort();
      expect(held, `step ${step} held ids`).toEqual([...naive.held.keys()].sort());
      const s = ec.stats()['dyn']!;
      expect({ hits: s.hits, misses: s.misses, admissions: s.admissions, evictions: s.evictions }, `step ${step} stats`).toEqual(naive.stats);
      expect(s.rows).toBe(naive.held.size);
      if (c.spillDir) expect(s.spilled, `step ${step} spilled rows`).toBe(naive.spilled.size);
    }
    // rows and state of every held id, of a few ids not held (zero), and of the static table
    const probe = [...naive.held.keys(), pool[0]!, pool[1]!, 12345n];
    const oRows = naive.lookup(probe);
    const T = oracle.tables[0]!;
    const want = new Float64Array(probe.length * DIM);
    oRows.forEach((row, k) => { for (let d = 0; d < DIM; d++) want[k * DIM + d] = T.w[row * DIM + d]!; });
    if (c.hashed) {
      // ids without a row read exactly their init row, as the table would store it (never updated)
      const loose = probe.filter((id) => !naive.held.has(id));
      const init = new Float64Array(loose.length * DIM);
      loose.forEach((id, k) => initRow(init, k, DIM, c.dtype, LOW, HIGH, SEED, 0, id));
      expect(ec.readRows('dyn', BigInt64Array.from(loose)), 'defaults read by id').toEqual(Float32Array.from(init));
      probe.forEach((id, k) => { if (!naive.held.has(id)) initRow(want, k, DIM, c.dtype, LOW, HIGH, SEED, 0, id); });
    }
    const rtol = c.dtype === 'fp32' ? 2e-5 : 4e-3;
    expect(worst(ec.readRows('dyn', BigInt64Array.from(probe)), want, rtol, 1e-6), 'dynamic rows').toBeLessThanOrEqual(1);
    const sw = ec.stateWidth('dyn');
    if (sw > 0) {
      const ws = new Float64Array(probe.length * sw);
      oRows.forEach((row, k) => {
        if (c.opt.type === 'rowwise_adagrad') ws[k] = T.state[0]![row]!;
        else for (let j = 0; j < sw; j++) ws[k * sw + j] = T.state[Math.floor(j / DIM)]![row * DIM + (j % DIM)]!;
      });
      expect(worst(ec.readState('dyn', BigInt64Array.from(probe)), ws, rtol, 1e-9), 'dynamic state').toBeLessThanOrEqual(1);
    }
    expect(worst(ec.readRows('s', BigInt64Array.from({ length: 10 }, (_, i) => BigInt(i))), oracle.tables[1]!.w, 2e-5, 1e-6), 'static rows').toBeLessThanOrEqual(1);
  } finally {
    ec.dispose();
  }
}

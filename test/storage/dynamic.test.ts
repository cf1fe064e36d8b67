// dynamic.test.ts — dynamic tables (rows: 'dynamic') against a naive oracle: raw 64-bit ids from a pool
// far larger than the capacity (uniform and Zipf), multi-step training with every optimizer and pooling,
// LRU / LFU eviction, admission after minCount sightings; held ids, stats, rows and optimizer state
// compared with the naive map + naive math after every step. On the CPU and, where one is usable (or
// emulated: scripts/test-cuda-emu.mjs), on cuda:0 (the slot table then lives in device memory).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, JaggedBatch } from '../../lib/index.js';
import type { OptimizerConfig } from '../../lib/index.js';
import { Oracle, rng, worst, type OBatch, type OTable, type Pool } from '../embedding/oracle.js';
import { testDevices } from '../embedding/devices.js';
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
        init: { type: 'uniform', low: LOW, high: HIGH }, admission: { minCount: c.spec.minCount, candidates: c.spec.candidates }, eviction: c.spec.eviction,
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
  return { ec, oracle, naive, newRow };
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
  const { ec, oracle, naive, newRow } = dynamicPair(c);
  try {
    for (let step = 0; step < steps; step++) {
      const B = 5;
      const { batch, feats, lengths, ids, weights } = dynBatch(r, pool, c, B, 4);
      const pos = dynPositions(feats, lengths, B);
      const rows = naive.translate(pos.map((i) => ids[i]!), newRow);
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

const OPTS: OptimizerConfig[] = [
  { type: 'sgd', lr: 0.1, weightDecay: 0.01 },
  { type: 'adagrad', lr: 0.1 },
  { type: 'rowwise_adagrad', lr: 0.1 },
  { type: 'adam', lr: 0.05 },
];
const POOLS: Pool[] = ['sum', 'mean', 'none'];

for (const { device, skip } of testDevices())
  describe.skipIf(skip)(`dynamic tables vs a naive map and naive math (${device})`, () => {
    let k = 0;
    for (const opt of OPTS)
      for (const pooling of POOLS) {
        const i = k++;
        // the CPU runs every optimizer × pooling; a CUDA device one pooling per optimizer (emulated kernels are slow)
        if (device !== 'cpu' && i % 3 !== Math.floor(i / 3) % 3) continue;
        const spec: NaiveSpec = { capacity: 24, minCount: i % 3 === 2 ? 2 : 1, candidates: i % 3 === 2 ? 30 : 24, eviction: i % 2 ? 'lfu' : 'lru' };
        const c: Case = { opt, pooling, dtype: 'fp32', spec, zipf: i % 4 < 2, weights: pooling !== 'none' && i % 2 === 0, device };
        it(`${opt.type} / ${pooling} / ${spec.eviction} minCount ${spec.minCount} / ${c.zipf ? 'zipf' : 'uniform'} ids`, async () => {
          await runCase(c, 100 + i, 8);
        });
      }

    it('fp16 and bf16 storage (round to nearest) under adam and LFU with minCount 3', async () => {
      for (const dtype of ['fp16', 'bf16'] as const)
        await runCase({ opt: { type: 'adam', lr: 0.05 }, pooling: 'sum', dtype, spec: { capacity: 16, minCount: 3, candidates: 8, eviction: 'lfu' }, zipf: true, weights: false, device }, 7, 8);
    });

    it('spill: evicted rows (values + state) come back on re-admission, under every optimizer, LRU / LFU, minCount 1 / 2', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'embshard-spill-'));
      try {
        for (const [i, opt] of OPTS.entries()) {
          if (device !== 'cpu' && i % 2 === 1) continue;
          const spec: NaiveSpec = { capacity: 24, minCount: i === 3 ? 2 : 1, candidates: 30, eviction: i % 2 ? 'lfu' : 'lru', spill: true };
          await runCase({ opt, pooling: i === 2 ? 'mean' : 'sum', dtype: i === 3 ? 'bf16' : 'fp32', spec, zipf: i % 2 === 0, weights: i === 1, device, spillDir: dir }, 300 + i, 10);
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it('a capacity of one row: after its first admission every other id reads zero', async () => {
      await runCase({ opt: { type: 'sgd', lr: 0.1 }, pooling: 'sum', dtype: 'fp32', spec: { capacity: 1, minCount: 1, candidates: 1, eviction: 'lru' }, zipf: false, weights: false, device }, 9, 5);
    });
  });

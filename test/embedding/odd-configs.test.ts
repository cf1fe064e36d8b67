// odd-configs.test.ts — the CPU engine on the configurations at the edges, against the naive oracle:
// widths that are not multiples of any SIMD width (1, 3, 7, 17, 130, 1000), a one-row table, a table
// shared by features of different bag lengths, sequence features, batch size 1, weighted bags with
// negative and zero weights, every optimizer with its hyperparameters at their edges (lr 0, tiny eps,
// positive and negative weight decay, betas 0), learning-rate changes between steps, fp16 / bf16
// storage; every id on the last row of its table in one huge bag; optimizer state written, then trained
// on; one and two threads and repeated runs bitwise equal. Then the refusals: a released output, eps 0,
// init values that are not finite in fp32, a fractional step, and every misuse leaving tables exactly as
// they were.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { totalmem } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError, JaggedBatch } from '../../lib/index.js';
import type { CollectionConfig, OptimizerConfig, TableConfig } from '../../lib/index.js';
import { loadAddon, packageRoot } from '../../lib/native.js';
import { rng, roundTo, worst, type Oracle } from './oracle.js';
import { allRows, codeOf, ids, oddTables, pair, randomBatch, randomGrads, snapshot } from './helpers.js';

const OPTIMIZERS: OptimizerConfig[] = [
  { type: 'sgd', lr: 0.05 },
  { type: 'sgd', lr: 0, weightDecay: 0.5 },
  { type: 'adagrad', lr: 0.05 },
  { type: 'adagrad', lr: 0.05, eps: 1e-30, weightDecay: 0.1 },
  { type: 'rowwise_adagrad', lr: 0.05 },
  { type: 'rowwise_adagrad', lr: 0.05, eps: 1e-40, weightDecay: -0.05 },
  { type: 'adam', lr: 0.01 },
  { type: 'adam', lr: 0.01, beta1: 0, beta2: 0 },
  { type: 'adam', lr: 0.01, beta1: 0.99, beta2: 0.9999, weightDecay: 0.3 },
  { type: 'adam', lr: 0, eps: 1e-12 },
];

/** The oracle's optimizer state of table i in the engine's layout (adam: m then v). */
function oracleState(oracle: Oracle, i: number, type: OptimizerConfig['type']): Float64Array {
  const t = oracle.tables[i]!;
  const w = type === 'sgd' ? 0 : type === 'adagrad' ? t.dim : type === 'rowwise_adagrad' ? 1 : 2 * t.dim;
  const ref = new Float64Array(t.rows * w);
  for (let row = 0; row < t.rows; row++) {
    if (type === 'rowwise_adagrad') ref[row] = t.state[0]![row]!;
    else if (type !== 'sgd')
      for (let c = 0; c < t.dim; c++) {
        ref[row * w + c] = t.state[0]![row * t.dim + c]!;
        if (type === 'adam') ref[row * w + t.dim + c] = t.state[1]![row * t.dim + c]!;
      }
  }
  return ref;
}

/** Stores oracle state (engine layout, adam: m then v) into the oracle's table i. */
function setOracleState(oracle: Oracle, i: number, type: OptimizerConfig['type'], vals: Float32Array): void {
  const t = oracle.tables[i]!;
  const w = vals.length / t.rows;
  for (let row = 0; row < t.rows; row++) {
    if (type === 'rowwise_adagrad') t.state[0]![row] = vals[row]!;
    else
      for (let c = 0; c < t.dim; c++) {
        t.state[0]![row * t.dim + c] = vals[row * w + c]!;
        if (type === 'adam') t.state[1]![row * t.dim + c] = vals[row * w + t.dim + c]!;
      }
  }
}

describe('odd configurations match the oracle', () => {
  // relative, absolute: fp32 as the README's bound; fp16 / bf16 forward outputs sum rows that may sit one
  // unit in the last place apart, so their bound is that unit relative to the output's scale
  const TOL = { fp32: [2e-5, 1e-6], fp16: [2e-3, 2e-3], bf16: [1.6e-2, 1.6e-2] } as const;
  for (const dtype of ['fp32', 'fp16', 'bf16'] as const)
    for (const opt of OPTIMIZERS) {
      it(`${dtype} ${opt.type} ${JSON.stringify(opt)}`, async () => {
        const tables = oddTables(dtype);
        const [rtol, atol] = TOL[dtype];
        const r = rng(5);
        const { ec, oracle } = pair(tables, opt, 3);
        for (let step = 0; step < 5; step++) {
          if (step === 3) {
            ec.setLearningRate(0.02);
            oracle.opt.lr = Math.fround(0.02);
          }
          // batch size 1 on one step; bag lengths 0 … 5 drawn per feature, so the features sharing w1 and
          // seq3 have bags of different lengths
          const { batch, ob } = randomBatch(ec, r, { B: step === 1 ? 1 : 6, maxLen: 5, weights: step % 2 === 1 });
          if (ob.weights) for (let i = 0; i < ob.weights.length; i += 3) ob.weights[i] = i % 2 ? 0 : -1.5; // the batch holds the same array
          const out = await ec.forward(batch);
          const ref = oracle.forward(ob);
          expect(worst(out.pooled, ref.pooled, rtol, atol), `forward, step ${step}`).toBeLessThanOrEqual(1);
          for (const f of ['s3a', 's3b']) expect(worst(out.sequences[f]!.values, ref.seq.get(f)!, rtol, atol)).toBeLessThanOrEqual(1);
          const g = randomGrads(ec, ob, r);
          const res = await ec.backward(out, { pooled: g.pooled, sequences: g.sequences });
          expect(res.skipped).toBe(false);
          oracle.backward(ob, g.pooled, g.seqMap);
        }
        expect(ec.step).toBe(5);
        ec.tables.forEach((t, i) => {
          // tables: the README's bounds (fp16 / bf16: one unit in the last place)
          const [trt, tat] = dtype === 'fp32' ? [2e-5, 1e-6] : dtype === 'fp16' ? [2 ** -10, 2 ** -24] : [2 ** -7, 1e-30];
          expect(worst(allRows(ec, t.name), oracle.tables[i]!.w, trt, tat), `table ${t.name}`).toBeLessThanOrEqual(1);
          expect(worst(ec.readState(t.name, ids(t.rows)), oracleState(oracle, i, opt.type), 1e-3, 1e-9), `state of ${t.name}`).toBeLessThanOrEqual(1);
        });
        ec.dispose();
      });
    }

  it('every id of one huge bag on the last row of its table (batch size 1, weights -1, 0, 1)', async () => {
    for (const opt of [{ type: 'sgd', lr: 0.01 }, { type: 'adagrad', lr: 0.01 }, { type: 'rowwise_adagrad', lr: 0.01 }, { type: 'adam', lr: 0.01 }] as const)
      for (const pooling of ['sum', 'mean'] as const) {
        const rows = 1000, dim = 17, n = 100_000;
        const { ec, oracle } = pair([{ name: 't', rows, dim, pooling }, { name: 'u', rows: 3, dim: 5, pooling: 'none' }], opt, 1);
        const idList = [...new Array<number>(n).fill(rows - 1), 2, 2];
        const lengths = Int32Array.from([n, 2]);
        const weights = Float32Array.from({ length: n + 2 }, (_, i) => (i % 3) - 1);
        const batch = JaggedBatch.fromLengths({ features: ['t', 'u'], batchSize: 1, lengths, ids: BigInt64Array.from(idList, BigInt), weights });
        const ob = { B: 1, features: ['t', 'u'], lengths, ids: idList, weights };
        const out = await ec.forward(batch);
        expect(worst(out.pooled, oracle.forward(ob).pooled, 1e-5, 1e-6)).toBeLessThanOrEqual(1);
        const gp = Float32Array.from({ length: dim }, (_, i) => i - 8);
        const gs = Float32Array.from({ length: 10 }, (_, i) => i * 0.1);
        const res = await ec.backward(out, { pooled: gp, sequences: { u: gs } });
        oracle.backward(ob, gp, new Map([['u', gs]]));
        expect(res.uniqueRows).toBe(2);
        expect(worst(allRows(ec, 't'), oracle.tables[0]!.w, 2e-5, 1e-6), `${opt.type} ${pooling}`).toBeLessThanOrEqual(1);
        expect(worst(allRows(ec, 'u'), oracle.tables[1]!.w, 2e-5, 1e-6)).toBeLessThanOrEqual(1);
        ec.dispose();
      }
  });

  it('every id of 20 000 bags on the same row; a collection of one table of one row', async () => {
    for (const opt of [{ type: 'sgd', lr: 0.01 }, { type: 'adagrad', lr: 0.01 }, { type: 'rowwise_adagrad', lr: 0.01 }, { type: 'adam', lr: 0.01 }] as const)
      for (const rows of [1, 300]) {
        const { ec, oracle } = pair([{ name: 't', rows, dim: 3, pooling: 'mean', features: ['a', 'b'] }], opt, 6);
        const r = rng(rows);
        for (let step = 0; step < 2; step++) {
          const B = 10_000;
          const lengths = Int32Array.from({ length: 2 * B }, () => Math.floor(r() * 4));
          const idList = new Array<number>(lengths.reduce((x, y) => x + y, 0)).fill(rows - 1);
          const weights = Float32Array.from(idList, () => Math.fround(r() * 2 - 1));
          const batch = JaggedBatch.fromLengths({ features: ['a', 'b'], batchSize: B, lengths, ids: BigInt64Array.from(idList, BigInt), weights });
          const ob = { B, features: ['a', 'b'], lengths, ids: idList, weights };
          const out = await ec.forward(batch);
          expect(worst(out.pooled, oracle.forward(ob).pooled, 1e-5, 1e-6)).toBeLessThanOrEqual(1);
          const g = Float32Array.from({ length: B * ec.pooledDim }, () => r() * 2 - 1);
          expect((await ec.backward(out, { pooled: g })).uniqueRows).toBe(1);
          oracle.backward(ob, g, new Map());
        }
        // ~30 000 contributions summed in id order: the sum's rounding is the oracle's, step after step
        expect(worst(allRows(ec, 't'), oracle.tables[0]!.w, 2e-5, 1e-6), `${opt.type} rows ${rows}`).toBeLessThanOrEqual(1);
        expect(worst(ec.readState('t', ids(rows)), oracleState(oracle, 0, opt.type), 2e-5, 1e-9)).toBeLessThanOrEqual(1);
        ec.dispose();
      }
  });

  it('optimizer state written with writeState reads back exactly, and training goes on from it as the oracle', async () => {
    for (const type of ['adagrad', 'rowwise_adagrad', 'adam'] as const) {
      const tables: TableConfig[] = [{ name: 't', rows: 6, dim: 5 }, { name: 'u', rows: 4, dim: 1, pooling: 'mean' }];
      const { ec, oracle } = pair(tables, { type, lr: 0.05 }, 4);
      const r = rng(8);
      tables.forEach((t, i) => {
        const vals = Float32Array.from({ length: (t.rows as number) * ec.stateWidth(t.name) }, () => Math.fround(r() * 0.5));
        ec.writeState(t.name, ids(t.rows as number), vals);
        expect(Array.from(ec.readState(t.name, ids(t.rows as number)))).toEqual(Array.from(vals));
        setOracleState(oracle, i, type, vals);
      });
      for (let s = 0; s < 3; s++) {
        const { batch, ob } = randomBatch(ec, r, { B: 3, maxLen: 4 });
        const out = await ec.forward(batch);
        const g = randomGrads(ec, ob, r);
        await ec.backward(out, g);
        oracle.backward(ob, g.pooled, g.seqMap);
      }
      tables.forEach((t, i) => {
        expect(worst(allRows(ec, t.name), oracle.tables[i]!.w, 2e-5, 1e-6), `${type} ${t.name}`).toBeLessThanOrEqual(1);
        expect(worst(ec.readState(t.name, ids(t.rows as number)), oracleState(oracle, i, type), 2e-5, 1e-9)).toBeLessThanOrEqual(1);
      });
      ec.dispose();
    }
  });
});

describe('fp16 / bf16 storage rounds as the oracle', () => {
  // ties at every exponent, values around the subnormal range, the overflow boundary (65504 / 65520) and
  // random values over the whole fp32 range: writeRows stores them rounded, readRows gives them back in fp32
  function values(): Float32Array {
    const r = rng(16);
    const v: number[] = [0, -0, 65504, 65519.996, 65520, -65520, 2 ** -24, 2 ** -25, 2 ** -25 * 1.0000001, 3 * 2 ** -26, 2 ** -14, 2 ** -14 - 2 ** -25, 1e-45, 3.4e38, -3.4e38];
    for (let e = -30; e < 17; e++) for (const m of [1, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1.5 + 2 ** -9]) v.push(m * 2 ** e, -m * 2 ** e);
    for (let i = 0; i < 20_000; i++) v.push((r() - 0.5) * 2 ** Math.floor(r() * 250 - 125));
    return Float32Array.from(v);
  }
  for (const dtype of ['fp16', 'bf16'] as const)
    it(dtype, () => {
      const v = values();
      const ec = new EmbeddingCollection({ tables: [{ name: 't', rows: v.length, dim: 1, dtype }] });
      ec.writeRows('t', ids(v.length), v);
      const back = ec.readRows('t', ids(v.length));
      const want = Float32Array.from(v, (x) => roundTo(dtype, x));
      for (let i = 0; i < v.length; i++) if (!Object.is(back[i], want[i])) expect(`${v[i]} → ${back[i]}`).toBe(`${v[i]} → ${want[i]}`);
      ec.dispose();
    });
});

describe('odd configurations: bitwise the same on one and two threads, and run after run', () => {
  const addon = loadAddon();
  const poolSize = addon.threads();
  afterAll(() => addon.setThreads(poolSize));

  async function run(threads: number): Promise<string> {
    addon.setThreads(threads);
    const ec = new EmbeddingCollection({
      tables: [
        { name: 'one', rows: 1, dim: 7 },
        { name: 'h', rows: 300, dim: 130, pooling: 'mean', features: ['h1', 'h2', 'h3'], dtype: 'fp16' },
        { name: 'b', rows: 70_000, dim: 3, dtype: 'bf16' },
        { name: 's', rows: 50, dim: 17, pooling: 'none' },
        { name: 'k', rows: 2, dim: 1000 },
      ],
      optimizer: { type: 'rowwise_adagrad', lr: 0.05, weightDecay: 0.01, stochasticRounding: true },
      seed: 9,
    });
    const r = rng(3);
    const outs: number[][] = [];
    for (let s = 0; s < 3; s++) {
      const { batch, ob } = randomBatch(ec, r, { B: 700, maxLen: 9, weights: s !== 1 });
      const out = await ec.forward(batch);
      outs.push(Array.from(out.pooled), ...Object.values(out.sequences).map((q) => Array.from(q.values)));
      await ec.backward(out, randomGrads(ec, ob, r));
    }
    const tables = ec.tables.map((t) => [Array.from(allRows(ec, t.name)), Array.from(ec.readState(t.name, ids(t.rows)))]);
    ec.dispose();
    return JSON.stringify([outs, tables]);
  }

  it('fp16 / bf16 with stochastic rounding, widths 1000, 130, 17, 7, 3', async () => {
    const one = await run(1);
    const two = await run(2);
    expect(two === one).toBe(true);
    expect((await run(2)) === two).toBe(true);
  });
});

describe('refusals of odd configurations and misuse leave everything as it was', () => {
  const base: CollectionConfig = {
    tables: [{ name: 't', rows: 4, dim: 3 }, { name: 's', rows: 5, dim: 2, pooling: 'none' }],
    optimizer: { type: 'adam', lr: 0.1 },
    seed: 2,
  };
  const batch = (idList: bigint[]) =>
    JaggedBatch.fromLengths({ features: ['t', 's'], batchSize: 2, lengths: Int32Array.from([1, 2, 1, 0]), ids: BigInt64Array.from(idList) });
  const good = () => batch([3n, 0n, 1n, 4n]);
  const grads = () => ({ pooled: new Float32Array(6).fill(1), sequences: { s: new Float32Array(2).fill(1) } });

  async function trained(): Promise<EmbeddingCollection> {
    const ec = new EmbeddingCollection(base);
    await ec.backward(await ec.forward(good()), grads()); // optimizer state non-zero from here on
    return ec;
  }

  function expectUnchanged(ec: EmbeddingCollection, before: Float32Array[], step: number): void {
    snapshot(ec).forEach((a, i) => expect(Array.from(a), `array ${i}`).toEqual(Array.from(before[i]!)));
    expect(ec.step).toBe(step);
  }

  it('a released output does not go through backward: INVALID_ARGUMENT, nothing changes', async () => {
    const ec = await trained();
    const before = snapshot(ec);
    const out = await ec.forward(good());
    expect(await ec.release(out)).toBe(2);
    expect(await codeOf(() => ec.backward(out, grads()))).toBe('INVALID_ARGUMENT');
    expectUnchanged(ec, before, 1);
    // a backward queued behind the release is refused when its turn comes
    const out2 = await ec.forward(good());
    const released = ec.release(out2);
    const late = ec.backward(out2, grads());
    expect(await released).toBe(2);
    expect(await codeOf(() => late)).toBe('INVALID_ARGUMENT');
    expect(await codeOf(() => ec.backward(out2, grads(), { keepOutput: true }))).toBe('INVALID_ARGUMENT');
    expectUnchanged(ec, before, 1);
    // a kept output released after its backward: still one backward only
    const kept = await ec.forward(good());
    await ec.backward(kept, grads(), { keepOutput: true });
    expect(await ec.release(kept)).toBe(2);
    expect(await codeOf(() => ec.backward(kept, grads()))).toBe('INVALID_ARGUMENT');
    expect(ec.step).toBe(2);
    ec.dispose();
  });

  it('eps 0 (or an eps that is 0 in fp32) is INVALID_CONFIG for the optimizers that divide by √s + eps', async () => {
    for (const type of ['adagrad', 'rowwise_adagrad', 'adam'] as const)
      for (const eps of [0, 1e-50]) expect(await codeOf(() => new EmbeddingCollection({ ...base, optimizer: { type, lr: 0.1, eps } })), `${type} ${eps}`).toBe('INVALID_CONFIG');
    // sgd does not use eps; the smallest fp32 eps works and a zero-gradient row stays as it was
    new EmbeddingCollection({ ...base, optimizer: { type: 'sgd', lr: 0.1, eps: 0 } }).dispose();
    for (const type of ['adagrad', 'rowwise_adagrad', 'adam'] as const) {
      const ec = new EmbeddingCollection({ ...base, optimizer: { type, lr: 0.1, eps: 1e-45 } });
      const rowsBefore = allRows(ec, 't');
      const weighted = JaggedBatch.fromLengths({
        features: ['t', 's'], batchSize: 2, lengths: Int32Array.from([1, 1, 0, 0]), ids: BigInt64Array.from([0n, 1n]), weights: Float32Array.from([0, 1]),
      });
      await ec.backward(await ec.forward(weighted), { pooled: Float32Array.from([1, 2, 3, 0, 0, 0]) });
      const after = allRows(ec, 't');
      expect(Array.from(after.subarray(0, 3)), type).toEqual(Array.from(rowsBefore.subarray(0, 3))); // weight 0: a zero gradient
      expect(Array.from(after.subarray(3, 6)), type).toEqual(Array.from(rowsBefore.subarray(3, 6))); // zero upstream gradient
      expect(after.every(Number.isFinite)).toBe(true);
      ec.dispose();
    }
  });

  it('init values that are not finite in fp32 are INVALID_CONFIG', async () => {
    const t = { name: 't', rows: 4, dim: 3 };
    for (const init of [
      { type: 'uniform', low: Number.NaN, high: 1 },
      { type: 'uniform', low: -1, high: 1e39 },
      { type: 'uniform', low: -3e38, high: 3e38 },
      { type: 'normal', mean: 0, std: 1e38 },
      { type: 'normal', mean: Number.POSITIVE_INFINITY },
      { type: 'constant', value: 1e39 },
      { type: 'constant', value: Number.NaN },
    ] as const)
      expect(await codeOf(() => new EmbeddingCollection({ tables: [{ ...t, init }] })), JSON.stringify(init)).toBe('INVALID_CONFIG');
    const ec = new EmbeddingCollection({ tables: [{ ...t, init: { type: 'uniform', low: -3e38, high: 0 } }, { name: 'c', rows: 2, dim: 2, init: { type: 'constant', value: -3e38 } }] });
    expect(allRows(ec, 't').every(Number.isFinite)).toBe(true);
    expect(Array.from(allRows(ec, 'c'))).toEqual(new Array(4).fill(Math.fround(-3e38)));
    ec.dispose();
  });

  it('optimizer.stochasticRounding must be a boolean: INVALID_CONFIG naming it', () => {
    for (const v of ['yes', 1, null])
      expect(() => new EmbeddingCollection({ ...base, optimizer: { type: 'sgd', lr: 0.1, stochasticRounding: v as unknown as boolean } })).toThrowError(/stochasticRounding/);
  });

  it('optimizer values missing, not numbers, beyond float32, or betas that are 1 in float32: INVALID_CONFIG naming the field', () => {
    const cases = [['lr', {}], ['lr', { lr: '0.1' }], ['lr', { lr: 1e39 }], ['eps', { lr: 0.1, eps: 1e39 }], ['weightDecay', { lr: 0.1, weightDecay: -1e39 }], ['beta2', { lr: 0.1, beta2: 1 }], ['beta1', { lr: 0.1, beta1: 0.99999999 }]] as const;
    for (const [field, o] of cases)
      expect(() => new EmbeddingCollection({ ...base, optimizer: { type: 'adam', ...o } as never }), JSON.stringify(o)).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringMatching(new RegExp(`^optimizer\\.${field} `)) }));
    expect(() => new EmbeddingCollection({ ...base, optimizer: { type: 'adam', lr: 0.1, beta1: 1 - 2 ** -25 } })).toThrow(/rounds to 1/);
    new EmbeddingCollection({ ...base, optimizer: { type: 'adam', lr: 0.1, beta1: 1 - 2 ** -24 } }).dispose(); // the largest float32 below 1
  });

  it('a sequence gradient is read from the gradients\' own fields only (a feature named like an Object member)', async () => {
    const cfg: CollectionConfig = { tables: [{ name: 'constructor', rows: 4, dim: 2, pooling: 'none' }], optimizer: { type: 'sgd', lr: 0.1 } };
    const ec = new EmbeddingCollection(cfg);
    const before = snapshot(ec);
    const out = await ec.forward(JaggedBatch.fromLengths({ features: ['constructor'], batchSize: 1, lengths: Int32Array.of(1), ids: BigInt64Array.of(2n) }));
    // no gradient given for it: GRAD_SIZE_MISMATCH (Object.prototype.constructor is not a gradient), nothing changes
    expect(await codeOf(() => ec.backward(out, { pooled: new Float32Array(0), sequences: {} }))).toBe('GRAD_SIZE_MISMATCH');
    expectUnchanged(ec, before, 0);
    ec.dispose();
  });

  it('a step that is not a non-negative integer is INVALID_ARGUMENT and the step stays', async () => {
    const ec = await trained();
    for (const t of [1.5, -1, Number.NaN, 2 ** 53 + 2]) {
      expect(await codeOf(() => { ec.step = t; }), String(t)).toBe('INVALID_ARGUMENT');
      expect(ec.step).toBe(1);
    }
    ec.step = 7;
    expect(ec.step).toBe(7);
    ec.dispose();
  });

  it('a gradient given where none is expected must be empty: GRAD_SIZE_MISMATCH otherwise, nothing changes', async () => {
    // 's' has no ids in the batch (0 gradient values); a collection of sequence features only has pooledDim 0
    const ec = await trained();
    const before = snapshot(ec);
    const noSeq = JaggedBatch.fromLengths({ features: ['t', 's'], batchSize: 2, lengths: Int32Array.from([1, 1, 0, 0]), ids: BigInt64Array.from([0n, 1n]) });
    const out = await ec.forward(noSeq);
    expect(await codeOf(() => ec.backward(out, { pooled: grads().pooled, sequences: { s: new Float32Array(3) } }))).toBe('GRAD_SIZE_MISMATCH');
    expectUnchanged(ec, before, 1);
    await ec.backward(out, { pooled: grads().pooled, sequences: { s: new Float32Array(0) } });
    expect(ec.step).toBe(2);
    ec.dispose();
    const seqOnly = new EmbeddingCollection({ tables: [{ name: 's', rows: 5, dim: 2, pooling: 'none' }], seed: 1 });
    const one = JaggedBatch.fromLengths({ features: ['s'], batchSize: 1, lengths: Int32Array.from([1]), ids: BigInt64Array.from([1n]) });
    const before2 = snapshot(seqOnly);
    const out2 = await seqOnly.forward(one);
    expect(await codeOf(() => seqOnly.backward(out2, { pooled: new Float32Array(9), sequences: { s: new Float32Array(2) } }))).toBe('GRAD_SIZE_MISMATCH');
    expectUnchanged(seqOnly, before2, 0);
    await seqOnly.backward(out2, { sequences: { s: new Float32Array(2).fill(1) } });
    expect(seqOnly.step).toBe(1);
    seqOnly.dispose();
  });

  it('sizes past the limits or past memory are typed errors, not aborts', async () => {
    expect(await codeOf(() => new EmbeddingCollection({ tables: [{ name: 't', rows: 4, dim: 65537 }] }))).toBe('INVALID_SIZE');
    expect(await codeOf(() => new EmbeddingCollection({ tables: [{ name: 't', rows: 2 ** 40 + 1, dim: 1 }] }))).toBe('INVALID_SIZE');
    expect(await codeOf(() => new EmbeddingCollection({ tables: [{ name: 't', rows: 2 ** 40, dim: 65536 }] }))).toBe('ALLOC_FAILED');
    expect(
      await codeOf(() => new EmbeddingCollection({ tables: [{ name: 'a', rows: 4, dim: 3 }, { name: 't', rows: 2 ** 36, dim: 16 }], optimizer: { type: 'adam', lr: 0.1 } })),
    ).toBe('ALLOC_FAILED');
  });

  it('weights and optimizer state that fit memory one by one but not together: ALLOC_FAILED naming both, before anything is allocated (a child with a capped address space)', () => {
    // this machine's memory and swap as the engine counts them; weights and adagrad state each 0.6 of it
    const swap = Number(/SwapTotal:\s+(\d+) kB/.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1] ?? 0) * 1024;
    const limit = totalmem() + swap, dim = 64;
    const rows = Math.ceil((0.6 * limit) / (4 * dim));
    const script = `
      const { EmbeddingCollection } = await import(${JSON.stringify(join(packageRoot, 'dist', 'lib', 'collection.js'))});
      try { new EmbeddingCollection({ tables: [{ name: 'big', rows: ${rows}, dim: ${dim} }], optimizer: { type: 'adagrad', lr: 0.1 } }); console.log('built'); }
      catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })); }`;
    // in a child whose address space is capped (3 GB), so that no path can commit the arenas' pages
    const r = spawnSync('/bin/sh', ['-c', 'ulimit -v 3000000 && exec "$0" "$@"', process.execPath, '--input-type=module', '-e', script], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    const o = JSON.parse(r.stdout.trim()) as { code: string; message: string };
    expect(o.code).toBe('ALLOC_FAILED');
    expect(o.message).toMatch(/weights and \d+ bytes of optimizer state .*together past/);
  });

  it('every misuse is a typed error that leaves the tables, the state and the step exactly as they were', async () => {
    const ec = await trained();
    const before = snapshot(ec);
    const out = await ec.forward(good());
    const cases: [string, () => unknown][] = [
      ['ID_OUT_OF_RANGE', () => ec.forward(batch([4n, 0n, 1n, 4n]))], // = rows
      ['ID_OUT_OF_RANGE', () => ec.forward(batch([3n, 0n, 1n, 5n]))],
      ['ID_OUT_OF_RANGE', () => ec.forward(batch([-1n, 0n, 1n, 4n]))],
      ['ID_OUT_OF_RANGE', () => ec.backward({ ...out, batch: batch([3n, 0n, 1n, 5n]) }, grads())],
      ['GRAD_SIZE_MISMATCH', () => ec.backward(out, { pooled: new Float32Array(7), sequences: grads().sequences })],
      ['GRAD_SIZE_MISMATCH', () => ec.backward(out, { pooled: grads().pooled, sequences: { s: new Float32Array(3) } })],
      ['GRAD_SIZE_MISMATCH', () => ec.backward(out, { pooled: grads().pooled })],
      ['NON_FINITE_GRADIENT', () => ec.backward(out, { pooled: grads().pooled, sequences: { s: Float32Array.from([1, Number.POSITIVE_INFINITY]) } })],
      ['INVALID_ARGUMENT', () => ec.backward(out, grads(), { keepOutput: 1 } as never)],
      ['INVALID_CONFIG', () => ec.backward(out, grads(), { keepOutputs: true } as never)],
      ['ID_OUT_OF_RANGE', () => ec.readRows('t', [4])],
      ['ID_OUT_OF_RANGE', () => ec.readRows('t', [-1])],
      ['INVALID_ARGUMENT', () => ec.readRows('t', [1.5])],
      ['ID_OUT_OF_RANGE', () => ec.writeRows('t', [0, 4], new Float32Array(6).fill(9))],
      ['DIM_MISMATCH', () => ec.writeRows('t', [0], new Float32Array(4))],
      ['ID_OUT_OF_RANGE', () => ec.writeState('t', [2, 4], new Float32Array(12).fill(9))],
      ['DIM_MISMATCH', () => ec.writeState('t', [0], new Float32Array(5))],
      ['UNKNOWN_TABLE', () => ec.readState('x', [0])],
      ['INVALID_ARGUMENT', () => ec.setLearningRate(-1)],
      ['INVALID_ARGUMENT', () => ec.setLearningRate(Number.NaN)],
    ];
    for (const [want, call] of cases) expect(await codeOf(call), String(call)).toBe(want);
    expectUnchanged(ec, before, 1);
    // the refused backward left its output usable
    await ec.backward(out, grads());
    expect(ec.step).toBe(2);
    ec.dispose();
    for (const call of [() => ec.forward(good()), () => ec.readRows('t', [0]), () => ec.writeState('t', [0], new Float32Array(6)), () => ec.setLearningRate(1), () => ec.step, () => ec.save('/nonexistent/x')])
      expect(await codeOf(call), String(call)).toBe('DISPOSED');
  });
});

// forward-backward.test.ts — forward, backward and every optimizer against the naive oracle on random
// inputs: dims 1, 3, 64, 129; shared tables; sum / mean / none pooling; empty bags; duplicate ids within
// and across bags; weights; every id array type; fp16 / bf16 tables; multi-step runs.
import { describe, expect, it } from 'vitest';
import { JaggedBatch } from '../../lib/index.js';
import type { TableConfig, OptimizerConfig } from '../../lib/index.js';
import { rng, roundTo, worst } from './oracle.js';
import { allRows, pair, randomBatch, randomGrads } from './helpers.js';
import { testDevices } from './devices.js';

const OPTIMIZERS: OptimizerConfig[] = [
  { type: 'sgd', lr: 0.05 },
  { type: 'adagrad', lr: 0.05, eps: 1e-8 },
  { type: 'rowwise_adagrad', lr: 0.05, eps: 1e-8 },
  { type: 'adam', lr: 0.01, eps: 1e-8, beta1: 0.9, beta2: 0.999 },
  { type: 'adam', lr: 0.01, weightDecay: 0.01 },
  { type: 'sgd', lr: 0.05, weightDecay: 0.1 },
];

function tablesFor(dims: number[], dtype: 'fp32' | 'fp16' | 'bf16' = 'fp32'): TableConfig[] {
  return [
    { name: 'a', rows: 37, dim: dims[0]!, pooling: 'sum', dtype },
    { name: 'b', rows: 11, dim: dims[1]!, pooling: 'mean', features: ['b1', 'b2'], dtype }, // shared table
    { name: 'c', rows: 23, dim: dims[2]!, pooling: 'none', dtype }, // sequence output
  ];
}

describe.each(testDevices())('on $device', ({ device, skip }) => {
  if (skip) {
    it.skip(skip, () => {});
    return;
  }

  describe('forward matches the oracle', () => {
    for (const dims of [[1, 3, 64], [129, 64, 3], [3, 1, 129]]) {
      for (const idType of ['i64', 'i32', 'u32'] as const) {
        it(`dims ${dims} ids ${idType}`, async () => {
          const r = rng(dims[0]! * 31 + idType.length);
          const { ec, oracle } = pair(tablesFor(dims), { type: 'sgd', lr: 0.1 }, 7, device);
          for (const weights of [false, true]) {
            const { batch, ob } = randomBatch(ec, r, { B: 9, maxLen: 6, weights, idType, shuffle: true });
            const out = await ec.forward(batch);
            const ref = oracle.forward(ob);
            expect(out.pooled.length).toBe(9 * ec.pooledDim);
            expect(worst(out.pooled, ref.pooled, 1e-6, 1e-7)).toBeLessThanOrEqual(1);
            expect(Array.from(out.sequences.c!.values)).toEqual(Array.from(ref.seq.get('c')!));
            // sync twin gives the same bits
            const sync = ec.forwardSync(batch);
            expect(Array.from(sync.pooled)).toEqual(Array.from(out.pooled));
          }
          ec.dispose();
        });
      }
    }

    it('empty bags pool to zeros and an all-empty batch works', async () => {
      const { ec } = pair(tablesFor([4, 4, 4]), { type: 'sgd', lr: 0.1 }, 7, device);
      const feats = ec.featureInfo.map((f) => f.name);
      const { JaggedBatch } = await import('../../lib/index.js');
      const batch = JaggedBatch.fromLengths({ features: feats, batchSize: 3, lengths: new Int32Array(feats.length * 3), ids: new BigInt64Array(0) });
      const out = await ec.forward(batch);
      expect(Array.from(out.pooled).every((x) => x === 0)).toBe(true);
      expect(out.sequences.c!.values.length).toBe(0);
      const res = await ec.backward(out, { pooled: new Float32Array(3 * ec.pooledDim), sequences: { c: new Float32Array(0) } });
      expect(res.uniqueRows).toBe(0);
      ec.dispose();
    });
  });

  describe('backward + optimizers match the oracle over several steps', () => {
    for (const opt of OPTIMIZERS) {
      for (const dims of [[1, 3, 64], [129, 3, 1]]) {
        it(`${opt.type}${opt.weightDecay ? ' +wd' : ''} dims ${dims}`, async () => {
          const r = rng(dims[0]! + opt.type.length * 101 + (opt.weightDecay ? 7 : 0));
          const { ec, oracle } = pair(tablesFor(dims), opt, 7, device);
          for (let step = 0; step < 4; step++) {
            const { batch, ob } = randomBatch(ec, r, { B: 8, maxLen: 5, weights: step % 2 === 1, shuffle: step === 2 });
            const out = await ec.forward(batch);
            const ref = oracle.forward(ob);
            expect(worst(out.pooled, ref.pooled, 2e-5, 1e-6)).toBeLessThanOrEqual(1);
            const g = randomGrads(ec, ob, r);
            const res = await ec.backward(out, { pooled: g.pooled, sequences: g.sequences });
            expect(res.skipped).toBe(false);
            oracle.backward(ob, g.pooled, g.seqMap);
          }
          expect(ec.step).toBe(4);
          ec.tables.forEach((t, i) => {
            expect(worst(allRows(ec, t.name), oracle.tables[i]!.w, 2e-5, 1e-6), `table ${t.name}`).toBeLessThanOrEqual(1);
            if (opt.type !== 'sgd') {
              const ids = BigInt64Array.from({ length: t.rows }, (_, k) => BigInt(k));
              const st = ec.readState(t.name, ids);
              const w = ec.stateWidth(t.name);
              const ref = new Float64Array(t.rows * w);
              for (let row = 0; row < t.rows; row++) {
                if (opt.type === 'rowwise_adagrad') ref[row] = oracle.tables[i]!.state[0]![row]!;
                else for (let c = 0; c < t.dim; c++) {
                  ref[row * w + c] = oracle.tables[i]!.state[0]![row * t.dim + c]!;
                  if (opt.type === 'adam') ref[row * w + t.dim + c] = oracle.tables[i]!.state[1]![row * t.dim + c]!;
                }
              }
              expect(worst(st, ref, 2e-5, 1e-9), `state of ${t.name}`).toBeLessThanOrEqual(1);
            }
          });
          ec.dispose();
        });
      }
    }
  });

  it('rowwise adagrad sums the squares in the documented order, bit for bit', async () => {
    // one bag of one id per row: each row's gradient is exactly its upstream gradient, so the stored
    // s_row = fl(sum of squares / dim) depends only on the order the squares are added in. dims 200 and 67
    // have a tail past the last full group of 16 columns; 200 spans more than one CUDA warp block.
    for (const dim of [200, 67]) {
      const rows = 6;
      const { ec, oracle } = pair([{ name: 't', rows, dim }], { type: 'rowwise_adagrad', lr: 0.05, eps: 1e-8 }, 7, device);
      const r = rng(dim);
      const ids = Array.from({ length: rows }, (_, k) => k);
      const lengths = new Int32Array(rows).fill(1);
      const batch = JaggedBatch.fromLengths({ features: ['t'], batchSize: rows, lengths, ids: BigInt64Array.from(ids, (x) => BigInt(x)) });
      // magnitudes spread over 2^-6 .. 2^6 so that different addition orders round differently
      const g = Float32Array.from({ length: rows * dim }, () => (r() * 2 - 1) * 2 ** Math.floor(r() * 13 - 6));
      const out = await ec.forward(batch);
      await ec.backward(out, { pooled: g });
      oracle.backward({ B: rows, features: ['t'], lengths, ids }, g, new Map());
      const st = ec.readState('t', BigInt64Array.from(ids, (x) => BigInt(x)));
      let differsFromColumnOrder = 0;
      for (let row = 0; row < rows; row++) {
        expect(st[row], `row ${row} dim ${dim}`).toBe(oracle.tables[0]!.state[0]![row]);
        let serial = 0;
        for (let c = 0; c < dim; c++) serial = Math.fround(serial + Math.fround(g[row * dim + c]! ** 2));
        if (Math.fround(serial / dim) !== st[row]) differsFromColumnOrder++;
      }
      // the inputs tell the orders apart: a column-order sum would fail the check above
      expect(differsFromColumnOrder).toBeGreaterThan(0);
      ec.dispose();
    }
  });

  describe('fp16 and bf16 tables', () => {
    for (const dtype of ['fp16', 'bf16'] as const) {
      for (const opt of [OPTIMIZERS[0]!, OPTIMIZERS[1]!, OPTIMIZERS[3]!]) {
        it(`${dtype} ${opt.type}: storage rounding and updates`, async () => {
          const r = rng(dtype.length * 13 + opt.type.length);
          const { ec, oracle } = pair(tablesFor([5, 64, 3], dtype), opt, 7, device);
          // stored initial values are representable in the dtype
          for (const [i, t] of ec.tables.entries())
            for (const v of oracle.tables[i]!.w) expect(roundTo(dtype, v), `table ${t.name}`).toBe(v);
          for (let step = 0; step < 3; step++) {
            const { batch, ob } = randomBatch(ec, r, { B: 6, maxLen: 4 });
            const out = await ec.forward(batch);
            expect(worst(out.pooled, oracle.forward(ob).pooled, 1e-6, 1e-7)).toBeLessThanOrEqual(1);
            const g = randomGrads(ec, ob, r);
            await ec.backward(out, { pooled: g.pooled, sequences: g.sequences });
            oracle.backward(ob, g.pooled, g.seqMap);
          }
          // tolerance: one unit in the last place of the storage format (fp16 2^-10, bf16 2^-7 relative)
          const rtol = dtype === 'fp16' ? 2 ** -10 : 2 ** -7;
          ec.tables.forEach((t, i) => expect(worst(allRows(ec, t.name), oracle.tables[i]!.w, rtol, 1e-6)).toBeLessThanOrEqual(1));
          ec.dispose();
        });
      }
    }

    it('stochastic rounding is unbiased: many tiny SGD steps move a bf16 weight on average', async () => {
      const { EmbeddingCollection, JaggedBatch } = await import('../../lib/index.js');
      const mk = (sr: boolean) =>
        new EmbeddingCollection({
          tables: [{ name: 't', rows: 1, dim: 256, dtype: 'bf16', init: { type: 'constant', value: 1 } }],
          optimizer: { type: 'sgd', lr: 1, stochasticRounding: sr },
          device,
        });
      const batch = JaggedBatch.fromLengths({ features: ['t'], batchSize: 1, lengths: Int32Array.of(1), ids: BigInt64Array.of(0n) });
      const res: number[] = [];
      for (const sr of [false, true]) {
        const ec = mk(sr);
        // each step subtracts 2^-10, a quarter of bf16's spacing at 1.0 (2^-7 below 1: 2^-8)
        for (let i = 0; i < 64; i++) {
          const out = await ec.forward(batch);
          await ec.backward(out, { pooled: new Float32Array(256).fill(2 ** -10) });
        }
        const w = ec.readRows('t', [0n]);
        res.push(w.reduce((s, x) => s + x, 0) / 256);
        ec.dispose();
      }
      // exact answer 1 - 64·2^-10 = 0.9375; nearest rounding never moves (1 - 2^-10 rounds back to 1)
      expect(res[0]).toBe(1);
      expect(Math.abs(res[1]! - 0.9375)).toBeLessThan(0.01);
    });
  });
});

// skewed-ids.test.ts — batches whose ids fall mostly on a few rows (half of every feature's ids on its
// table's first five rows: runs of about 150 contributions per row, spread over every thread's share of
// the work), against the naive oracle over several steps, for every optimizer, with weights and mean
// pooling, a shared table, a sequence feature and a width with no fixed-width kernel.
import { describe, expect, it } from 'vitest';
import type { OptimizerConfig, TableConfig } from '../../lib/index.js';
import { rng, worst } from './oracle.js';
import { allRows, pair, randomBatch, randomGrads } from './helpers.js';

const TABLES: TableConfig[] = [
  { name: 'a', rows: 3000, dim: 64, pooling: 'sum' },
  { name: 'b', rows: 400, dim: 20, pooling: 'mean', features: ['b1', 'b2'] },
  { name: 'c', rows: 900, dim: 16, pooling: 'none' },
];

const OPTIMIZERS: OptimizerConfig[] = [
  { type: 'sgd', lr: 0.1 },
  { type: 'adagrad', lr: 0.05 },
  { type: 'rowwise_adagrad', lr: 0.05, weightDecay: 0.01 },
  { type: 'adam', lr: 0.01 },
];

describe('CPU backward with a few rows taking half the ids: matches the oracle', () => {
  for (const opt of OPTIMIZERS) {
    it(opt.type, async () => {
      const r = rng(opt.type.length * 31 + 5);
      const { ec, oracle } = pair(TABLES, opt, 9);
      for (let step = 0; step < 3; step++) {
        // 4 features × 512 samples of up to 6 ids: each of the five hot rows of a feature takes about 150
        const { batch, ob } = randomBatch(ec, r, { B: 512, maxLen: 6, weights: step !== 1 });
        const out = await ec.forward(batch);
        oracle.forward(ob);
        const g = randomGrads(ec, ob, r);
        const res = await ec.backward(out, { pooled: g.pooled, sequences: g.sequences });
        expect(res.skipped).toBe(false);
        oracle.backward(ob, g.pooled, g.seqMap);
      }
      ec.tables.forEach((t, i) => expect(worst(allRows(ec, t.name), oracle.tables[i]!.w, 2e-5, 1e-6), `table ${t.name}`).toBeLessThanOrEqual(1));
      if (opt.type !== 'sgd')
        ec.tables.forEach((t, i) => {
          const ids = BigInt64Array.from({ length: t.rows }, (_, k) => BigInt(k));
          const st = ec.readState(t.name, ids), w = ec.stateWidth(t.name);
          const ref = new Float64Array(t.rows * w);
          for (let row = 0; row < t.rows; row++) {
            if (opt.type === 'rowwise_adagrad') ref[row] = oracle.tables[i]!.state[0]![row]!;
            else
              for (let c = 0; c < t.dim; c++) {
                ref[row * w + c] = oracle.tables[i]!.state[0]![row * t.dim + c]!;
                if (opt.type === 'adam') ref[row * w + t.dim + c] = oracle.tables[i]!.state[1]![row * t.dim + c]!;
              }
          }
          expect(worst(st, ref, 2e-5, 1e-9), `state of ${t.name}`).toBeLessThanOrEqual(1);
        });
      ec.dispose();
    });
  }
});

// Run under mpirun (test/train/sharded-mpi.test.ts): the Trainer on the MPI group with a plan covering dp,
// row / column-split rb, ub and hot-row tiers, trained twice on the same seeded batches: overlap off
// (every collective waited for where it is issued) and on (Trainer.fit's look-ahead id exchange, the bottom
// MLP beside the embedding forward, the all-reduce beside the embedding backward). Every rank checks that
// losses, dense weights and every table row are bitwise equal, and that exposed communication never
// exceeds total communication (and equals it without overlap). One JSON line per rank.
import { JaggedBatch } from '../../../dist/lib/batch.js';
import { ShardPlan } from '../../../dist/lib/plan/shard-plan.js';
import { createMpiGroup } from '../../../dist/lib/sharded/group.js';
import { Trainer } from '../../../dist/lib/train/trainer.js';
import { rng } from '../../sharded/scenario.mjs';

const g = await createMpiGroup({ timeoutMs: 60_000 });
const W = g.size, r = g.rank, B = 12, STEPS = 4;
const R = (k) => k % W;
const rows = { A: 30, Bt: 40, C: 36, D: 44 };
const plan = ShardPlan.create({
  topology: { name: 'test', worldSize: W, ranksPerNode: g.ranksPerNode, deviceMemoryBytes: 1e12, memoryLimitBytes: 1e12, hbmBandwidth: 1e12, intraNodeBandwidth: 1e11, interNodeBandwidth: 1e10 },
  batchSize: B,
  tables: [
    { table: { name: 'A', rows: rows.A, dim: 4, pooling: 'sum', features: ['a'] }, cluster: 'dp' },
    {
      table: { name: 'Bt', rows: rows.Bt, dim: 4, pooling: 'mean', features: ['b'] },
      cluster: 'rb',
      shards: [{ rows: [0, 16], cols: [0, 4], rank: R(0) }, { rows: [16, 40], cols: [0, 2], rank: R(1) }, { rows: [16, 40], cols: [2, 4], rank: R(2) }],
    },
    { table: { name: 'C', rows: rows.C, dim: 4, pooling: 'sum', features: ['c'] }, cluster: 'ub', shards: [{ rows: [0, 20], cols: [0, 4], rank: R(W - 1) }, { rows: [20, 36], cols: [0, 4], rank: R(0) }] },
    {
      table: { name: 'D', rows: rows.D, dim: 4, pooling: 'sum', features: ['d'] },
      cluster: 'rb',
      tiers: { replicated: 4, node: 6 },
      shards: [{ rows: [10, 30], cols: [0, 4], rank: R(1) }, { rows: [30, 44], cols: [0, 4], rank: R(W - 1) }],
    },
  ],
});
const spec = { denseIn: 3, bottom: [5, 4], top: [6, 1], numSparse: 4, embDim: 4, interaction: 'dot' };

function batch(step) {
  const q = rng(1000 * step + r + 1);
  const bags = Object.values(rows).map((n) => Array.from({ length: B }, () => Array.from({ length: 1 + Math.floor(q() * 3) }, () => Math.floor(n * q() * q()))));
  return {
    dense: Float32Array.from({ length: B * 3 }, () => 2 * q()),
    sparse: JaggedBatch.fromBags(['a', 'b', 'c', 'd'], bags),
    labels: Float32Array.from({ length: B }, () => (q() < 0.4 ? 1 : 0)),
    size: B,
  };
}
const batches = Array.from({ length: STEPS }, (_, k) => batch(k));

async function run(overlap) {
  const t = new Trainer({ model: spec, plan, group: g, optimizer: { type: 'adam', lr: 0.01 }, embeddingOptimizer: { type: 'adagrad', lr: 0.1 }, seed: 3, overlap });
  const losses = [];
  let timesOk = true, total = 0;
  await t.fit(batches, {
    onStep: (s) => {
      losses.push(s.loss);
      const tt = t.lastTimes;
      if (tt.communication > tt.communicationTotal || (!overlap && tt.communication !== tt.communicationTotal)) timesOk = false;
      total += tt.communicationTotal;
    },
  });
  const params = Float32Array.from(t.dense.params);
  const tables = [];
  for (const tb of plan.tables) tables.push(await t.embeddings.readRows(tb.name, Array.from({ length: tb.rows }, (_, i) => i)));
  t.embeddings.dispose();
  return { losses, params, tables, timesOk, total, steps: t.stepCount };
}

const off = await run(false);
const on = await run(true);
const same = (a, b) => Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.byteLength), Buffer.from(b.buffer, b.byteOffset, b.byteLength)) === 0;
const equal =
  JSON.stringify(on.losses) === JSON.stringify(off.losses) && same(on.params, off.params) && on.tables.every((x, i) => same(x, off.tables[i]));
console.log(JSON.stringify({ rank: r, size: W, equal, timesOk: on.timesOk && off.timesOk, communicated: on.total > 0 && off.total > 0, steps: [off.steps, on.steps], losses: on.losses.length }));
g.close();

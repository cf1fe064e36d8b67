// scenario.mjs — the sharded Trainer scenario the MPI scripts of this folder share: a plan over the
// group's ranks covering dp, row / column-split rb, ub and hot-row tiers, the dense model, and each rank's
// seeded batch of a step.
import { JaggedBatch } from '../../../dist/lib/batch.js';
import { ShardPlan } from '../../../dist/lib/plan/shard-plan.js';
import { rng } from '../../sharded/scenario.mjs';

export const B = 12;
export const rows = { A: 30, Bt: 40, C: 36, D: 44 };
export const spec = { denseIn: 3, bottom: [5, 4], top: [6, 1], numSparse: 4, embDim: 4, interaction: 'dot' };

/** The plan over the group's W ranks (ranksPerNode from the group). */
export function planFor(g) {
  const W = g.size;
  const R = (k) => k % W;
  return ShardPlan.create({
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
}

/** Rank r's batch of step `step`. */
export function batch(step, r) {
  const q = rng(1000 * step + r + 1);
  const bags = Object.values(rows).map((n) => Array.from({ length: B }, () => Array.from({ length: 1 + Math.floor(q() * 3) }, () => Math.floor(n * q() * q()))));
  return {
    dense: Float32Array.from({ length: B * 3 }, () => 2 * q()),
    sparse: JaggedBatch.fromBags(['a', 'b', 'c', 'd'], bags),
    labels: Float32Array.from({ length: B }, () => (q() < 0.4 ? 1 : 0)),
    size: B,
  };
}

/** Whether two float arrays hold the same bytes. */
export function same(a, b) {
  return Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.byteLength), Buffer.from(b.buffer, b.byteOffset, b.byteLength)) === 0;
}

/** Dense weights and every table's rows of a trainer (a collective: every rank calls it). */
export async function stateOf(t, plan) {
  const tables = [];
  for (const tb of plan.tables) tables.push(await t.embeddings.readRows(tb.name, Array.from({ length: tb.rows }, (_, i) => i)));
  return { params: Float32Array.from(t.dense.params), tables };
}

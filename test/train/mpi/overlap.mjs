// Run under mpirun (test/train/sharded-mpi.test.ts): the Trainer on the MPI group with a plan covering dp,
// row / column-split rb, ub and hot-row tiers, trained twice on the same seeded batches: overlap off
// (every collective waited for where it is issued) and on (Trainer.fit's look-ahead id exchange, the bottom
// MLP beside the embedding forward, the all-reduce beside the embedding backward). Every rank checks that
// losses, dense weights and every table row are bitwise equal, and that exposed communication never
// exceeds total communication (and equals it without overlap). One JSON line per rank.
import { createMpiGroup } from '../../../dist/lib/sharded/group.js';
import { Trainer } from '../../../dist/lib/train/trainer.js';
import { batch, planFor, same, spec, stateOf } from './scenario.mjs';

const g = await createMpiGroup({ timeoutMs: 60_000 });
const W = g.size, r = g.rank, STEPS = 4;
const plan = planFor(g);
const batches = Array.from({ length: STEPS }, (_, k) => batch(k, r));

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
  const { params, tables } = await stateOf(t, plan);
  t.embeddings.dispose();
  return { losses, params, tables, timesOk, total, steps: t.stepCount };
}

const off = await run(false);
const on = await run(true);
const equal =
  JSON.stringify(on.losses) === JSON.stringify(off.losses) && same(on.params, off.params) && on.tables.every((x, i) => same(x, off.tables[i]));
console.log(JSON.stringify({ rank: r, size: W, equal, timesOk: on.timesOk && off.timesOk, communicated: on.total > 0 && off.total > 0, steps: [off.steps, on.steps], losses: on.losses.length }));
g.close();

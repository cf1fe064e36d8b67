// Run under mpirun (test/train/sharded-mpi.test.ts): the Trainer on the MPI group, where rank 0's batch of
// one step has a NaN dense feature and, in a second try, a label out of range. fit() looks one batch
// ahead; every rank must reject the step (rank 0 naming the value, the others "another rank rejected"),
// change nothing, and go on from a later batch (the look-ahead batch of the rejected step dropped). The
// oracle is the same trainers never shown the bad step: losses after it, dense weights and every table row
// must be bitwise equal. One JSON line per rank.
import { createMpiGroup } from '../../../dist/lib/sharded/group.js';
import { Trainer } from '../../../dist/lib/train/trainer.js';
import { batch, planFor, same, spec, stateOf } from './scenario.mjs';

const g = await createMpiGroup({ timeoutMs: 60_000 });
const W = g.size, r = g.rank;
const plan = planFor(g);
const make = () => new Trainer({ model: spec, plan, group: g, optimizer: { type: 'adam', lr: 0.01 }, embeddingOptimizer: { type: 'adagrad', lr: 0.1 }, seed: 3 });
const b = Array.from({ length: 8 }, (_, k) => batch(k, r));
const spoil = (x, field, v) => {
  const c = { ...x, [field]: Float32Array.from(x[field]) };
  if (r === 0) c[field][5] = v;
  return c;
};

const t = make();
const errors = [];
const losses = [];
await t.fit([b[0], b[1]]);
for (const bad of [spoil(b[2], 'dense', NaN), spoil(b[3], 'labels', 7)]) {
  try {
    await t.fit([bad, b[6]]); // b[6] is prepared during the bad step, then dropped
    errors.push('none');
  } catch (e) {
    errors.push(`${e.code}: ${e.message}`);
  }
}
await t.fit([b[4], b[5]], { onStep: (s) => losses.push(s.loss) });
const got = await stateOf(t, plan);
t.embeddings.dispose();

const o = make();
const want = [];
await o.fit([b[0], b[1]]);
await o.fit([b[4], b[5]], { onStep: (s) => want.push(s.loss) });
const ref = await stateOf(o, plan);
o.embeddings.dispose();

const equal = JSON.stringify(losses) === JSON.stringify(want) && same(got.params, ref.params) && got.tables.every((x, i) => same(x, ref.tables[i]));
console.log(JSON.stringify({ rank: r, size: W, errors, equal, steps: t.stepCount }));
g.close();

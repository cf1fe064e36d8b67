// Run under mpirun (test/herald/herald-mpi.test.ts): Herald-scheduled training on the MPI group, every
// rank comparing its pooled outputs, the gathered final tables and optimizer state and a lookup of a batch
// of its own with one EmbeddingCollection trained on the same global batches (the scenario is
// deterministic, so every rank builds the oracle itself). Args: optimizer cacheRows steps. One JSON line per rank.
import { JaggedBatch } from '../../../dist/lib/batch.js';
import { EmbeddingCollection } from '../../../dist/lib/collection.js';
import { createMpiGroup } from '../../../dist/lib/sharded/group.js';
import { HeraldEmbeddingCollection } from '../../../dist/lib/herald/collection.js';
import { takeRows } from '../../../dist/lib/data/take.js';
import * as S from '../scenario.mjs';

const [optName = 'adagrad', cacheArg = '8', stepsArg = '4'] = process.argv.slice(2);
const lib = { JaggedBatch };
const g = await createMpiGroup({ timeoutMs: 60_000 });
const W = g.size, r = g.rank, B = 10;
const cfg = S.config({ type: optName, lr: optName === 'adam' ? 0.01 : 0.1 });
const h = new HeraldEmbeddingCollection(cfg, g, { cacheRows: Number(cacheArg), batchSize: B });
const oracle = new EmbeddingCollection(cfg);
let outErr = 0, tableErr = 0, stateErr = 0, moves = 0;
const P = oracle.pooledDim;
for (let step = 0; step < Number(stepsArg); step++) {
  const global = S.globalBatch(lib, step, W * B, { weighted: true });
  const local = h.assign(global);
  const out = await h.forward(local);
  const go = await oracle.forward(global);
  outErr = Math.max(outErr, S.relErr(out.pooled, takeRows(go.pooled, P, out.samples)));
  await oracle.backward(go, { pooled: S.gradsFor(step, Int32Array.from({ length: W * B }, (_, i) => i), P) });
  await h.backward(out, { pooled: S.gradsFor(step, out.samples, P) });
  moves += h.lastCounts.moves;
}
for (const t of oracle.tables) {
  const ids = Int32Array.from({ length: t.rows }, (_, j) => j);
  const got = await h.gather(t.name);
  tableErr = Math.max(tableErr, S.relErr(got.weights, oracle.readRows(t.name, ids)));
  stateErr = Math.max(stateErr, S.relErr(got.state, oracle.readState(t.name, ids)));
}
const mine = S.globalBatch(lib, 77 + r, 4 + r);
const looked = await h.forward(mine);
const lookupErr = S.relErr(looked.pooled, (await oracle.forward(mine)).pooled);
console.log(JSON.stringify({ rank: r, size: W, outErr, tableErr, stateErr, lookupErr, moves, steps: h.step, oracleSteps: oracle.step }));
h.dispose();
oracle.dispose();
g.close();

// Run under mpirun (test/sharded/sharded-mpi.test.ts): a multi-step sharded training run on the MPI group,
// every rank comparing its outputs, the gathered final tables and optimizer state with a single
// EmbeddingCollection over the global batch it builds itself (the scenario is deterministic), and its
// per-step byte counters with measureTraffic. Args: optimizer wire steps [weighted] [hier] (the hierarchical
// protocol). One JSON line per rank.
import { JaggedBatch } from '../../../dist/lib/batch.js';
import { EmbeddingCollection } from '../../../dist/lib/collection.js';
import { ShardPlan } from '../../../dist/lib/plan/shard-plan.js';
import { measureTraffic } from '../../../dist/lib/plan/traffic.js';
import { createMpiGroup } from '../../../dist/lib/sharded/group.js';
import { ShardedEmbeddingCollection, collectionConfigOf } from '../../../dist/lib/sharded/sharded.js';
import { gatherTable } from '../../../dist/lib/sharded/reshard.js';
import * as S from '../scenario.mjs';

const [optName = 'adagrad', wireName = 'fp32', stepsArg = '3', weightedArg = '', hierArg = ''] = process.argv.slice(2);
const steps = Number(stepsArg);
const lib = { JaggedBatch, ShardPlan };
const g = await createMpiGroup({ timeoutMs: 60_000 });
const W = g.size, r = g.rank;
const plan = S.makePlan(lib, W, g.ranksPerNode, { wire: { forward: wireName, backward: wireName }, hierarchical: hierArg === 'hier' });
const cfg = { optimizer: { type: optName, lr: optName === 'adam' ? 0.01 : 0.1 }, seed: 11 };
const sc = new ShardedEmbeddingCollection(plan, g, cfg);
const oracle = new EmbeddingCollection(collectionConfigOf(plan, cfg));
let outErr = 0, tableErr = 0, stateErr = 0, trafficOk = true, inter = 0;
for (let step = 0; step < steps; step++) {
  const batches = Array.from({ length: W }, (_, p) => S.localBatch(lib, plan, p, step, { weighted: weightedArg === 'weighted' }));
  const out = await sc.forward(batches[r]);
  const gout = await oracle.forward(S.globalBatch(lib, batches));
  const B = batches[0].batchSize;
  outErr = Math.max(outErr, S.relErr(out.pooled, S.sliceRows(gout.pooled, oracle.pooledDim, r * B, B)));
  for (const f of oracle.sequenceFeatures) {
    const dim = oracle.featureInfo.find((x) => x.name === f).dim;
    let before = 0;
    for (let p = 0; p < r; p++) before += batches[p].feature(f).ids.length;
    const n = batches[r].feature(f).ids.length;
    outErr = Math.max(outErr, S.relErr(out.sequences[f].values, gout.sequences[f].values.subarray(before * dim, (before + n) * dim)));
  }
  // every rank's gradients are reproducible anywhere: rebuild the others' outputs' shapes from the oracle
  const grads = batches.map((b, p) => {
    const rows = S.sliceRows(gout.pooled, oracle.pooledDim, p * B, B);
    const seq = {};
    for (const f of oracle.sequenceFeatures) seq[f] = { values: new Float32Array(b.feature(f).ids.length * oracle.featureInfo.find((x) => x.name === f).dim) };
    return S.gradsFor({ pooled: rows, sequences: seq }, p, step);
  });
  await sc.backward(out, grads[r]);
  await oracle.backward(gout, S.concatGrads(grads, oracle.sequenceFeatures));
  const predicted = measureTraffic(plan, batches).perRank[r];
  if (JSON.stringify(sc.traffic) !== JSON.stringify(predicted)) trafficOk = false;
  inter += sc.traffic.forward.sentInter + sc.traffic.backward.sentInter;
}
for (const t of plan.tables) {
  const gth = await gatherTable(sc, t.name);
  const ids = Array.from({ length: t.rows }, (_, i) => i);
  tableErr = Math.max(tableErr, S.relErr(gth.weights, oracle.readRows(t.name, ids)));
  if (oracle.stateWidth(t.name) > 0) stateErr = Math.max(stateErr, S.relErr(gth.state, oracle.readState(t.name, ids)));
}
console.log(JSON.stringify({ rank: r, size: W, ranksPerNode: g.ranksPerNode, outErr, tableErr, stateErr, trafficOk, inter, step: sc.step }));
sc.dispose();
oracle.dispose();
g.close();

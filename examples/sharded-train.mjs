// sharded-train.mjs — sharded embedding training across MPI ranks:
//   npm run compile && mpirun -np 4 node examples/sharded-train.mjs            (CPU ranks, MPI all-to-all)
//   mpirun -np 4 node examples/sharded-train.mjs --nccl                       (one GPU per rank, NCCL)
// Rank 0 plans the tables with embshard's planner for this topology and broadcasts the plan; every rank
// then trains on its own local batches (a toy regression: push every pooled embedding towards a target)
// and rank 0 prints the loss and the bytes each step moved. --save DIR writes a checkpoint any world size
// (or a single EmbeddingCollection) can load.
import { JaggedBatch } from 'embshard';
import { ShardPlan, planShards, topologyPreset } from 'embshard/plan';
import { ShardedEmbeddingCollection, createMpiGroup, createNcclGroup, saveSharded } from 'embshard/sharded';

const args = process.argv.slice(2);
const useNccl = args.includes('--nccl');
const steps = Number(args[args.indexOf('--steps') + 1] ?? 0) || 20;
const saveDir = args.includes('--save') ? args[args.indexOf('--save') + 1] : undefined;

const mpi = await createMpiGroup({ timeoutMs: 120_000 });
const group = useNccl ? await createNcclGroup({ bootstrap: mpi }) : mpi;
const W = group.size, rank = group.rank;
const B = 512;

// A small DLRM-like model: a few big tables (model parallel), a few small ones (data parallel candidates).
const tables = [
  { name: 'user', rows: 400_000, dim: 64, features: ['user_id'], access: { zipf: 1.1 } },
  { name: 'item', rows: 200_000, dim: 64, features: ['item_id', 'last_item'], poolingFactors: [1, 8], access: { zipf: 1.05 } },
  { name: 'category', rows: 1_000, dim: 32, features: ['category'] },
  { name: 'query', rows: 100_000, dim: 32, pooling: 'mean', features: ['query_terms'], poolingFactors: [6], access: { zipf: 1.2 } },
];

// Plan on rank 0 (the search is time-boxed, so ranks could disagree) and broadcast it as JSON.
let json = new Uint8Array(0);
if (rank === 0) {
  const topology = topologyPreset(useNccl ? 'dgx-h100' : 'cpu', { worldSize: W, ranksPerNode: group.ranksPerNode });
  json = new TextEncoder().encode(JSON.stringify(planShards(tables, topology, { batchSize: B, timeBudgetMs: 2000 }).toJSON()));
}
const len = await mpi.broadcast(Float64Array.of(json.length), 0);
if (rank !== 0) json = new Uint8Array(len[0]);
await mpi.broadcast(json, 0);
const plan = ShardPlan.fromJSON(new TextDecoder().decode(json));
if (rank === 0) console.log(plan.explain());

const sc = new ShardedEmbeddingCollection(plan, group, {
  optimizer: { type: 'adagrad', lr: 0.05 },
  seed: 42,
  ...(useNccl ? { device: `cuda:${rank % group.ranksPerNode}` } : {}),
});

// Local batches: Zipf-ish ids per feature (hot rows first), seeded by rank and step.
function localBatch(step) {
  let s = (rank * 2654435761 + step * 40503 + 17) >>> 0;
  const rnd = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296);
  const features = [], lengths = [], ids = [];
  for (const t of plan.tables)
    t.features.forEach((f, k) => {
      features.push(f);
      for (let b = 0; b < B; b++) {
        const n = 1 + Math.floor(rnd() * 2 * (t.poolingFactors[k] - 1));
        lengths.push(n);
        for (let i = 0; i < n; i++) ids.push(BigInt(Math.floor(t.rows * rnd() ** 4)));
      }
    });
  return JaggedBatch.fromLengths({ features, batchSize: B, lengths: Int32Array.from(lengths), ids: BigInt64Array.from(ids) });
}

const target = 0.1;
for (let step = 0; step < steps; step++) {
  const t0 = performance.now();
  const out = await sc.forward(localBatch(step));
  // loss = mean (pooled - target)^2; its gradient goes back through the sharded tables
  const grad = new Float32Array(out.pooled.length);
  let loss = 0;
  for (let i = 0; i < grad.length; i++) {
    const d = out.pooled[i] - target;
    loss += d * d;
    grad[i] = (2 * d) / grad.length;
  }
  const sequences = Object.fromEntries(Object.entries(out.sequences).map(([f, s]) => [f, new Float32Array(s.values.length)]));
  await sc.backward(out, { pooled: grad, sequences });
  const total = await group.allReduce(Float64Array.of(loss / grad.length), 'sum', { uncounted: true });
  const tr = sc.traffic;
  if (rank === 0)
    console.log(
      `step ${step}: loss ${(total[0] / W).toFixed(6)}  ${(performance.now() - t0).toFixed(1)} ms  sent fwd ${((tr.forward.sentIntra + tr.forward.sentInter) / 1e6).toFixed(2)} MB` +
        ` bwd ${((tr.backward.sentIntra + tr.backward.sentInter) / 1e6).toFixed(2)} MB (rank 0)`,
    );
}
if (saveDir) {
  await saveSharded(sc, saveDir);
  if (rank === 0) console.log(`checkpoint written to ${saveDir} (load it with loadSharded under any plan, or EmbeddingCollection.load)`);
}
sc.dispose();
if (group !== mpi) group.close();
mpi.close();

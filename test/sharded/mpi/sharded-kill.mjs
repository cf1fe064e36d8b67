// Run under mpirun --enable-recovery (test/sharded/sharded-mpi.test.ts): sharded training where the last rank
// dies at the start of step 2; every survivor must fail with COMM_TIMEOUT / COMM_FAILED within its
// timeout. Prints one JSON line per survivor.
import { JaggedBatch } from '../../../dist/lib/batch.js';
import { ShardPlan } from '../../../dist/lib/plan/shard-plan.js';
import { createMpiGroup } from '../../../dist/lib/sharded/group.js';
import { ShardedEmbeddingCollection } from '../../../dist/lib/sharded/sharded.js';
import * as S from '../scenario.mjs';

const timeoutMs = Number(process.argv[2] ?? 2000);
const lib = { JaggedBatch, ShardPlan };
const g = await createMpiGroup({ timeoutMs });
const plan = S.makePlan(lib, g.size, g.ranksPerNode);
const sc = new ShardedEmbeddingCollection(plan, g, { optimizer: { type: 'sgd', lr: 0.1 } });
let step = 0, t0 = Date.now();
try {
  for (; step < 5; step++) {
    if (step === 2 && g.rank === g.size - 1) process.kill(process.pid, 'SIGKILL');
    t0 = Date.now();
    const out = await sc.forward(S.localBatch(lib, plan, g.rank, step));
    await sc.backward(out, S.gradsFor(out, g.rank, step));
  }
  console.log(JSON.stringify({ rank: g.rank, error: null }));
} catch (e) {
  console.log(JSON.stringify({ rank: g.rank, step, code: e.code, message: e.message, waitedMs: Date.now() - t0 }));
}
process.exit(0);

// Run under mpirun --enable-recovery (test/herald/herald-mpi.test.ts): Herald-scheduled training where the
// last rank dies at the start of step 2; every survivor must fail with COMM_TIMEOUT / COMM_FAILED within
// its timeout. Prints one JSON line per survivor.
import { JaggedBatch } from '../../../dist/lib/batch.js';
import { createMpiGroup } from '../../../dist/lib/sharded/group.js';
import { HeraldEmbeddingCollection } from '../../../dist/lib/herald/collection.js';
import * as S from '../scenario.mjs';

const timeoutMs = Number(process.argv[2] ?? 2000);
const lib = { JaggedBatch };
const g = await createMpiGroup({ timeoutMs });
const B = 6;
const h = new HeraldEmbeddingCollection(S.config({ type: 'sgd', lr: 0.1 }), g, { cacheRows: 8, batchSize: B });
let step = 0, t0 = Date.now();
try {
  for (; step < 5; step++) {
    if (step === 2 && g.rank === g.size - 1) process.kill(process.pid, 'SIGKILL');
    t0 = Date.now();
    const out = await h.forward(h.assign(S.globalBatch(lib, step, g.size * B)));
    await h.backward(out, { pooled: S.gradsFor(step, out.samples, h.pooledDim) });
  }
  console.log(JSON.stringify({ rank: g.rank, error: null }));
} catch (e) {
  console.log(JSON.stringify({ rank: g.rank, step, code: e.code, message: e.message, waitedMs: Date.now() - t0 }));
}
process.exit(0);

// Run under mpirun --enable-recovery (test/sharded/group-mpi.test.ts): the last rank kills itself in the
// middle of a training-like loop; every surviving rank must fail with COMM_TIMEOUT / COMM_FAILED within
// its timeout instead of hanging. Prints one JSON line per survivor.
import { createMpiGroup } from '../../../dist/lib/sharded/group.js';

const timeoutMs = Number(process.argv[2] ?? 2000);
const g = await createMpiGroup({ timeoutMs });
const victim = g.size - 1;
let step = 0;
const t0 = Date.now();
let failedAt = 0;
try {
  for (; step < 100; step++) {
    if (step === 3 && g.rank === victim) process.kill(process.pid, 'SIGKILL');
    const counts = new Array(g.size).fill(4);
    await g.allToAllV(new Float32Array(4 * g.size).fill(step), counts);
    await g.allReduce(new Float32Array([1]));
  }
  console.log(JSON.stringify({ rank: g.rank, error: null }));
} catch (e) {
  failedAt = Date.now();
  console.log(JSON.stringify({ rank: g.rank, step, code: e.code, message: e.message, waitedMs: failedAt - t0 }));
}
process.exit(0);

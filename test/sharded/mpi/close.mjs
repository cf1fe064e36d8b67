// Run under mpirun --enable-recovery (test/sharded/group-mpi.test.ts): rank 0 closes its group while one of
// its collectives waits for the other ranks, which join it only later. Rank 0 must reject that call with
// COMM_FAILED and stay healthy: the request it abandoned keeps its buffers (MPI may still read or write
// them), so the pooled buffers its later work takes stay intact. The others must fail or finish, never
// crash. Prints one JSON line per rank. argv[2]: the collective ('known' = allToAllV with recvCounts,
// 'counts' = allToAllV with its count exchange, 'allReduce', 'deterministic').
import { createInProcessGroups, createMpiGroup } from '../../../dist/lib/sharded/group.js';

const what = process.argv[2] ?? 'known';
const g = await createMpiGroup({ timeoutMs: 4000 });
const n = g.size, r = g.rank, len = 1 << 15;
const call = () => {
  const send = new Float32Array(n * len).fill(r + 1);
  const counts = new Array(n).fill(len);
  if (what === 'known') return g.allToAllV(send, counts, { recvCounts: counts });
  if (what === 'counts') return g.allToAllV(send, counts);
  return g.allReduce(send, 'sum', { deterministic: what === 'deterministic' });
};
const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
if (r === 0) {
  const p = call();
  setTimeout(() => g.close('closed mid-call'), 200);
  let code = 'none';
  try {
    await p;
  } catch (e) {
    code = e.code;
  }
  // the peers join now; meanwhile pooled buffers are taken, filled and checked again and again
  const local = createInProcessGroups(1)[0];
  let intact = true;
  const until = Date.now() + 2500;
  while (Date.now() < until) {
    const res = await local.allToAllV(new Float32Array(n * len).fill(7), [n * len]);
    await sleep(20);
    if (res.data.some((v) => v !== 7)) intact = false;
    local.release(res.data);
  }
  console.log(JSON.stringify({ rank: r, code, intact }));
} else {
  await sleep(1000);
  let code = 'ok';
  try {
    await call();
  } catch (e) {
    code = e.code;
  }
  console.log(JSON.stringify({ rank: r, code }));
}
process.exit(0);

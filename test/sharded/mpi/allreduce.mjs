// Run under mpirun (test/sharded/group-mpi.test.ts): the MPI group's all-reduce, both ways, against a naive
// sum (allreduce-oracle.mjs), identical on every rank, and the bytes stats() counts for it. Prints one JSON
// line per rank; exits non-zero on a wrong result.
import assert from 'node:assert/strict';
import { createMpiGroup } from '../../../dist/lib/sharded/group.js';
import { allReduceBytes, exactInputOf, inputOf, naiveSum, rankOrderSumF32 } from '../allreduce-oracle.mjs';

const g = await createMpiGroup({ timeoutMs: 30_000 });
const W = g.size, r = g.rank;
const ranks = Array.from({ length: W }, (_, p) => p);
let maxRel = 0;
for (const n of [1, 3, 1000, 65_537]) {
  for (const deterministic of [false, true]) {
    const before = g.stats().allReduce;
    const mine = inputOf(r, n);
    await g.allReduce(mine, 'sum', { deterministic });
    const inputs = ranks.map((p) => inputOf(p, n));
    if (deterministic) assert.deepEqual(mine, rankOrderSumF32(inputs));
    else {
      const ref = naiveSum(inputs);
      for (let i = 0; i < n; i++) {
        const scale = inputs.reduce((s, a) => s + Math.abs(a[i]), 0);
        const rel = Math.abs(mine[i] - ref[i]) / scale;
        maxRel = Math.max(maxRel, rel);
        assert.ok(rel <= W * 2 ** -23, `element ${i}: ${mine[i]} vs ${ref[i]}`);
      }
    }
    // every rank holds bitwise the same result
    const all = await g.allGather(mine, { uncounted: true });
    for (let p = 1; p < W; p++) assert.deepEqual(all.data.subarray(p * n, (p + 1) * n), all.data.subarray(0, n));
    const after = g.stats().allReduce;
    const exp = allReduceBytes(n, 4, W, r, g.ranksPerNode, deterministic);
    for (const k of ['sent', 'recv', 'sentInter', 'recvInter']) assert.equal(after[k] - before[k], exp[k], k);
    assert.equal(after.calls - before.calls, 1);
    // inputs whose every partial sum is exact: the same result in any order
    const ex = exactInputOf(r, n);
    await g.allReduce(ex, 'sum', { deterministic });
    assert.deepEqual(ex, Float32Array.from(naiveSum(ranks.map((p) => exactInputOf(p, n)))));
  }
}
// (max / min and the integer types through MPI's own collective: collectives.mjs)
// the non-blocking all-reduce's algorithm as Open MPI read it at MPI_Init (the group sets Rabenseifner's, 3,
// unless the launcher's environment named one)
console.log(JSON.stringify({ rank: r, size: W, ok: true, maxRel, algorithm: process.env.OMPI_MCA_coll_libnbc_iallreduce_algorithm }));
g.close();

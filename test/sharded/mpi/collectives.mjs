// Run under mpirun (test/sharded/group-mpi.test.ts): every collective of the MPI group against closed-form
// results, a mismatched call, and the byte counters. Prints one JSON line per rank; exits non-zero on a
// wrong result.
import assert from 'node:assert/strict';
import { createMpiGroup } from '../../../dist/lib/sharded/group.js';

const g = await createMpiGroup({ timeoutMs: 30_000 });
const n = g.size, r = g.rank;

// allToAllV: rank s sends (s + d + 1) float64 to d, element k = s*1000 + d*10 + k
{
  const counts = Array.from({ length: n }, (_, d) => r + d + 1);
  const vals = [];
  for (let d = 0; d < n; d++) for (let k = 0; k < counts[d]; k++) vals.push(r * 1000 + d * 10 + k);
  const res = await g.allToAllV(Float64Array.from(vals), counts);
  const exp = [];
  for (let s = 0; s < n; s++) for (let k = 0; k < s + r + 1; k++) exp.push(s * 1000 + r * 10 + k);
  assert.deepEqual(Array.from(res.data), exp);
  assert.deepEqual(res.counts, Array.from({ length: n }, (_, s) => s + r + 1));
}
// the same with known receive counts (no count phase), and an allGather likewise
{
  const counts = Array.from({ length: n }, (_, d) => r + d + 1);
  const vals = [];
  for (let d = 0; d < n; d++) for (let k = 0; k < counts[d]; k++) vals.push(r * 1000 + d * 10 + k);
  const res = await g.allToAllV(Int32Array.from(vals), counts, { recvCounts: Array.from({ length: n }, (_, s) => s + r + 1) });
  const exp = [];
  for (let s = 0; s < n; s++) for (let k = 0; k < s + r + 1; k++) exp.push(s * 1000 + r * 10 + k);
  assert.deepEqual(Array.from(res.data), exp);
  const ag = await g.allGather(new Float32Array(r + 1).fill(r), { recvCounts: Array.from({ length: n }, (_, s) => s + 1) });
  const agExp = [];
  for (let s = 0; s < n; s++) for (let k = 0; k <= s; k++) agExp.push(s);
  assert.deepEqual(Array.from(ag.data), agExp);
}
// allToAllV with empty messages, BigInt64 payload
{
  const counts = Array.from({ length: n }, (_, d) => (r % 2 === 0 && d % 2 === 1 ? 1 : 0));
  const ids = [];
  for (let d = 0; d < n; d++) if (counts[d]) ids.push(BigInt(r) * 2n ** 40n + BigInt(d));
  const res = await g.allToAllV(BigInt64Array.from(ids), counts);
  const exp = [];
  if (r % 2 === 1) for (let s = 0; s < n; s += 2) exp.push(BigInt(s) * 2n ** 40n + BigInt(r));
  assert.deepEqual(Array.from(res.data), exp);
}
// allGather of different sizes
{
  const res = await g.allGather(new Int32Array(r + 1).fill(r + 7));
  const exp = [];
  for (let s = 0; s < n; s++) for (let k = 0; k <= s; k++) exp.push(s + 7);
  assert.deepEqual(Array.from(res.data), exp);
}
// known sizes with late peers: every rank but 0 calls 50 ms late, so rank 0's call outlasts the JS
// thread's poll and is finished by the worker thread; two calls back to back (the second queues behind
// the first), then one with the ranks in step
{
  const block = (k) => Float32Array.from({ length: n * 3 }, (_, i) => r * 100 + Math.floor(i / 3) * 10 + (i % 3) + k);
  const want = (k) => Array.from({ length: n * 3 }, (_, i) => Math.floor(i / 3) * 100 + r * 10 + (i % 3) + k);
  const counts = Array(n).fill(3), opts = { recvCounts: Array(n).fill(3) };
  if (r > 0) await new Promise((res) => setTimeout(res, 50));
  const [a, b] = await Promise.all([g.allToAllV(block(0), counts, opts), g.allToAllV(block(1), counts, opts)]);
  assert.deepEqual(Array.from(a.data), want(0));
  assert.deepEqual(Array.from(b.data), want(1));
  const late = await g.allGather(Int32Array.of(r, r), { recvCounts: Array(n).fill(2) });
  assert.deepEqual(Array.from(late.data), Array.from({ length: 2 * n }, (_, i) => Math.floor(i / 2)));
  await g.barrier();
  const c = await g.allToAllV(block(2), counts, opts);
  assert.deepEqual(Array.from(c.data), want(2));
}
// allReduce: sum (the deterministic one sums in rank order), max, min
{
  const f = Float32Array.from([r + 0.5, -r]);
  await g.allReduce(f, 'sum');
  assert.deepEqual(Array.from(f), [(n * (n - 1)) / 2 + n / 2, -(n * (n - 1)) / 2]);
  const d = Float64Array.from([0.1 * (r + 1)]);
  await g.allReduce(d, 'sum', { deterministic: true });
  let acc = 0.1;
  for (let s = 1; s < n; s++) acc += 0.1 * (s + 1);
  assert.equal(d[0], acc);
  const mx = Int32Array.from([r, -r]);
  await g.allReduce(mx, 'max');
  assert.deepEqual(Array.from(mx), [n - 1, 0]);
  const mn = BigInt64Array.from([BigInt(r) - 5n]);
  await g.allReduce(mn, 'min');
  assert.deepEqual(Array.from(mn), [-5n]);
}
// broadcast from every root, barrier
for (let root = 0; root < n; root++) {
  const b = r === root ? Uint16Array.from([root, 2 * root, 65535]) : new Uint16Array(3);
  await g.broadcast(b, root);
  assert.deepEqual(Array.from(b), [root, 2 * root, 65535]);
}
await g.barrier();
// traffic of one more all-to-all: (d + 1) float32 from every rank to d
const before = { ...g.traffic };
await g.allToAllV(new Float32Array((n * (n + 1)) / 2), Array.from({ length: n }, (_, d) => d + 1));
const node = (x) => Math.floor(x / g.ranksPerNode);
const exp = { sentIntra: 0, sentInter: 0, recvIntra: 0, recvInter: 0, local: (r + 1) * 4 };
for (let p = 0; p < n; p++) {
  if (p === r) continue;
  if (node(p) === node(r)) { exp.sentIntra += (p + 1) * 4; exp.recvIntra += (r + 1) * 4; }
  else { exp.sentInter += (p + 1) * 4; exp.recvInter += (r + 1) * 4; }
}
const delta = Object.fromEntries(Object.keys(exp).map((k) => [k, g.traffic[k] - before[k]]));
assert.deepEqual(delta, exp);

// a mismatched call: rank 0 calls barrier, the others broadcast; every rank must see COMM_FAILED
let mismatch = 'none';
if (n > 1) {
  try {
    if (r === 0) await g.barrier({ timeoutMs: 10_000 });
    else await g.broadcast(new Int32Array(1), 0, { timeoutMs: 10_000 });
  } catch (e) {
    mismatch = e.code;
  }
  assert.equal(mismatch, 'COMM_FAILED');
}
console.log(JSON.stringify({ rank: r, size: n, ranksPerNode: g.ranksPerNode, ok: true, mismatch }));
g.close();

// allreduce-oracle.mjs — the naive references the all-reduce tests compare against, shared by the
// in-process suite (group-inprocess.test.ts) and the MPI scenario (mpi/allreduce.mjs): each rank's input,
// the sum written from the math (a plain loop over ranks in float64), and the bytes a rank must count for
// reduce-scatter + all-gather (chunk p = elements ⌊p·n/W⌋ … ⌊(p+1)·n/W⌋) or for the gather-and-sum.

/** Rank r's input of length n: fractional values (rounding matters) with a few large ones. */
export function inputOf(rank, n) {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = Math.sin(rank * 7.31 + i * 0.173) * (i % 17 === 0 ? 4096 : 1) + 1 / (rank + 3);
  return a;
}

/** Rank r's input of small multiples of 1/64: every partial sum is exact in fp32, in any order. */
export function exactInputOf(rank, n) {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = (((rank * 7919 + i * 104729) % 2003) - 1001) / 64;
  return a;
}

/** Σ over ranks in float64, element by element. */
export function naiveSum(inputs) {
  const n = inputs[0].length;
  const out = new Float64Array(n);
  for (const a of inputs) for (let i = 0; i < n; i++) out[i] += a[i];
  return out;
}

/** Σ over ranks in rank order with fp32 rounding after every add (the documented deterministic order). */
export function rankOrderSumF32(inputs) {
  const n = inputs[0].length;
  const out = Float32Array.from(inputs[0]);
  for (let r = 1; r < inputs.length; r++) for (let i = 0; i < n; i++) out[i] = Math.fround(out[i] + inputs[r][i]);
  return out;
}

/** Bytes rank r sends (= receives) for one all-reduce of n elements of `bpe` bytes over W ranks, split by node. */
export function allReduceBytes(n, bpe, W, r, ranksPerNode, deterministic) {
  const chunk = (p) => (Math.floor((n * (p + 1)) / W) - Math.floor((n * p) / W)) * bpe;
  let sent = 0, recv = 0, sentInter = 0, recvInter = 0;
  for (let p = 0; p < W; p++) {
    if (p === r) continue;
    const out = deterministic ? n * bpe : chunk(p) + chunk(r);
    const back = deterministic ? n * bpe : chunk(r) + chunk(p);
    sent += out;
    recv += back;
    if (Math.floor(p / ranksPerNode) !== Math.floor(r / ranksPerNode)) {
      sentInter += out;
      recvInter += back;
    }
  }
  return { sent, recv, sentInter, recvInter };
}

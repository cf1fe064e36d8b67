// scenario.mjs — the sharded-training scenario shared by the in-process tests (vitest, TypeScript
// sources) and the mpirun scripts (compiled dist/): one plan covering every cluster type, row / column /
// table splits, both hot-row tiers, sum / mean / sequence pooling; seeded batches and gradients; and the
// oracle: a single EmbeddingCollection over the global batch (every rank's local batch in rank order).
// The library is passed in (`lib`), so the same code runs against either build.

/** mulberry32: a tiny seeded generator for test data (independent of the library's generators). */
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Table specs and placements for W ranks (rank numbers folded into [0, W)). */
export function scenarioTables(W, variant = 'all') {
  const R = (k) => k % W;
  const all = [
    { table: { name: 'A', rows: 40, dim: 8, pooling: 'sum', features: ['a1', 'a2'] }, cluster: 'dp' },
    {
      table: { name: 'Bt', rows: 64, dim: 8, pooling: 'mean', features: ['b1', 'b2'] },
      cluster: 'rb',
      shards: [
        { rows: [0, 24], cols: [0, 8], rank: R(0) },
        { rows: [24, 64], cols: [0, 4], rank: R(1) },
        { rows: [24, 64], cols: [4, 8], rank: R(2) },
      ],
    },
    {
      table: { name: 'C', rows: 50, dim: 6, pooling: 'sum', features: ['c1'] },
      cluster: 'ub',
      shards: [
        { rows: [0, 30], cols: [0, 6], rank: R(W - 1) },
        { rows: [30, 50], cols: [0, 2], rank: R(0) },
        { rows: [30, 50], cols: [2, 6], rank: R(1) },
      ],
    },
    {
      table: { name: 'D', rows: 48, dim: 4, pooling: 'sum', features: ['d1'] },
      cluster: 'rb',
      tiers: { replicated: 4, node: 6 },
      shards: [
        { rows: [10, 30], cols: [0, 4], rank: R(1) },
        { rows: [30, 48], cols: [0, 4], rank: R(W - 1) },
      ],
    },
    {
      table: { name: 'E', rows: 40, dim: 4, pooling: 'mean', features: ['e1', 'e2'] },
      cluster: 'ub',
      tiers: { replicated: 3, node: 5 },
      shards: [
        { rows: [8, 40], cols: [0, 2], rank: R(0) },
        { rows: [8, 40], cols: [2, 4], rank: R(W - 1) },
      ],
    },
    {
      table: { name: 'F', rows: 30, dim: 4, pooling: 'none', features: ['f1'] },
      cluster: 'rb',
      shards: [
        { rows: [0, 15], cols: [0, 4], rank: R(0) },
        { rows: [15, 30], cols: [0, 2], rank: R(2) },
        { rows: [15, 30], cols: [2, 4], rank: R(W - 1) },
      ],
    },
    {
      table: { name: 'G', rows: 20, dim: 4, pooling: 'none', features: ['g1'] },
      cluster: 'ub',
      shards: [{ rows: [0, 20], cols: [0, 4], rank: R(1) }],
    },
  ];
  if (variant === 'all') return all;
  return all.filter((t) => variant.split(',').includes(t.table.name));
}

export function topology(W, ranksPerNode) {
  return { name: 'test', worldSize: W, ranksPerNode, deviceMemoryBytes: 1e12, memoryLimitBytes: 1e12, hbmBandwidth: 1e12, intraNodeBandwidth: 1e11, interNodeBandwidth: 1e10 };
}

export function makePlan(lib, W, ranksPerNode, { B = 6, wire, variant, hierarchical = false } = {}) {
  return lib.ShardPlan.create({ topology: topology(W, ranksPerNode), batchSize: B, ...(wire ? { wire } : {}), hierarchical, tables: scenarioTables(W, variant) });
}

/** The local batch of `rank` at `step`: skewed ids (hot rows are hit), 0–4 ids per bag. */
export function localBatch(lib, plan, rank, step, { B = 6, weighted = false } = {}) {
  const rand = rng(1000 * step + rank + 7);
  const features = [], lengthsAll = [], ids = [], weights = [];
  for (const t of plan.tables) {
    for (const f of t.features) {
      features.push(f);
      for (let b = 0; b < B; b++) {
        const n = Math.floor(rand() * 5);
        lengthsAll.push(n);
        for (let k = 0; k < n; k++) {
          const u = rand();
          ids.push(BigInt(Math.min(t.rows - 1, Math.floor(t.rows * u * u))));
          weights.push(0.5 + rand());
        }
      }
    }
  }
  return lib.JaggedBatch.fromLengths({
    features,
    batchSize: B,
    lengths: Int32Array.from(lengthsAll),
    ids: BigInt64Array.from(ids),
    weights: weighted ? Float32Array.from(weights) : undefined,
  });
}

/** The concatenation of the ranks' local batches (per feature, rank-major bags). */
export function globalBatch(lib, batches) {
  const features = batches[0].features;
  const B = batches.reduce((a, b) => a + b.batchSize, 0);
  const lengths = [], ids = [], weights = [];
  for (const f of features) {
    for (const b of batches) {
      const v = b.feature(f);
      lengths.push(...v.lengths);
      ids.push(...v.ids);
      if (v.weights) weights.push(...v.weights);
    }
  }
  return lib.JaggedBatch.fromLengths({
    features,
    batchSize: B,
    lengths: Int32Array.from(lengths),
    ids: BigInt64Array.from(ids),
    weights: batches[0].weights ? Float32Array.from(weights) : undefined,
  });
}

/** Seeded gradients for a rank's forward output: pooled [B × pooledDim] and each sequence feature's. */
export function gradsFor(out, rank, step) {
  const rand = rng(777 + 31 * step + rank);
  const pooled = Float32Array.from({ length: out.pooled.length }, () => rand() * 2 - 1);
  const sequences = {};
  for (const [f, s] of Object.entries(out.sequences)) sequences[f] = Float32Array.from({ length: s.values.length }, () => rand() * 2 - 1);
  return { pooled, sequences };
}

/** Rows [r*B, (r+1)*B) of the global pooled output (rank r's slice), and the ranks' grads concatenated. */
export function sliceRows(a, width, r0, n) {
  return a.subarray(r0 * width, (r0 + n) * width);
}
export function concatGrads(grads, seqFeatures) {
  const pooled = Float32Array.from(grads.flatMap((g) => [...g.pooled]));
  const sequences = {};
  for (const f of seqFeatures) sequences[f] = Float32Array.from(grads.flatMap((g) => [...g.sequences[f]]));
  return { pooled, sequences };
}

/**
 * The largest relErr of every rank's forward output (pooled and sequences) against the single collection's
 * output `gout` over the global batch (rank-major samples and sequence ids).
 */
export function outputErr(outs, gout, oracle, batches) {
  let err = 0;
  for (let r = 0, row = 0; r < batches.length; row += batches[r].batchSize, r++) {
    err = Math.max(err, relErr(outs[r].pooled, sliceRows(gout.pooled, oracle.pooledDim, row, batches[r].batchSize)));
    for (const f of oracle.sequenceFeatures) {
      const dim = oracle.featureInfo.find((x) => x.name === f).dim;
      let before = 0;
      for (let p = 0; p < r; p++) before += batches[p].feature(f).ids.length;
      const n = batches[r].feature(f).ids.length;
      err = Math.max(err, relErr(outs[r].sequences[f].values, gout.sequences[f].values.subarray(before * dim, (before + n) * dim)));
    }
  }
  return err;
}

/**
 * One training step of the sharded ranks (rank r on batches[r]) and of the single collection `oracle` on the
 * global batch, with the seeded gradients of gradsFor; resolves to the largest output error (outputErr).
 */
export async function stepBoth(lib, ranks, oracle, batches, step) {
  const outs = await Promise.all(ranks.map((sc, r) => sc.forward(batches[r])));
  const gout = await oracle.forward(globalBatch(lib, batches));
  const err = outputErr(outs, gout, oracle, batches);
  const grads = outs.map((out, r) => gradsFor(out, r, step));
  await Promise.all(ranks.map((sc, r) => sc.backward(outs[r], grads[r])));
  await oracle.backward(gout, concatGrads(grads, oracle.sequenceFeatures));
  return err;
}

/** max |x − y| / max(|y|, 1e-3): the norm-relative error the tests bound. */
export function relErr(x, y) {
  if (x.length !== y.length) return Infinity;
  let num = 0, den = 1e-3;
  for (let i = 0; i < x.length; i++) {
    num = Math.max(num, Math.abs(x[i] - y[i]));
    den = Math.max(den, Math.abs(y[i]));
  }
  return num / den;
}

// scenario.mjs — the deterministic Herald test scenario shared by the in-process suites and the mpirun
// scripts: a collection config with shared, mean-pooled and weighted tables, skewed global batches, and a
// gradient for every global sample (so every rank can rebuild its own share).

/** Tables: a shared two-feature table, a skewed big one, a tiny mean-pooled one. */
export function config(optimizer) {
  return {
    tables: [
      { name: 'users', rows: 600, dim: 8, features: ['user', 'friend'] },
      { name: 'items', rows: 2000, dim: 4 },
      { name: 'tiny', rows: 7, dim: 4, pooling: 'mean' },
    ],
    optimizer,
    seed: 5,
  };
}

function h(a, b, c) {
  let x = (Math.imul(a, 0x9e3779b1) ^ Math.imul(b + 0x632be5ab, 0x85ebca6b) ^ Math.imul(c + 7, 0xc2b2ae35)) >>> 0;
  x ^= x >>> 15;
  x = Math.imul(x, 0x2c1b3c6d) >>> 0;
  x ^= x >>> 12;
  return (x >>> 0) / 4294967296;
}

/** Skewed ids: rows ⌊rows · u³⌋ (low rows hot). */
function skewed(rows, u) {
  return Math.min(rows - 1, Math.floor(rows * u * u * u));
}

/** The global batch of `step`: G samples; bags of 0-3 ids (weights on 'items' when weighted). */
export function globalBatch(lib, step, G, { weighted = false } = {}) {
  const feats = [['user', 600], ['friend', 600], ['items', 2000], ['tiny', 7]];
  const lengths = new Int32Array(feats.length * G);
  const ids = [], w = [];
  feats.forEach(([, rows], f) => {
    for (let b = 0; b < G; b++) {
      const n = f === 3 ? 1 + Math.floor(h(step, b, f) * 2) : Math.floor(h(step, b, 10 + f) * 4);
      lengths[f * G + b] = n;
      for (let k = 0; k < n; k++) {
        ids.push(skewed(rows, h(step * 31 + k, b, 100 + f)));
        w.push(f === 2 && weighted ? 0.25 + h(step, b * 7 + k, 9) : 1);
      }
    }
  });
  return lib.JaggedBatch.fromLengths({
    features: feats.map(([n]) => n), batchSize: G, lengths, ids: Int32Array.from(ids), weights: weighted ? Float32Array.from(w) : undefined,
  });
}

/** d(pooled) of global sample i, column c. */
export function grad(step, i, c) {
  return Math.sin(step * 1.7 + i * 0.37 + c * 1.3) * 0.5;
}

export function gradsFor(step, samples, pooledDim) {
  const g = new Float32Array(samples.length * pooledDim);
  samples.forEach((i, k) => {
    for (let c = 0; c < pooledDim; c++) g[k * pooledDim + c] = grad(step, i, c);
  });
  return g;
}

/** max |a − b| / max(1, max |b|) */
export function relErr(a, b) {
  if (a.length !== b.length) return Infinity;
  let d = 0, m = 1;
  for (let i = 0; i < a.length; i++) {
    d = Math.max(d, Math.abs(a[i] - b[i]));
    m = Math.max(m, Math.abs(b[i]));
  }
  return d / m;
}

export function bitwise(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) return false;
  return true;
}

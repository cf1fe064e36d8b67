// kill-steps.mjs — the deterministic training run of the kill test: its config, the batch and the
// gradients of step s (a plain LCG, so the test and its child process make the same ones). Run as a
// script (node kill-steps.mjs <dist index.js> <table dir> <checkpoint dir>) it trains forever, saving
// every SAVE_EVERY steps and printing `saved <step>` after each finished save.
export const SAVE_EVERY = 3;
export const B = 16;

export function config(path) {
  return {
    tables: [
      { name: 'd', rows: 20000, dim: 8, storage: { kind: 'disk', path, cacheBytes: 64 * 1024 } },
      { name: 'm', rows: 64, dim: 4 },
    ],
    optimizer: { type: 'adam', lr: 0.01 },
    seed: 5,
  };
}

export function lcg(seed) {
  let x = (seed * 2654435761) >>> 0 || 1;
  return () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return x / 4294967296;
  };
}

export function batchAt(JaggedBatch, s) {
  const r = lcg(s + 1);
  const lengths = new Int32Array(2 * B);
  const ids = [];
  for (let f = 0; f < 2; f++)
    for (let b = 0; b < B; b++) {
      const len = 1 + Math.floor(r() * 4);
      lengths[f * B + b] = len;
      for (let k = 0; k < len; k++) ids.push(BigInt(Math.floor((f === 0 ? 20000 : 64) * r() ** 3)));
    }
  return JaggedBatch.fromLengths({ features: ['d', 'm'], batchSize: B, lengths, ids: BigInt64Array.from(ids) });
}

export function gradsAt(pooledDim, s) {
  const r = lcg(1000 + s);
  return { pooled: Float32Array.from({ length: B * pooledDim }, () => r() * 2 - 1) };
}

export async function train(ec, JaggedBatch, s) {
  const out = await ec.forward(batchAt(JaggedBatch, s));
  await ec.backward(out, gradsAt(ec.pooledDim, s));
}

/**
 * The child process of a kill test: builds a collection of `config(dir)` from the dist build at `index`
 * and trains it with `train(ec, JaggedBatch, step)` forever, saving to `ckpt` every `every` steps and
 * printing `saved <step>` after each finished save.
 */
export async function trainAndSave(index, config, train, dir, ckpt, every) {
  const { EmbeddingCollection, JaggedBatch } = await import(index);
  const ec = new EmbeddingCollection(config(dir));
  for (let s = 0; ; s++) {
    await train(ec, JaggedBatch, s);
    if ((s + 1) % every === 0) {
      await ec.save(ckpt);
      console.log(`saved ${s + 1}`);
    }
  }
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop())) {
  const [, , index, dir, ckpt] = process.argv;
  await trainAndSave(index, config, train, dir, ckpt, SAVE_EVERY);
}

// kill-spill.mjs — the deterministic training run of the spill kill test: a dynamic table far smaller
// than its ids whose evicted rows spill, the batch and gradients of step s (a plain LCG, so the test and
// its child process make the same ones). Run as a script (node kill-spill.mjs <dist index.js> <spill dir>
// <checkpoint dir>) it trains forever, saving every SAVE_EVERY steps and printing `saved <step>` after
// each finished save.
import { lcg, trainAndSave } from './kill-steps.mjs';

export const SAVE_EVERY = 2;
const B = 8;

export function config(spillPath) {
  return {
    tables: [{ name: 'u', rows: 'dynamic', capacity: 48, dim: 8, features: ['u'], init: { type: 'uniform', low: -0.5, high: 0.5 }, spill: { path: spillPath } }],
    optimizer: { type: 'adam', lr: 0.01 },
    seed: 7,
  };
}

export async function train(ec, JaggedBatch, s) {
  const r = lcg(s + 1);
  const lengths = Int32Array.from({ length: B }, () => 1 + Math.floor(r() * 5));
  const n = lengths.reduce((a, b) => a + b, 0);
  // 4000 raw ids (any 64 bits), Zipf-like: most steps evict and re-admit spilled rows
  const ids = BigInt64Array.from({ length: n }, () => BigInt.asIntN(64, BigInt(1 + Math.floor(4000 * r() ** 2)) * 0x9e3779b97f4a7c15n));
  const out = await ec.forward(JaggedBatch.fromLengths({ features: ['u'], batchSize: B, lengths, ids }));
  const g = lcg(1000 + s);
  await ec.backward(out, { pooled: Float32Array.from({ length: B * 8 }, () => g() * 2 - 1) });
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop())) {
  const [, , index, dir, ckpt] = process.argv;
  await trainAndSave(index, config, train, dir, ckpt, SAVE_EVERY);
}

// trainer-saver.mjs — a child process that saves a Trainer checkpoint in a loop, state k for k = 1, 2, …
// (printing "saved k"), every value of state k set by formula: the dense parameters and dense optimizer
// state (denseValue), the embeddings' rows and optimizer state (saver.mjs's weight / accum), the step
// counts k. A loader then checks any checkpoint it reads against the formulas of the steps it holds.
// Usage: node trainer-saver.mjs <lib index.js> <dir>
import { accum, weight } from './saver.mjs';

export const TRAINER_TABLES = [
  { name: 's0', rows: 60000, dim: 8 },
  { name: 's1', rows: 40000, dim: 8 },
];
export const MODEL = { denseIn: 5, bottom: [16, 8], top: [16, 1], numSparse: 2, embDim: 8, interaction: 'dot' };

/** Value i of the dense parameters (part 0) or the dense optimizer state (part 1) of state k. */
export function denseValue(k, part, i) {
  return (((k * 37 + i * 11 + part * 5) % 41) - 20) / 16;
}

/** `n` values of `f(i)`. */
export function filled(n, f) {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = f(i);
  return out;
}

/** Sets every value of trainer `t` to state k. */
function setState(t, k) {
  t.dense.setParams(filled(t.dense.params.length, (i) => denseValue(k, 0, i)));
  t.dense.setState(filled(t.dense.state.length, (i) => denseValue(k, 1, i)));
  t.dense.step = k;
  t.steps = k; // kept private by the class; saved as the trainer's step count
  TRAINER_TABLES.forEach((tab, ti) => {
    const ids = BigInt64Array.from({ length: tab.rows }, (_, r) => BigInt(r));
    t.embeddings.writeRows(tab.name, ids, filled(tab.rows * tab.dim, (j) => weight(k, ti, Math.floor(j / tab.dim), j % tab.dim)));
    t.embeddings.writeState(tab.name, ids, filled(tab.rows * tab.dim, (j) => accum(k, ti, Math.floor(j / tab.dim), j % tab.dim)));
  });
  t.embeddings.step = k;
}

async function main(index, dir) {
  const { EmbeddingCollection } = await import(index);
  const { Trainer } = await import(index.replace(/index\.js$/, 'train/index.js'));
  const emb = new EmbeddingCollection({ tables: TRAINER_TABLES, optimizer: { type: 'adagrad', lr: 0.05 }, seed: 1 });
  const t = new Trainer({ model: MODEL, embeddings: emb, optimizer: { type: 'adam', lr: 0.01 }, seed: 2 });
  for (let k = 1; ; k++) {
    setState(t, k);
    await t.save(dir);
    console.log(`saved ${k}`);
  }
}

if (process.argv[1]?.endsWith('trainer-saver.mjs')) await main(process.argv[2], process.argv[3]);

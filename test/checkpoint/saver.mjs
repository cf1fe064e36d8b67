// saver.mjs — a child process that saves checkpoints of known contents, for the crash tests: a
// collection whose state k is written by formula (rows, optimizer state, step k), saved for k = 1, 2, …
// ('loop', printing "saving k" / "saved k"), or saved twice with a SIGKILL of itself at one point of the
// second save ('kill-<point>'): 'aside' right after the old folder was moved aside (between the two
// renames), 'swapped' right after the new folder was renamed in, 'manifest' as the manifest is written.
// 'states-<from>-<to>': saves states from … to in order, then exits. Trainer mode: the same kills in a
// trainer's save, or steps and saves in a loop ('loop'), printing the SHA-256 of its state per step.
// Usage: node saver.mjs collection <lib index.js> <dir> <loop | kill-point | states-from-to>
//        node saver.mjs trainer <lib train/index.js> <dir> <loop | kill-point>
import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import { basename } from 'node:path';

export const TABLES = [
  { name: 'a', rows: 20000, dim: 16, pooling: 'sum' },
  { name: 'b', rows: 3000, dim: 4, pooling: 'mean', dtype: 'bf16', features: ['b1', 'b2'] },
];
export const OPTIMIZER = { type: 'adagrad', lr: 0.05 };

/** State k of table t: row r, column c (multiples of 1/8 within ±4: exact in bf16). */
export function weight(k, t, r, c) {
  return (((k * 131 + r * 17 + c * 5 + t * 7) % 61) - 30) / 8;
}
/** Adagrad's sum of squares of state k. */
export function accum(k, t, r, c) {
  return ((k * 29 + r * 3 + c + t) % 50) / 4;
}

function fill(rows, width, f) {
  const out = new Float32Array(rows * width);
  for (let r = 0; r < rows; r++) for (let c = 0; c < width; c++) out[r * width + c] = f(r, c);
  return out;
}

function setState(ec, k) {
  TABLES.forEach((t, i) => {
    const ids = BigInt64Array.from({ length: t.rows }, (_, r) => BigInt(r));
    ec.writeRows(t.name, ids, fill(t.rows, t.dim, (r, c) => weight(k, i, r, c)));
    ec.writeState(t.name, ids, fill(t.rows, t.dim, (r, c) => accum(k, i, r, c)));
  });
  ec.step = k;
}

/** Arms a SIGKILL of this process at `point` of the next save to `dir`. */
function armKill(dir, point) {
  const name = basename(dir);
  const rename = fs.rename.bind(fs);
  fs.rename = async (from, to) => {
    await rename(from, to);
    if (point === 'aside' && basename(to).startsWith(`.${name}.old-`)) process.kill(process.pid, 'SIGKILL');
    if (point === 'swapped' && basename(from).startsWith(`.${name}.tmp-`) && basename(to) === name) process.kill(process.pid, 'SIGKILL');
  };
  const open = fs.open.bind(fs);
  fs.open = async (path, ...rest) => {
    if (point === 'manifest' && /(manifest|trainer)\.json$/.test(path) && path.includes(`.${name}.tmp-`)) process.kill(process.pid, 'SIGKILL');
    return open(path, ...rest);
  };
}

async function collection(index, dir, mode) {
  const { EmbeddingCollection } = await import(index);
  const ec = new EmbeddingCollection({ tables: TABLES, optimizer: OPTIMIZER, seed: 1 });
  if (mode.startsWith('states-')) {
    // saves states from … to, in order, then exits
    const [from, to] = mode.slice('states-'.length).split('-').map(Number);
    for (let k = from; k <= to; k++) {
      setState(ec, k);
      await ec.save(dir);
    }
    console.log(`saved ${to}`);
    return;
  }
  for (let k = 1; ; k++) {
    if (mode !== 'loop' && k === 2) armKill(dir, mode.slice('kill-'.length));
    setState(ec, k);
    console.log(`saving ${k}`);
    await ec.save(dir);
    console.log(`saved ${k}`);
    if (mode !== 'loop' && k === 2) throw new Error(`the save was not killed at ${mode}`);
  }
}

/** SHA-256 of a trainer's dense parameters and state and every table's rows and optimizer state. */
export function trainerDigest(t) {
  const h = createHash('sha256');
  const bytes = (a) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  h.update(bytes(t.dense.params)).update(bytes(t.dense.state));
  for (const tab of t.embeddings.config.tables) {
    const ids = BigInt64Array.from({ length: tab.rows }, (_, r) => BigInt(r));
    h.update(bytes(t.embeddings.readRows(tab.name, ids))).update(bytes(t.embeddings.readState(tab.name, ids)));
  }
  return h.digest('hex');
}

/** SHA-256 of a trainer's dense parameters and dense optimizer state. */
export function denseDigest(t) {
  const bytes = (a) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  return createHash('sha256').update(bytes(t.dense.params)).update(bytes(t.dense.state)).digest('hex');
}

export const TRAINER_SPEC = { denseIn: 13, bottom: [16, 8], top: [16, 1], numSparse: 4, embDim: 8, interaction: 'dot' };

async function trainer(trainIndex, dir, mode) {
  const { Trainer, embeddingsFor } = await import(trainIndex);
  const { SyntheticSource } = await import(trainIndex.replace(/train[/\\]index\.js$/, 'data/index.js'));
  const src = new SyntheticSource({ batchSize: 32, cardinalities: [300, 300, 300, 300], seed: 1 });
  const emb = embeddingsFor(src.features, src.tableRows, { dim: 8, optimizer: { type: 'adam', lr: 0.02 }, seed: 3 });
  const t = new Trainer({ model: TRAINER_SPEC, embeddings: emb, optimizer: { type: 'adam', lr: 0.02 }, seed: 7 });
  if (mode === 'loop')
    for (let k = 1; ; k++) {
      await t.step(src.batch(k));
      console.log(`state ${t.steps} ${trainerDigest(t)} ${denseDigest(t)}`);
      await t.save(dir);
      console.log(`saved ${t.steps}`);
    }
  for (let k = 1; k <= 2; k++) {
    if (k === 2) armKill(dir, mode.slice('kill-'.length));
    await t.step(src.batch(k));
    console.log(`state ${t.steps} ${trainerDigest(t)}`);
    await t.save(dir);
    console.log(`saved ${t.steps}`);
  }
  throw new Error(`the save was not killed at ${mode}`);
}

const [kind, index, dir, mode] = process.argv.slice(2);
if (kind === 'collection') await collection(index, dir, mode);
else if (kind === 'trainer') await trainer(index, dir, mode);

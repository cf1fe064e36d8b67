// load-while-saving.test.ts — Trainer.load and EmbeddingCollection.load, called plainly, while another
// process saves to the same folder in a loop (what a server's reload meets while a training job saves
// there): every load succeeds and holds exactly one save's state — each value checked bitwise against the
// formula the saving process wrote that save from (the save's index is the step count it holds), so a
// trainer whose dense weights and embeddings come from two saves fails; never refused.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection } from '../../lib/index.js';
import { Trainer } from '../../lib/train/index.js';
import { tempDir } from '../temp-dir.js';
import { holdsState, last, libIndex, runSaver, saver, savingInLoop, trainerSteps } from './child.js';
// @ts-expect-error a plain ES module shared with the child process
import { accum, weight } from './saver.mjs';
// @ts-expect-error a plain ES module shared with the child process
import { TRAINER_TABLES, denseValue, filled } from './trainer-saver.mjs';

const tmp = tempDir('ckpt-load-while-saving');
const trainerSaver = join(saver, '..', 'trainer-saver.mjs');


/**
 * Calls `load` while the child saves: at least `min` times, and on until the child has saved ten more
 * times (at most `max` loads). Returns the state index of every load (each checked by `load`).
 */
async function loadWhileSaving(child: { lines: string[] }, min: number, max: number, load: () => Promise<number>): Promise<number[]> {
  const seen: number[] = [];
  const from = last(child.lines, 'saved');
  for (let i = 0; i < min || (last(child.lines, 'saved') < from + 10 && i < max); i++) seen.push(await load());
  return seen;
}

const bytes = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

/** Whether `got` equals `want` bitwise (a bare boolean keeps a mismatch's report short). */
const same = (got: Float32Array, want: Float32Array) => bytes(got).equals(bytes(want));

/** Every value of trainer `t` against state k of trainer-saver.mjs: [part, matches] for each part. */
function trainerParts(t: Trainer, k: number): [string, boolean][] {
  const parts: [string, boolean][] = [
    ['dense params', same(t.dense.params, filled(t.dense.params.length, (i: number) => denseValue(k, 0, i)))],
    ['dense state', same(t.dense.state, filled(t.dense.state.length, (i: number) => denseValue(k, 1, i)))],
    ['dense step', t.dense.step === k],
    ['embedding step', t.embeddings.step === k],
  ];
  const emb = t.embeddings as EmbeddingCollection;
  (TRAINER_TABLES as { name: string; rows: number; dim: number }[]).forEach((tab, ti) => {
    const ids = BigInt64Array.from({ length: tab.rows }, (_, r) => BigInt(r));
    const at = (f: (k: number, t: number, r: number, c: number) => number) => filled(tab.rows * tab.dim, (j: number) => f(k, ti, Math.floor(j / tab.dim), j % tab.dim));
    parts.push([`${tab.name} rows`, same(emb.readRows(tab.name, ids), at(weight))], [`${tab.name} state`, same(emb.readState(tab.name, ids), at(accum))]);
  });
  return parts;
}

describe('plain loads while another process saves to the folder in a loop', () => {
  it('Trainer.load: never refused; trainer.json, dense.bin and embeddings/ always of one save, bitwise', async () => {
    await runSaver([]); // the compiled library current
    const dir = join(tmp.dir, 'trainer', 'ck');
    const child = await savingInLoop([trainerSaver, libIndex, dir]);
    let seen: number[];
    try {
      seen = await loadWhileSaving(child, 40, 2000, async () => {
        const t = await Trainer.load(dir);
        try {
          const k = trainerSteps(t);
          const parts = trainerParts(t, k);
          expect([k, parts]).toEqual([k, parts.map(([p]) => [p, true])]);
          return k;
        } finally {
          t.dispose();
        }
      });
    } finally {
      await child.stop();
    }
    expect(new Set(seen).size).toBeGreaterThan(1); // saves landed while it loaded
  }, 180_000);

  it('EmbeddingCollection.load: never refused; every row and its optimizer state of one save, bitwise', async () => {
    await runSaver([]);
    const dir = join(tmp.dir, 'collection', 'ck');
    const child = await savingInLoop([saver, 'collection', libIndex, dir, 'loop']);
    let seen: number[];
    try {
      seen = await loadWhileSaving(child, 40, 2000, async () => {
        const ec = await EmbeddingCollection.load(dir);
        try {
          holdsState(ec, ec.step);
          return ec.step;
        } finally {
          ec.dispose();
        }
      });
    } finally {
      await child.stop();
    }
    expect(new Set(seen).size).toBeGreaterThan(1);
  }, 180_000);
});

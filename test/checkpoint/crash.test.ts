// crash.test.ts — crash consistency: a child process that saves checkpoints of known contents is killed
// (SIGKILL) at random points of its saves, and at exact points of one save (right after the old folder
// was moved aside, right after the new one was renamed in, as the manifest is written); a load then
// gives the old checkpoint or the new one, bitwise, never a torn one nor a refusal, and the next save
// leaves no folder of the killed one behind. Collections and trainers.
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection } from '../../lib/index.js';
import { Trainer } from '../../lib/train/index.js';
import { tempDir } from '../temp-dir.js';
import { holdsState, last, libIndex, runSaver, trainIndex, trainerSteps } from './child.js';
// @ts-expect-error a plain ES module shared with the child process
import { OPTIMIZER, TABLES, trainerDigest, weight, accum } from './saver.mjs';

const tmp = tempDir('ckpt-crash');

/** The names beside checkpoint `name` in `parent` that its saves leave while they run. */
function siblings(parent: string, name: string): string[] {
  return readdirSync(parent).filter((n) => n.startsWith(`.${name}.`));
}

/** A collection in state k of saver.mjs (written here from the same formulas). */
function collectionAt(k: number): EmbeddingCollection {
  const ec = new EmbeddingCollection({ tables: TABLES, optimizer: OPTIMIZER, seed: 1 });
  (TABLES as { name: string; rows: number; dim: number }[]).forEach((t, i) => {
    const ids = BigInt64Array.from({ length: t.rows }, (_, r) => BigInt(r));
    const w = new Float32Array(t.rows * t.dim), s = new Float32Array(t.rows * t.dim);
    for (let r = 0; r < t.rows; r++)
      for (let c = 0; c < t.dim; c++) {
        w[r * t.dim + c] = weight(k, i, r, c);
        s[r * t.dim + c] = accum(k, i, r, c);
      }
    ec.writeRows(t.name, ids, w);
    ec.writeState(t.name, ids, s);
  });
  ec.step = k;
  return ec;
}

/** mulberry32: the test's own seeded stream of kill delays. */
function stream(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('a save killed at an exact point', () => {
  // the point, and which of the two saves a load then reads: the new one once its folder is complete
  const points = [['aside', 2], ['swapped', 2], ['manifest', 1]] as const;
  for (const [point, want] of points) {
    it(`collection, killed ${point}: load reads save ${want} bitwise; the next save tidies up`, async () => {
      const parent = join(tmp.dir, `c-${point}`), dir = join(parent, 'ck');
      const run = await runSaver(['collection', libIndex, dir, `kill-${point}`]);
      expect([run.signal, run.stderr]).toEqual(['SIGKILL', '']);
      expect(siblings(parent, 'ck').length).toBeGreaterThan(0); // the kill left its folders
      const ec = await EmbeddingCollection.load(dir);
      holdsState(ec, want);
      ec.dispose();
      const next = collectionAt(3);
      await next.save(dir);
      next.dispose();
      expect(siblings(parent, 'ck')).toEqual([]);
      const again = await EmbeddingCollection.load(dir);
      holdsState(again, 3);
      again.dispose();
    });

    it(`trainer, killed ${point}: Trainer.load reads save ${want} bitwise; the next save tidies up`, async () => {
      const parent = join(tmp.dir, `t-${point}`), dir = join(parent, 'ck');
      const run = await runSaver(['trainer', trainIndex, dir, `kill-${point}`]);
      expect([run.signal, run.stderr]).toEqual(['SIGKILL', '']);
      const digests = new Map(run.lines.filter((l) => l.startsWith('state ')).map((l) => [Number(l.split(' ')[1]), l.split(' ')[2]]));
      const t = await Trainer.load(dir);
      expect(trainerSteps(t)).toBe(want);
      expect(trainerDigest(t)).toBe(digests.get(want));
      await t.save(dir);
      expect(siblings(parent, 'ck')).toEqual([]);
      t.dispose();
      const again = await Trainer.load(dir);
      expect(trainerDigest(again)).toBe(digests.get(want));
      again.dispose();
    });
  }
});

describe('saves killed at random points', () => {
  for (const seed of [1, 2, 3])
    it(`seed ${seed}: every kill leaves the last finished save or the one in flight, bitwise, and loadable`, async () => {
      const next = stream(seed);
      for (let trial = 0; trial < 8; trial++) {
        const parent = join(tmp.dir, `r${seed}-${trial}`), dir = join(parent, 'ck');
        const after = 1 + Math.floor(next() * 3), delay = Math.floor(next() * 40);
        const run = await runSaver(['collection', libIndex, dir, 'loop'], (lines) => last(lines, 'saved') >= after, delay);
        expect([run.signal, run.stderr]).toEqual(['SIGKILL', '']);
        const saved = last(run.lines, 'saved'), saving = last(run.lines, 'saving');
        const ec = await EmbeddingCollection.load(dir);
        expect([saved, saving]).toContain(ec.step);
        holdsState(ec, ec.step);
        ec.dispose();
      }
    }, 120_000);
});

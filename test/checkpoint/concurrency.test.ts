// concurrency.test.ts — saves and loads of one path at once: two saves (of one process, of two processes,
// and two that both find a killed save's folders to tidy) each land whole, the last swap winning, with no
// error and no folder left beside the path; loads while
// another process saves in a loop read one checkpoint whole (readConsistent; a trainer's manifest and dense
// file always of one save), never refused; a save called again before the first resolves, or a step
// called while a save runs, run in call order: the checkpoint holds the state at the save's call.
import { createHash } from 'node:crypto';
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, JaggedBatch } from '../../lib/index.js';
import { readConsistent } from '../../lib/checkpoint.js';
import { Trainer, readTrainerCheckpoint } from '../../lib/train/index.js';
import { tempDir } from '../temp-dir.js';
import { holdsState, last, libIndex, runSaver, saver, savingInLoop, trainIndex, trainerSteps } from './child.js';
// @ts-expect-error a plain ES module shared with the child process
import { trainerDigest } from './saver.mjs';

const tmp = tempDir('ckpt-concurrency');

const ids = (n: number) => BigInt64Array.from({ length: n }, (_, i) => BigInt(i));
const b64 = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64');

/** A collection of one table whose rows are all `v`, at step `v`. */
function filled(v: number): EmbeddingCollection {
  const ec = new EmbeddingCollection({ tables: [{ name: 'a', rows: 2000, dim: 8 }], optimizer: { type: 'adagrad', lr: 0.1 } });
  ec.writeRows('a', ids(2000), new Float32Array(2000 * 8).fill(v));
  ec.step = v;
  return ec;
}

/** The names beside checkpoint `name` in `parent` that its saves leave while they run. */
const siblings = (parent: string, name = 'ck') => readdirSync(parent).filter((n) => n.startsWith(`.${name}.`));

describe('two saves to one path at once', () => {
  it('of one process (two collections): both resolve, the path holds one of them whole, nothing left beside it', async () => {
    const parent = join(tmp.dir, 'same-process'), dir = join(parent, 'ck');
    const a = filled(1), b = filled(2);
    for (let round = 0; round < 60; round++) {
      const results = await Promise.allSettled([a.save(dir), b.save(dir)]);
      expect(results.map((r) => (r.status === 'rejected' ? String(r.reason) : 'saved'))).toEqual(['saved', 'saved']);
      const back = await EmbeddingCollection.load(dir);
      expect([1, 2]).toContain(back.step);
      expect(b64(back.readRows('a', ids(2000)))).toBe(b64(new Float32Array(2000 * 8).fill(back.step)));
      back.dispose();
      expect(siblings(parent)).toEqual([]);
    }
    a.dispose();
    b.dispose();
  });

  it('after a save killed between its renames: two saves at once both complete its swap and land whole', async () => {
    const parent = join(tmp.dir, 'tidy-race'), dir = join(parent, 'ck');
    const a = filled(1), b = filled(2), c = filled(3);
    for (let round = 0; round < 20; round++) {
      // what a killed save leaves (its pid above Linux's PID_MAX_LIMIT: a writer that cannot be alive)
      await a.save(join(parent, '.ck.old-4194400-0a0b0c0d'));
      await c.save(join(parent, '.ck.tmp-4194400-0a0b0c0d'));
      rmSync(dir, { recursive: true, force: true });
      const results = await Promise.allSettled([a.save(dir), b.save(dir)]);
      expect(results.map((r) => (r.status === 'rejected' ? String(r.reason) : 'saved'))).toEqual(['saved', 'saved']);
      const back = await EmbeddingCollection.load(dir);
      expect([1, 2]).toContain(back.step);
      back.dispose();
      expect(siblings(parent)).toEqual([]);
    }
    for (const x of [a, b, c]) x.dispose();
  });

  it('of two processes saving in a loop: neither fails, the path holds the last state of one of them whole', async () => {
    const parent = join(tmp.dir, 'two-processes'), dir = join(parent, 'ck');
    const runs = await Promise.all([runSaver(['collection', libIndex, dir, 'states-1-8']), runSaver(['collection', libIndex, dir, 'states-101-108'])]);
    expect(runs.map((r) => [r.code, r.stderr])).toEqual([[0, ''], [0, '']]);
    const back = await EmbeddingCollection.load(dir);
    expect([8, 108]).toContain(back.step);
    holdsState(back, back.step);
    back.dispose();
    expect(siblings(parent)).toEqual([]);
  }, 60_000);
});

/** Starts saver.mjs saving `kind` in a loop to `dir`; resolves with its output lines and a kill once it has saved once. */
function savingKindInLoop(kind: 'collection' | 'trainer', dir: string): Promise<{ lines: string[]; stop: () => Promise<void> }> {
  return savingInLoop([saver, kind, kind === 'trainer' ? trainIndex : libIndex, dir, 'loop']);
}

describe('loads while another process saves in a loop', () => {
  it("readTrainerCheckpoint: never refused, the manifest and the dense file always of one save", async () => {
    await runSaver([]); // the compiled library current
    const dir = join(tmp.dir, 'trainer-reads', 'ck');
    const child = await savingKindInLoop('trainer', dir);
    const seen: [number, string][] = [];
    try {
      // reads until the other process has saved ten more times, at least 200
      const from = last(child.lines, 'saved');
      for (let i = 0; i < 200 || (last(child.lines, 'saved') < from + 10 && i < 20000); i++) {
        const ck = await readTrainerCheckpoint(dir);
        const h = createHash('sha256').update(new Uint8Array(ck.params.buffer, ck.params.byteOffset, ck.params.byteLength)).update(new Uint8Array(ck.state.buffer, ck.state.byteOffset, ck.state.byteLength));
        seen.push([ck.manifest.steps, h.digest('hex')]);
      }
    } finally {
      await child.stop();
    }
    const dense = new Map(child.lines.filter((l) => l.startsWith('state ')).map((l) => [Number(l.split(' ')[1]), l.split(' ')[3]]));
    for (const [steps, digest] of seen) expect([steps, digest]).toEqual([steps, dense.get(steps)]);
    expect(new Set(seen.map((s) => s[0])).size).toBeGreaterThan(1); // saves landed while it read
  }, 120_000);

  it('readConsistent: a trainer and a collection loaded whole (bitwise one save), never refused', async () => {
    await runSaver([]);
    const tdir = join(tmp.dir, 'trainer-loads', 'ck');
    const trainer = await savingKindInLoop('trainer', tdir);
    const got: [number, string][] = [];
    try {
      const from = last(trainer.lines, 'saved');
      for (let i = 0; i < 40 || (last(trainer.lines, 'saved') < from + 10 && i < 2000); i++) {
        const t = await readConsistent(tdir, (f) => Trainer.load(f), (x) => x.dispose());
        got.push([trainerSteps(t), trainerDigest(t)]);
        t.dispose();
      }
    } finally {
      await trainer.stop();
    }
    const digests = new Map(trainer.lines.filter((l) => l.startsWith('state ')).map((l) => [Number(l.split(' ')[1]), l.split(' ')[2]]));
    for (const [steps, digest] of got) expect([steps, digest]).toEqual([steps, digests.get(steps)]);

    const cdir = join(tmp.dir, 'collection-loads', 'ck');
    const coll = await savingKindInLoop('collection', cdir);
    try {
      const from = last(coll.lines, 'saved');
      for (let i = 0; i < 40 || (last(coll.lines, 'saved') < from + 10 && i < 2000); i++) {
        const ec = await readConsistent(cdir, (f) => EmbeddingCollection.load(f), (x) => x.dispose());
        holdsState(ec, ec.step);
        ec.dispose();
      }
    } finally {
      await coll.stop();
    }
  }, 120_000);
});

describe('calls made while a save runs', () => {
  it('a save called again before the first resolves, and a step called during a save: call order; each checkpoint holds the state at its call', async () => {
    const ec = new EmbeddingCollection({ tables: [{ name: 'a', rows: 50, dim: 4 }], optimizer: { type: 'adam', lr: 0.1 }, seed: 2 });
    const all = ids(50);
    const state = () => `${ec.step}:${b64(ec.readRows('a', all))}:${b64(ec.readState('a', all))}`;
    const before = state();
    const d1 = join(tmp.dir, 'order-1'), d2 = join(tmp.dir, 'order-2');
    const batch = JaggedBatch.fromLengths({ features: ['a'], batchSize: 2, lengths: new Int32Array([2, 1]), ids: new BigInt64Array([3n, 7n, 3n]) });
    const grads = { pooled: new Float32Array(8).fill(0.5) };
    const load = async (d: string) => {
      const x = await EmbeddingCollection.load(d);
      const s = `${x.step}:${b64(x.readRows('a', all))}:${b64(x.readState('a', all))}`;
      x.dispose();
      return s;
    };
    // a save, another save (elsewhere), the step's update, the first path saved again: none awaited in between
    const d0 = join(tmp.dir, 'order-0');
    const out = await ec.forward(batch);
    const first = ec.save(d1);
    const elsewhere = ec.save(d0);
    const update = ec.backward(out, grads);
    const again = ec.save(d1);
    const other = ec.save(d2);
    await Promise.all([first, elsewhere, update, again, other]);
    const after = state();
    expect(after).not.toBe(before);
    expect(await load(d0)).toBe(before);
    expect(await load(d1)).toBe(after);
    expect(await load(d2)).toBe(after);
    // a whole step called during a save: the checkpoint holds the state before it
    const d3 = join(tmp.dir, 'order-3');
    const saved = ec.save(d3);
    const step = ec.backward(await ec.forward(batch), grads);
    await Promise.all([saved, step]);
    expect(await load(d3)).toBe(after);
    expect(state()).not.toBe(after);
    ec.dispose();
  });
});

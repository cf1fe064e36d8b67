// HeraldScheduler against a naive simulation written from its rules (arrays for LRU caches, sets for
// readers): the allocation is the greedy one (each sample to the rank with room whose cache holds most of
// its ids, ties from a start rotating with the step), every rank gets exactly its batch size, and every
// step's hits, allocator score, moves, dirty evictions, copies and gradient rows agree; random placement is
// balanced too and its counts agree the same way. Bad input (a batch, unknown options, a seed that is not a
// non-negative integer) throws before any state changes.
import { describe, it, expect } from 'vitest';
import { JaggedBatch } from '../../lib/batch.js';
import { HeraldScheduler, type Allocation } from '../../lib/herald/scheduler.js';
import type { HeraldTable } from '../../lib/herald/owners.js';
import { EmbshardError } from '../../lib/errors.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';

const lib = { JaggedBatch };
const TABLES: HeraldTable[] = [
  { name: 'users', rows: 600, dim: 8, stateWidth: 8, features: ['user', 'friend'] },
  { name: 'items', rows: 2000, dim: 4, stateWidth: 1, features: ['items'] },
  { name: 'tiny', rows: 7, dim: 4, stateWidth: 0, features: ['tiny'] },
];

/** The naive model: holder of every checked-out row, an LRU array per (rank, table). */
class Naive {
  holder = new Map<number, number>();
  caches: number[][];
  base = [0, 600, 2600, 2607];
  constructor(
    readonly W: number,
    readonly cap: number,
  ) {
    this.caches = Array.from({ length: W * 3 }, () => []);
  }
  table(x: number): number {
    return x < 600 ? 0 : x < 2600 ? 1 : 2;
  }
  owner(x: number): number {
    const t = this.table(x), rows = TABLES[t]!.rows, r = x - this.base[t]!;
    for (let p = this.W - 1; p >= 0; p--) if (Math.floor((rows * p) / this.W) <= r) return p;
    return 0;
  }
  cache(w: number, x: number): number[] {
    return this.caches[w * 3 + this.table(x)]!;
  }
  remove(w: number, x: number): void {
    const c = this.cache(w, x);
    c.splice(c.indexOf(x), 1);
  }
  sampleKeys(g: JaggedBatch): number[][] {
    const out: number[][] = Array.from({ length: g.batchSize }, () => []);
    TABLES.forEach((t, ti) =>
      t.features.forEach((f) => {
        const fv = g.feature(f);
        let i = 0;
        for (let b = 0; b < g.batchSize; b++) for (let k = 0; k < fv.lengths[b]!; k++) out[b]!.push(this.base[ti]! + Number(fv.ids[i++]!));
      }),
    );
    return out;
  }
  /** Herald's greedy allocation from this model's caches. */
  greedy(keys: number[][], B: number, step: number): number[] {
    const fill = new Array(this.W).fill(0);
    return keys.map((ks) => {
      let best = -1, bs = -1;
      for (let j = 0; j < this.W; j++) {
        const r = (step + j) % this.W;
        const s = ks.filter((x) => this.holder.get(x) === r).length;
        if (fill[r] < B && s > bs) (best = r), (bs = s);
      }
      fill[best]++;
      return best;
    });
  }
  step(keys: number[][], assign: ArrayLike<number>) {
    const c = { moves: 0, evictions: 0, copies: 0, grads: 0, reads: 0, hits: 0, score: 0 };
    keys.forEach((ks, i) => ks.forEach((x) => (c.score += this.holder.get(x) === assign[i] ? 1 : 0)));
    const readers = new Map<number, Set<number>>();
    keys.forEach((ks, i) => ks.forEach((x) => (readers.get(x) ?? readers.set(x, new Set()).get(x)!).add(assign[i]!)));
    const used = [...readers.keys()].sort((a, b) => a - b);
    const pre = new Map(this.holder);
    for (const x of used) {
      const h = this.holder.get(x);
      if (h === undefined) continue;
      const u = readers.get(x)!;
      if (u.size === 1 && u.has(h)) {
        this.remove(h, x);
        this.cache(h, x).push(x);
      } else if (u.size > 1 || u.has(this.owner(x))) {
        this.remove(h, x);
        this.holder.delete(x);
        c.moves++;
      }
    }
    for (const x of used) {
      const u = readers.get(x)!;
      if (u.size !== 1) continue;
      const w = [...u][0]!, o = this.owner(x), h = this.holder.get(x);
      if (w === o || h === w) continue;
      const cw = this.cache(w, x);
      let ok = cw.length < Math.min(this.cap, TABLES[this.table(x)]!.rows);
      if (!ok && cw.length > 0 && !readers.has(cw[0]!)) {
        const y = cw.shift()!;
        this.holder.delete(y);
        c.moves++;
        c.evictions++;
        ok = true;
      }
      if (ok) {
        c.moves++;
        if (h !== undefined) this.remove(h, x);
        cw.push(x);
        this.holder.set(x, w);
      } else if (h !== undefined) {
        this.remove(h, x);
        this.holder.delete(x);
        c.moves++;
      }
    }
    for (let w = 0; w < this.W; w++)
      for (const x of used) {
        if (!readers.get(x)!.has(w)) continue;
        c.reads++;
        const p = pre.get(x) ?? this.owner(x);
        if (p === w) c.hits++;
        if ((this.holder.get(x) ?? this.owner(x)) !== w) {
          if (p !== w) c.copies++;
          c.grads++;
        }
      }
    return c;
  }
}

function run(W: number, B: number, cacheRows: number, allocation: Allocation, steps: number) {
  const s = new HeraldScheduler(TABLES, { world: W, batchSize: B, cacheRows, allocation, seed: 3 });
  const n = new Naive(W, cacheRows);
  let hits = 0, score = 0, moves = 0;
  for (let step = 0; step < steps; step++) {
    const g: JaggedBatch = S.globalBatch(lib, step, W * B);
    const keys = n.sampleKeys(g);
    const want = allocation === 'herald' ? n.greedy(keys, B, step) : undefined;
    const p = s.schedule(g);
    const assign = new Int32Array(W * B).fill(-1);
    p.samples.forEach((list, w) => {
      expect(list.length).toBe(B);
      for (let k = 1; k < list.length; k++) expect(list[k]!).toBeGreaterThan(list[k - 1]!);
      for (const i of list) {
        expect(assign[i]).toBe(-1);
        assign[i] = w;
      }
    });
    expect(assign.includes(-1)).toBe(false);
    if (want) expect(Array.from(assign)).toEqual(want);
    const c = n.step(keys, assign);
    const { moves: m, evictions, copies, grads, reads, hits: h, score: sc } = p.counts;
    expect({ moves: m, evictions, copies, grads, reads, hits: h, score: sc }).toEqual(c);
    hits += c.hits;
    score += c.score;
    moves += c.moves;
  }
  return { hits, score, moves };
}

describe('HeraldScheduler vs a naive simulation of the same caches', () => {
  for (const [W, B, cache, alloc] of [
    [2, 16, 4, 'herald'],
    [3, 10, 2, 'herald'],
    [4, 12, 50, 'herald'],
    [5, 8, 0, 'herald'],
    [4, 12, 3, 'random'],
  ] as [number, number, number, Allocation][])
    it(`${W} ranks × ${B}, cache ${cache}, ${alloc}`, () => {
      const r = run(W, B, cache, alloc, 8);
      if (cache > 0) expect(r.moves).toBeGreaterThan(0);
      if (cache > 0 && alloc === 'herald') expect(r.score).toBeGreaterThan(0);
    });

  it('rejects a batch of the wrong size or an id out of range before any state changes', () => {
    const s = new HeraldScheduler(TABLES, { world: 2, batchSize: 4, cacheRows: 4 });
    expect(() => s.schedule(S.globalBatch(lib, 0, 6))).toThrow(EmbshardError);
    const bad = JaggedBatch.fromBags(['user', 'friend', 'items', 'tiny'], [[[1], [2], [3], [4], [5], [6], [7], [8]], [[], [], [], [], [], [], [], []], [[1], [1], [1], [1], [1], [1], [1], [2000]], [[0], [0], [0], [0], [0], [0], [0], [0]]]);
    expect(() => s.schedule(bad)).toThrow(/items.*2000/);
    expect(s.steps).toBe(0);
    expect(s.schedule(S.globalBatch(lib, 0, 8)).step).toBe(0);
  });

  it('rejects options it does not know and a seed that is not a non-negative integer, naming the field', () => {
    const o = { world: 2, batchSize: 4, cacheRows: 4 };
    expect(() => new HeraldScheduler(TABLES, { ...o, sed: 3 } as never)).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringMatching(/options\.sed: unknown field/) }));
    for (const seed of [-1, 1.5, Number.NaN, '3', 2 ** 60])
      expect(() => new HeraldScheduler(TABLES, { ...o, allocation: 'random', seed } as never)).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringMatching(/^seed/) }));
  });

  it('off the event loop (scheduleAsync): the decisions of the naive simulation; one call at a time', async () => {
    const W = 4, B = 12;
    const s = new HeraldScheduler(TABLES, { world: W, batchSize: B, cacheRows: 3 });
    const n = new Naive(W, 3);
    for (let step = 0; step < 6; step++) {
      const g: JaggedBatch = S.globalBatch(lib, step, W * B);
      const keys = n.sampleKeys(g);
      const want = n.greedy(keys, B, step);
      const pending = s.scheduleAsync(g);
      expect(() => s.schedule(g)).toThrow(/still running/);
      const p = await pending;
      expect(p.step).toBe(step);
      const assign = new Int32Array(W * B);
      p.samples.forEach((list, w) => list.forEach((i) => (assign[i] = w)));
      expect(Array.from(assign)).toEqual(want);
      const { moves, evictions, copies, grads, reads, hits, score } = p.counts;
      expect({ moves, evictions, copies, grads, reads, hits, score }).toEqual(n.step(keys, assign));
    }
  });
});

describe('undo: steps the ranks refused are forgotten', () => {
  for (const allocation of ['herald', 'random'] as Allocation[])
    it(`${allocation}: after rollback() the steps are those of a scheduler that never saw the refused batches (plans equal, the naive simulation's counts)`, async () => {
      const W = 4, B = 12, cacheRows = 3;
      const o = { world: W, batchSize: B, cacheRows, allocation, seed: 3, rank: 1 };
      const s = new HeraldScheduler(TABLES, { ...o, undo: true });
      const fresh = new HeraldScheduler(TABLES, o);
      const n = new Naive(W, cacheRows);
      let refused = 100;
      for (let k = 0; k < 6; k++) {
        const g: JaggedBatch = S.globalBatch(lib, k, W * B);
        const p = k % 2 ? await s.scheduleAsync(g) : s.schedule(g);
        expect(p).toEqual(fresh.schedule(g));
        const keys = n.sampleKeys(g);
        const want = allocation === 'herald' ? n.greedy(keys, B, k) : undefined;
        const assign = new Int32Array(W * B);
        p.samples.forEach((list, w) => list.forEach((i) => (assign[i] = w)));
        if (want) expect(Array.from(assign)).toEqual(want);
        const { moves, evictions, copies, grads, reads, hits, score } = p.counts;
        expect({ moves, evictions, copies, grads, reads, hits, score }).toEqual(n.step(keys, assign));
        // refused steps: one to three scheduled after it (one off the event loop), then, after the kept
        // step was committed or not, all of them rolled back
        const extra = 1 + (k % 3);
        for (let j = 0; j < extra; j++) {
          const bad: JaggedBatch = S.globalBatch(lib, refused++, W * B);
          if (j === 1) await s.scheduleAsync(bad);
          else s.schedule(bad);
        }
        if (k % 2 === 0) s.commit();
        expect(s.steps).toBe(k + 1 + extra);
        if (k % 2 === 0) {
          s.rollback();
          expect(s.steps).toBe(k + 1);
        } else {
          // not committed: the kept step goes too, and is scheduled again
          s.rollback();
          expect(s.steps).toBe(k);
          expect(s.schedule(g)).toEqual(p);
          s.commit();
        }
      }
    });

  it('undo must be a boolean; commit() and rollback() need it, and none of them runs beside scheduleAsync (INVALID_ARGUMENT, a known code)', async () => {
    const o = { world: 2, batchSize: 4, cacheRows: 4 };
    expect(() => new HeraldScheduler(TABLES, { ...o, undo: 'yes' } as never)).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringMatching(/^undo/) }));
    const plain = new HeraldScheduler(TABLES, o);
    for (const f of [() => plain.commit(), () => plain.rollback()]) expect(f).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/undo: true/) }));
    const s = new HeraldScheduler(TABLES, { ...o, undo: true });
    s.schedule(S.globalBatch(lib, 0, 8));
    s.commit();
    const running = s.scheduleAsync(S.globalBatch(lib, 1, 8));
    for (const f of [() => s.rollback(), () => s.schedule(S.globalBatch(lib, 2, 8))]) expect(f).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/still running/) }));
    const busy = plain.scheduleAsync(S.globalBatch(lib, 0, 8));
    expect(() => plain.schedule(S.globalBatch(lib, 1, 8))).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/still running/) }));
    await Promise.all([running, busy]);
    s.rollback();
    expect(s.steps).toBe(1);
  });
});

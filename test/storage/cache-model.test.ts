// cache-model.test.ts — the disk table's cache against a naive model of its documented rules
// (docs/storage.md): slots of rowBytes + state + 32 bytes in cacheBytes, 16 ways (fewer when fewer
// slots), row r in set ⌊r / ways⌋ when the slots cover the table, else ⌊mix64(r XOR salt) · sets / 2^64⌋
// (SplitMix64, written out here from its constants); per batch its distinct rows are placed in ascending order, a miss
// taking the first empty way of its set, else the way the batch does not use with the oldest last use
// (LRU) or the fewest uses then the oldest last use (LFU), lowest way on ties; rows a backward updated
// are dirty and written back when evicted. Hits, misses, evictions and write-backs must match per step.
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError, JaggedBatch } from '../../lib/index.js';
import { Rng } from '../../lib/random/rng.js';
import { everything, grads, idBatch } from './helpers.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('cache-model');

const M64 = (1n << 64n) - 1n;
const SALT = 0x4341434845534554n; // "CACHESET"
/** SplitMix64's finaliser (Steele, Lea, Flood 2014). */
function mix64(z: bigint): bigint {
  z = (z + 0x9e3779b97f4a7c15n) & M64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M64;
  return z ^ (z >> 31n);
}
/** The set of row r in a cache of `sets` × `ways` slots over `rows` rows. */
function setOf(r: number, sets: number, ways: number, rows: number): number {
  if (sets * ways >= rows) return Math.floor(r / ways);
  return Number((mix64(BigInt(r) ^ SALT) * BigInt(sets)) >> 64n);
}

interface Way {
  row: number;
  tick: number;
  uses: number;
  dirty: boolean;
}

class NaiveCache {
  readonly ways: number;
  readonly sets: number;
  private readonly set: (Way | null)[][];
  private clock = 0;
  hits = 0;
  misses = 0;
  evictions = 0;
  writebacks = 0;

  constructor(cacheBytes: number, slotBytes: number, readonly rows: number, readonly lfu: boolean) {
    const max = Math.floor(cacheBytes / (slotBytes + 32));
    this.ways = Math.min(16, max);
    this.sets = Math.min(Math.floor(max / this.ways), Math.ceil(rows / this.ways));
    this.set = Array.from({ length: this.sets }, () => Array<Way | null>(this.ways).fill(null));
  }

  setOf(r: number): number {
    return setOf(r, this.sets, this.ways, this.rows);
  }

  /** true when some set gets more distinct rows than it has ways */
  overflows(rows: number[]): boolean {
    const n = new Map<number, number>();
    for (const r of rows) n.set(this.setOf(r), (n.get(this.setOf(r)) ?? 0) + 1);
    return [...n.values()].some((c) => c > this.ways);
  }

  /** one training step over the batch's distinct rows (sorted): place, count, mark dirty */
  step(rows: number[]): void {
    this.clock++;
    const used = new Set<Way>();
    const misses: number[] = [];
    for (const r of rows) {
      const w = this.set[this.setOf(r)]!.find((x) => x?.row === r);
      if (w) {
        used.add(w);
        this.hits++;
      } else misses.push(r);
    }
    for (const r of misses) {
      const ways = this.set[this.setOf(r)]!;
      let pick = ways.findIndex((x) => x === null);
      if (pick < 0) {
        for (let i = 0; i < ways.length; i++) {
          const w = ways[i]!;
          if (used.has(w)) continue;
          const b = pick < 0 ? undefined : ways[pick]!;
          const colder = !b || (this.lfu && w.uses !== b.uses ? w.uses < b.uses : w.tick < b.tick);
          if (colder) pick = i;
        }
        this.evictions++;
        if (ways[pick]!.dirty) this.writebacks++;
      }
      const w: Way = { row: r, tick: 0, uses: 0, dirty: false };
      ways[pick] = w;
      used.add(w);
      this.misses++;
    }
    for (const w of used) {
      w.tick = this.clock;
      w.uses++;
      w.dirty = true; // the backward updates every row of the batch
    }
  }
}

function distinct(batch: JaggedBatch, feature: string): number[] {
  return [...new Set(Array.from(batch.feature(feature).ids as BigInt64Array, Number))].sort((a, b) => a - b);
}

describe('the cache follows its documented placement and eviction rules', () => {
  for (const policy of ['lru', 'lfu'] as const)
    for (const alpha of [0, 1.05]) {
      it(`${policy}, ${alpha === 0 ? 'uniform' : `Zipf ${alpha}`} ids`, async () => {
        const rows = 6000, dim = 8, cacheBytes = 48 * (dim * 4 + 4 + 32) * 16; // 48 sets of 16 ways
        const ec = new EmbeddingCollection({
          tables: [{ name: 't', rows, dim, storage: { kind: 'disk', path: `${tmp.dir}/${policy}${alpha}`, cacheBytes, policy } }],
          optimizer: { type: 'rowwise_adagrad', lr: 0.1 },
        });
        const model = new NaiveCache(cacheBytes, dim * 4 + 4, rows, policy === 'lfu');
        expect(ec.storageStats().t!.slots).toBe(model.sets * model.ways);
        const rng = new Rng(alpha * 100 + (policy === 'lfu' ? 1 : 0));
        for (let s = 0; s < 40; s++) {
          const batch = idBatch(ec, rng, 32, 8, alpha);
          const ids = distinct(batch, 't');
          expect(model.overflows(ids)).toBe(false);
          const out = await ec.forward(batch);
          await ec.backward(out, grads(ec, batch, rng));
          model.step(ids);
          const st = ec.storageStats().t!;
          expect({ hits: st.hits, misses: st.misses, evictions: st.evictions, writebacks: st.writebacks }).toEqual({
            hits: model.hits, misses: model.misses, evictions: model.evictions, writebacks: model.writebacks,
          });
        }
        expect(model.evictions).toBeGreaterThan(100);
        ec.dispose();
      });
    }

  it('ids with a stride of the set count spread over the sets: 125 rows (16% of the slots) train', async () => {
    const rows = 6000, dim = 8, cacheBytes = 48 * (dim * 4 + 32) * 16; // 48 sets of 16 ways (sgd: no state)
    const ec = new EmbeddingCollection({
      tables: [{ name: 't', rows, dim, storage: { kind: 'disk', path: `${tmp.dir}/stride`, cacheBytes } }],
      optimizer: { type: 'sgd', lr: 0.1 },
    });
    const model = new NaiveCache(cacheBytes, dim * 4, rows, false);
    expect(model.sets).toBe(48);
    // rows 0, 48, 96, …: `r mod sets` would put all 125 in set 0
    const ids = BigInt64Array.from({ length: 125 }, (_, i) => BigInt(48 * i));
    const batch = JaggedBatch.fromLengths({ features: ['t'], batchSize: 5, lengths: Int32Array.of(25, 25, 25, 25, 25), ids });
    expect(model.overflows(distinct(batch, 't'))).toBe(false);
    for (let s = 0; s < 2; s++) {
      await ec.backward(await ec.forward(batch), grads(ec, batch, new Rng(s)));
      model.step(distinct(batch, 't'));
    }
    const st = ec.storageStats().t!;
    expect({ hits: st.hits, misses: st.misses }).toEqual({ hits: model.hits, misses: model.misses });
    expect(st.misses).toBe(125);
    ec.dispose();
  });

  it('a cache whose slots cover the table holds every row at once: a batch of all of them, then none evicted', async () => {
    const rows = 1000, dim = 4, cacheBytes = 63 * 16 * (dim * 4 + 32); // 63 sets of 16 ways ≥ 1000 rows
    const ec = new EmbeddingCollection({
      tables: [{ name: 't', rows, dim, storage: { kind: 'disk', path: `${tmp.dir}/whole`, cacheBytes } }],
      optimizer: { type: 'sgd', lr: 0.1 },
    });
    const model = new NaiveCache(cacheBytes, dim * 4, rows, false);
    expect(model.sets * model.ways).toBeGreaterThanOrEqual(rows);
    const all = Array.from({ length: rows }, (_, r) => r);
    expect(model.overflows(all)).toBe(false);
    const every = JaggedBatch.fromLengths({ features: ['t'], batchSize: 4, lengths: Int32Array.of(250, 250, 250, 250), ids: BigInt64Array.from(all, BigInt) });
    const rng = new Rng(9);
    await ec.backward(await ec.forward(every), grads(ec, every, rng));
    model.step(all);
    for (let s = 0; s < 10; s++) {
      const b = idBatch(ec, rng, 16, 8, 1.05);
      await ec.backward(await ec.forward(b), grads(ec, b, rng));
      model.step(distinct(b, 't'));
    }
    const st = ec.storageStats().t!;
    expect({ hits: st.hits, misses: st.misses, evictions: st.evictions }).toEqual({ hits: model.hits, misses: rows, evictions: 0 });
    expect(model.misses).toBe(rows);
    ec.dispose();
  });

  it('a batch whose distinct rows overflow a set: INVALID_CONFIG naming cacheBytes, nothing changed', async () => {
    const rows = 1000, dim = 4, cacheBytes = 2 * 16 * (dim * 4 + 32); // 2 sets of 16 ways (sgd: no state)
    const ec = new EmbeddingCollection({
      tables: [{ name: 't', rows, dim, storage: { kind: 'disk', path: `${tmp.dir}/small`, cacheBytes } }],
      optimizer: { type: 'sgd', lr: 0.1 },
    });
    const model = new NaiveCache(cacheBytes, dim * 4, rows, false);
    const rng = new Rng(5);
    const ok = idBatch(ec, rng, 4, 4, 0);
    expect(model.overflows(distinct(ok, 't'))).toBe(false);
    await ec.backward(await ec.forward(ok), grads(ec, ok, rng));
    const before = everything(ec);
    const statsBefore = ec.storageStats().t!;
    // the first 17 rows of set 0
    const inSet0 = Array.from({ length: rows }, (_, r) => r).filter((r) => model.setOf(r) === 0);
    expect(model.sets).toBe(2);
    const ids = BigInt64Array.from(inSet0.slice(0, 17), BigInt);
    const big = JaggedBatch.fromLengths({ features: ['t'], batchSize: 1, lengths: Int32Array.of(17), ids });
    expect(model.overflows(distinct(big, 't'))).toBe(true);
    const e = await ec.forward(big).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(EmbshardError);
    expect((e as EmbshardError).code).toBe('INVALID_CONFIG');
    expect((e as EmbshardError).message).toContain('storage.cacheBytes');
    expect(ec.storageStats().t).toEqual(statsBefore);
    everything(ec).forEach((a, i) => expect(a).toEqual(before[i]));
    ec.dispose();
  });
});

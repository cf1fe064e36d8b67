// cache-model.test.ts — the disk table's cache against a naive model of its documented rules
// (docs/storage.md): slots of rowBytes + state + 32 bytes in cacheBytes, 16 ways (fewer when fewer
// slots), row r in set r % sets; per batch its distinct rows are placed in ascending order, a miss
// taking the first empty way of its set, else the way the batch does not use with the oldest last use
// (LRU) or the fewest uses then the oldest last use (LFU), lowest way on ties; rows a backward updated
// are dirty and written back when evicted. Hits, misses, evictions and write-backs must match per step.
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError, JaggedBatch } from '../../lib/index.js';
import { Rng } from '../../lib/random/rng.js';
import { everything, grads, idBatch } from './helpers.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('cache-model');

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

  constructor(cacheBytes: number, slotBytes: number, rows: number, readonly lfu: boolean) {
    const max = Math.floor(cacheBytes / (slotBytes + 32));
    this.ways = Math.min(16, max);
    this.sets = Math.min(Math.floor(max / this.ways), Math.ceil(rows / this.ways));
    this.set = Array.from({ length: this.sets }, () => Array<Way | null>(this.ways).fill(null));
  }

  /** true when some set gets more distinct rows than it has ways */
  overflows(rows: number[]): boolean {
    const n = new Map<number, number>();
    for (const r of rows) n.set(r % this.sets, (n.get(r % this.sets) ?? 0) + 1);
    return [...n.values()].some((c) => c > this.ways);
  }

  /** one training step over the batch's distinct rows (sorted): place, count, mark dirty */
  step(rows: number[]): void {
    this.clock++;
    const used = new Set<Way>();
    const misses: number[] = [];
    for (const r of rows) {
      const w = this.set[r % this.sets]!.find((x) => x?.row === r);
      if (w) {
        used.add(w);
        this.hits++;
      } else misses.push(r);
    }
    for (const r of misses) {
      const ways = this.set[r % this.sets]!;
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
    // 17 even rows: all in set 0
    const ids = BigInt64Array.from({ length: 17 }, (_, i) => BigInt(2 * i));
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

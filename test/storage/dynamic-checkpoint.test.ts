// dynamic-checkpoint.test.ts — checkpoints of dynamic tables: a loaded collection holds the same ids in
// the same slots with the same rows, state, counters and candidates, and trains on bitwise like the one
// that was saved; a missing, truncated or altered id map is CHECKPOINT_CORRUPT.
import { mkdtempSync, readFileSync, rmSync, truncateSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError, JaggedBatch } from '../../lib/index.js';
import { rng } from '../embedding/oracle.js';
import { manifestFields, sealedManifest } from '../manifest-seal.js';

const dir = mkdtempSync(join(tmpdir(), 'embshard-dyn-ck-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function config(eviction: 'lru' | 'lfu', minCount: number) {
  return {
    tables: [
      { name: 'd', rows: 'dynamic' as const, capacity: 8, dim: 3, features: ['a', 'b'], admission: { minCount, candidates: 10 }, eviction },
      { name: 's', rows: 6, dim: 2, pooling: 'mean' as const },
    ],
    optimizer: { type: 'adam' as const, lr: 0.05 },
    seed: 11,
  };
}

function batch(r: () => number): JaggedBatch {
  const B = 4;
  const lengths = Int32Array.from({ length: 3 * B }, () => 1 + Math.floor(r() * 3));
  const n = lengths.reduce((a, b) => a + b, 0);
  const sStart = n - lengths.subarray(2 * B).reduce((a, b) => a + b, 0);
  const ids = BigInt64Array.from({ length: n }, (_, i) => (i < sStart ? BigInt.asIntN(64, BigInt(Math.floor(r() * r() * 60)) * 0x9e3779b97f4a7c15n) : BigInt(Math.floor(r() * 6))));
  return JaggedBatch.fromLengths({ features: ['a', 'b', 's'], batchSize: B, lengths, ids });
}

async function train(ec: EmbeddingCollection, r: () => number, steps: number): Promise<Float32Array[]> {
  const outs: Float32Array[] = [];
  for (let s = 0; s < steps; s++) {
    const out = await ec.forward(batch(r));
    outs.push(out.pooled.slice());
    await ec.backward(out, { pooled: Float32Array.from({ length: out.pooled.length }, () => r() - 0.5) });
  }
  return outs;
}

function everything(ec: EmbeddingCollection) {
  const held = ec.heldIds('d');
  return { held, stats: ec.stats(), rows: ec.readRows('d', held), state: ec.readState('d', held), s: ec.readRows('s', [0, 1, 2, 3, 4, 5]), step: ec.step };
}

describe('checkpoints of dynamic tables', () => {
  for (const [eviction, minCount] of [['lru', 1], ['lfu', 2]] as const)
    it(`round trip (${eviction}, minCount ${minCount}): same map, rows and state; training goes on identically`, async () => {
      const ec = new EmbeddingCollection(config(eviction, minCount));
      const r = rng(5);
      await train(ec, r, 12);
      expect(ec.stats()['d']!.evictions).toBeGreaterThan(0);
      const path = join(dir, `ck-${eviction}`);
      await ec.save(path);
      const back = await EmbeddingCollection.load(path);
      expect(back.tables[0]!.dynamic).toEqual(ec.tables[0]!.dynamic);
      expect(everything(back)).toEqual(everything(ec));
      const seed = Math.floor(r() * 1e9);
      const a = await train(ec, rng(seed), 4);
      const b = await train(back, rng(seed), 4);
      expect(b).toEqual(a);
      expect(everything(back)).toEqual(everything(ec));
      ec.dispose();
      back.dispose();
    });

  it('a missing, truncated or altered id map, or a manifest without it: CHECKPOINT_CORRUPT', async () => {
    const ec = new EmbeddingCollection(config('lru', 1));
    await train(ec, rng(8), 3);
    const cases: [string, (p: string) => void][] = [
      ['missing', (p) => unlinkSync(join(p, 'dynamic-0.bin'))],
      ['truncated', (p) => truncateSync(join(p, 'dynamic-0.bin'), 40)],
      ['altered', (p) => {
        const f = join(p, 'dynamic-0.bin');
        const b = readFileSync(f);
        b[130] ^= 1;
        writeFileSync(f, b);
      }],
      ['unlisted', (p) => {
        const m = manifestFields(readFileSync(join(p, 'manifest.json'), 'utf8'));
        delete m.dynamic;
        writeFileSync(join(p, 'manifest.json'), sealedManifest(m)); // sealed again: the listing check is what refuses it
      }],
    ];
    for (const [what, damage] of cases) {
      const p = join(dir, `bad-${what}`);
      await ec.save(p);
      damage(p);
      const err = await EmbeddingCollection.load(p).then(() => undefined, (e: unknown) => e);
      expect(err, what).toBeInstanceOf(EmbshardError);
      expect((err as EmbshardError).code, what).toBe('CHECKPOINT_CORRUPT');
    }
    ec.dispose();
  });
});

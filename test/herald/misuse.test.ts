// Herald calls made out of order or with input one rank cannot use, on in-process groups: a backward of an
// output that is not the rank's open step (none, another collection's, a lookup's, a stale one) while the
// other ranks' are good ends every rank's backward, nothing changed, and the good backward then trains like
// one EmbeddingCollection; a batch feature no table has is UNKNOWN_FEATURE and a table feature the batch
// lacks MISSING_FEATURE, as one collection says, in training and in a lookup on one rank; dispose() in the middle of a step lets the step end on every rank,
// and every later call on that rank is DISPOSED at once; a save() whose folder one rank cannot use ends every
// rank's save before anything is written; a global batch whose bags are all empty, or half of
// whose samples have no ids, trains like one collection.
import { describe, it, expect } from 'vitest';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import { HeraldEmbeddingCollection, type HeraldForwardOutput } from '../../lib/herald/collection.js';
import { takeRows } from '../../lib/data/take.js';
import { createInProcessGroups, type ProcessGroup } from '../../lib/sharded/group.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';

const lib = { JaggedBatch };
const W = 2, B = 8, cfg = S.config({ type: 'adagrad', lr: 0.1 });
const codes = (res: PromiseSettledResult<unknown>[]) => res.map((x) => (x.status === 'rejected' ? (x.reason as { code?: string }).code ?? String(x.reason) : 'fulfilled'));

async function withRanks(body: (ranks: HeraldEmbeddingCollection[], oracle: EmbeddingCollection, groups: ProcessGroup[]) => Promise<void>) {
  const groups = createInProcessGroups(W, { timeoutMs: 10_000 });
  const ranks = groups.map((g) => new HeraldEmbeddingCollection(cfg, g, { cacheRows: 8, batchSize: B }));
  const oracle = new EmbeddingCollection(cfg);
  try {
    await body(ranks, oracle, groups);
  } finally {
    for (const r of ranks) r.dispose();
    for (const g of groups) g.close();
    oracle.dispose();
  }
}

const engineOf = (h: HeraldEmbeddingCollection) =>
  h.local.tables.flatMap((t) => {
    const ids = Int32Array.from({ length: t.rows }, (_, j) => j);
    return [h.local.readRows(t.name, ids), h.local.readState(t.name, ids)];
  });

/** The oracle's step on a global batch, then the ranks' gathered tables within 1e-5 of it. */
async function expectOracle(ranks: HeraldEmbeddingCollection[], oracle: EmbeddingCollection, global: JaggedBatch, k: number) {
  const go = await oracle.forward(global);
  await oracle.backward(go, { pooled: S.gradsFor(k, Int32Array.from({ length: global.batchSize }, (_, i) => i), oracle.pooledDim) });
  for (const t of oracle.tables) {
    const [got] = await Promise.all(ranks.map((r) => r.gather(t.name)));
    expect(S.relErr(got!.weights, oracle.readRows(t.name, Int32Array.from({ length: t.rows }, (_, j) => j))), t.name).toBeLessThan(1e-5);
  }
}

describe('backward of an output that is not the open step, on one rank', () => {
  it('none, another collection\'s, a lookup\'s or a stale output: every rank rejects, nothing changes, the good backward then trains like one collection', async () => {
    await withRanks(async (ranks, oracle) => {
      const g0 = S.globalBatch(lib, 0, W * B) as JaggedBatch, g1 = S.globalBatch(lib, 1, W * B) as JaggedBatch;
      const train = async (g: JaggedBatch) => {
        const locals = ranks.map((r) => r.assign(g));
        return Promise.all(ranks.map((r, i) => r.forward(locals[i]!)));
      };
      const first = await train(g0);
      const outs = await train(g1); // `first` is now stale: g0's step never applied
      const lookup = await Promise.all(ranks.map((r) => r.forward(S.globalBatch(lib, 7, 3) as JaggedBatch)));
      const foreign = new HeraldEmbeddingCollection(cfg, createInProcessGroups(1)[0]!, { cacheRows: 8, batchSize: W * B });
      const fo = await foreign.forward(foreign.assign(g1));
      foreign.dispose();
      const grads = outs.map((o) => ({ pooled: S.gradsFor(1, o.samples, oracle.pooledDim) as Float32Array }));
      const before = ranks.map(engineOf);
      for (const wrong of [undefined, fo, lookup[1], first[1]] as HeraldForwardOutput[]) {
        const res = await Promise.allSettled(ranks.map((r, i) => r.backward(i === 1 ? wrong : outs[i]!, grads[i]!)));
        expect(codes(res)).toEqual(['INVALID_ARGUMENT', 'INVALID_ARGUMENT']);
        expect((res[0] as PromiseRejectedResult).reason.message).toMatch(/another rank rejected its gradients/);
        ranks.forEach((r, i) => engineOf(r).forEach((a, t) => expect(S.bitwise(a, before[i]![t]!)).toBe(true)));
      }
      await Promise.all(ranks.map((r, i) => r.backward(outs[i]!, grads[i]!)));
      await expectOracle(ranks, oracle, g1, 1);
      // the step is spent: a backward of it again is refused on each rank at once (no step is open anywhere)
      const again = await Promise.allSettled([ranks[1]!.backward(outs[1]!, grads[1]!)]);
      expect(codes(again)).toEqual(['INVALID_ARGUMENT']);
    });
  });
});

describe('a batch feature no table has, or a table feature the batch lacks', () => {
  it('is UNKNOWN_FEATURE / MISSING_FEATURE naming it, as one collection says: in training on every rank, and in a lookup on one rank', async () => {
    await withRanks(async (ranks, oracle) => {
      const G = W * B, g0 = S.globalBatch(lib, 0, G) as JaggedBatch;
      const extra = (g: JaggedBatch) =>
        JaggedBatch.fromLengths({ features: [...g.features, 'bogus'], batchSize: g.batchSize, lengths: Int32Array.from([...g.lengths, ...new Array<number>(g.batchSize).fill(1)]), ids: Int32Array.from([...Array.from(g.ids, Number), ...new Array<number>(g.batchSize).fill(0)]) });
      const want = { code: 'UNKNOWN_FEATURE', message: expect.stringMatching(/'bogus'/) };
      await expect(oracle.forward(extra(g0))).rejects.toMatchObject(want);
      for (const r of ranks) expect(() => r.assign(extra(g0))).toThrow(expect.objectContaining(want));
      const own = ranks.map((_, r) => S.globalBatch(lib, 30 + r, 4) as JaggedBatch);
      const res = await Promise.allSettled(ranks.map((r, i) => r.forward(i === 1 ? extra(own[i]!) : own[i]!)));
      expect(codes(res)).toEqual(['UNKNOWN_FEATURE', 'UNKNOWN_FEATURE']);
      // a table's feature the batch lacks: MISSING_FEATURE, as one collection says
      const lacking = (g: JaggedBatch) => {
        const n = g.lengths.subarray(0, 3 * g.batchSize).reduce((x, y) => x + y, 0);
        return JaggedBatch.fromLengths({ features: g.features.slice(0, 3), batchSize: g.batchSize, lengths: g.lengths.slice(0, 3 * g.batchSize), ids: g.ids.slice(0, n) });
      };
      const missing = { code: 'MISSING_FEATURE', message: expect.stringMatching(/'tiny'/) };
      await expect(oracle.forward(lacking(g0))).rejects.toMatchObject(missing);
      for (const r of ranks) expect(() => r.assign(lacking(g0))).toThrow(expect.objectContaining(missing));
      const res2 = await Promise.allSettled(ranks.map((r, i) => r.forward(i === 1 ? lacking(own[i]!) : own[i]!)));
      expect(codes(res2)).toEqual(['MISSING_FEATURE', 'MISSING_FEATURE']);
      // nothing was scheduled: the batch with exactly the collection's features trains like one collection
      const locals = ranks.map((r) => r.assign(g0));
      const outs = await Promise.all(ranks.map((r, i) => r.forward(locals[i]!)));
      await Promise.all(ranks.map((r, i) => r.backward(outs[i]!, { pooled: S.gradsFor(0, outs[i]!.samples, oracle.pooledDim) })));
      await expectOracle(ranks, oracle, g0, 0);
    });
  });
});

describe('dispose() in the middle of a step', () => {
  it('the step in flight ends on every rank; every later call on that rank is DISPOSED at once', async () => {
    await withRanks(async (ranks, oracle) => {
      const g0 = S.globalBatch(lib, 0, W * B) as JaggedBatch;
      const locals = ranks.map((r) => r.assign(g0));
      const pending = Promise.allSettled(ranks.map((r, i) => r.forward(locals[i]!)));
      ranks[1]!.dispose();
      const res = await pending;
      expect(codes(res)).toEqual(['fulfilled', 'fulfilled']);
      const go = await oracle.forward(g0);
      for (const x of res) {
        const o = (x as PromiseFulfilledResult<HeraldForwardOutput>).value;
        expect(S.bitwise(o.pooled, takeRows(go.pooled, oracle.pooledDim, o.samples))).toBe(true);
      }
      const out = (res[1] as PromiseFulfilledResult<HeraldForwardOutput>).value;
      const d = ranks[1]!;
      const later: [string, () => unknown][] = [
        ['assign', () => d.assign(S.globalBatch(lib, 1, W * B))],
        ['localize', () => d.localize({ dense: new Float32Array(W * B), sparse: S.globalBatch(lib, 1, W * B), labels: new Float32Array(W * B), size: W * B })],
        ['forward', () => d.forward(out.batch)],
        ['backward', () => d.backward(out, { pooled: new Float32Array(B * d.pooledDim) })],
        ['gather', () => d.gather('users')],
        ['save', () => d.save('/nonexistent/ck')],
      ];
      for (const [name, call] of later) {
        let got: unknown;
        try {
          got = await call();
        } catch (e) {
          got = e;
        }
        expect(got, name).toMatchObject({ code: 'DISPOSED' });
      }
    });
  });
});

describe('save() with a folder one rank cannot use', () => {
  it('every rank rejects with INVALID_ARGUMENT before anything is gathered or written; a good save then loads as one collection', async () => {
    await withRanks(async (ranks) => {
      const dir = mkdtempSync(join(tmpdir(), 'embshard-herald-misuse-'));
      try {
        const res = await Promise.allSettled(ranks.map((r, i) => r.save(i === 1 ? (123 as never) : join(dir, 'ck'))));
        expect(codes(res)).toEqual(['INVALID_ARGUMENT', 'INVALID_ARGUMENT']);
        expect((res[0] as PromiseRejectedResult).reason.message).toMatch(/another rank rejected its checkpoint folder/);
        expect(existsSync(join(dir, 'ck'))).toBe(false);
        await Promise.all(ranks.map((r) => r.save(join(dir, 'ck'))));
        const back = await EmbeddingCollection.load(join(dir, 'ck'));
        try {
          for (const t of back.tables) {
            const [g] = await Promise.all(ranks.map((r) => r.gather(t.name)));
            expect(S.bitwise(back.readRows(t.name, Int32Array.from({ length: t.rows }, (_, j) => j)), g!.weights)).toBe(true);
          }
        } finally {
          back.dispose();
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });
});

describe('empty bags', () => {
  it('a global batch whose bags are all empty, and one where half the samples have no ids, train like one collection', async () => {
    await withRanks(async (ranks, oracle) => {
      const G = W * B, F = 4;
      const empty = JaggedBatch.fromLengths({ features: ['user', 'friend', 'items', 'tiny'], batchSize: G, lengths: new Int32Array(F * G), ids: new Int32Array(0) });
      // half the samples without ids: the allocator may give one rank only those
      const g = S.globalBatch(lib, 4, G) as JaggedBatch;
      const lengths = Int32Array.from(g.lengths, (n, i) => (i % G < G / 2 ? 0 : n));
      const ids: number[] = [];
      for (let f = 0, o = 0; f < F; f++)
        for (let b = 0; b < G; b++) {
          const n = g.lengths[f * G + b]!;
          if (b >= G / 2) for (let k = 0; k < n; k++) ids.push(Number(g.ids[o + k]!));
          o += n;
        }
      const half = JaggedBatch.fromLengths({ features: [...g.features], batchSize: G, lengths, ids: Int32Array.from(ids) });
      for (const [k, batch] of [[0, empty], [1, half]] as const) {
        const locals = ranks.map((r) => r.assign(batch));
        const outs = await Promise.all(ranks.map((r, i) => r.forward(locals[i]!)));
        const go = await oracle.forward(batch);
        for (const o of outs) expect(S.bitwise(o.pooled, takeRows(go.pooled, oracle.pooledDim, o.samples))).toBe(true);
        await oracle.release(go);
        await Promise.all(ranks.map((r, i) => r.backward(outs[i]!, { pooled: S.gradsFor(k, outs[i]!.samples, oracle.pooledDim) })));
        await expectOracle(ranks, oracle, batch, k);
      }
    });
  });
});

// batch-edges.test.ts — JaggedBatch at its edges: every id array type and views at offsets through forward
// and backward against a naive pooling written here (sum / mean / none, weighted); bad lengths caught with
// their codes wherever a batch is read (one collection, sharded ranks, feature()); weights that are not
// finite and fromBags input that does not fit a batch refused before anything runs; ids given to row access
// that do not fit 64 bits exactly refused, not wrapped.
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError, JaggedBatch } from '../../lib/index.js';
import type { IdArray } from '../../lib/binding.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection } from '../../lib/sharded/sharded.js';
import { gatherTable } from '../../lib/sharded/reshard.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from '../sharded/scenario.mjs';

const f32 = Math.fround;
const LR = 0.25;
const tables = [
  { name: 's', rows: 9, dim: 3, pooling: 'sum' as const },
  { name: 'm', rows: 7, dim: 2, pooling: 'mean' as const },
  { name: 'n', rows: 5, dim: 2, pooling: 'none' as const },
];
const F = ['s', 'm', 'n'];

function codeOf(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(EmbshardError);
    return (e as EmbshardError).code;
  }
  return 'no error';
}

/** A view of `src` starting `pad` elements into a larger buffer (garbage around it). */
function viewOf<T extends Int32Array | Uint32Array | BigInt64Array | Float32Array>(src: T, pad: number): T {
  const C = src.constructor as new (n: number) => T;
  const big = new C(src.length + 2 * pad);
  for (let i = 0; i < big.length; i++) (big as unknown as number[])[i] = (big instanceof BigInt64Array ? 77n : 77) as never;
  (big as unknown as { set(a: T, o: number): void }).set(src, pad);
  return (big as unknown as { subarray(a: number, b: number): T }).subarray(pad, pad + src.length);
}

describe('JaggedBatch edges', () => {
  for (const idType of ['i64', 'i32', 'u32'] as const)
    for (const weighted of [false, true])
      it(`${idType} ids${weighted ? ', weighted' : ''}, every array a view at an offset: forward and backward match a naive pooling`, async () => {
        const ec = new EmbeddingCollection({ tables, optimizer: { type: 'sgd', lr: LR }, seed: 4 });
        const B = 3;
        // bags per feature: an empty bag, duplicates within and across bags
        const bags: number[][][] = [
          [[1, 1, 8], [], [0]],
          [[6], [2, 2, 3, 6], []],
          [[4, 0], [], [4]],
        ];
        const flat = bags.flat(2);
        const w = Float32Array.from(flat, (_, i) => 0.25 + 0.5 * i);
        const ids = idType === 'i64' ? BigInt64Array.from(flat, BigInt) : idType === 'i32' ? Int32Array.from(flat) : Uint32Array.from(flat);
        const batch = JaggedBatch.fromLengths({
          features: F,
          batchSize: B,
          lengths: viewOf(Int32Array.from(bags.flatMap((fb) => fb.map((b) => b.length))), 5),
          ids: viewOf(ids as Int32Array, 3) as IdArray,
          weights: weighted ? viewOf(w, 2) : undefined,
        });
        const rowsOf = (t: string) => Array.from({ length: tables.find((x) => x.name === t)!.rows }, (_, i) => Array.from(ec.readRows(t, [i])));
        const before = Object.fromEntries(F.map((t) => [t, rowsOf(t)]));
        // the naive forward: pooled[b] = Σ w_i · row_i (fp32, id order) / (mean ? len : 1); none: the rows
        const out = await ec.forward(batch);
        const pooledDim = 3 + 2;
        const wantPooled = new Float32Array(B * pooledDim);
        const wantSeq: number[] = [];
        let k = 0;
        F.forEach((t, fi) => {
          const dim = tables[fi]!.dim, col = fi === 0 ? 0 : 3;
          for (let b = 0; b < B; b++) {
            const bag = bags[fi]![b]!;
            const acc = new Array(dim).fill(0);
            for (const id of bag) {
              const wi = weighted && tables[fi]!.pooling !== 'none' ? w[k]! : 1;
              for (let d = 0; d < dim; d++) acc[d] = f32(acc[d] + f32(wi * before[t]![id]![d]!));
              if (tables[fi]!.pooling === 'none') wantSeq.push(...before[t]![id]!);
              k++;
            }
            if (tables[fi]!.pooling !== 'none')
              for (let d = 0; d < dim; d++) wantPooled[b * pooledDim + col + d] = tables[fi]!.pooling === 'mean' && bag.length > 0 ? f32(acc[d] / bag.length) : acc[d];
          }
        });
        expect(S.relErr(out.pooled, wantPooled)).toBeLessThanOrEqual(1e-6);
        expect(Array.from(out.sequences.n!.values)).toEqual(wantSeq.map(f32));
        expect(Array.from(out.sequences.n!.lengths)).toEqual([2, 0, 1]);
        // the naive backward (sgd): row −= lr · Σ its contributions (w_i · g_b / (mean ? len : 1); none: g_i)
        const gp = Float32Array.from({ length: B * pooledDim }, (_, i) => ((i * 7) % 11) / 8 - 0.6);
        const gs = Float32Array.from({ length: 3 * 2 }, (_, i) => 0.3 - 0.2 * i);
        const sums = Object.fromEntries(F.map((t) => [t, before[t]!.map((r) => r.map(() => 0))]));
        k = 0;
        let q = 0;
        F.forEach((t, fi) => {
          const dim = tables[fi]!.dim, col = fi === 0 ? 0 : 3, pool = tables[fi]!.pooling;
          for (let b = 0; b < B; b++) {
            const bag = bags[fi]![b]!;
            for (const id of bag) {
              const wi = weighted && pool !== 'none' ? w[k]! : 1;
              for (let d = 0; d < dim; d++)
                sums[t]![id]![d] += pool === 'none' ? gs[q * dim + d]! : (wi * gp[b * pooledDim + col + d]!) / (pool === 'mean' ? bag.length : 1);
              if (pool === 'none') q++;
              k++;
            }
          }
        });
        await ec.backward(out, { pooled: gp, sequences: { n: gs } });
        for (const t of F) {
          const got = rowsOf(t).flat(), want = before[t]!.flatMap((r, i) => r.map((x, d) => x - LR * sums[t]![i]![d]!));
          expect(S.relErr(Float32Array.from(got), Float64Array.from(want))).toBeLessThanOrEqual(1e-6);
        }
        ec.dispose();
      });

  it('lengths that do not fit the ids: NEGATIVE_LENGTH / LENGTH_MISMATCH from offsets and feature(), as from a forward', async () => {
    const mk = (lengths: number[], n: number) => JaggedBatch.fromLengths({ features: ['a', 'b'], batchSize: 2, lengths: Int32Array.from(lengths), ids: new BigInt64Array(n) });
    expect(codeOf(() => mk([1, -1, 2, 0], 2).offsets)).toBe('NEGATIVE_LENGTH');
    expect(codeOf(() => mk([1, -1, 2, 0], 2).feature('b'))).toBe('NEGATIVE_LENGTH');
    expect(codeOf(() => mk([1, 0, 2, 0], 4).feature('a'))).toBe('LENGTH_MISMATCH');
    expect(codeOf(() => mk([1, 0, 2, 1], 3).feature('b'))).toBe('LENGTH_MISMATCH');
    expect(mk([1, 0, 2, 1], 4).feature('b').ids.length).toBe(3);
    // a name the batch lacks is MISSING_FEATURE (lib/errors.ts: a feature the batch does not have), as a collection says
    expect(codeOf(() => mk([1, 0, 2, 1], 4).feature('zz'))).toBe('MISSING_FEATURE');
  });

  it('a sharded forward refuses lengths that sum to fewer ids than the batch has, on every rank, changing nothing', async () => {
    const lib = { JaggedBatch, ShardPlan };
    const plan = S.makePlan(lib, 2, 2);
    const groups = createInProcessGroups(2, { ranksPerNode: 2, timeoutMs: 20_000 });
    const cfg = { optimizer: { type: 'adam' as const, lr: 0.01 }, seed: 5 };
    const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, cfg));
    try {
      const good = [0, 1].map((r) => S.localBatch(lib, plan, r, 0) as JaggedBatch);
      const g0 = good[0]!;
      // one id more than the lengths account for
      const extra = JaggedBatch.fromLengths({ features: g0.features, batchSize: g0.batchSize, lengths: g0.lengths, ids: BigInt64Array.from([...(g0.ids as BigInt64Array), 1n]) });
      const before = await Promise.all(plan.tables.map((t: { name: string }) => Promise.all(ranks.map((sc) => gatherTable(sc, t.name)))));
      const res = await Promise.allSettled(ranks.map((sc, r) => sc.forward(r === 0 ? extra : good[r]!)));
      expect(res[0]).toMatchObject({ status: 'rejected', reason: { code: 'LENGTH_MISMATCH' } });
      expect(res[1]).toMatchObject({ status: 'rejected', reason: expect.any(EmbshardError) });
      const after = await Promise.all(plan.tables.map((t: { name: string }) => Promise.all(ranks.map((sc) => gatherTable(sc, t.name)))));
      expect(after).toEqual(before);
      expect(ranks.map((sc) => sc.step)).toEqual([0, 0]);
      // and the ranks go on with good batches
      const outs = await Promise.all(ranks.map((sc, r) => sc.forward(good[r]!)));
      await Promise.all(ranks.map((sc, r) => sc.backward(outs[r]!, S.gradsFor(outs[r], r, 0))));
      expect(ranks.map((sc) => sc.step)).toEqual([1, 1]);
    } finally {
      ranks.forEach((sc) => sc.dispose());
      groups.forEach((g) => g.close());
    }
  });

  it('weights that are NaN or ±Inf are INVALID_ARGUMENT where the batch is read, one collection or sharded ranks, changing nothing', async () => {
    const ec = new EmbeddingCollection({ tables: [tables[0]!], optimizer: { type: 'sgd', lr: LR }, seed: 3 });
    const lib = { JaggedBatch, ShardPlan };
    const plan = S.makePlan(lib, 2, 2);
    const groups = createInProcessGroups(2, { ranksPerNode: 2, timeoutMs: 20_000 });
    const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, { optimizer: { type: 'sgd' as const, lr: 0.1 }, seed: 5 }));
    try {
      const before = ec.readRows('s', [0, 1, 2, 3, 4, 5, 6, 7, 8]);
      for (const x of [NaN, Infinity, -Infinity]) {
        const bad = JaggedBatch.fromLengths({ features: ['s'], batchSize: 1, lengths: Int32Array.of(2), ids: BigInt64Array.of(1n, 2n), weights: Float32Array.of(1, x) });
        await expect(ec.forward(bad)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/weights\[1\] is -?(nan|inf).*must be finite/) });
        expect(codeOf(() => ec.forwardSync(bad))).toBe('INVALID_ARGUMENT');
        // a weighted batch of the sharded scenario with one weight not finite on rank 1: every rank refuses
        const good = [0, 1].map((r) => S.localBatch(lib, plan, r, 0, { weighted: true }) as JaggedBatch);
        const w = Float32Array.from(good[1]!.weights!);
        w[w.length - 1] = x;
        const b1 = JaggedBatch.fromLengths({ features: good[1]!.features, batchSize: good[1]!.batchSize, lengths: good[1]!.lengths, ids: good[1]!.ids, weights: w });
        const res = await Promise.allSettled(ranks.map((sc, r) => sc.forward(r === 1 ? b1 : good[0]!)));
        expect(res.map((o) => o.status === 'rejected' && (o.reason as EmbshardError).code)).toEqual(['INVALID_ARGUMENT', 'INVALID_ARGUMENT']);
        expect(codeOf(() => JaggedBatch.fromBags(['s'], [[[1, 2]]], [[[x, 1]]]).weights)).toBe('no error'); // refused when read, not built
      }
      expect(ec.readRows('s', [0, 1, 2, 3, 4, 5, 6, 7, 8])).toEqual(before);
      expect([ec.step, ...ranks.map((sc) => sc.step)]).toEqual([0, 0, 0]);
      // a weight missing from its bag's list (a hole) or of another type
      // eslint-disable-next-line no-sparse-arrays
      expect(codeOf(() => JaggedBatch.fromBags(['s'], [[[1, 2]]], [[[1, ,] as number[]]]))).toBe('INVALID_ARGUMENT');
      expect(codeOf(() => JaggedBatch.fromBags(['s'], [[[1, 2]]], [[[1, '2' as never]]]))).toBe('INVALID_ARGUMENT');
    } finally {
      ec.dispose();
      ranks.forEach((sc) => sc.dispose());
      groups.forEach((g) => g.close());
    }
  });

  it('fromBags: ids beyond int64 and bags for more features than named are refused, not wrapped or dropped', () => {
    for (const id of [1n << 64n, (1n << 64n) + 3n, 1n << 63n, -(1n << 63n) - 1n])
      expect(codeOf(() => JaggedBatch.fromBags(['s'], [[[1, id]]]))).toBe('INVALID_ARGUMENT');
    expect(JaggedBatch.fromBags(['s'], [[[(1n << 63n) - 1n, -(1n << 63n), 5]]]).ids).toEqual(BigInt64Array.of((1n << 63n) - 1n, -(1n << 63n), 5n));
    expect(codeOf(() => JaggedBatch.fromBags(['s'], [[[1]], [[2]]]))).toBe('LENGTH_MISMATCH');
    expect(codeOf(() => JaggedBatch.fromBags([], [[[1]]]))).toBe('LENGTH_MISMATCH');
    // mixed number / bigint ids are one int64 array
    expect(JaggedBatch.fromBags(['s', 'm'], [[[1, 2n]], [[3n, 4]]]).ids).toEqual(BigInt64Array.of(1n, 2n, 3n, 4n));
  });

  it('feature names with holes are INVALID_ARGUMENT at construction; other id array types UNSUPPORTED_DTYPE', () => {
    // eslint-disable-next-line no-sparse-arrays
    expect(codeOf(() => JaggedBatch.fromLengths({ features: ['s', ,] as string[], batchSize: 1, lengths: Int32Array.of(1, 0), ids: BigInt64Array.of(1n) }))).toBe('INVALID_ARGUMENT');
    for (const ids of [BigUint64Array.of(1n), Float64Array.of(1), Int16Array.of(1), Uint8Array.of(1), [1]])
      expect(codeOf(() => JaggedBatch.fromLengths({ features: ['s'], batchSize: 1, lengths: Int32Array.of(1), ids: ids as never }))).toBe('UNSUPPORTED_DTYPE');
  });
});

describe('row access by id', () => {
  it('ids past 64 bits (bigints) or past 2^53 (numbers) are INVALID_ARGUMENT, not wrapped: single and sharded dynamic tables', async () => {
    const table = { name: 'd', rows: 'dynamic' as const, capacity: 8, dim: 2, features: ['a'] };
    const ec = new EmbeddingCollection({ tables: [table], seed: 1 });
    const plan = ShardPlan.create({ topology: S.topology(1, 1), batchSize: 2, tables: [{ table, cluster: 'rb', shards: [{ rows: [0, 8], cols: [0, 2], rank: 0 }] }] as never });
    const [g] = createInProcessGroups(1, { timeoutMs: 30_000 });
    const sc = new ShardedEmbeddingCollection(plan, g!, { optimizer: { type: 'sgd', lr: 0.1 }, seed: 1 });
    try {
      for (const id of [(1n << 64n) + 3n, 1n << 63n, -(1n << 63n) - 1n, 2 ** 60 + 1, 2 ** 53]) {
        expect(codeOf(() => ec.readRows('d', [id])), `readRows ${id}`).toBe('INVALID_ARGUMENT');
        expect(codeOf(() => ec.writeRows('d', [id], Float32Array.of(1, 2))), `writeRows ${id}`).toBe('INVALID_ARGUMENT');
        await expect(sc.readRows('d', [id]), `sharded readRows ${id}`).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      }
      // the extremes of int64 and safe integers are ids like any other (a row without a row reads zeros)
      expect(ec.readRows('d', [(1n << 63n) - 1n, -(1n << 63n), 2 ** 53 - 1])).toEqual(new Float32Array(6));
    } finally {
      ec.dispose();
      sc.dispose();
      g!.close();
    }
  });
});

// A Herald training step one rank refuses in its forward: the caller's reject (also while the next batch is
// being prepared), options it cannot use, a forward of another batch (or of no batch) while the others
// train, a global batch it could not schedule (an id out of range, a feature missing, another size) or
// scheduled apart from the others (other ids); and the Trainer given such a batch, as a step and as the
// next batch it prepared. Every rank rejects with the refusing rank's code (not COMM_TIMEOUT: a rank left waiting on the others
// would show as that), every rank's engine rows and optimizer state are bitwise as before, and the
// next good step trains bitwise like a run that never saw the refused one: the same samples per rank, the
// same pooled outputs, the same rows and state on every rank afterwards; the gathered tables are within
// 1e-5 of one EmbeddingCollection trained on the good global batches only.
import { describe, it, expect } from 'vitest';
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import type { Batch } from '../../lib/data/types.js';
import { EmbshardError } from '../../lib/errors.js';
import { HeraldEmbeddingCollection, type HeraldForwardOutput } from '../../lib/herald/collection.js';
import { createInProcessGroups, type ProcessGroup } from '../../lib/sharded/group.js';
import type { DenseModelSpec } from '../../lib/train/dense.js';
import { Trainer } from '../../lib/train/trainer.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';

const lib = { JaggedBatch };
const W = 2, B = 8, cfg = S.config({ type: 'adagrad', lr: 0.1 });
const codes = (res: PromiseSettledResult<unknown>[]) => res.map((x) => (x.status === 'rejected' ? (x.reason as { code?: string }).code ?? String(x.reason) : 'fulfilled'));

/** A rank's whole engine: every row (its range and its cache slots) and its optimizer state, per table. */
function engineOf(h: HeraldEmbeddingCollection): Float32Array[] {
  return h.local.tables.flatMap((t) => {
    const ids = Int32Array.from({ length: t.rows }, (_, j) => j);
    return [h.local.readRows(t.name, ids), h.local.readState(t.name, ids)];
  });
}

function sameEngines(a: Float32Array[][], b: Float32Array[][]): boolean {
  return a.length === b.length && a.every((r, i) => r.length === b[i]!.length && r.every((x, t) => S.bitwise(x, b[i]![t]!)));
}

/** One training step of every rank on a global batch (step k's gradients): the outputs. */
async function train(ranks: HeraldEmbeddingCollection[], global: JaggedBatch, k: number): Promise<HeraldForwardOutput[]> {
  const locals = ranks.map((r) => r.assign(global));
  const outs = await Promise.all(ranks.map((r, i) => r.forward(locals[i]!)));
  await Promise.all(ranks.map((r, i) => r.backward(outs[i]!, { pooled: S.gradsFor(k, outs[i]!.samples, r.pooledDim) })));
  return outs;
}

async function withRanks<T>(body: (ranks: HeraldEmbeddingCollection[], groups: ProcessGroup[]) => Promise<T>): Promise<T> {
  const groups = createInProcessGroups(W, { timeoutMs: 10_000 });
  const ranks = groups.map((g) => new HeraldEmbeddingCollection(cfg, g, { cacheRows: 8, batchSize: B }));
  try {
    return await body(ranks, groups);
  } finally {
    for (const r of ranks) r.dispose();
    for (const g of groups) g.close();
  }
}

/** A global batch whose first id is out of range (a copy of `g`). */
function outOfRange(g: JaggedBatch): JaggedBatch {
  return JaggedBatch.fromLengths({ features: [...g.features], batchSize: g.batchSize, lengths: g.lengths, ids: BigInt64Array.from(g.ids, (x, i) => (i === 0 ? 10n ** 9n : BigInt(x))) });
}

function batchOf(sparse: JaggedBatch): Batch {
  const G = sparse.batchSize;
  return { dense: new Float32Array(G), sparse, labels: new Float32Array(G), size: G };
}

interface Refusal {
  name: string;
  code: string;
  /** every rank's forward of the step, rank 1 refusing it; g: the global batch */
  run: (ranks: HeraldEmbeddingCollection[], g: JaggedBatch) => Promise<PromiseSettledResult<unknown>[]>;
}

const why = new EmbshardError('NON_FINITE_GRADIENT', "rank 1's dense features were NaN");
const refusals: Refusal[] = [
  {
    name: "the caller's reject",
    code: 'NON_FINITE_GRADIENT',
    run: (ranks, g) => {
      const locals = ranks.map((r) => r.assign(g));
      return Promise.allSettled(ranks.map((r, i) => r.forward(locals[i]!, i === 1 ? { reject: why } : {})));
    },
  },
  {
    name: "the caller's reject while the next batch is being prepared",
    code: 'NON_FINITE_GRADIENT',
    run: (ranks, g) => {
      const locals = ranks.map((r) => r.assign(g));
      for (const r of ranks) void r.prepare(S.globalBatch(lib, 3, W * B) as JaggedBatch);
      return Promise.allSettled(ranks.map((r, i) => r.forward(locals[i]!, i === 1 ? { reject: why } : {})));
    },
  },
  {
    name: 'options it cannot use',
    code: 'INVALID_ARGUMENT',
    run: (ranks, g) => {
      const locals = ranks.map((r) => r.assign(g));
      return Promise.allSettled(ranks.map((r, i) => r.forward(locals[i]!, i === 1 ? ({ bogus: 1 } as never) : {})));
    },
  },
  {
    name: 'a forward of another batch (a lookup while the other trains)',
    code: 'INVALID_ARGUMENT',
    run: (ranks, g) => {
      const locals = ranks.map((r) => r.assign(g));
      const other = S.globalBatch(lib, 50, B) as JaggedBatch;
      return Promise.allSettled(ranks.map((r, i) => r.forward(i === 1 ? other : locals[i]!)));
    },
  },
  {
    name: 'a forward of no batch',
    code: 'INVALID_ARGUMENT',
    run: (ranks, g) => {
      const locals = ranks.map((r) => r.assign(g));
      return Promise.allSettled(ranks.map((r, i) => r.forward(i === 1 ? (null as never) : locals[i]!)));
    },
  },
  {
    name: 'a global batch it could not schedule (the trainer hook)',
    code: 'ID_OUT_OF_RANGE',
    run: (ranks, g) => {
      const mine = [batchOf(g), batchOf(outOfRange(g))];
      const local = ranks.map((r, i) => r.localize(mine[i]!));
      return Promise.allSettled(ranks.map((r, i) => r.forward(local[i]!.sparse)));
    },
  },
  {
    name: 'a global batch without one of the features (the trainer hook)',
    code: 'MISSING_FEATURE',
    run: (ranks, g) => {
      const n = g.lengths.subarray(0, 3 * g.batchSize).reduce((a, b) => a + b, 0);
      const noTiny = JaggedBatch.fromLengths({ features: g.features.slice(0, 3), batchSize: g.batchSize, lengths: g.lengths.slice(0, 3 * g.batchSize), ids: g.ids.slice(0, n) });
      const mine = [batchOf(g), batchOf(noTiny)];
      const local = ranks.map((r, i) => r.localize(mine[i]!));
      return Promise.allSettled(ranks.map((r, i) => r.forward(local[i]!.sparse)));
    },
  },
  {
    name: 'a global batch of another size (the trainer hook)',
    code: 'INVALID_SIZE',
    run: (ranks, g) => {
      const mine = [batchOf(g), batchOf(S.globalBatch(lib, 1, W * B - 1) as JaggedBatch)];
      const local = ranks.map((r, i) => r.localize(mine[i]!));
      return Promise.allSettled(ranks.map((r, i) => r.forward(local[i]!.sparse)));
    },
  },
  {
    name: 'a global batch of the same size with other ids (the ranks scheduled different steps)',
    code: 'INVALID_ARGUMENT',
    run: (ranks, g) => {
      const mine = [g, S.globalBatch(lib, 60, W * B) as JaggedBatch];
      const locals = ranks.map((r, i) => r.assign(mine[i]!));
      return Promise.allSettled(ranks.map((r, i) => r.forward(locals[i]!)));
    },
  },
];

describe('a training forward one rank refuses', () => {
  for (const rf of refusals)
    it(`${rf.name}: every rank rejects with its code, nothing changes, the next step trains as if it never came`, async () => {
      const g0 = S.globalBatch(lib, 0, W * B) as JaggedBatch, g1 = S.globalBatch(lib, 1, W * B) as JaggedBatch, g2 = S.globalBatch(lib, 2, W * B) as JaggedBatch;
      const seen = await withRanks(async (ranks) => {
        await train(ranks, g0, 0);
        const before = ranks.map(engineOf);
        const res = await rf.run(ranks, g1);
        expect(codes(res)).toEqual([rf.code, rf.code]);
        expect(sameEngines(ranks.map(engineOf), before)).toBe(true);
        const outs = await train(ranks, g2, 2);
        return { outs, engines: ranks.map(engineOf), counts: ranks[0]!.lastCounts, tables: await gatherAll(ranks) };
      });
      const clean = await withRanks(async (ranks) => {
        await train(ranks, g0, 0);
        const outs = await train(ranks, g2, 2);
        return { outs, engines: ranks.map(engineOf), counts: ranks[0]!.lastCounts };
      });
      seen.outs.forEach((o, i) => {
        expect(o.samples).toEqual(clean.outs[i]!.samples);
        expect(S.bitwise(o.pooled, clean.outs[i]!.pooled)).toBe(true);
      });
      expect(seen.counts).toEqual(clean.counts);
      expect(sameEngines(seen.engines, clean.engines)).toBe(true);
      // the independent oracle: one collection trained on g0 and g2
      const oracle = new EmbeddingCollection(cfg);
      try {
        for (const [g, k] of [[g0, 0], [g2, 2]] as const) {
          const go = await oracle.forward(g);
          await oracle.backward(go, { pooled: S.gradsFor(k, Int32Array.from({ length: W * B }, (_, i) => i), oracle.pooledDim) });
        }
        for (const t of oracle.tables) expect(S.relErr(seen.tables.get(t.name)!, oracle.readRows(t.name, Int32Array.from({ length: t.rows }, (_, j) => j))), t.name).toBeLessThan(1e-5);
      } finally {
        oracle.dispose();
      }
    });
});

async function gatherAll(ranks: HeraldEmbeddingCollection[]): Promise<Map<string, Float32Array>> {
  const m = new Map<string, Float32Array>();
  for (const t of ranks[0]!.local.tables) m.set(t.name, (await Promise.all(ranks.map((r) => r.gather(t.name))))[0]!.weights);
  return m;
}

describe('the Trainer over Herald tables: a global batch one rank cannot schedule', () => {
  const spec: DenseModelSpec = { denseIn: 3, bottom: [8, 4], top: [8, 1], numSparse: 4, embDim: 4, interaction: 'dot' };
  const tcfg = { ...S.config({ type: 'adagrad', lr: 0.1 }), tables: S.config({ type: 'adagrad', lr: 0.1 }).tables.map((t: object) => ({ ...t, dim: 4 })) };
  function trainBatch(k: number, sparse?: JaggedBatch): Batch {
    const G = W * B;
    sparse ??= S.globalBatch(lib, k, G) as JaggedBatch;
    return { dense: Float32Array.from({ length: G * 3 }, (_, i) => Math.cos(k * 3.1 + i * 0.7)), sparse, labels: Float32Array.from({ length: G }, (_, i) => ((k * 7 + i * 13) % 5 < 2 ? 1 : 0)), size: G };
  }

  /** Trainers on W ranks stepping through `plan` (per step: each rank's batch and next batch); the rejected steps' codes, then every rank's engine and dense parameters. */
  async function runTrainers(plan: { batch: (r: number) => Batch; next?: (r: number) => Batch }[]) {
    const groups = createInProcessGroups(W, { timeoutMs: 10_000 });
    const tables = groups.map((g) => new HeraldEmbeddingCollection(tcfg, g, { cacheRows: 8, batchSize: B }));
    const trainers = groups.map((g, r) => new Trainer({ model: spec, embeddings: tables[r]!, group: g, optimizer: { type: 'adagrad', lr: 0.05 } }));
    try {
      const rejected: string[][] = [];
      for (const p of plan) {
        const res = await Promise.allSettled(trainers.map((t, r) => t.step(p.batch(r), p.next?.(r))));
        if (res.some((x) => x.status === 'rejected')) rejected.push(codes(res));
      }
      return { rejected, engines: tables.map(engineOf), dense: trainers.map((t) => Float32Array.from(t.dense.params)), steps: trainers.map((t) => t.stepCount) };
    } finally {
      tables.forEach((t) => t.dispose());
      groups.forEach((g) => g.close());
    }
  }

  it('every rank rejects the step with its code, and training goes on bitwise as if it never came (as a step, and as the next batch prepared)', async () => {
    const good = [0, 1, 2, 3].map((k) => trainBatch(k));
    const badOf = [trainBatch(9), trainBatch(9, outOfRange(S.globalBatch(lib, 9, W * B) as JaggedBatch))];
    const bad = (r: number) => badOf[r]!;
    const seen = await runTrainers([
      { batch: () => good[0]!, next: () => good[1]! },
      { batch: () => good[1]!, next: bad },
      { batch: bad, next: () => good[2]! },
      { batch: () => good[2]!, next: () => good[3]! },
      { batch: () => good[3]! },
    ]);
    const clean = await runTrainers([
      { batch: () => good[0]!, next: () => good[1]! },
      { batch: () => good[1]!, next: () => good[2]! },
      { batch: () => good[2]!, next: () => good[3]! },
      { batch: () => good[3]! },
    ]);
    expect(seen.rejected).toEqual([['ID_OUT_OF_RANGE', 'ID_OUT_OF_RANGE']]);
    expect(seen.steps).toEqual([4, 4]);
    expect(sameEngines(seen.engines, clean.engines)).toBe(true);
    seen.dense.forEach((d, r) => expect(S.bitwise(d, clean.dense[r]!)).toBe(true));
  });

  it('a batch the Trainer itself refuses (a NaN dense feature) moves no rows: training goes on bitwise as if it never came', async () => {
    const good = [0, 1, 2].map((k) => trainBatch(k));
    const nan = trainBatch(9);
    nan.dense[4] = NaN;
    const seen = await runTrainers([{ batch: () => good[0]! }, { batch: () => nan }, { batch: () => good[1]! }, { batch: () => good[2]! }]);
    const clean = await runTrainers([{ batch: () => good[0]! }, { batch: () => good[1]! }, { batch: () => good[2]! }]);
    expect(seen.rejected).toEqual([['INVALID_ARGUMENT', 'INVALID_ARGUMENT']]);
    expect(seen.steps).toEqual([3, 3]);
    expect(sameEngines(seen.engines, clean.engines)).toBe(true);
    seen.dense.forEach((d, r) => expect(S.bitwise(d, clean.dense[r]!)).toBe(true));
  });
});

// HeraldEmbeddingCollection on in-process groups of 1, 2, 4 and 8 ranks (with 8, a rank owns no row of the
// tiny table) against one EmbeddingCollection trained on the same global batches: sgd / adagrad / adam, no cache / small / large caches, Herald and
// random placement, shared, mean-pooled and weighted tables, several steps. Every rank's pooled outputs
// are the oracle's rows of its samples (bitwise in the first step, when the tables are still equal); the
// gathered tables and optimizer state are within 1e-5 (norm-relative) after every run. A rank that dies,
// gradients or backward options one rank cannot use, a lookup one rank cannot make (its batch, its options)
// and a save rank 0 cannot write end the call on every rank; an output of an earlier step, another rank's or
// another collection's is rejected before anything moves, and options are checked field by field.
import { describe, it, expect } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import type { OptimizerConfig } from '../../lib/config.js';
import { HeraldEmbeddingCollection } from '../../lib/herald/collection.js';
import type { Allocation } from '../../lib/herald/scheduler.js';
import { takeRows, takeSparse } from '../../lib/data/take.js';
import { EmbshardError } from '../../lib/errors.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';

const lib = { JaggedBatch };

interface Case {
  W: number;
  B: number;
  opt: OptimizerConfig;
  cacheRows: number;
  allocation: Allocation;
  weighted?: boolean;
  steps: number;
}

async function compare(c: Case) {
  const cfg = S.config(c.opt);
  const groups = createInProcessGroups(c.W, { timeoutMs: 20_000 });
  const ranks = groups.map((g) => new HeraldEmbeddingCollection(cfg, g, { cacheRows: c.cacheRows, batchSize: c.B, allocation: c.allocation }));
  const oracle = new EmbeddingCollection(cfg);
  let outBitwise = true, moves = 0;
  try {
    for (let step = 0; step < c.steps; step++) {
      const global: JaggedBatch = S.globalBatch(lib, step, c.W * c.B, { weighted: c.weighted });
      const locals = ranks.map((r) => r.assign(global));
      const outs = await Promise.all(ranks.map((r, i) => r.forward(locals[i]!)));
      const go = await oracle.forward(global);
      const P = oracle.pooledDim;
      for (const o of outs) {
        expect(o.samples.length).toBe(c.B);
        if (step === 0 && !S.bitwise(o.pooled, takeRows(go.pooled, P, o.samples))) outBitwise = false;
        expect(S.relErr(o.pooled, takeRows(go.pooled, P, o.samples))).toBeLessThan(1e-6);
      }
      const all = Int32Array.from({ length: c.W * c.B }, (_, i) => i);
      await oracle.backward(go, { pooled: S.gradsFor(step, all, P) });
      await Promise.all(ranks.map((r, i) => r.backward(outs[i]!, { pooled: S.gradsFor(step, outs[i]!.samples, P) })));
      moves += ranks[0]!.lastCounts!.moves;
    }
    let tableErr = 0, stateErr = 0;
    for (const t of oracle.tables) {
      const ids = Int32Array.from({ length: t.rows }, (_, j) => j);
      const want = oracle.readRows(t.name, ids), wantS = oracle.readState(t.name, ids);
      const got = await Promise.all(ranks.map((r) => r.gather(t.name)));
      for (const g of got) {
        tableErr = Math.max(tableErr, S.relErr(g.weights, want));
        stateErr = Math.max(stateErr, S.relErr(g.state, wantS));
      }
    }
    // a forward outside the schedule (evaluation): every rank looks up a batch of its own
    let lookupErr = 0;
    const own = ranks.map((_, r) => S.globalBatch(lib, 99 + r, 3 + r, { weighted: c.weighted }) as JaggedBatch);
    const looked = await Promise.all(ranks.map((r, i) => r.forward(own[i]!)));
    for (let i = 0; i < ranks.length; i++) {
      const want = await oracle.forward(own[i]!);
      lookupErr = Math.max(lookupErr, S.relErr(looked[i]!.pooled, want.pooled));
      await oracle.release(want);
    }
    return { outBitwise, tableErr, stateErr, lookupErr, moves, step: ranks[0]!.step, oracleStep: oracle.step };
  } finally {
    ranks.forEach((r) => r.dispose());
    oracle.dispose();
    groups.forEach((g) => g.close());
  }
}

describe('HeraldEmbeddingCollection vs one collection (in-process groups)', () => {
  const cases: Case[] = [
    { W: 1, B: 16, opt: { type: 'adagrad', lr: 0.1 }, cacheRows: 8, allocation: 'herald', steps: 3 },
    { W: 2, B: 12, opt: { type: 'sgd', lr: 0.5 }, cacheRows: 0, allocation: 'herald', steps: 4 },
    { W: 4, B: 10, opt: { type: 'adagrad', lr: 0.1 }, cacheRows: 6, allocation: 'herald', weighted: true, steps: 6 },
    { W: 4, B: 10, opt: { type: 'adam', lr: 0.01 }, cacheRows: 64, allocation: 'random', steps: 5 },
    { W: 4, B: 8, opt: { type: 'rowwise_adagrad', lr: 0.1 }, cacheRows: 1000, allocation: 'herald', steps: 6 },
    { W: 8, B: 5, opt: { type: 'adagrad', lr: 0.1 }, cacheRows: 4, allocation: 'herald', steps: 4 },
  ];
  for (const c of cases)
    it(`${c.W} rank(s), ${c.opt.type}, cache ${c.cacheRows}, ${c.allocation}${c.weighted ? ', weighted' : ''}`, async () => {
      const r = await compare(c);
      expect(r.outBitwise).toBe(true);
      expect(r.tableErr).toBeLessThan(1e-5);
      expect(r.stateErr).toBeLessThan(1e-5);
      expect(r.lookupErr).toBeLessThan(1e-5);
      expect(r.step).toBe(r.oracleStep);
      if (c.cacheRows > 0 && c.W > 1) expect(r.moves).toBeGreaterThan(0);
    });
});

describe('a rank that dies mid-step', () => {
  it('fails the others with COMM_FAILED before anything is written', async () => {
    const W = 4, B = 6;
    const groups = createInProcessGroups(W, { timeoutMs: 5000 });
    const ranks = groups.map((g) => new HeraldEmbeddingCollection(S.config({ type: 'adagrad', lr: 0.1 }), g, { cacheRows: 16, batchSize: B }));
    try {
      const P = ranks[0]!.pooledDim;
      const step = async (k: number, live: number[]) => {
        const global = S.globalBatch(lib, k, W * B) as JaggedBatch;
        const locals = ranks.map((r) => r.assign(global));
        return Promise.allSettled(
          live.map(async (i) => {
            const out = await ranks[i]!.forward(locals[i]!);
            await ranks[i]!.backward(out, { pooled: S.gradsFor(k, out.samples, P) });
          }),
        );
      };
      for (let k = 0; k < 3; k++) expect((await step(k, [0, 1, 2, 3])).every((x) => x.status === 'fulfilled')).toBe(true);
      const snapshot = (i: number) =>
        ranks[i]!.local.tables.map((t) => ranks[i]!.local.readRows(t.name, Int32Array.from({ length: t.rows }, (_, j) => j)));
      const before = [0, 1, 2].map(snapshot);
      groups[3]!.close('rank 3 died');
      const r = await step(3, [0, 1, 2]);
      for (const x of r) {
        expect(x.status).toBe('rejected');
        expect((x as PromiseRejectedResult).reason.code).toBe('COMM_FAILED');
      }
      [0, 1, 2].forEach((i) => snapshot(i).forEach((a, t) => expect(S.bitwise(a, before[i]![t]!)).toBe(true)));
    } finally {
      ranks.forEach((r) => r.dispose());
      groups.forEach((g) => g.close());
    }
  });
});

describe('gradients one rank cannot use', () => {
  for (const bad of ['nan', 'size'] as const)
    it(`${bad === 'nan' ? 'NaN' : 'a wrong size'} on one rank: every rank rejects, nothing changes, the same outputs then step like one collection`, async () => {
      const W = 2, B = 8, cfg = S.config({ type: 'adagrad', lr: 0.1 });
      const groups = createInProcessGroups(W, { timeoutMs: 20_000 });
      const ranks = groups.map((g) => new HeraldEmbeddingCollection(cfg, g, { cacheRows: 8, batchSize: B }));
      const oracle = new EmbeddingCollection(cfg);
      try {
        const gather = async () => {
          const m = new Map<string, Float32Array>();
          for (const t of oracle.tables) m.set(t.name, (await Promise.all(ranks.map((r) => r.gather(t.name))))[0]!.weights);
          return m;
        };
        const global: JaggedBatch = S.globalBatch(lib, 0, W * B);
        const locals = ranks.map((r) => r.assign(global));
        const outs = await Promise.all(ranks.map((r, i) => r.forward(locals[i]!)));
        const P = oracle.pooledDim;
        const before = await gather();
        const grads = outs.map((o) => S.gradsFor(0, o.samples, P) as Float32Array);
        const broken = bad === 'nan' ? Object.assign(grads[1]!.slice(), { [3]: Number.NaN }) : grads[1]!.subarray(1);
        const res = await Promise.allSettled(ranks.map((r, i) => r.backward(outs[i]!, { pooled: i === 1 ? broken : grads[i]! })));
        const code = bad === 'nan' ? 'NON_FINITE_GRADIENT' : 'GRAD_SIZE_MISMATCH';
        expect(res.map((x) => x.status === 'rejected' && (x.reason as { code?: string }).code)).toEqual([code, code]);
        expect(await gather()).toEqual(before);
        // the outputs are still theirs: good gradients now, and the tables are one collection's after the step
        await Promise.all(ranks.map((r, i) => r.backward(outs[i]!, { pooled: grads[i]! })));
        const go = await oracle.forward(global);
        await oracle.backward(go, { pooled: S.gradsFor(0, Int32Array.from({ length: W * B }, (_, i) => i), P) });
        const after = await gather();
        for (const t of oracle.tables) {
          const want = oracle.readRows(t.name, Int32Array.from({ length: t.rows }, (_, j) => j));
          expect(S.relErr(after.get(t.name)!, want), t.name).toBeLessThan(1e-5);
        }
      } finally {
        for (const r of ranks) r.dispose();
        for (const g of groups) g.close();
        oracle.dispose();
      }
    });
});

describe('save', () => {
  it('a save rank 0 cannot write rejects on every rank; a save elsewhere then loads as one collection of the gathered tables', async () => {
    const W = 2, B = 8, cfg = S.config({ type: 'adagrad', lr: 0.1 });
    const groups = createInProcessGroups(W, { timeoutMs: 20_000 });
    const ranks = groups.map((g) => new HeraldEmbeddingCollection(cfg, g, { cacheRows: 8, batchSize: B }));
    const dir = mkdtempSync(join(tmpdir(), 'embshard-herald-save-'));
    try {
      writeFileSync(join(dir, 'a-file'), 'not a folder');
      const res = await Promise.allSettled(ranks.map((r) => r.save(join(dir, 'a-file', 'ck'))));
      expect(res.map((x) => (x as PromiseRejectedResult).reason?.code)).toEqual(['IO_ERROR', 'IO_ERROR']);
      expect((res[1] as PromiseRejectedResult).reason.message).toMatch(/failed on rank 0/);
      await Promise.all(ranks.map((r) => r.save(join(dir, 'ck'))));
      const back = await EmbeddingCollection.load(join(dir, 'ck'));
      for (const t of back.tables) {
        const [g] = await Promise.all(ranks.map((r) => r.gather(t.name)));
        expect(back.readRows(t.name, Int32Array.from({ length: t.rows }, (_, j) => j))).toEqual(g!.weights);
      }
      back.dispose();
    } finally {
      rmSync(dir, { recursive: true, force: true });
      for (const r of ranks) r.dispose();
      for (const g of groups) g.close();
    }
  });
});

describe('a lookup (not a training batch) one rank cannot make', () => {
  it('an id out of range or the caller\'s reject on one rank ends every rank\'s lookup; the next lookup works', async () => {
    const W = 2, B = 8, cfg = S.config({ type: 'adagrad', lr: 0.1 });
    const groups = createInProcessGroups(W, { timeoutMs: 20_000 });
    const ranks = groups.map((g) => new HeraldEmbeddingCollection(cfg, g, { cacheRows: 8, batchSize: B }));
    const oracle = new EmbeddingCollection(cfg);
    try {
      const global: JaggedBatch = S.globalBatch(lib, 3, W * B);
      const good = ranks.map((_, r) => takeSparse(global, Int32Array.from({ length: B }, (_, i) => r * B + i)));
      const badIds = JaggedBatch.fromLengths({ features: [...good[0]!.features], batchSize: B, lengths: good[0]!.lengths, ids: BigInt64Array.from(good[0]!.ids, (x, i) => (i === 0 ? 10n ** 9n : BigInt(x))) });
      const why = new EmbshardError('INVALID_ARGUMENT', "rank 0's dense features were NaN");
      for (const [b0, o0, code] of [[badIds, {}, 'ID_OUT_OF_RANGE'], [good[0]!, { reject: why }, 'INVALID_ARGUMENT']] as const) {
        const res = await Promise.allSettled(ranks.map((r, i) => r.forward(i === 0 ? b0 : good[i]!, i === 0 ? o0 : {})));
        expect(res.map((x) => (x as PromiseRejectedResult).reason?.code)).toEqual([code, code]);
        expect((res[1] as PromiseRejectedResult).reason.message).toMatch(/another rank rejected its batch/);
      }
      const outs = await Promise.all(ranks.map((r, i) => r.forward(good[i]!)));
      const want = await oracle.forward(global);
      outs.forEach((o, r) => expect(o.pooled).toEqual(want.pooled.subarray(r * B * oracle.pooledDim, (r + 1) * B * oracle.pooledDim)));
    } finally {
      for (const r of ranks) r.dispose();
      for (const g of groups) g.close();
      oracle.dispose();
    }
  });
});

describe('misuse on one rank or on all', () => {
  const W = 2, B = 8, cfg = S.config({ type: 'adagrad', lr: 0.1 });
  const codes = (res: PromiseSettledResult<unknown>[]) => res.map((x) => (x.status === 'rejected' ? (x.reason as { code?: string }).code ?? String(x.reason) : 'fulfilled'));

  /** W ranks (timeouts short enough that a rank left waiting shows as COMM_TIMEOUT), the oracle, and the gathered tables. */
  async function withRanks(body: (ranks: HeraldEmbeddingCollection[], oracle: EmbeddingCollection, gather: () => Promise<Map<string, Float32Array>>) => Promise<void>) {
    const groups = createInProcessGroups(W, { timeoutMs: 4000 });
    const ranks = groups.map((g) => new HeraldEmbeddingCollection(cfg, g, { cacheRows: 8, batchSize: B }));
    const oracle = new EmbeddingCollection(cfg);
    const gather = async () => {
      const m = new Map<string, Float32Array>();
      for (const t of oracle.tables) m.set(t.name, (await Promise.all(ranks.map((r) => r.gather(t.name))))[0]!.weights);
      return m;
    };
    try {
      await body(ranks, oracle, gather);
    } finally {
      for (const r of ranks) r.dispose();
      for (const g of groups) g.close();
      oracle.dispose();
    }
  }

  /** The oracle trained on `global` (step `k`'s gradients): the tables one collection has after it. */
  async function oracleStep(oracle: EmbeddingCollection, global: JaggedBatch, k: number) {
    const go = await oracle.forward(global);
    await oracle.backward(go, { pooled: S.gradsFor(k, Int32Array.from({ length: global.batchSize }, (_, i) => i), oracle.pooledDim) });
  }

  async function expectOracle(oracle: EmbeddingCollection, gather: () => Promise<Map<string, Float32Array>>) {
    const got = await gather();
    for (const t of oracle.tables) expect(S.relErr(got.get(t.name)!, oracle.readRows(t.name, Int32Array.from({ length: t.rows }, (_, j) => j))), t.name).toBeLessThan(1e-5);
  }

  it('gradients that are not an object, or backward options one rank cannot use: every rank rejects with its code, nothing changes, the step then goes ahead', async () => {
    await withRanks(async (ranks, oracle, gather) => {
      const global: JaggedBatch = S.globalBatch(lib, 0, W * B);
      const locals = ranks.map((r) => r.assign(global));
      const outs = await Promise.all(ranks.map((r, i) => r.forward(locals[i]!)));
      const grads = outs.map((o) => ({ pooled: S.gradsFor(0, o.samples, oracle.pooledDim) as Float32Array }));
      const before = await gather();
      for (const [g1, o1, code] of [[null, {}, 'GRAD_SIZE_MISMATCH'], [grads[1]!, { reject: true }, 'INVALID_ARGUMENT'], [grads[1]!, { keepOutput: true }, 'INVALID_CONFIG']] as const) {
        const res = await Promise.allSettled(ranks.map((r, i) => r.backward(outs[i]!, i === 1 ? (g1 as never) : grads[i]!, i === 1 ? (o1 as never) : {})));
        expect(codes(res)).toEqual([code, code]);
        expect(await gather()).toEqual(before);
      }
      await Promise.all(ranks.map((r, i) => r.backward(outs[i]!, grads[i]!)));
      await oracleStep(oracle, global, 0);
      await expectOracle(oracle, gather);
    });
  });

  it("an output of an earlier step (a later training forward ran), another rank's or another collection's: rejected before anything moves", async () => {
    await withRanks(async (ranks, oracle, gather) => {
      const g1: JaggedBatch = S.globalBatch(lib, 0, W * B), g2: JaggedBatch = S.globalBatch(lib, 1, W * B);
      const l1 = ranks.map((r) => r.assign(g1));
      const o1 = await Promise.all(ranks.map((r, i) => r.forward(l1[i]!)));
      const l2 = ranks.map((r) => r.assign(g2));
      const o2 = await Promise.all(ranks.map((r, i) => r.forward(l2[i]!)));
      const before = await gather();
      const grad = (o: { samples: Int32Array }, k: number) => ({ pooled: S.gradsFor(k, o.samples, oracle.pooledDim) as Float32Array });
      const stale = await Promise.allSettled(ranks.map((r, i) => r.backward(o1[i]!, grad(o1[i]!, 0))));
      expect(codes(stale)).toEqual(['INVALID_ARGUMENT', 'INVALID_ARGUMENT']);
      expect((stale[0] as PromiseRejectedResult).reason.message).toMatch(/stale/);
      const swapped = await Promise.allSettled(ranks.map((r, i) => r.backward(o2[1 - i]!, grad(o2[1 - i]!, 1))));
      expect(codes(swapped)).toEqual(['INVALID_ARGUMENT', 'INVALID_ARGUMENT']);
      expect(await gather()).toEqual(before);
      // the latest step still goes through: the tables are one collection's trained on g2 (g1's step never applied)
      await Promise.all(ranks.map((r, i) => r.backward(o2[i]!, grad(o2[i]!, 1))));
      await oracleStep(oracle, g2, 1);
      await expectOracle(oracle, gather);
      // another collection's output (same config, same group size)
      const groups = createInProcessGroups(W, { timeoutMs: 4000 });
      const others = groups.map((g) => new HeraldEmbeddingCollection(cfg, g, { cacheRows: 8, batchSize: B }));
      try {
        const g3: JaggedBatch = S.globalBatch(lib, 2, W * B);
        const lo = others.map((r) => r.assign(g3));
        const oo = await Promise.all(others.map((r, i) => r.forward(lo[i]!)));
        const after = await gather();
        const res = await Promise.allSettled(ranks.map((r, i) => r.backward(oo[i]!, grad(oo[i]!, 2))));
        expect(codes(res)).toEqual(['INVALID_ARGUMENT', 'INVALID_ARGUMENT']);
        expect(await gather()).toEqual(after);
      } finally {
        for (const r of others) r.dispose();
        for (const g of groups) g.close();
      }
    });
  });

  it('a lookup whose batch is not a JaggedBatch or whose options are bad on one rank: every rank rejects with its code; the next lookup works', async () => {
    await withRanks(async (ranks, oracle) => {
      const global: JaggedBatch = S.globalBatch(lib, 3, W * B);
      const good = ranks.map((_, r) => takeSparse(global, Int32Array.from({ length: B }, (_, i) => r * B + i)));
      for (const [b0, o0, code] of [[null, {}, 'INVALID_ARGUMENT'], [good[0]!, { bogus: 1 }, 'INVALID_ARGUMENT'], [good[0]!, { reject: 'no' }, 'INVALID_ARGUMENT']] as const) {
        const res = await Promise.allSettled(ranks.map((r, i) => r.forward(i === 0 ? (b0 as never) : good[i]!, i === 0 ? (o0 as never) : {})));
        expect(codes(res)).toEqual([code, code]);
        expect((res[1] as PromiseRejectedResult).reason.message).toMatch(/another rank rejected its batch/);
      }
      const outs = await Promise.all(ranks.map((r, i) => r.forward(good[i]!)));
      const want = await oracle.forward(global);
      outs.forEach((o, r) => expect(o.pooled).toEqual(want.pooled.subarray(r * B * oracle.pooledDim, (r + 1) * B * oracle.pooledDim)));
    });
  });

  it('herald options: an unknown field or a seed that is not a non-negative integer is INVALID_CONFIG naming it', () => {
    const [g] = createInProcessGroups(1);
    try {
      for (const [o, re] of [[{ seed: -1 }, /^seed/], [{ seed: 2.5 }, /^seed/], [{ seed: 'x' }, /^seed/], [{ sed: 1 }, /options\.sed/]] as const)
        expect(() => new HeraldEmbeddingCollection(cfg, g!, { cacheRows: 8, batchSize: B, allocation: 'random', ...o } as never)).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringMatching(re) }));
    } finally {
      g!.close();
    }
  });
});

// ShardedEmbeddingCollection has EmbeddingCollection's surface: rows and optimizer state addressed by
// global row id wherever they live (dp tables, replicated and node tiers, row / column / table shards),
// learning rate, save / load, release — each checked against one EmbeddingCollection given the same
// calls, on 4 in-process ranks in two modelled nodes; bad arguments are typed errors that change nothing.
import { describe, it, expect } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { measureTraffic } from '../../lib/plan/traffic.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection, collectionConfigOf, type ShardedConfig } from '../../lib/sharded/sharded.js';
import * as S from './scenario.mjs';

const lib = { JaggedBatch, ShardPlan };
const W = 4, RPN = 2;

function setup(optimizer: ShardedConfig['optimizer'], hierarchical = false) {
  const plan: ShardPlan = S.makePlan(lib, W, RPN, { hierarchical });
  const cfg: ShardedConfig = { optimizer, seed: 5 };
  const groups = createInProcessGroups(W, { ranksPerNode: RPN, timeoutMs: 30_000 });
  const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, cfg));
  const oracle = new EmbeddingCollection(collectionConfigOf(plan, cfg));
  const close = () => {
    for (const sc of ranks) sc.dispose();
    for (const g of groups) g.close();
    oracle.dispose();
  };
  return { plan, groups, ranks, oracle, close };
}

/** One step on the sharded ranks (each its local batch) and on the oracle (the global batch). */
async function stepBoth(ranks: ShardedEmbeddingCollection[], oracle: EmbeddingCollection, plan: ShardPlan, step: number, keepOutput = false) {
  const batches = ranks.map((_, r) => S.localBatch(lib, plan, r, step));
  const outs = await Promise.all(ranks.map((sc, r) => sc.forward(batches[r]!)));
  const gout = await oracle.forward(S.globalBatch(lib, batches));
  const grads = outs.map((o, r) => S.gradsFor(o, r, step));
  await Promise.all(ranks.map((sc, r) => sc.backward(outs[r]!, grads[r]!, { keepOutput })));
  await oracle.backward(gout, S.concatGrads(grads, oracle.sequenceFeatures));
  return { outs, grads };
}

/** Every row of the table, shuffled, with some ids twice. */
function idsOf(rows: number, seed: number): number[] {
  const r = S.rng(seed);
  const ids = Array.from({ length: rows }, (_, i) => i);
  for (let i = rows - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [ids[i], ids[j]] = [ids[j]!, ids[i]!];
  }
  return [...ids, ids[0]!, ids[rows >> 1]!];
}

describe('ShardedEmbeddingCollection starts equal to one collection', () => {
  it('every shard holds exactly its slice of the init, bitwise, for tables longer than one init chunk (65,536 rows)', async () => {
    // a node tier long enough that each holder's share (every RPN-th row) spans several chunks too
    const rows = 140_011, dim = 5;
    const plan = ShardPlan.create({
      topology: S.topology(W, RPN), batchSize: 4,
      tables: [
        { table: { name: 'R', rows, dim, pooling: 'sum', features: ['r'] }, cluster: 'rb', tiers: { replicated: 3, node: 132_001 },
          shards: [{ rows: [132_004, 136_000], cols: [0, 2], rank: 1 }, { rows: [132_004, 136_000], cols: [2, 5], rank: 2 }, { rows: [136_000, rows], cols: [0, 5], rank: 3 }] },
        { table: { name: 'U', rows: 66_001, dim: 3, pooling: 'sum', features: ['u'] }, cluster: 'ub', shards: [{ rows: [0, 66_001], cols: [0, 3], rank: 0 }] },
      ],
    });
    const cfg: ShardedConfig = { seed: 11, init: { R: { type: 'normal', mean: 0.5, std: 2 } } };
    const groups = createInProcessGroups(W, { ranksPerNode: RPN, timeoutMs: 30_000 });
    const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, cfg));
    const oracle = new EmbeddingCollection(collectionConfigOf(plan, cfg));
    try {
      for (const t of plan.tables) {
        const all = Array.from({ length: t.rows }, (_, i) => i);
        const want = oracle.readRows(t.name, all);
        const got = await Promise.all(ranks.map((sc) => sc.readRows(t.name, all))); // a collective
        // bitwise, compared as bytes (an element-wise toEqual of 700,000 values takes seconds)
        const bytes = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
        got.forEach((g, r) => expect(g.length === want.length && bytes(g).equals(bytes(want)), `${t.name} on rank ${r}`).toBe(true));
      }
    } finally {
      for (const sc of ranks) sc.dispose();
      for (const g of groups) g.close();
      oracle.dispose();
    }
  });
});

describe('ShardedEmbeddingCollection has the surface of EmbeddingCollection', () => {
  it('readRows / readState by global row id equal one collection, on every rank, for every table', async () => {
    const { plan, ranks, oracle, close } = setup({ type: 'adam', lr: 0.01 });
    try {
      // a step so the state is not all zeros
      await stepBoth(ranks, oracle, plan, 0);
      for (const t of plan.tables) {
        const ids = idsOf(t.rows, t.rows);
        expect(ranks[0]!.stateWidth(t.name)).toBe(oracle.stateWidth(t.name));
        const w = await Promise.all(ranks.map((sc) => sc.readRows(t.name, ids)));
        const st = await Promise.all(ranks.map((sc) => sc.readState(t.name, ids)));
        const refW = oracle.readRows(t.name, ids), refS = oracle.readState(t.name, ids);
        for (let r = 0; r < W; r++) {
          expect(S.relErr(w[r], refW), `${t.name} rows on rank ${r}`).toBeLessThanOrEqual(1e-5);
          expect(S.relErr(st[r], refS), `${t.name} state on rank ${r}`).toBeLessThanOrEqual(1e-5);
          expect(w[r]).toEqual(w[0]);
        }
      }
    } finally {
      close();
    }
  });

  it('writeRows / writeState by global row id land in every copy: reads and the next step equal one collection', async () => {
    const { plan, ranks, oracle, close } = setup({ type: 'adagrad', lr: 0.05 });
    try {
      for (const t of plan.tables) {
        const ids = idsOf(t.rows, 7 * t.rows).slice(0, Math.max(1, t.rows >> 1));
        const rnd = S.rng(t.rows);
        const vals = Float32Array.from({ length: ids.length * t.dim }, () => rnd() - 0.5);
        const sw = oracle.stateWidth(t.name);
        const st = Float32Array.from({ length: ids.length * sw }, () => rnd());
        await Promise.all(ranks.map((sc) => sc.writeRows(t.name, ids, vals)));
        await Promise.all(ranks.map((sc) => sc.writeState(t.name, ids, st)));
        oracle.writeRows(t.name, ids, vals);
        oracle.writeState(t.name, ids, st);
        const all = Array.from({ length: t.rows }, (_, i) => i);
        const got = await Promise.all(ranks.map((sc) => sc.readRows(t.name, all)));
        const gotS = await Promise.all(ranks.map((sc) => sc.readState(t.name, all)));
        // written values round to the table dtype the same way in both
        expect(got[0]).toEqual(oracle.readRows(t.name, all));
        expect(gotS[0]).toEqual(oracle.readState(t.name, all));
      }
      // the new learning rate and the written rows drive the next step on every replica
      for (const sc of ranks) sc.setLearningRate(0.2);
      oracle.setLearningRate(0.2);
      expect(ranks[0]!.learningRate).toBe(0.2);
      await stepBoth(ranks, oracle, plan, 1);
      for (const t of plan.tables) {
        const all = Array.from({ length: t.rows }, (_, i) => i);
        const got = await Promise.all(ranks.map((sc) => sc.readRows(t.name, all)));
        expect(S.relErr(got[0], oracle.readRows(t.name, all)), t.name).toBeLessThanOrEqual(1e-5);
      }
    } finally {
      close();
    }
  });

  it('a step is a fixed, small set of exchanges: forward 3 all-to-alls, backward a one-value finiteness all-reduce, 1 gradient all-to-all and the replica syncs', async () => {
    const { plan, groups, ranks, close } = setup({ type: 'sgd', lr: 0.1 });
    try {
      const calls = () => groups.map((g) => ({ a2a: g.stats().allToAllV.calls, ag: g.stats().allGather.calls, ar: g.stats().allReduce.calls, arBytes: g.stats().allReduce.sent }));
      const c0 = calls();
      const batches = ranks.map((_, r) => S.localBatch(lib, plan, r, 0));
      const outs = await Promise.all(ranks.map((sc, r) => sc.forward(batches[r]!)));
      const c1 = calls();
      await Promise.all(ranks.map((sc, r) => sc.backward(outs[r]!, S.gradsFor(outs[r], r, 0))));
      const c2 = calls();
      for (let r = 0; r < W; r++) {
        // forward: segment counts, ids + lengths + weights in one message, outputs
        expect({ a2a: c1[r]!.a2a - c0[r]!.a2a, ag: c1[r]!.ag - c0[r]!.ag, ar: c1[r]!.ar - c0[r]!.ar }).toEqual({ a2a: 3, ag: 0, ar: 0 });
        // backward: whether every rank's gradients are finite (one uncounted value); gradients; dp /
        // replicated rows: counts + one all-gather of ids and gradients; node tiers across the two nodes,
        // the rail all-reduce: node sums to their home node, then global sums from it, each as counts +
        // one all-to-all of ids and gradients
        expect({ a2a: c2[r]!.a2a - c1[r]!.a2a, ag: c2[r]!.ag - c1[r]!.ag, ar: c2[r]!.ar - c1[r]!.ar, arBytes: c2[r]!.arBytes - c1[r]!.arBytes }).toEqual({ a2a: 5, ag: 2, ar: 1, arBytes: 0 });
      }
    } finally {
      close();
    }
  });

  it('prepare(next) during the current step (routing + id exchange overlapped) is bitwise equal to not preparing, and bytes = measureTraffic (flat and hierarchical protocol)', async () => {
    const run = async (prepare: boolean, hierarchical: boolean) => {
      const { plan, ranks, close } = setup({ type: 'adagrad', lr: 0.05 }, hierarchical);
      try {
        const pooled: Float32Array[] = [];
        const traffic: string[] = [];
        let outs = await Promise.all(ranks.map((sc, r) => sc.forward(S.localBatch(lib, plan, r, 0))));
        for (let step = 0; step < 3; step++) {
          const next = ranks.map((_, r) => S.localBatch(lib, plan, r, step + 1));
          // every rank prepares the next batch before the current backward, at the same point
          if (prepare) ranks.forEach((sc, r) => sc.prepare(next[r]!));
          await Promise.all(ranks.map((sc, r) => sc.backward(outs[r]!, S.gradsFor(outs[r], r, step))));
          traffic.push(JSON.stringify(ranks.map((sc) => sc.traffic.backward)));
          outs = await Promise.all(ranks.map((sc, r) => sc.forward(next[r]!)));
          traffic.push(JSON.stringify(ranks.map((sc) => sc.traffic.forward)));
          expect(JSON.parse(traffic[traffic.length - 1]!)).toEqual(measureTraffic(plan, next).perRank.map((x) => x.forward));
          pooled.push(...outs.map((o) => Float32Array.from(o.pooled)));
        }
        const rows: Float32Array[] = [];
        for (const t of plan.tables) rows.push((await Promise.all(ranks.map((sc) => sc.readRows(t.name, Array.from({ length: t.rows }, (_, i) => i)))))[0]!);
        return { pooled, rows, traffic };
      } finally {
        close();
      }
    };
    for (const hierarchical of [false, true]) {
      const a = await run(true, hierarchical), b = await run(false, hierarchical);
      expect(a.traffic).toEqual(b.traffic);
      a.pooled.forEach((x, i) => expect(Buffer.compare(Buffer.from(x.buffer), Buffer.from(b.pooled[i]!.buffer))).toBe(0));
      a.rows.forEach((x, i) => expect(Buffer.compare(Buffer.from(x.buffer), Buffer.from(b.rows[i]!.buffer))).toBe(0));
    }
    // a forward of another batch than the prepared one is refused before anything is sent
    const { plan, ranks, close } = setup({ type: 'sgd', lr: 0.1 });
    try {
      ranks.forEach((sc, r) => sc.prepare(S.localBatch(lib, plan, r, 0)));
      await expect(ranks[0]!.forward(S.localBatch(lib, plan, 0, 0))).rejects.toThrow(/prepare/);
      expect(() => ranks[0]!.prepare(S.localBatch(lib, plan, 0, 1))).toThrow(/already waiting/);
    } finally {
      close();
    }
  });

  it('bad arguments are typed errors and change nothing', async () => {
    const { plan, ranks, oracle, close } = setup({ type: 'sgd', lr: 0.1 });
    try {
      const t = plan.tables[0]!;
      const sc = ranks[0]!;
      await expect(sc.readRows('nope', [0])).rejects.toMatchObject({ code: 'UNKNOWN_TABLE' });
      await expect(sc.writeRows(t.name, [0, t.rows], new Float32Array(2 * t.dim))).rejects.toMatchObject({ code: 'ID_OUT_OF_RANGE' });
      await expect(sc.writeRows(t.name, [0, -1], new Float32Array(2 * t.dim))).rejects.toMatchObject({ code: 'ID_OUT_OF_RANGE' });
      await expect(sc.writeRows(t.name, [0, 1], new Float32Array(t.dim))).rejects.toMatchObject({ code: 'LENGTH_MISMATCH' });
      await expect(sc.writeRows(t.name, [0.5], new Float32Array(t.dim))).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      const all = Array.from({ length: t.rows }, (_, i) => i);
      const got = await Promise.all(ranks.map((x) => x.readRows(t.name, all)));
      expect(got[0]).toEqual(oracle.readRows(t.name, all));
    } finally {
      close();
    }
  });

  it("another collection's forward output is INVALID_ARGUMENT in backward, before anything moves", async () => {
    const plan: ShardPlan = S.makePlan(lib, 1, 1, {});
    const cfg: ShardedConfig = { optimizer: { type: 'sgd', lr: 0.1 }, seed: 5 };
    const [ga] = createInProcessGroups(1, { timeoutMs: 30_000 }), [gb] = createInProcessGroups(1, { timeoutMs: 30_000 });
    const a = new ShardedEmbeddingCollection(plan, ga!, cfg), b = new ShardedEmbeddingCollection(plan, gb!, cfg);
    try {
      const batch = S.localBatch(lib, plan, 0, 0);
      const outA = await a.forward(batch);
      const before = await Promise.all(plan.tables.map((t) => b.readRows(t.name, Array.from({ length: t.rows }, (_, i) => i))));
      await expect(b.backward(outA, S.gradsFor(outA, 0, 0))).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/this collection's forward/) });
      const after = await Promise.all(plan.tables.map((t) => b.readRows(t.name, Array.from({ length: t.rows }, (_, i) => i))));
      expect(after).toEqual(before);
      expect(b.step).toBe(0);
      // the output still goes through its own collection's backward
      await a.backward(outA, S.gradsFor(outA, 0, 0));
      expect(a.step).toBe(1);
    } finally {
      a.dispose();
      b.dispose();
      ga!.close();
      gb!.close();
    }
  });

  it('save writes one checkpoint EmbeddingCollection.load reads; load reshards it onto 2 ranks; backward consumes its output unless kept, release detaches a kept one', async () => {
    const { plan, ranks, oracle, close } = setup({ type: 'adagrad', lr: 0.05 });
    const dir = mkdtempSync(join(tmpdir(), 'embshard-surface-'));
    try {
      // consumed by backward: detached, as EmbeddingCollection's; nothing left for release()
      const first = await stepBoth(ranks, oracle, plan, 1);
      expect(first.outs[0]!.pooled.length).toBe(0);
      for (const f of oracle.sequenceFeatures) expect(first.outs[0]!.sequences[f]!.values.length).toBe(0);
      expect(await ranks[0]!.release(first.outs[0]!)).toBe(0);
      await Promise.all(ranks.slice(1).map((sc, r) => sc.release(first.outs[r + 1]!)));
      // kept: readable after backward until release()
      const { outs, grads } = await stepBoth(ranks, oracle, plan, 0, true);
      expect(outs[0]!.pooled.length).toBeGreaterThan(0);
      const released = await Promise.all(ranks.map((sc, r) => sc.release(outs[r]!)));
      expect(released[0]).toBe(1 + oracle.sequenceFeatures.length);
      expect(outs[0]!.pooled.length).toBe(0);
      await expect(ranks[0]!.backward(outs[0]!, grads[0]!)).rejects.toThrow(/already been through backward/);
      // backward options are checked like EmbeddingCollection's (before anything is exchanged)
      const more = await Promise.all(ranks.map((sc, r) => sc.forward(S.localBatch(lib, plan, r, 2))));
      await expect(ranks[0]!.backward(more[0]!, S.gradsFor(more[0]!, 0, 2), { keepOutput: true, extra: 1 } as never)).rejects.toThrow(/unknown field 'extra'/);
      await Promise.all(ranks.map((sc, r) => sc.release(more[r]!)));
      await Promise.all(ranks.map((sc) => sc.save(join(dir, 'ck'), { note: 'surface' })));
      const back = await EmbeddingCollection.load(join(dir, 'ck'));
      const plan2: ShardPlan = S.makePlan(lib, 2, 2, {});
      const g2 = createInProcessGroups(2, { timeoutMs: 30_000 });
      const re = await Promise.all(g2.map((g) => ShardedEmbeddingCollection.load(join(dir, 'ck'), plan2, g)));
      try {
        expect(back.step).toBe(oracle.step);
        for (const t of plan.tables) {
          const all = Array.from({ length: t.rows }, (_, i) => i);
          const ref = oracle.readRows(t.name, all);
          expect(S.relErr(back.readRows(t.name, all), ref)).toBeLessThanOrEqual(1e-5);
          const r2 = await Promise.all(re.map((sc) => sc.readRows(t.name, all)));
          expect(r2[1]).toEqual(back.readRows(t.name, all));
          const s2 = await Promise.all(re.map((sc) => sc.readState(t.name, all)));
          expect(s2[0]).toEqual(back.readState(t.name, all));
        }
      } finally {
        back.dispose();
        for (const sc of re) sc.dispose();
        for (const g of g2) g.close();
      }
    } finally {
      close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('a NaN or Inf in one rank\'s gradients', () => {
  /** Every table's rows on every rank equal the oracle's (within the runtime's documented 1e-5). */
  async function expectOracleRows(plan: ShardPlan, ranks: ShardedEmbeddingCollection[], oracle: EmbeddingCollection, what: string) {
    for (const t of plan.tables) {
      const all = Array.from({ length: t.rows }, (_, i) => i);
      const got = await Promise.all(ranks.map((sc) => sc.readRows(t.name, all)));
      for (let r = 0; r < W; r++) expect(S.relErr(got[r], oracle.readRows(t.name, all)), `${what}: ${t.name} on rank ${r}`).toBeLessThanOrEqual(1e-5);
    }
  }

  for (const hierarchical of [false, true])
    for (const nonFinite of ['error', 'skip'] as const)
      it(`changes nothing on any rank (nonFinite '${nonFinite}', ${hierarchical ? 'hierarchical' : 'flat'}), and training goes on`, async () => {
        const { plan, ranks, oracle, close } = setup({ type: 'adagrad', lr: 0.05, nonFinite }, hierarchical);
        try {
          await stepBoth(ranks, oracle, plan, 0);
          // step 1 on the ranks only: rank 2's first pooled gradient is NaN (one feature's, so only the
          // owners of that feature's rows receive it)
          const batches = ranks.map((_, r) => S.localBatch(lib, plan, r, 1));
          const outs = await Promise.all(ranks.map((sc, r) => sc.forward(batches[r]!)));
          const grads = outs.map((o, r) => S.gradsFor(o, r, 1));
          grads[2]!.pooled[0] = Number.NaN;
          const res = await Promise.allSettled(ranks.map((sc, r) => sc.backward(outs[r]!, grads[r]!)));
          if (nonFinite === 'error') {
            for (const x of res) expect(x.status === 'rejected' && (x.reason as { code?: string }).code).toBe('NON_FINITE_GRADIENT');
            expect(String((res[2] as PromiseRejectedResult).reason.message)).toMatch(/^the gradients contain NaN or Inf; no table was changed on any rank/);
            expect(String((res[0] as PromiseRejectedResult).reason.message)).toMatch(/^another rank's gradients contain NaN or Inf/);
          } else {
            expect(res.map((x) => x.status === 'fulfilled' && x.value)).toEqual(Array.from({ length: W }, () => ({ skipped: true, uniqueRows: 0 })));
          }
          await expectOracleRows(plan, ranks, oracle, 'after the rejected step');
          // the next step, on every rank and on the oracle, still agrees
          await stepBoth(ranks, oracle, plan, 2);
          await expectOracleRows(plan, ranks, oracle, 'after the next step');
        } finally {
          close();
        }
      });
});

describe('a batch one rank rejects (an id out of range)', () => {
  for (const hierarchical of [false, true])
    for (const prepared of [false, true])
      it(`ends the step on every rank with its code, nothing changed (${hierarchical ? 'hierarchical' : 'flat'}${prepared ? ', through prepare()' : ''}), and training goes on`, async () => {
        const { plan, ranks, oracle, close } = setup({ type: 'adagrad', lr: 0.05 }, hierarchical);
        try {
          await stepBoth(ranks, oracle, plan, 0);
          const batches = ranks.map((_, r) => S.localBatch(lib, plan, r, 1));
          const b2 = batches[2]!, ids = BigInt64Array.from(b2.ids as BigInt64Array);
          ids[0] = 1_000_000n;
          batches[2] = JaggedBatch.fromLengths({ features: b2.features, batchSize: b2.batchSize, lengths: b2.lengths, ids, ...(b2.weights ? { weights: b2.weights } : {}) });
          if (prepared) await Promise.all(ranks.map((sc, r) => sc.prepare(batches[r]!)));
          const res = await Promise.allSettled(ranks.map((sc, r) => sc.forward(batches[r]!)));
          expect(res.map((x) => x.status === 'rejected' && (x.reason as { code?: string }).code)).toEqual(new Array(W).fill('ID_OUT_OF_RANGE'));
          expect(String((res[2] as PromiseRejectedResult).reason.message)).toMatch(/id 1000000 is outside/);
          expect(String((res[0] as PromiseRejectedResult).reason.message)).toBe('rank 2 rejected its batch (ID_OUT_OF_RANGE); the step changed nothing on any rank');
          // the groups are whole: the next step runs on every rank and still equals one collection
          await stepBoth(ranks, oracle, plan, 2);
          for (const t of plan.tables) {
            const all = Array.from({ length: t.rows }, (_, i) => i);
            const got = await Promise.all(ranks.map((sc) => sc.readRows(t.name, all)));
            for (let r = 0; r < W; r++) expect(S.relErr(got[r], oracle.readRows(t.name, all)), `${t.name} on rank ${r}`).toBeLessThanOrEqual(1e-5);
          }
        } finally {
          close();
        }
      });
});

describe('gradients or a batch one rank cannot use', () => {
  it('a gradient of the wrong size on one rank: every backward rejects with its code, nothing changed; the same outputs then step with good gradients', async () => {
    const { plan, ranks, oracle, close } = setup({ type: 'adam', lr: 0.01 });
    try {
      await stepBoth(ranks, oracle, plan, 0);
      const batches = ranks.map((_, r) => S.localBatch(lib, plan, r, 1));
      const outs = await Promise.all(ranks.map((sc, r) => sc.forward(batches[r]!)));
      const gout = await oracle.forward(S.globalBatch(lib, batches));
      const grads = outs.map((o, r) => S.gradsFor(o, r, 1));
      const short = { ...grads[1]!, pooled: grads[1]!.pooled.subarray(1) };
      const res = await Promise.allSettled(ranks.map((sc, r) => sc.backward(outs[r]!, r === 1 ? short : grads[r]!, { keepOutput: true })));
      expect(res.map((x) => x.status === 'rejected' && (x.reason as { code?: string }).code)).toEqual(new Array(W).fill('GRAD_SIZE_MISMATCH'));
      expect(String((res[0] as PromiseRejectedResult).reason.message)).toBe('another rank rejected its gradients (GRAD_SIZE_MISMATCH); the step changed nothing on any rank');
      expect(String((res[1] as PromiseRejectedResult).reason.message)).toMatch(/^grads\.pooled must be a Float32Array/);
      // nothing changed, and the outputs are still theirs to step with
      await Promise.all(ranks.map((sc, r) => sc.backward(outs[r]!, grads[r]!)));
      await oracle.backward(gout, S.concatGrads(grads, oracle.sequenceFeatures));
      for (const t of plan.tables) {
        const all = Array.from({ length: t.rows }, (_, i) => i);
        const got = await Promise.all(ranks.map((sc) => sc.readRows(t.name, all)));
        const st = await Promise.all(ranks.map((sc) => sc.readState(t.name, all)));
        for (let r = 0; r < W; r++) {
          expect(S.relErr(got[r], oracle.readRows(t.name, all)), `${t.name} on rank ${r}`).toBeLessThanOrEqual(1e-5);
          expect(S.relErr(st[r], oracle.readState(t.name, all)), `${t.name} state on rank ${r}`).toBeLessThanOrEqual(1e-5);
        }
      }
    } finally {
      close();
    }
  });

  it('a batch that lacks a feature on one rank: every forward rejects with MISSING_FEATURE; the next step trains', async () => {
    const { plan, ranks, oracle, close } = setup({ type: 'sgd', lr: 0.1 });
    try {
      const batches = ranks.map((_, r) => S.localBatch(lib, plan, r, 0));
      const b3 = batches[3]!, f0 = b3.features[0]!, B = b3.batchSize;
      const keep = b3.features.slice(1);
      const ids = BigInt64Array.from(keep.flatMap((f) => Array.from(b3.feature(f).ids as BigInt64Array)));
      const lengths = Int32Array.from(keep.flatMap((f) => Array.from(b3.feature(f).lengths)));
      expect(lengths.length).toBe(keep.length * B);
      const lacking = JaggedBatch.fromLengths({ features: keep, batchSize: B, lengths, ids });
      const res = await Promise.allSettled(ranks.map((sc, r) => sc.forward(r === 3 ? lacking : batches[r]!)));
      expect(res.map((x) => x.status === 'rejected' && (x.reason as { code?: string }).code)).toEqual(new Array(W).fill('MISSING_FEATURE'));
      expect(String((res[3] as PromiseRejectedResult).reason.message)).toContain(`'${f0}'`);
      await stepBoth(ranks, oracle, plan, 1);
      for (const t of plan.tables) {
        const all = Array.from({ length: t.rows }, (_, i) => i);
        const got = await Promise.all(ranks.map((sc) => sc.readRows(t.name, all)));
        for (let r = 0; r < W; r++) expect(S.relErr(got[r], oracle.readRows(t.name, all))).toBeLessThanOrEqual(1e-5);
      }
    } finally {
      close();
    }
  });
});

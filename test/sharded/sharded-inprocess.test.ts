// ShardedEmbeddingCollection on in-process groups of 1, 2 and 4 ranks (4 = two modelled nodes) against a
// single EmbeddingCollection over the global batch: every cluster type, row / column / table splits, both
// hot-row tiers, sum / mean / sequence pooling, weighted bags, sgd / adagrad / adam, several steps:
// outputs and final tables (and optimizer state) within 1e-5 (norm-relative) on an fp32 wire; within
// the documented bounds on fp16 / bf16 wires; and the bytes each rank sends per step equal measureTraffic.
import { describe, it, expect } from 'vitest';
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { measureTraffic } from '../../lib/plan/traffic.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection, collectionConfigOf, type ShardedConfig } from '../../lib/sharded/sharded.js';
import { gatherTable } from '../../lib/sharded/reshard.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';

const lib = { JaggedBatch, ShardPlan };

interface RunOpts {
  W: number;
  rpn: number;
  steps: number;
  optimizer: ShardedConfig['optimizer'];
  weighted?: boolean;
  wire?: { forward: 'fp32' | 'fp16' | 'bf16'; backward: 'fp32' | 'fp16' | 'bf16' };
  variant?: string;
  /** rank r's local batch size is 3 + 2r instead of 6 */
  varyB?: boolean;
  /** rank r's local batch size at step k is 600 + 97·((r + k) mod 3): step temporaries of hundreds of KB */
  bigB?: boolean;
  /** the hierarchical rb / ub protocol */
  hier?: boolean;
}

async function compare(o: RunOpts): Promise<{ outErr: number; tableErr: number; stateErr: number; trafficOk: boolean; inter: number }> {
  const plan: ShardPlan = S.makePlan(lib, o.W, o.rpn, { wire: o.wire, variant: o.variant, hierarchical: o.hier ?? false });
  const cfg: ShardedConfig = { optimizer: o.optimizer, seed: 11 };
  const groups = createInProcessGroups(o.W, { ranksPerNode: o.rpn, timeoutMs: 30_000 });
  const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, cfg));
  const oracle = new EmbeddingCollection(collectionConfigOf(plan, cfg));
  let outErr = 0, tableErr = 0, stateErr = 0, trafficOk = true, inter = 0;
  // Σ over the steps of measureTraffic's bytes per rank: what each group's stats() must have counted
  const sentPred = new Float64Array(o.W), interPred = new Float64Array(o.W);
  try {
    for (let step = 0; step < o.steps; step++) {
      const batches: JaggedBatch[] = groups.map((_, r) => S.localBatch(lib, plan, r, step, { weighted: o.weighted, ...(o.varyB ? { B: 3 + 2 * r } : o.bigB ? { B: 600 + 97 * ((r + step) % 3) } : {}) }));
      outErr = Math.max(outErr, await S.stepBoth(lib, ranks, oracle, batches, step));
      const predicted = measureTraffic(plan, batches).perRank;
      for (let r = 0; r < o.W; r++) {
        const p = predicted[r]!;
        sentPred[r] += p.forward.sentIntra + p.forward.sentInter + p.backward.sentIntra + p.backward.sentInter;
        interPred[r] += p.forward.sentInter + p.backward.sentInter;
        const got = ranks[r]!.traffic;
        inter += got.forward.sentInter + got.backward.sentInter;
        if (JSON.stringify(got) !== JSON.stringify(predicted[r])) {
          trafficOk = false;
          console.error('traffic', r, JSON.stringify(got), JSON.stringify(predicted[r]));
        }
      }
    }
    // the groups' own per-kind counters (stats(), crossed-node bytes included) saw exactly those bytes
    for (let r = 0; r < o.W; r++) {
      const st = groups[r]!.stats();
      const kinds = Object.values(st);
      if (kinds.reduce((n, k) => n + k.sent, 0) !== sentPred[r] || kinds.reduce((n, k) => n + k.sentInter, 0) !== interPred[r]) {
        trafficOk = false;
        console.error('stats', r, JSON.stringify(st), sentPred[r], interPred[r]);
      }
    }
    for (const t of plan.tables) {
      const gathered = await Promise.all(ranks.map((sc) => gatherTable(sc, t.name)));
      const ids = Array.from({ length: t.rows }, (_, i) => i);
      const w = oracle.readRows(t.name, ids);
      const st = oracle.stateWidth(t.name) > 0 ? oracle.readState(t.name, ids) : new Float32Array(0);
      for (const gth of gathered) {
        tableErr = Math.max(tableErr, S.relErr(gth.weights, w));
        if (st.length) stateErr = Math.max(stateErr, S.relErr(gth.state, st));
      }
      // every rank gathers the same table
      for (const gth of gathered) expect(gth.weights).toEqual(gathered[0]!.weights);
    }
    // replicas: every rank's copy of a dp table / replicated tier, and every node's copy of its node-tier
    // rows, are bitwise identical (read straight from each rank's engine)
    const copies = new Map<string, Float32Array[]>();
    for (const sc of ranks)
      sc.layout.localTables.forEach((lt, li) => {
        if (lt.part !== 'dp' && lt.part !== 'rep' && lt.part !== 'node') return;
        const key = `${lt.name}@${lt.part === 'node' ? sc.group.rank % o.rpn : 'all'}`;
        const vals = new Float32Array(lt.rows * lt.dim);
        sc.localEngine.readRows(li, BigInt64Array.from({ length: lt.rows }, (_, j) => BigInt(j)), vals);
        copies.set(key, [...(copies.get(key) ?? []), vals]);
      });
    for (const [key, list] of copies) {
      const expected = key.endsWith('@all') ? o.W : o.W / o.rpn;
      expect(list.length, key).toBe(expected);
      for (const c of list) expect(c, key).toEqual(list[0]);
    }
    expect(ranks.every((sc) => sc.step === o.steps)).toBe(true);
    // two modelled nodes: the counters really see inter-node traffic
    if (o.W / o.rpn > 1) expect(inter).toBeGreaterThan(0);
  } finally {
    ranks.forEach((x) => x.dispose());
    oracle.dispose();
    groups.forEach((g) => g.close());
  }
  console.log(`errs W=${o.W}${o.hier ? ' hier' : ''} ${o.optimizer?.type} ${o.wire?.forward ?? "fp32"} out=${outErr.toExponential(2)} table=${tableErr.toExponential(2)} state=${stateErr.toExponential(2)} traffic=${trafficOk}`);
  return { outErr, tableErr, stateErr, trafficOk, inter };
}

describe('ShardedEmbeddingCollection (in-process ranks) equals one collection over the global batch', () => {
  for (const [W, rpn] of [[1, 1], [2, 2], [4, 2]] as const) {
    for (const opt of [{ type: 'sgd', lr: 0.1 }, { type: 'adagrad', lr: 0.1 }, { type: 'adam', lr: 0.01 }] as const) {
      it(`W=${W} (${W / rpn} node(s)), ${opt.type}, 3 steps, fp32 wire: outputs, tables, state within 1e-5; bytes = measureTraffic`, async () => {
        const r = await compare({ W, rpn, steps: 3, optimizer: opt });
        expect(r.outErr).toBeLessThanOrEqual(1e-5);
        expect(r.tableErr).toBeLessThanOrEqual(1e-5);
        expect(r.stateErr).toBeLessThanOrEqual(1e-5);
        expect(r.trafficOk).toBe(true);
      });
    }
  }

  it('ranks that hold no shard at all (one ub sequence table on one rank of 4) still take part exactly', async () => {
    const r = await compare({ W: 4, rpn: 2, steps: 2, optimizer: { type: 'adam', lr: 0.01 }, variant: 'G' });
    expect(r.outErr).toBeLessThanOrEqual(1e-5);
    expect(r.tableErr).toBeLessThanOrEqual(1e-5);
    expect(r.trafficOk).toBe(true);
  });

  it('a rank whose sequence features have no ids at all (every bag empty) steps exactly, for dp, rb and ub tables', async () => {
    // an empty typed array may have no memory at all: the per-id kernels once took it for an absent one
    const W = 2;
    const tables = [
      { table: { name: 'Sd', rows: 20, dim: 4, pooling: 'none' as const, features: ['sd'] }, cluster: 'dp' as const },
      { table: { name: 'Sr', rows: 20, dim: 4, pooling: 'none' as const, features: ['sr'] }, cluster: 'rb' as const, shards: [{ rows: [0, 10] as [number, number], cols: [0, 4] as [number, number], rank: 0 }, { rows: [10, 20] as [number, number], cols: [0, 4] as [number, number], rank: 1 }] },
      { table: { name: 'Su', rows: 20, dim: 4, pooling: 'none' as const, features: ['su'] }, cluster: 'ub' as const, shards: [{ rows: [0, 20] as [number, number], cols: [0, 4] as [number, number], rank: 1 }] },
      { table: { name: 'P', rows: 20, dim: 4, pooling: 'sum' as const, features: ['p'] }, cluster: 'rb' as const, shards: [{ rows: [0, 20] as [number, number], cols: [0, 4] as [number, number], rank: 0 }] },
    ];
    for (const hierarchical of [false, true]) {
      const plan = ShardPlan.create({ topology: S.topology(W, 1), batchSize: 4, hierarchical, tables });
      const cfg: ShardedConfig = { optimizer: { type: 'adagrad', lr: 0.1 }, seed: 5 };
      const groups = createInProcessGroups(W, { ranksPerNode: 1, timeoutMs: 30_000 });
      const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, cfg));
      const oracle = new EmbeddingCollection(collectionConfigOf(plan, cfg));
      try {
        for (let step = 0; step < 3; step++) {
          // at step k, rank k mod 2 has no sequence ids; the pooled feature always has some
          const batches = groups.map((_, r) => {
            const empty = r === step % 2;
            const lengths = plan.tables.flatMap((t) => Array.from({ length: 3 }, (_, b) => (t.pooling === 'none' && empty ? 0 : 1 + ((b + r + step) % 2))));
            const ids = lengths.flatMap((n, k) => Array.from({ length: n }, (_, j) => BigInt((7 * k + 3 * j + step) % 20)));
            return JaggedBatch.fromLengths({ features: ['sd', 'sr', 'su', 'p'], batchSize: 3, lengths: Int32Array.from(lengths), ids: BigInt64Array.from(ids) });
          });
          expect(await S.stepBoth(lib, ranks, oracle, batches, step)).toBeLessThanOrEqual(1e-6);
        }
        for (const t of plan.tables) {
          const all = Array.from({ length: t.rows }, (_, i) => i);
          for (const got of await Promise.all(ranks.map((sc) => sc.readRows(t.name, all)))) expect(S.relErr(got, oracle.readRows(t.name, all)), t.name).toBeLessThanOrEqual(1e-6);
        }
      } finally {
        ranks.forEach((x) => x.dispose());
        oracle.dispose();
        groups.forEach((g) => g.close());
      }
    }
  });

  it('ranks with different local batch sizes (3, 5, 7, 9 bags; W=4, two nodes, adam)', async () => {
    const r = await compare({ W: 4, rpn: 2, steps: 2, optimizer: { type: 'adam', lr: 0.01 }, varyB: true });
    expect(r.outErr).toBeLessThanOrEqual(1e-5);
    expect(r.tableErr).toBeLessThanOrEqual(1e-5);
    expect(r.stateErr).toBeLessThanOrEqual(1e-5);
    expect(r.trafficOk).toBe(true);
  });

  // the temporaries of these steps are large enough to be views of the collection's kept scratch
  // buffers (lib/sharded/scratch.ts), reused with other sizes from step to step
  for (const hier of [false, true])
    it(`large batches changing size from step to step (600–794 bags; W=4, two nodes, ${hier ? 'hierarchical' : 'flat'}, adam, 4 steps)`, async () => {
      const r = await compare({ W: 4, rpn: 2, steps: 4, optimizer: { type: 'adam', lr: 0.01 }, bigB: true, hier, weighted: hier });
      expect(r.outErr).toBeLessThanOrEqual(1e-5);
      expect(r.tableErr).toBeLessThanOrEqual(1e-5);
      expect(r.stateErr).toBeLessThanOrEqual(1e-5);
      expect(r.trafficOk).toBe(true);
    });

  it('weighted bags (W=4, two nodes, adagrad)', async () => {
    const r = await compare({ W: 4, rpn: 2, steps: 2, optimizer: { type: 'adagrad', lr: 0.1 }, weighted: true });
    expect(r.outErr).toBeLessThanOrEqual(1e-5);
    expect(r.tableErr).toBeLessThanOrEqual(1e-5);
    expect(r.trafficOk).toBe(true);
  });

  // fp16 keeps 11 significant bits (relative rounding ≤ 2^-11 ≈ 4.9e-4 per value), bf16 8 (≤ 2^-8 ≈ 3.9e-3);
  // a pooled output adds a few rounded partials, so the documented bounds are 4× the unit roundoff.
  for (const [wire, bound] of [['fp16', 2e-3], ['bf16', 1.6e-2]] as const) {
    it(`${wire} wire (forward and backward) stays within ${bound} of fp32 and sends fewer bytes, exactly as predicted`, async () => {
      const r = await compare({ W: 4, rpn: 2, steps: 2, optimizer: { type: 'sgd', lr: 0.1 }, wire: { forward: wire, backward: wire } });
      expect(r.outErr).toBeLessThanOrEqual(bound);
      expect(r.tableErr).toBeLessThanOrEqual(bound);
      expect(r.trafficOk).toBe(true);
    });
  }
});

describe('the hierarchical protocol (node-level rb reduction and ub deduplication, rail-aligned across nodes) equals one collection', () => {
  for (const [W, rpn] of [[4, 2], [8, 2], [8, 4]] as const) {
    for (const opt of [{ type: 'sgd', lr: 0.1 }, { type: 'adagrad', lr: 0.1 }, { type: 'adam', lr: 0.01 }] as const) {
      it(`W=${W} (${W / rpn} nodes), ${opt.type}, 3 steps, fp32 wire: outputs, tables, state within 1e-5; bytes = measureTraffic`, async () => {
        const r = await compare({ W, rpn, steps: 3, optimizer: opt, hier: true });
        expect(r.outErr).toBeLessThanOrEqual(1e-5);
        expect(r.tableErr).toBeLessThanOrEqual(1e-5);
        expect(r.stateErr).toBeLessThanOrEqual(1e-5);
        expect(r.trafficOk).toBe(true);
      });
    }
  }

  it('weighted bags and different local batch sizes (W=4, two nodes, adagrad)', async () => {
    for (const o of [{ weighted: true }, { varyB: true }]) {
      const r = await compare({ W: 4, rpn: 2, steps: 2, optimizer: { type: 'adagrad', lr: 0.1 }, hier: true, ...o });
      expect(r.outErr).toBeLessThanOrEqual(1e-5);
      expect(r.tableErr).toBeLessThanOrEqual(1e-5);
      expect(r.trafficOk).toBe(true);
    }
  });

  it('sends fewer inter-node bytes than the flat protocol for the same plan and batches (W=8, two nodes)', async () => {
    const flat = await compare({ W: 8, rpn: 4, steps: 2, optimizer: { type: 'sgd', lr: 0.1 } });
    const hier = await compare({ W: 8, rpn: 4, steps: 2, optimizer: { type: 'sgd', lr: 0.1 }, hier: true });
    expect(flat.trafficOk && hier.trafficOk).toBe(true);
    expect(hier.inter).toBeLessThan(flat.inter);
  });

  it('syncs dp tables and replicated tiers through the node: fewer inter-node bytes, replicas identical (W=8, two nodes)', async () => {
    // only the dp table A and the tiered tables D, E: the replica syncs are most of the traffic
    for (const variant of ['A', 'A,D,E']) {
      const flat = await compare({ W: 8, rpn: 4, steps: 3, optimizer: { type: 'adagrad', lr: 0.1 }, variant });
      const hier = await compare({ W: 8, rpn: 4, steps: 3, optimizer: { type: 'adagrad', lr: 0.1 }, variant, hier: true });
      expect(flat.trafficOk && hier.trafficOk).toBe(true);
      expect(hier.tableErr).toBeLessThanOrEqual(1e-5);
      expect(hier.stateErr).toBeLessThanOrEqual(1e-5);
      expect(hier.inter).toBeLessThan(flat.inter);
    }
  });

  it('fp16 wire stays within the documented bound, exactly as predicted', async () => {
    const r = await compare({ W: 4, rpn: 2, steps: 2, optimizer: { type: 'sgd', lr: 0.1 }, wire: { forward: 'fp16', backward: 'fp16' }, hier: true });
    expect(r.outErr).toBeLessThanOrEqual(2e-3);
    expect(r.tableErr).toBeLessThanOrEqual(2e-3);
    expect(r.trafficOk).toBe(true);
  });
});

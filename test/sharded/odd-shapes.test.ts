// ShardedEmbeddingCollection on plans and batches of odd shapes against one EmbeddingCollection over the
// global batch (test/sharded/odd-harness.ts): dim 1 and one-column shards, one row per rank, tables of one
// row, idle ranks, every table on one rank, tiers as large as the table or of one row, dp tables alone,
// fp16 / bf16 tables, shared tables with different pooling factors, wide rows in odd column widths, a rank
// with several shards of one row group; batches of one sample, of only empty bags, of one contended row,
// of ids next to range boundaries, with zero / negative weights; every optimizer; 1–4 ranks, one or two
// ranks per node, flat and hierarchical protocols. Outputs, tables and state within the documented 1e-5
// (fp32 wire) or 2e-3 / 1.6e-2 (fp16 / bf16 wires, sgd); bytes per step equal measureTraffic.
import { describe, it, expect } from 'vitest';
import { EmbeddingCollection } from '../../lib/collection.js';
import { JaggedBatch } from '../../lib/batch.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection, collectionConfigOf } from '../../lib/sharded/sharded.js';
import { bagModes, fullWidth, makeBatch, oddShapes, randomBags, runCase, type Result } from './odd-harness.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';

const lib = { JaggedBatch, ShardPlan };

const topologies = [
  [1, 1, false],
  [2, 1, false],
  [2, 2, false],
  [2, 1, true],
  [3, 1, false],
  [3, 1, true],
  [4, 2, false],
  [4, 2, true],
  [4, 1, true],
] as const;
const optimizers = [{ type: 'sgd', lr: 0.1 }, { type: 'adagrad', lr: 0.1 }, { type: 'rowwise_adagrad', lr: 0.1 }, { type: 'adam', lr: 0.01 }] as const;

function summary(r: Result): string {
  const tables = Object.entries(r.perTable).map(([k, v]) => `${k} ${v.table.toExponential(1)}/${v.state.toExponential(1)}`).join(', ');
  return `out ${r.outErr.toExponential(2)}; table/state ${tables}${r.traffic.length ? `; bytes: ${r.traffic.slice(0, 2).join(' | ')}` : ''}`;
}

describe('odd plan and batch shapes equal one collection over the global batch', () => {
  const shapeNames = Object.keys(oddShapes(1));
  shapeNames.forEach((shape, i) => {
    it(`${shape}: every batch shape and optimizer over 1–4 ranks, flat and hierarchical (fp32 wire, 1e-5)`, async () => {
      const failures: string[] = [];
      for (const [ti, [W, rpn, hier]] of topologies.entries()) {
        const tables = oddShapes(W)[shape]!;
        const modes = Object.entries(bagModes(W, tables));
        // two batch shapes and two optimizers per topology, rotating so every pair is met across shapes
        for (const k of [0, 1]) {
          const [mode, { bags, weighted }] = modes[(i + ti + 3 * k) % modes.length]!;
          const opt = optimizers[(i + ti + k) % optimizers.length]!;
          // rowwise_adagrad keeps one row state per column shard (docs/distributed.md): full-width placements only
          const tbl = opt.type === 'rowwise_adagrad' ? tables.filter(fullWidth) : tables;
          if (tbl.length === 0) continue;
          const r = await runCase({ W, rpn, hier, tables: tbl, bags, weighted, cfg: { optimizer: opt, seed: 3 + k }, steps: 3, prepare: k === 1, rowAccess: true });
          if (r.outErr > 1e-5 || r.tableErr > 1e-5 || r.stateErr > 1e-5 || r.traffic.length > 0)
            failures.push(`W=${W} rpn=${rpn} ${hier ? 'hierarchical' : 'flat'} ${mode} ${opt.type}: ${summary(r)}`);
        }
      }
      expect(failures).toEqual([]);
    });
  });

  for (const [wire, bound] of [['fp16', 2e-3], ['bf16', 1.6e-2]] as const)
    it(`${wire} wire on every shape (sgd, 4 ranks, two nodes, both protocols): within ${bound}, bytes as predicted`, async () => {
      const failures: string[] = [];
      for (const hier of [false, true])
        for (const [shape, tables] of Object.entries(oddShapes(4))) {
          const { bags, weighted } = bagModes(4, tables).skewed!;
          const r = await runCase({ W: 4, rpn: 2, hier, tables, bags, weighted, wire: { forward: wire, backward: wire }, cfg: { optimizer: { type: 'sgd', lr: 0.1 }, seed: 9 }, steps: 2 });
          if (r.outErr > bound || r.tableErr > bound || r.traffic.length > 0) failures.push(`${shape} ${hier ? 'hierarchical' : 'flat'}: ${summary(r)}`);
        }
      expect(failures).toEqual([]);
    });

  it('ids as Int32Array / Uint32Array and features in another order on every rank give the same results', async () => {
    const failures: string[] = [];
    for (const idType of ['i32', 'u32'] as const)
      for (const [W, rpn, hier] of [[3, 1, true], [4, 2, true]] as const)
        for (const shape of ['tiers', 'twice', 'seq']) {
          const tables = oddShapes(W)[shape]!;
          const { bags, weighted } = bagModes(W, tables).skewed!;
          const r = await runCase({ W, rpn, hier, tables, bags, weighted, idType, rotateFeatures: true, cfg: { optimizer: { type: 'adagrad', lr: 0.1 }, seed: 1 }, steps: 2 });
          if (r.outErr > 1e-5 || r.tableErr > 1e-5 || r.stateErr > 1e-5 || r.traffic.length > 0) failures.push(`${idType} W=${W} ${shape}: ${summary(r)}`);
        }
    expect(failures).toEqual([]);
  });

  it('rowwise_adagrad on column shards: each shard accumulates the mean of g² over its own columns (the documented per-shard state)', async () => {
    // g does not depend on the weights (seeded gradients), so after the same steps the adagrad state of one
    // collection is Σ g² per cell, and a column shard's rowwise state must be its columns' mean of that
    for (const [W, rpn, hier] of [[1, 1, false], [2, 1, false], [3, 1, true], [4, 2, true]] as const) {
      const R = (k: number): number => k % W;
      const sh = (r0: number, r1: number, c0: number, c1: number, rank: number) => ({ rows: [r0, r1] as [number, number], cols: [c0, c1] as [number, number], rank });
      const tables = [
        { table: { name: 'C', rows: 10, dim: 5, pooling: 'sum' as const, features: ['c', 'c2'] }, cluster: 'rb' as const, tiers: { replicated: 1, node: 2 }, shards: [sh(3, 6, 0, 1, R(0)), sh(3, 6, 1, 5, R(1)), sh(6, 10, 0, 3, R(2)), sh(6, 10, 3, 4, R(3)), sh(6, 10, 4, 5, R(1))] },
        { table: { name: 'U', rows: 9, dim: 3, pooling: 'mean' as const, features: ['u'] }, cluster: 'ub' as const, shards: [sh(0, 9, 0, 1, R(1)), sh(0, 9, 1, 3, R(0))] },
        { table: { name: 'Q', rows: 9, dim: 3, pooling: 'none' as const, features: ['q'] }, cluster: 'rb' as const, shards: [sh(0, 4, 0, 2, R(1)), sh(0, 4, 2, 3, R(0)), sh(4, 9, 0, 3, R(2))] },
      ];
      const plan = ShardPlan.create({ topology: S.topology(W, rpn), batchSize: 4, hierarchical: hier, tables });
      const groups = createInProcessGroups(W, { ranksPerNode: rpn, timeoutMs: 20_000 });
      const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, { optimizer: { type: 'rowwise_adagrad', lr: 0.1 }, seed: 2 }));
      const adagrad = new EmbeddingCollection(collectionConfigOf(plan, { optimizer: { type: 'adagrad', lr: 0.1 }, seed: 2 }));
      const features = plan.tables.flatMap((t) => [...t.features]);
      const rowsOf = (f: string): number => plan.tables.find((t) => t.features.includes(f))!.rows as number;
      const bags = randomBags((r) => 2 + r, 4, (rows, u) => Math.floor(rows * u), (u) => u - 0.3);
      let worst = 0, where = '';
      try {
        for (let step = 0; step < 3; step++) {
          const batches = groups.map((_, r) => makeBatch(features, rowsOf, bags, r, step, true));
          await S.stepBoth(lib, ranks, adagrad, batches, step);
        }
        for (const sc of ranks)
          sc.layout.localTables.forEach((lt, li) => {
            if (lt.part === 'idle' || lt.rows === 0) return;
            const t = plan.tables[lt.t]!;
            const full = adagrad.readState(t.name, Array.from({ length: t.rows as number }, (_, i) => i));
            const st = new Float32Array(lt.rows);
            sc.localEngine.readState(li, BigInt64Array.from({ length: lt.rows }, (_, j) => BigInt(j)), st);
            for (let j = 0; j < lt.rows; j++) {
              const row = lt.part === 'node' ? lt.r0 + (sc.group.rank % rpn) + j * rpn : lt.r0 + j;
              let m = 0;
              for (let c = lt.c0; c < lt.c1; c++) m += full[row * t.dim + c]!;
              m /= lt.c1 - lt.c0;
              const e = Math.abs(st[j]! - m) / Math.max(Math.abs(m), 1e-3);
              if (e > worst) [worst, where] = [e, `W=${W} rank ${sc.group.rank} ${lt.name} row ${row}: ${st[j]} vs ${m}`];
            }
          });
      } finally {
        ranks.forEach((x) => x.dispose());
        adagrad.dispose();
        groups.forEach((g) => g.close());
      }
      expect(worst, where).toBeLessThanOrEqual(1e-5);
    }
  });

  it('an out-of-range id on one rank is refused by every rank for tier-only, one-row and row-split tables, and the next step goes on', async () => {
    const sh = (r0: number, r1: number, c0: number, c1: number, rank: number) => ({ rows: [r0, r1] as [number, number], cols: [c0, c1] as [number, number], rank });
    const failures: string[] = [];
    for (const [W, rpn, hier] of [[1, 1, false], [2, 1, true], [4, 2, false], [4, 2, true]] as const) {
      const R = (k: number): number => k % W;
      const placements = [
        { table: { name: 'X', rows: 5, dim: 2, pooling: 'sum' as const, features: ['x'] }, cluster: 'rb' as const, tiers: { replicated: 5, node: 0 } },
        { table: { name: 'X', rows: 5, dim: 2, pooling: 'sum' as const, features: ['x'] }, cluster: 'ub' as const, tiers: { replicated: 0, node: 5 } },
        { table: { name: 'X', rows: 5, dim: 2, pooling: 'none' as const, features: ['x'] }, cluster: 'rb' as const, tiers: { replicated: 2, node: 3 } },
        { table: { name: 'X', rows: 1, dim: 2, pooling: 'mean' as const, features: ['x'] }, cluster: 'rb' as const, shards: [sh(0, 1, 0, 1, R(1)), sh(0, 1, 1, 2, R(0))] },
        { table: { name: 'X', rows: 1, dim: 2, pooling: 'mean' as const, features: ['x'] }, cluster: 'ub' as const, shards: [sh(0, 1, 0, 2, R(W - 1))] },
        { table: { name: 'X', rows: 4, dim: 2, pooling: 'sum' as const, features: ['x'] }, cluster: 'rb' as const, shards: [sh(0, 2, 0, 2, R(0)), sh(2, 4, 0, 2, R(1))] },
      ];
      for (const [pi, p] of placements.entries())
        for (const bad of [BigInt(p.table.rows), -1n]) {
          const plan = ShardPlan.create({ topology: S.topology(W, rpn), batchSize: 2, hierarchical: hier, tables: [p] });
          const groups = createInProcessGroups(W, { ranksPerNode: rpn, timeoutMs: 20_000 });
          const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, { optimizer: { type: 'sgd', lr: 0.1 } }));
          try {
            const before = await Promise.all(ranks.map((sc) => sc.readRows('X', Array.from({ length: p.table.rows }, (_, i) => i))));
            const res = await Promise.allSettled(ranks.map((sc, r) => sc.forward(JaggedBatch.fromLengths({ features: ['x'], batchSize: 2, lengths: Int32Array.from([1, 1]), ids: BigInt64Array.from([0n, r === W - 1 ? bad : 0n]) }))));
            const codes = res.map((x) => (x.status === 'rejected' ? (x.reason as { code?: string }).code : 'resolved'));
            if (!codes.every((c) => c === 'ID_OUT_OF_RANGE')) failures.push(`W=${W} placement ${pi} id ${bad}: ${codes.join(',')}`);
            const good = JaggedBatch.fromLengths({ features: ['x'], batchSize: 2, lengths: Int32Array.from([1, 0]), ids: BigInt64Array.from([0n]) });
            const outs = await Promise.all(ranks.map((sc) => sc.forward(good)));
            for (const [r, o] of outs.entries()) if (Buffer.compare(Buffer.from(o.pooled.buffer, o.pooled.byteOffset, o.pooled.byteLength), Buffer.from(outs[0]!.pooled.buffer, outs[0]!.pooled.byteOffset, outs[0]!.pooled.byteLength)) !== 0) failures.push(`W=${W} placement ${pi}: rank ${r} output differs`);
            await Promise.all(ranks.map((sc, r) => sc.backward(outs[r]!, S.gradsFor(outs[r]!, r, 0))));
            // the refused step changed nothing: row 0 moved by the good step only; the other rows kept their values
            const after = await Promise.all(ranks.map((sc) => sc.readRows('X', Array.from({ length: p.table.rows }, (_, i) => i))));
            for (const [r, a] of after.entries()) if (!Buffer.from(a.buffer, a.byteOffset + 8, a.byteLength - 8).equals(Buffer.from(before[r]!.buffer, before[r]!.byteOffset + 8, before[r]!.byteLength - 8))) failures.push(`W=${W} placement ${pi}: rank ${r} rows 1… changed`);
          } finally {
            ranks.forEach((x) => x.dispose());
            groups.forEach((g) => g.close());
          }
        }
    }
    expect(failures).toEqual([]);
  });
});

// reshard-matrix.test.ts — checkpoints saved under one plan and world size load under another across the
// ways a table can be placed: table-wise, row-wise, column-wise, 2D (row and column splits), dp, hot-row
// tiers, hot-id remaps, flat and hierarchical exchanges, 1 to 4 ranks. After the load every row and
// optimizer state equals the gathered tables bitwise (sharded and as one EmbeddingCollection), the tables
// equal an oracle EmbeddingCollection trained on the global batches, and training goes on like the oracle.
import { describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection, collectionConfigOf, type ShardedConfig } from '../../lib/sharded/sharded.js';
import { gatherTable, loadSharded, saveSharded } from '../../lib/sharded/reshard.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';

const lib = { JaggedBatch, ShardPlan };
type Mode = 'scenario' | 'tw' | 'rw' | 'cw' | 'dp' | '2d';
type Cells = Record<string, { weights: Float32Array; state: Float32Array }>;

const split = (n: number, k: number) => Array.from({ length: k }, (_, i) => [Math.floor((i * n) / k), Math.floor(((i + 1) * n) / k)] as [number, number]);

/** Hot ids (a scattered permutation's first ones) for tables with tiers and one without. */
function hotIds(seed: number): Map<string, number[]> {
  return new Map(
    (['Bt', 'D', 'E'] as const).map((n, j) => {
      const rows = { Bt: 64, D: 48, E: 40 }[n];
      return [n, Array.from({ length: 9 + j }, (_, i) => (i * (seed === 1 ? 7 : 11) + seed + j) % rows)]; // 7, 11: prime to every row count
    }),
  );
}

/** The scenario's tables placed by `mode` over W ranks (tiers kept where the scenario has them). */
function planOf(W: number, rpn: number, mode: Mode, hierarchical: boolean, hot?: Map<string, number[]>): ShardPlan {
  const tables = (S.scenarioTables(W) as { table: Record<string, unknown> & { name: string; rows: number; dim: number }; tiers?: { replicated: number; node: number } }[]).map((e, i) => {
    const table = { ...e.table, ...(hot?.has(e.table.name) ? { hotIds: hot.get(e.table.name) } : {}) };
    if (mode === 'scenario') return { ...e, table };
    const tiers = e.tiers ? { tiers: e.tiers } : {};
    const lo = e.tiers ? e.tiers.replicated + e.tiers.node : 0;
    const cluster = i % 2 ? 'rb' : 'ub';
    const R = (k: number) => k % W;
    const { rows, dim } = table;
    if (mode === 'dp' && !e.tiers) return { table, cluster: 'dp' };
    if (mode === 'tw' || mode === 'dp') return { table, cluster, ...tiers, shards: [{ rows: [lo, rows], cols: [0, dim], rank: R(i) }] };
    if (mode === 'rw') return { table, cluster, ...tiers, shards: split(rows - lo, W).map(([a, b], k) => ({ rows: [lo + a, lo + b], cols: [0, dim], rank: R(k + i) })) };
    if (mode === 'cw') return { table, cluster, ...tiers, shards: split(dim, Math.min(W, dim)).map(([a, b], k) => ({ rows: [lo, rows], cols: [a, b], rank: R(k + i) })) };
    return { table, cluster, ...tiers, shards: split(rows - lo, 2).flatMap(([a, b], h) => split(dim, 2).map(([c0, c1], k) => ({ rows: [lo + a, lo + b], cols: [c0, c1], rank: R(i + 2 * h + k) }))) };
  });
  return ShardPlan.create({ topology: S.topology(W, rpn), batchSize: 6, hierarchical, tables } as never);
}

async function gatherAll(ranks: ShardedEmbeddingCollection[], plan: ShardPlan): Promise<Cells> {
  const out: Cells = {};
  for (const t of plan.tables) out[t.name] = (await Promise.all(ranks.map((sc) => gatherTable(sc, t.name))))[0]!;
  return out;
}

function readAll(ec: EmbeddingCollection, plan: ShardPlan): Cells {
  const out: Cells = {};
  for (const t of plan.tables) {
    const ids = Array.from({ length: t.rows }, (_, i) => i);
    out[t.name] = { weights: ec.readRows(t.name, ids), state: ec.stateWidth(t.name) > 0 ? ec.readState(t.name, ids) : new Float32Array(0) };
  }
  return out;
}

const bits = (a: Float32Array) => Array.from(new Uint32Array(a.buffer, a.byteOffset, a.length));

/** Two steps of the ranks next to the oracle (the second with weighted bags); the largest output error. */
async function steps(ranks: ShardedEmbeddingCollection[], oracle: EmbeddingCollection, plan: ShardPlan, from: number): Promise<number> {
  let err = 0;
  for (let s = from; s < from + 2; s++)
    err = Math.max(err, await S.stepBoth(lib, ranks, oracle, ranks.map((_, r) => S.localBatch(lib, plan, r, s, { weighted: s % 2 === 1 })), s));
  return err;
}

function tableErr(x: Cells, y: Cells, plan: ShardPlan): number {
  let err = 0;
  for (const t of plan.tables) err = Math.max(err, S.relErr(x[t.name]!.weights, y[t.name]!.weights), S.relErr(x[t.name]!.state, y[t.name]!.state));
  return err;
}

// [W, ranks per node, placement, hierarchical, hot-id remap]: saved under A, loaded under B
type Side = [number, number, Mode, boolean, boolean];
const cases: [Side, Side, ShardedConfig['optimizer']][] = [
  [[4, 2, 'scenario', true, true], [1, 1, 'tw', false, false], { type: 'adam', lr: 0.05 }],
  [[4, 2, 'tw', false, false], [2, 2, 'scenario', false, true], { type: 'adagrad', lr: 0.05 }],
  [[4, 2, 'rw', false, true], [4, 2, '2d', true, false], { type: 'sgd', lr: 0.05 }],
  [[3, 3, 'dp', false, false], [1, 1, 'cw', false, true], { type: 'adam', lr: 0.05 }],
  [[3, 3, '2d', false, true], [2, 2, 'rw', false, false], { type: 'adagrad', lr: 0.05 }],
  [[2, 1, 'cw', true, false], [4, 2, 'dp', true, true], { type: 'adam', lr: 0.05 }],
  [[1, 1, 'rw', false, false], [3, 1, 'tw', false, true], { type: 'rowwise_adagrad', lr: 0.05 }],
];

describe('resharding checkpoints across placements', () => {
  for (const [[W1, r1, m1, h1, hot1], [W2, r2, m2, h2, hot2], optimizer] of cases)
    it(`${W1} ranks ${m1}${h1 ? ' hierarchical' : ''}${hot1 ? ' remapped' : ''} -> ${W2} ranks ${m2}${h2 ? ' hierarchical' : ''}${hot2 ? ' remapped' : ''} (${optimizer!.type})`, async () => {
      const dir = mkdtempSync(join(tmpdir(), 'embshard-reshard-m-'));
      const cfg: ShardedConfig = { optimizer, seed: 5 };
      const pA = planOf(W1, r1, m1, h1, hot1 ? hotIds(1) : undefined), pB = planOf(W2, r2, m2, h2, hot2 ? hotIds(2) : undefined);
      // rowwise_adagrad keeps one row state per column shard: only plans without column splits match one collection
      const exact = optimizer!.type !== 'rowwise_adagrad' || ![m1, m2].some((m) => m === 'cw' || m === '2d' || m === 'scenario');
      const gA = createInProcessGroups(W1, { ranksPerNode: r1, timeoutMs: 30_000 });
      const gB = createInProcessGroups(W2, { ranksPerNode: r2, timeoutMs: 30_000 });
      const A = gA.map((g) => new ShardedEmbeddingCollection(pA, g, cfg));
      const oracle = new EmbeddingCollection(collectionConfigOf(pA, cfg));
      let B: ShardedEmbeddingCollection[] = [];
      let ec: EmbeddingCollection | undefined;
      try {
        expect(await steps(A, oracle, pA, 0)).toBeLessThanOrEqual(1e-5);
        const saved = await gatherAll(A, pA);
        if (exact) expect(tableErr(saved, readAll(oracle, pA), pA)).toBeLessThanOrEqual(1e-5);
        await Promise.all(A.map((sc) => saveSharded(sc, join(dir, 'ck'))));

        B = await Promise.all(gB.map((g) => loadSharded(join(dir, 'ck'), pB, g)));
        const loaded = await gatherAll(B, pB);
        ec = await EmbeddingCollection.load(join(dir, 'ck'));
        const single = readAll(ec, pB);
        for (const t of pB.tables) {
          expect(bits(loaded[t.name]!.weights), t.name).toEqual(bits(saved[t.name]!.weights));
          expect(bits(loaded[t.name]!.state), t.name).toEqual(bits(saved[t.name]!.state));
          expect(bits(single[t.name]!.weights), t.name).toEqual(bits(saved[t.name]!.weights));
          expect(bits(single[t.name]!.state), t.name).toEqual(bits(saved[t.name]!.state));
        }
        expect([...B.map((sc) => sc.step), ec.step]).toEqual([...B.map(() => 2), 2]);

        // training goes on under B like one collection that loaded the same checkpoint
        const outErr = await steps(B, ec, pB, 2);
        if (exact || m2 === 'tw' || m2 === 'rw' || m2 === 'dp') {
          expect(outErr).toBeLessThanOrEqual(1e-5);
          expect(tableErr(await gatherAll(B, pB), readAll(ec, pB), pB)).toBeLessThanOrEqual(1e-5);
        }
      } finally {
        [...A, ...B].forEach((sc) => sc.dispose());
        oracle.dispose();
        ec?.dispose();
        [...gA, ...gB].forEach((g) => g.close());
        rmSync(dir, { recursive: true, force: true });
      }
    });
});

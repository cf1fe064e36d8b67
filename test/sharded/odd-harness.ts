// odd-harness.ts — runs a hand-built ShardPlan on in-process ranks against one EmbeddingCollection over
// the global batch: every forward output, then every table row and optimizer state cell (readRows /
// readState, a collective on every rank), row writes by id read back in another order, each rank's bytes
// per step against measureTraffic and every group's stats() against their sum. Also the odd plan shapes
// and batch shapes test/sharded/odd-shapes.test.ts runs.
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { measureTraffic } from '../../lib/plan/traffic.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection, collectionConfigOf, type ShardedConfig } from '../../lib/sharded/sharded.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';

const lib = { JaggedBatch, ShardPlan };

export type PlanTables = Parameters<typeof ShardPlan.create>[0]['tables'];

/** one bag: ids and (for weighted batches) weights */
export interface Bag {
  ids: number[];
  w?: number[];
}
/** the bags of one feature of rank r's local batch at a step */
export type BagsOf = (feature: string, rows: number, rank: number, step: number) => Bag[];

export interface Case {
  W: number;
  rpn: number;
  hier: boolean;
  tables: PlanTables;
  bags: BagsOf;
  cfg: ShardedConfig;
  steps?: number;
  weighted?: boolean;
  /** the plan's wire dtypes (default fp32) */
  idType?: 'i64' | 'i32' | 'u32';
  /** rank r's batch lists the features rotated by r */
  rotateFeatures?: boolean;
  /** after training: writeRows / writeState of some rows, then reads in another order */
  rowAccess?: boolean;
  /** each step's next batches go through prepare() between its forward and backward */
  prepare?: boolean;
  wire?: { forward: 'fp32' | 'fp16' | 'bf16'; backward: 'fp32' | 'fp16' | 'bf16' };
}

export interface Result {
  outErr: number;
  tableErr: number;
  stateErr: number;
  traffic: string[];
  /** per table: the largest weight and state errors */
  perTable: Record<string, { table: number; state: number }>;
}

export function makeBatch(features: string[], rowsOf: (f: string) => number, bags: BagsOf, rank: number, step: number, weighted: boolean, idType: 'i64' | 'i32' | 'u32' = 'i64'): JaggedBatch {
  let B = -1;
  const lengths: number[] = [], ids: bigint[] = [], weights: number[] = [];
  for (const f of features) {
    const bs = bags(f, rowsOf(f), rank, step);
    if (B < 0) B = bs.length;
    if (bs.length !== B) throw new Error('bags differ in count between features');
    for (const b of bs) {
      lengths.push(b.ids.length);
      b.ids.forEach((id, k) => {
        ids.push(BigInt(id));
        weights.push(b.w?.[k] ?? 1);
      });
    }
  }
  const idArr = idType === 'i32' ? Int32Array.from(ids, Number) : idType === 'u32' ? Uint32Array.from(ids, Number) : BigInt64Array.from(ids);
  return JaggedBatch.fromLengths({ features, batchSize: B, lengths: Int32Array.from(lengths), ids: idArr, weights: weighted ? Float32Array.from(weights) : undefined });
}

export async function runCase(c: Case): Promise<Result> {
  const plan = ShardPlan.create({ topology: S.topology(c.W, c.rpn), batchSize: 4, hierarchical: c.hier, ...(c.wire ? { wire: c.wire } : {}), tables: c.tables });
  const groups = createInProcessGroups(c.W, { ranksPerNode: c.rpn, timeoutMs: 20_000 });
  const ranks = groups.map((g) => new ShardedEmbeddingCollection(plan, g, c.cfg));
  const oracle = new EmbeddingCollection(collectionConfigOf(plan, c.cfg));
  const features = plan.tables.flatMap((t) => [...t.features]);
  const rowsOf = (f: string): number => plan.tables.find((t) => t.features.includes(f))!.rows as number;
  const sentPred = new Float64Array(c.W), interPred = new Float64Array(c.W);
  const res: Result = { outErr: 0, tableErr: 0, stateErr: 0, traffic: [], perTable: {} };
  try {
    const steps = c.steps ?? 3;
    const rot = (r: number) => (c.rotateFeatures ? [...features.slice(r % features.length), ...features.slice(0, r % features.length)] : features);
    const batchesAt = (step: number) => groups.map((_, r) => makeBatch(rot(r), rowsOf, c.bags, r, step, c.weighted ?? false, c.idType));
    // the oracle's global batch is built from the same bags with 64-bit ids
    const batches64 = (step: number) => groups.map((_, r) => makeBatch(rot(r), rowsOf, c.bags, r, step, c.weighted ?? false));
    let next = batchesAt(0);
    for (let step = 0; step < steps; step++) {
      const batches = next;
      next = batchesAt(step + 1);
      const outs = await Promise.all(ranks.map((sc, r) => sc.forward(batches[r]!)));
      const gout = await oracle.forward(S.globalBatch(lib, batches64(step)));
      const e = S.outputErr(outs, gout, oracle, batches);
      const grads = outs.map((out, r) => S.gradsFor(out, r, step));
      if (c.prepare && step + 1 < steps) await Promise.all(ranks.map((sc, r) => sc.prepare(next[r]!)));
      await Promise.all(ranks.map((sc, r) => sc.backward(outs[r]!, grads[r])));
      await oracle.backward(gout, S.concatGrads(grads, oracle.sequenceFeatures));
      res.outErr = Math.max(res.outErr, e);
      const predicted = measureTraffic(plan, batches).perRank;
      for (let r = 0; r < c.W; r++) {
        const p = predicted[r]!;
        sentPred[r] += p.forward.sentIntra + p.forward.sentInter + p.backward.sentIntra + p.backward.sentInter;
        interPred[r] += p.forward.sentInter + p.backward.sentInter;
        const got = JSON.stringify(ranks[r]!.traffic), want = JSON.stringify(predicted[r]);
        if (got !== want) res.traffic.push(`step ${step} rank ${r}: got ${got} want ${want}`);
      }
    }
    for (let r = 0; r < c.W; r++) {
      const kinds = Object.values(groups[r]!.stats());
      const sent = kinds.reduce((n, k) => n + k.sent, 0), inter = kinds.reduce((n, k) => n + k.sentInter, 0);
      if (sent !== sentPred[r] || inter !== interPred[r]) res.traffic.push(`stats rank ${r}: sent ${sent} inter ${inter}, want ${sentPred[r]} ${interPred[r]}`);
    }
    for (const t of plan.tables) {
      const ids = Array.from({ length: t.rows as number }, (_, i) => i);
      const w = oracle.readRows(t.name, ids);
      const pt = (res.perTable[t.name] = { table: 0, state: 0 });
      for (const got of await Promise.all(ranks.map((sc) => sc.readRows(t.name, ids)))) pt.table = Math.max(pt.table, S.relErr(got, w));
      if (oracle.stateWidth(t.name) > 0) {
        const st = oracle.readState(t.name, ids);
        for (const got of await Promise.all(ranks.map((sc) => sc.readState(t.name, ids)))) pt.state = Math.max(pt.state, S.relErr(got, st));
      }
      // row access by id: writes of some rows (duplicates: the last one wins) and state, then reads in another order
      if (c.rowAccess) {
        const n = t.rows as number, rand = S.rng(n * 7 + 1);
        const wIds = Array.from({ length: 2 * n }, () => Math.floor(rand() * n));
        const wVals = Float32Array.from({ length: wIds.length * t.dim }, () => rand() - 0.5);
        oracle.writeRows(t.name, wIds, wVals);
        ranks.forEach((sc) => sc.writeRows(t.name, wIds, wVals));
        const sw = oracle.stateWidth(t.name);
        if (sw > 0) {
          const sVals = Float32Array.from({ length: wIds.length * sw }, () => rand());
          oracle.writeState(t.name, wIds, sVals);
          ranks.forEach((sc) => sc.writeState(t.name, wIds, sVals));
        }
        const rIds = Array.from({ length: n + 3 }, (_, k) => (k * 5 + 3) % n);
        const want = oracle.readRows(t.name, rIds);
        for (const got of await Promise.all(ranks.map((sc) => sc.readRows(t.name, rIds)))) pt.table = Math.max(pt.table, S.relErr(got, want));
        if (sw > 0) {
          const wantS = oracle.readState(t.name, rIds);
          for (const got of await Promise.all(ranks.map((sc) => sc.readState(t.name, rIds)))) pt.state = Math.max(pt.state, S.relErr(got, wantS));
        }
        for (const got of await Promise.all(ranks.map((sc) => sc.readRows(t.name, [])))) if (got.length !== 0) pt.table = Infinity;
      }
      res.tableErr = Math.max(res.tableErr, pt.table);
      res.stateErr = Math.max(res.stateErr, pt.state);
    }
  } finally {
    ranks.forEach((x) => x.dispose());
    oracle.dispose();
    groups.forEach((g) => g.close());
  }
  return res;
}

/** mulberry32 bags: 0–maxLen ids per bag drawn by `pick`, weights from `weight` */
export function randomBags(B: (rank: number) => number, maxLen: number, pick: (rows: number, u: number) => number, weight: (u: number) => number = (u) => 0.5 + u): BagsOf {
  return (f, rows, rank, step) => {
    let h = 0;
    for (const ch of f) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
    const rand = S.rng(h + 1000 * step + 17 * rank + 3);
    return Array.from({ length: B(rank) }, () => {
      const n = Math.floor(rand() * (maxLen + 1));
      const ids = Array.from({ length: n }, () => pick(rows, rand()));
      return { ids, w: ids.map(() => weight(rand())) };
    });
  };
}

type Shard = { rows: [number, number]; cols: [number, number]; rank: number };
const sh = (r0: number, r1: number, c0: number, c1: number, rank: number): Shard => ({ rows: [r0, r1], cols: [c0, c1], rank });

/** Plans of odd shapes for W ranks (rank numbers folded into [0, W): small W leaves ranks several shards, large W idle ranks). */
export function oddShapes(W: number): Record<string, PlanTables> {
  const R = (k: number): number => k % W;
  return {
    // dim 1 everywhere
    dim1: [
      { table: { name: 'T1', rows: 12, dim: 1, pooling: 'sum', features: ['t1', 't1b'] }, cluster: 'rb', shards: [sh(0, 6, 0, 1, R(0)), sh(6, 12, 0, 1, R(1))] },
      { table: { name: 'U1', rows: 10, dim: 1, pooling: 'mean', features: ['u1'] }, cluster: 'ub', shards: [sh(0, 10, 0, 1, R(W - 1))] },
      { table: { name: 'D1', rows: 5, dim: 1, pooling: 'sum', features: ['d1'] }, cluster: 'dp' },
    ],
    // column shards of one column
    cols1: [
      { table: { name: 'C', rows: 10, dim: 4, pooling: 'sum', features: ['c', 'c2'] }, cluster: 'rb', shards: [0, 1, 2, 3].map((k) => sh(0, 10, k, k + 1, R(k))) },
      { table: { name: 'Cu', rows: 10, dim: 3, pooling: 'mean', features: ['cu'] }, cluster: 'ub', shards: [0, 1, 2].map((k) => sh(0, 10, k, k + 1, R(k + 1))) },
      { table: { name: 'Cs', rows: 9, dim: 3, pooling: 'none', features: ['cs'] }, cluster: 'rb', shards: [sh(0, 4, 0, 1, R(0)), sh(0, 4, 1, 3, R(1)), sh(4, 9, 0, 2, R(2)), sh(4, 9, 2, 3, R(3))] },
    ],
    // as many row groups as ranks, one row each; tables of one row
    rowsPerRank: [
      { table: { name: 'P', rows: W, dim: 3, pooling: 'sum', features: ['p'] }, cluster: 'rb', shards: Array.from({ length: W }, (_, k) => sh(k, k + 1, 0, 3, k)) },
      { table: { name: 'Q', rows: W, dim: 3, pooling: 'sum', features: ['q'] }, cluster: 'ub', shards: Array.from({ length: W }, (_, k) => sh(k, k + 1, 0, 3, W - 1 - k)) },
      { table: { name: 'One', rows: 1, dim: 2, pooling: 'mean', features: ['one'] }, cluster: 'rb', shards: [sh(0, 1, 0, 2, R(W - 1))] },
      { table: { name: 'OneU', rows: 1, dim: 2, pooling: 'none', features: ['oneu'] }, cluster: 'ub', shards: [sh(0, 1, 0, 1, R(1)), sh(0, 1, 1, 2, R(0))] },
    ],
    // every table on one rank: the others hold nothing
    allOnOne: [
      { table: { name: 'A', rows: 20, dim: 4, pooling: 'sum', features: ['a'] }, cluster: 'rb', shards: [sh(0, 20, 0, 4, R(1))] },
      { table: { name: 'B', rows: 20, dim: 4, pooling: 'mean', features: ['b'] }, cluster: 'ub', shards: [sh(0, 20, 0, 4, R(1))] },
      { table: { name: 'Sq', rows: 20, dim: 4, pooling: 'none', features: ['s'] }, cluster: 'rb', shards: [sh(0, 7, 0, 4, R(1)), sh(7, 20, 0, 4, R(1))] },
    ],
    // hot tiers as large as the table, or of one row
    tiers: [
      { table: { name: 'Rfull', rows: 8, dim: 2, pooling: 'sum', features: ['rf'] }, cluster: 'rb', tiers: { replicated: 8, node: 0 } },
      { table: { name: 'Nfull', rows: 8, dim: 2, pooling: 'mean', features: ['nf'] }, cluster: 'ub', tiers: { replicated: 0, node: 8 } },
      { table: { name: 'R1', rows: 8, dim: 2, pooling: 'sum', features: ['r1'] }, cluster: 'ub', tiers: { replicated: 1, node: 1 }, shards: [sh(2, 8, 0, 1, R(0)), sh(2, 8, 1, 2, R(1))] },
      { table: { name: 'Mix', rows: 7, dim: 2, pooling: 'none', features: ['mx'] }, cluster: 'rb', tiers: { replicated: 3, node: 4 } },
    ],
    dpOnly: [
      { table: { name: 'D', rows: 6, dim: 3, pooling: 'sum', features: ['d', 'd2'] }, cluster: 'dp' },
      { table: { name: 'Dm', rows: 6, dim: 2, pooling: 'mean', features: ['dm'] }, cluster: 'dp' },
      { table: { name: 'Ds', rows: 6, dim: 2, pooling: 'none', features: ['ds'] }, cluster: 'dp' },
    ],
    // fp16 / bf16 tables
    dtypes: [
      { table: { name: 'H', rows: 12, dim: 4, pooling: 'sum', features: ['h'], dtype: 'fp16' }, cluster: 'rb', shards: [sh(0, 5, 0, 4, R(0)), sh(5, 12, 0, 1, R(1)), sh(5, 12, 1, 4, R(2))] },
      { table: { name: 'Bf', rows: 12, dim: 4, pooling: 'mean', features: ['bf'], dtype: 'bf16' }, cluster: 'ub', tiers: { replicated: 1, node: 2 }, shards: [sh(3, 12, 0, 4, R(3))] },
      { table: { name: 'Hd', rows: 5, dim: 2, pooling: 'none', features: ['hd'], dtype: 'fp16' }, cluster: 'dp' },
    ],
    // features sharing a table with different pooling factors (bagModes' poolf: features ending in 0 / 9)
    poolf: [
      { table: { name: 'M', rows: 14, dim: 3, pooling: 'mean', features: ['m0', 'm1', 'm9'] }, cluster: 'rb', tiers: { replicated: 1, node: 1 }, shards: [sh(2, 7, 0, 3, R(1)), sh(7, 14, 0, 2, R(2)), sh(7, 14, 2, 3, R(0))] },
      { table: { name: 'N', rows: 14, dim: 3, pooling: 'sum', features: ['n0', 'n9'] }, cluster: 'ub', shards: [sh(0, 9, 0, 3, R(3)), sh(9, 14, 0, 3, R(1))] },
    ],
    // wide rows in column shards of odd widths
    wide: [
      { table: { name: 'Wd', rows: 11, dim: 37, pooling: 'sum', features: ['wd', 'wd2'] }, cluster: 'rb', shards: [sh(0, 11, 0, 13, R(0)), sh(0, 11, 13, 29, R(1)), sh(0, 11, 29, 37, R(2))] },
      { table: { name: 'Wu', rows: 11, dim: 19, pooling: 'mean', features: ['wu'] }, cluster: 'ub', tiers: { replicated: 1, node: 3 }, shards: [sh(4, 11, 0, 9, R(3)), sh(4, 11, 9, 19, R(1))] },
      { table: { name: 'Ws', rows: 11, dim: 21, pooling: 'none', features: ['ws'] }, cluster: 'ub', shards: [sh(0, 6, 0, 5, R(2)), sh(0, 6, 5, 21, R(0)), sh(6, 11, 0, 21, R(1))] },
    ],
    // one rank holding several column shards of one row group, and several row groups
    twice: [
      { table: { name: 'T2', rows: 12, dim: 6, pooling: 'sum', features: ['t2', 't2b'] }, cluster: 'rb', shards: [sh(0, 6, 0, 2, R(0)), sh(0, 6, 2, 4, R(1)), sh(0, 6, 4, 6, R(0)), sh(6, 12, 0, 3, R(0)), sh(6, 12, 3, 6, R(0))] },
      { table: { name: 'U2', rows: 12, dim: 6, pooling: 'mean', features: ['u2'] }, cluster: 'ub', shards: [sh(0, 6, 0, 2, R(1)), sh(0, 6, 2, 4, R(2)), sh(0, 6, 4, 6, R(1)), sh(6, 12, 0, 6, R(1))] },
      { table: { name: 'S2', rows: 12, dim: 4, pooling: 'none', features: ['s2'] }, cluster: 'rb', shards: [sh(0, 6, 0, 1, R(2)), sh(0, 6, 1, 3, R(3)), sh(0, 6, 3, 4, R(2)), sh(6, 12, 0, 4, R(2))] },
    ],
    // sequence features split by rows and columns, with tiers
    seq: [
      { table: { name: 'S', rows: 16, dim: 4, pooling: 'none', features: ['s1', 's2'] }, cluster: 'rb', shards: [sh(0, 5, 0, 1, R(0)), sh(0, 5, 1, 4, R(2)), sh(5, 16, 0, 3, R(1)), sh(5, 16, 3, 4, R(3))] },
      { table: { name: 'Su', rows: 16, dim: 4, pooling: 'none', features: ['su'] }, cluster: 'ub', tiers: { replicated: 2, node: 3 }, shards: [sh(5, 9, 0, 2, R(3)), sh(5, 9, 2, 4, R(0)), sh(9, 16, 0, 4, R(2))] },
    ],
  };
}

/** Whether every shard of a placement is full width (rowwise_adagrad matches one collection only then). */
export function fullWidth(t: PlanTables[number]): boolean {
  return (t.shards ?? []).every((s) => s.cols[0] === 0 && s.cols[1] === (t.table as { dim: number }).dim);
}

/** Batch shapes for W ranks over `tables`; `weighted` ones are meant for weighted batches. */
export function bagModes(W: number, tables: PlanTables): Record<string, { bags: BagsOf; weighted: boolean }> {
  // the rows next to every range boundary of each table (tiers and row groups: r0 − 1, r0, r1 − 1)
  const edges = new Map<string, number[]>();
  for (const t of tables) {
    const rows = (t.table as { rows: number }).rows;
    const e = new Set<number>([0, rows - 1]);
    const rep = t.tiers?.replicated ?? 0, te = rep + (t.tiers?.node ?? 0);
    for (const x of [rep, te]) e.add(x).add(x - 1);
    for (const s of t.shards ?? []) for (const x of s.rows) e.add(x - 1).add(x);
    const list = [...e].filter((x) => x >= 0 && x < rows);
    for (const f of (t.table as { features: string[] }).features) edges.set(f, list);
  }
  const uniform = (rows: number, u: number): number => Math.floor(rows * u);
  const factor = (f: string): number => (f.endsWith('9') ? 9 : f.endsWith('0') ? 0 : 4);
  return {
    // skewed ids, 0–4 per bag (empty bags included), weights in [0.5, 1.5)
    skewed: { bags: randomBags(() => 3, 4, (rows, u) => Math.min(rows - 1, Math.floor(rows * u * u))), weighted: true },
    // local batch size 1
    single: { bags: randomBags(() => 1, 3, uniform), weighted: false },
    // at step k, rank k mod W has only empty bags
    emptyRank: { bags: (f, rows, rank, step) => (rank === step % W ? [{ ids: [] }, { ids: [] }] : randomBags(() => 2, 4, uniform)(f, rows, rank, step)), weighted: false },
    // every id of the batch on the table's last row; local batch sizes differ
    contention: { bags: randomBags((r) => 2 + r, 5, (rows) => rows - 1), weighted: false },
    // only ids next to range boundaries
    edges: { bags: (f, rows, rank, step) => randomBags(() => 3, 4, (_, u) => { const e = edges.get(f)!; return e[Math.floor(u * e.length)]!; })(f, rows, rank, step), weighted: false },
    // weights of 0, negative and positive
    signedWeights: { bags: randomBags(() => 3, 4, uniform, (u) => [0, -1.5, 2, -0.25][Math.floor(u * 4)]!), weighted: true },
    // pooling factors by feature name: 0 (every bag empty), 4, 9 ids per bag
    poolf: { bags: (f, rows, rank, step) => randomBags(() => 2 + rank, factor(f), uniform)(f, rows, rank, step), weighted: false },
  };
}

// routing-oracle.test.ts — route() (lib/sharded/routing.ts, one native call per batch) against a naive
// per-feature segmentation written here from the definition: an id of a table with bounds
// [b0, b1, …, bS] falls in the range s with b_s ≤ key < b_{s+1} (key = the id, or for a dynamic table the
// virtual row of its hash, core/id_hash.h), keeps its order there, and travels relative to b_s (a dynamic
// table's raw id as it is); the distinct ids of a ub row group / node tier are those of every feature of
// the table in that range, ordered by (id mod m, id). Odd shapes: empty features and bags, weights or
// none, every id array type, dynamic tables, several row groups, node tiers held by 2 ranks per node,
// batches listing features in another order; and the errors that name the feature and the table.
import { describe, expect, it } from 'vitest';
import { JaggedBatch } from '../../lib/batch.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { topologyPreset } from '../../lib/plan/topology.js';
import type { PlanTableSpec } from '../../lib/plan/types.js';
import { exchangeOps } from '../../lib/sharded/exchange-ops.js';
import { LocalLayout } from '../../lib/sharded/local-layout.js';
import { part, route, type Routed } from '../../lib/sharded/routing.js';
import { mix64 } from '../storage/dynamic-oracle.js';

/** hash_row(id, capacity) = floor(mix64(id ^ salt) · capacity / 2^64) */
function hashRow(id: bigint, capacity: number): bigint {
  return (mix64(BigInt.asUintN(64, id) ^ 0x53484152445f4944n) * BigInt(capacity)) >> 64n;
}

interface FeatureData {
  lengths: number[];
  ids: bigint[];
  weights: number[] | null;
}
interface OraclePart {
  ids: bigint[];
  pos: number[];
  weights: number[] | null;
  lengths: number[];
}

/** The definition: every id in the range of its key, in order; per range its bag lengths. */
function segmentOracle(f: FeatureData, bounds: number[], capacity: number): OraclePart[] {
  const S = bounds.length - 1;
  const out: OraclePart[] = Array.from({ length: S }, () => ({ ids: [], pos: [], weights: f.weights ? [] : null, lengths: f.lengths.map(() => 0) }));
  let i = 0;
  f.lengths.forEach((len, b) => {
    for (let k = 0; k < len; k++, i++) {
      const id = f.ids[i]!;
      const key = capacity > 0 ? hashRow(id, capacity) : id;
      let s = -1;
      for (let j = 0; j < S; j++) if (BigInt(bounds[j]!) <= key && key < BigInt(bounds[j + 1]!)) s = j;
      if (s < 0) throw new Error(`oracle: id ${id} in no range`);
      const p = out[s]!;
      p.ids.push(capacity > 0 ? id : id - BigInt(bounds[s]!));
      p.pos.push(i);
      p.weights?.push(f.weights![i]!);
      p.lengths[b]!++;
    }
  });
  return out;
}

/** Distinct values ordered by (v mod m, v), the index of every input in them, the count per residue. */
function uniqueOracle(ids: bigint[], m: number): { values: bigint[]; inverse: number[]; counts: number[] } {
  const res = (v: bigint) => (m > 1 ? Number(v % BigInt(m)) : 0);
  const values = [...new Set(ids)].sort((a, b) => res(a) - res(b) || (a < b ? -1 : a > b ? 1 : 0));
  const counts = Array.from({ length: m }, (_, j) => values.filter((v) => res(v) === j).length);
  return { values, inverse: ids.map((v) => values.indexOf(v)), counts };
}

/** The plan's tables: a hot-tiered rb table of two features over three row groups, a ub table with a node tier over three groups, dp, a dynamic ub table, a sequence table. */
function planOf(W: number, rpn: number): ShardPlan {
  const groups = (a: number, b: number, n: number, dim: number) =>
    Array.from({ length: n }, (_, k) => ({ rows: [a + Math.floor(((b - a) * k) / n), a + Math.floor(((b - a) * (k + 1)) / n)] as [number, number], cols: [0, dim] as [number, number], rank: (k * 3 + 1) % W }));
  const dyn = { name: 'dyn', rows: 'dynamic', capacity: 64, dim: 4, features: ['g', 'h'] } as PlanTableSpec;
  return ShardPlan.create({
    topology: topologyPreset('cpu', { worldSize: W, ranksPerNode: rpn }),
    batchSize: 5,
    tables: [
      { table: { name: 'rbt', rows: 1000, dim: 4, features: ['a', 'b'] }, cluster: 'rb', tiers: { replicated: 10, node: 30 }, shards: groups(40, 1000, 3, 4) },
      { table: { name: 'ubt', rows: 500, dim: 4, pooling: 'mean', features: ['c', 'd'] }, cluster: 'ub', tiers: { replicated: 0, node: 20 }, shards: groups(20, 500, 3, 4) },
      { table: { name: 'dpt', rows: 50, dim: 4, features: ['e'] }, cluster: 'dp' },
      { table: dyn, cluster: 'ub', shards: groups(0, 64, 2, 4) },
      { table: { name: 'seq', rows: 200, dim: 4, pooling: 'none', features: ['s'] }, cluster: 'rb', shards: groups(0, 200, 2, 4) },
    ],
  });
}

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296;
}

type IdKind = 'i64' | 'i32' | 'u32';
/** Per feature: bags of 0..4 ids (feature 'd' empty when `emptyD`), skewed to the hot tiers; dynamic features' raw ids negative too when i64. */
function featureData(plan: ShardPlan, seed: number, weighted: boolean, idKind: IdKind, emptyD: boolean, B = 5, most = 4): Map<string, FeatureData> {
  const r = rng(seed);
  const out = new Map<string, FeatureData>();
  for (const t of plan.tables)
    for (const f of t.features) {
      const lengths = Array.from({ length: B }, () => (emptyD && f === 'd' ? 0 : Math.floor(r() * (most + 1))));
      const n = lengths.reduce((a, b) => a + b, 0);
      const ids = Array.from({ length: n }, () => {
        if (t.name === 'dyn') return idKind === 'i64' ? BigInt(Math.floor((r() - 0.5) * 2 ** 40)) : BigInt(Math.floor(r() * 1000));
        return BigInt(Math.floor(t.rows * r() ** 3));
      });
      out.set(f, { lengths, ids, weights: weighted ? ids.map(() => Math.round(r() * 100) / 8 - 4) : null });
    }
  return out;
}

function batchOf(order: string[], data: Map<string, FeatureData>, idKind: IdKind, weighted: boolean, B = 5): JaggedBatch {
  const all = order.flatMap((f) => data.get(f)!.ids);
  const ids = idKind === 'i64' ? BigInt64Array.from(all) : idKind === 'i32' ? Int32Array.from(all, Number) : Uint32Array.from(all, Number);
  return JaggedBatch.fromLengths({
    features: order,
    batchSize: B,
    lengths: Int32Array.from(order.flatMap((f) => data.get(f)!.lengths)),
    ids,
    ...(weighted ? { weights: Float32Array.from(order.flatMap((f) => data.get(f)!.weights!)) } : {}),
  });
}

function expectRouted(L: LocalLayout, data: Map<string, FeatureData>, routed: Routed, B = 5): void {
  const ranges = new Map<string, OraclePart[]>();
  for (const rt of L.tables)
    for (const f of rt.features) {
      const want = segmentOracle(data.get(f)!, Array.from(rt.bounds), rt.hashCapacity);
      ranges.set(f, want);
      want.forEach((w, s) => {
        const got = part(routed.segs.get(f)!, s, B);
        expect({ f, s, ids: Array.from(got.ids), pos: Array.from(got.pos), weights: got.weights && Array.from(got.weights), lengths: Array.from(got.lengths), n: got.n }).toEqual({
          f,
          s,
          ids: w.ids,
          pos: w.pos,
          // the batch holds weights as float32
          weights: w.weights && w.weights.map((x) => Math.fround(x)),
          lengths: w.lengths,
          n: w.ids.length,
        });
      });
    }
  const distinct = (rt: (typeof L.tables)[number], s: number, m: number, got: Routed['ub'][number][number] | undefined) => {
    const parts = rt.features.map((f) => ranges.get(f)![s]!.ids);
    const want = uniqueOracle(parts.flat(), m);
    const featOff = parts.reduce((o, p) => [...o, o[o.length - 1]! + p.length], [0]);
    const starts = want.counts.reduce((o, c) => [...o, o[o.length - 1]! + c], [0]);
    expect(got && { values: Array.from(got.uq.values), inverse: Array.from(got.uq.inverse), counts: Array.from(got.uq.counts), featOff: got.featOff, starts: got.starts }).toEqual({ ...want, featOff, starts });
  };
  let ubGroups = 0, tiers = 0;
  L.tables.forEach((rt, t) => {
    if (rt.cluster === 'ub') rt.groups.forEach((_, g) => (distinct(rt, 2 + g, 1, routed.ub[t]![g]), ubGroups++));
    else expect(routed.ub[t]).toEqual([]);
    if (rt.N > 0) distinct(rt, 1, L.rpn, routed.node.get(rt.index)), tiers++;
  });
  expect(routed.node.size).toBe(tiers);
  expect([ubGroups, tiers]).toEqual([5, 2]);
}

describe('route: one native call per batch, against the per-feature definition', () => {
  for (const [W, rpn] of [[4, 2], [2, 2], [3, 1]] as const)
    for (const idKind of ['i64', 'i32', 'u32'] as const)
      for (const weighted of [false, true])
        it(`${W} ranks, ${rpn} per node, ${idKind} ids, ${weighted ? 'weighted' : 'unweighted'}: every feature's ranges, ub row groups and node tiers`, () => {
          const plan = planOf(W, rpn);
          for (let seed = 1; seed <= 4; seed++) {
            const data = featureData(plan, seed * 31 + W, weighted, idKind, seed % 2 === 0);
            const order = ['s', 'h', 'e', 'd', 'c', 'b', 'a', 'g'];
            for (let rank = 0; rank < W; rank++) {
              const L = new LocalLayout(plan, rank);
              expectRouted(L, data, route(L, batchOf(seed === 3 ? [...order].reverse() : order, data, idKind, weighted)));
            }
          }
        });

  // requests of 64 ids or more take the radix sort (narrow ranges), wide raw ids the comparison sort
  for (const idKind of ['i64', 'u32'] as const)
    it(`large bags (${idKind} ids): the distinct ids of many ids per row group and node tier`, () => {
      const plan = planOf(4, 2);
      const data = featureData(plan, 99, true, idKind, false, 97, 12);
      for (let rank = 0; rank < 4; rank++) {
        const L = new LocalLayout(plan, rank);
        const routed = route(L, batchOf(['a', 'b', 'c', 'd', 'e', 'g', 'h', 's'], data, idKind, true, 97), 97);
        expectRouted(L, data, routed, 97);
        // the node tier of 'rbt' and every ub row group hold 64 ids or more
        expect(Math.min(routed.node.get(0)!.uq.inverse.length, ...routed.ub[1]!.map((u) => u.uq.inverse.length), ...routed.ub[3]!.map((u) => u.uq.inverse.length))).toBeGreaterThanOrEqual(64);
      }
    });

  it('unique: ids of narrow and of wide spans, m = 1 and 3, against the definition', () => {
    const r = rng(5);
    for (const [n, span, m] of [[1000, 5000, 1], [1000, 5000, 3], [500, 1500, 1], [500, 2 ** 30, 3], [300, 2 ** 40, 1], [300, 2 ** 40, 3], [200, 1, 1], [63, 100, 2]] as const) {
      const ids = Array.from({ length: n }, () => BigInt(Math.floor(span * r() ** 2)) - (m === 1 && span > 2 ** 32 ? 2n ** 39n : 0n));
      const got = exchangeOps().unique(BigInt64Array.from(ids), m);
      expect({ values: Array.from(got.values), inverse: Array.from(got.inverse), counts: Array.from(got.counts) }).toEqual(uniqueOracle(ids, m));
    }
  });

  it('a batch without ids: every range empty, no distinct ids', () => {
    const plan = planOf(4, 2);
    const data = new Map(plan.tables.flatMap((t) => t.features.map((f) => [f, { lengths: [0, 0, 0, 0, 0], ids: [], weights: null }] as const)));
    const L = new LocalLayout(plan, 1);
    expectRouted(L, data, route(L, batchOf(['a', 'b', 'c', 'd', 'e', 'g', 'h', 's'], data, 'i64', false)));
  });

  it('errors name the first bad feature in table order and its table; nothing else differs', () => {
    const plan = planOf(4, 2);
    const L = new LocalLayout(plan, 0);
    const order = ['s', 'h', 'e', 'd', 'c', 'b', 'a', 'g'];
    const data = featureData(plan, 7, true, 'i64', false);
    const bad = (f: string, id: bigint) => {
      return new Map([...data, [f, { lengths: [0, 0, 1, 0, 0], ids: [id], weights: [1] }]]);
    };
    const routeOf = (m: Map<string, FeatureData>) => () => route(L, batchOf(order, m, 'i64', true));
    expect(routeOf(bad('b', 1000n))).toThrow(expect.objectContaining({ code: 'ID_OUT_OF_RANGE', message: "feature 'b' (table 'rbt', 1000 rows): id 1000 is outside [0, 1000)" }));
    expect(routeOf(bad('c', -1n))).toThrow(expect.objectContaining({ code: 'ID_OUT_OF_RANGE', message: "feature 'c' (table 'ubt', 500 rows): id -1 is outside [0, 500)" }));
    // 's' (last table) and 'a' (first) both bad: 'a' is named
    const two = bad('s', 200n);
    two.set('a', bad('a', 5000n).get('a')!);
    expect(routeOf(two)).toThrow(expect.objectContaining({ message: "feature 'a' (table 'rbt', 1000 rows): id 5000 is outside [0, 1000)" }));
    const nan = new Map(data);
    nan.set('e', { lengths: [0, 2, 0, 0, 0], ids: [1n, 2n], weights: [0.5, Number.NaN] });
    expect(routeOf(nan)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: "feature 'e' (table 'dpt', 50 rows): weights[1] is nan: weights must be finite" }));
    // a dynamic table takes every raw id
    expect(() => routeOf(bad('g', -(1n << 63n)))()).not.toThrow();
  });

  it('routeStep refuses plans and feature indices outside its arrays', () => {
    const K = exchangeOps();
    const ids = BigInt64Array.from([1n, 2n]), lengths = Int32Array.from([1, 1]), offsets = Float64Array.from([0, 1, 2]);
    const plan = { bounds: Float64Array.from([0, 10]), tables: Float64Array.from([0, 1, 0, 1]), uniq: new Float64Array(0), what: ["feature 'x'"] };
    expect(Array.from(K.routeStep(ids, lengths, null, 2, offsets, Int32Array.from([0]), plan).ids)).toEqual([1n, 2n]);
    expect(() => K.routeStep(ids, lengths, null, 2, offsets, Int32Array.from([1]), plan)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => K.routeStep(ids, lengths, null, 2, offsets, Int32Array.from([0]), { ...plan, tables: Float64Array.from([0, 2, 0, 1]) })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => K.routeStep(ids, lengths, null, 2, offsets, Int32Array.from([0]), { ...plan, uniq: Float64Array.from([0, 1, 1]) })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => K.routeStep(ids, lengths, null, 2, Float64Array.from([0, 1, 3]), Int32Array.from([0]), plan)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => K.routeStep(ids, Int32Array.from([2, 1]), null, 2, Float64Array.from([0, 1, 2]), Int32Array.from([0]), plan)).toThrow(expect.objectContaining({ code: 'LENGTH_MISMATCH', message: expect.stringMatching(/^feature 'x': /) }));
  });
});

// Limits and typed errors of the planner's inputs: every rank within its memory limit for dynamic tables
// (whose rows carry an id map beside them), the planner options, batch sizes, topology sizes, unknown fields
// of access statistics, plan lookups, workload presets and the batch generator. Expected values come from
// the byte arithmetic of docs/planner.md written out here, never from the code under test.
import { describe, expect, it, vi } from 'vitest';
import { EmbshardError } from '../../lib/errors.js';
import { baselinePlan, planShards, runBaselines } from '../../lib/plan/planner.js';
import { estimatePlan } from '../../lib/plan/cost-model.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { normalizeTopology, topologyPreset } from '../../lib/plan/topology.js';
import type { DynamicTableSpec, TableSpec, Topology } from '../../lib/plan/types.js';
import { simulate } from '../../lib/plan/simulator.js';
import { Load } from '../../lib/plan/load.js';
import { runPlan } from '../../lib/cli/plan.js';
import { generateBatch, generateBatches } from '../../lib/workloads/generator.js';
import { workload, type Workload } from '../../lib/workloads/presets.js';
import { smallTopology } from './helpers.js';

/** The error `f` throws, which must be an EmbshardError. */
function typedError(f: () => unknown): EmbshardError {
  let err: unknown;
  try {
    f();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(EmbshardError);
  return err as EmbshardError;
}

function expectError(f: () => unknown, code: string, field: string): void {
  const e = typedError(f);
  expect(e.code).toBe(code);
  expect(e.message).toContain(field);
}

describe('planner memory limits with dynamic tables', () => {
  // a dynamic table's row on a rank: dim × 2 (bf16, sgd: no state) + 128 bytes of id map (docs/storage.md)
  const heldRow = 256 * 2 + 128;
  const dyn = (capacity: number): DynamicTableSpec => ({ name: 'd', rows: 'dynamic', capacity, dim: 256, dtype: 'bf16', features: ['d0', 'd1'], poolingFactors: [0.5, 2] });
  const topo = (limit: number) => ({ ...smallTopology(16, 16, limit), deviceMemoryBytes: 2 * limit });

  /** Per-rank bytes of the plan, counted shard by shard. */
  function perRank(plan: ShardPlan): number[] {
    const mem = new Array<number>(plan.topology.worldSize).fill(0);
    for (const s of plan.shardsOf('d')) mem[s.rank] += (s.rows[1] - s.rows[0]) * heldRow;
    return mem;
  }

  it('a table that needs every rank gets PLAN_INFEASIBLE when whole rows cannot fit, never a plan over the limit', () => {
    // 7,690 rows over 16 ranks need 481 rows on some rank: 481 × 640 = 307,840 > 307,600 (= 480.6 rows)
    const limit = 307_600;
    let plan: ShardPlan | undefined;
    let err: unknown;
    try {
      plan = planShards([dyn(7690)], topo(limit), { batchSize: 64, maxIterations: 60, timeBudgetMs: Infinity, fromBaselines: false });
    } catch (e) {
      err = e;
    }
    if (plan) expect(Math.max(...perRank(plan))).toBeLessThanOrEqual(limit);
    expect((err as EmbshardError | undefined)?.code).toBe('PLAN_INFEASIBLE');
  });

  it('the same table fits when 481 rows do: every rank within the limit', () => {
    const limit = 481 * heldRow;
    for (const fromBaselines of [false, true]) {
      const plan = planShards([dyn(7690)], topo(limit), { batchSize: 64, maxIterations: 60, timeBudgetMs: Infinity, fromBaselines });
      const mem = perRank(plan);
      expect(mem.reduce((a, b) => a + b, 0)).toBe(7690 * heldRow);
      expect(Math.max(...mem)).toBeLessThanOrEqual(limit);
      expect(Array.from(plan.memoryPerRank())).toEqual(mem);
    }
  });

  it('a row larger than a rank\'s limit with its id map: PLAN_INFEASIBLE naming the table', () => {
    // 256 × 2 = 512 bytes of row fit a 600-byte limit; with its 128 bytes of id map (640) it does not
    const e = typedError(() => planShards([dyn(4)], topo(600), { batchSize: 4 }));
    expect(e.code).toBe('PLAN_INFEASIBLE');
    expect(e.details).toMatchObject({ table: 'd', shortfallBytes: heldRow - 600 });
  });
});

describe('planner options', () => {
  const tables: TableSpec[] = [{ name: 'a', rows: 100, dim: 8 }, { name: 'b', rows: 50, dim: 16, poolingFactors: [3] }];
  const topo = smallTopology(4, 2);

  it('are validated before any work, each bad value an INVALID_CONFIG naming the field', () => {
    const bad: [Record<string, unknown>, string][] = [
      [{ batchSize: 2 ** 24 + 1 }, 'batchSize'],
      [{ batchSize: 2 ** 53 - 1 }, 'batchSize'],
      [{ batchSize: 4, maxIterations: -1 }, 'maxIterations'],
      [{ batchSize: 4, maxIterations: 1.5 }, 'maxIterations'],
      [{ batchSize: 4, maxIterations: 'x' }, 'maxIterations'],
      [{ batchSize: 4, timeBudgetMs: -5 }, 'timeBudgetMs'],
      [{ batchSize: 4, timeBudgetMs: NaN }, 'timeBudgetMs'],
      [{ batchSize: 4, timeBudgetMs: '100' }, 'timeBudgetMs'],
      [{ batchSize: 4, tiers: 'no' }, 'tiers'],
      [{ batchSize: 4, fromBaselines: 0 }, 'fromBaselines'],
      [{ batchSize: 4, meta: 'x' }, 'meta'],
      [{ batchSize: 4, meta: { a: 1 } }, 'meta.a'],
      [{ batchSize: 4, wire: { forward: 'constructor' } }, 'wire.forward'],
      [{ batchSize: 4, wire: { backward: 'toString' } }, 'wire.backward'],
    ];
    for (const [options, field] of bad) {
      expectError(() => planShards(tables, topo, options as never), 'INVALID_CONFIG', field);
      expectError(() => runBaselines(tables, topo, options as never), 'INVALID_CONFIG', field);
      expectError(() => baselinePlan('row-wise', tables, topo, options as never), 'INVALID_CONFIG', field);
    }
    // options that are checked even when the model cannot fit
    expectError(() => planShards(tables, smallTopology(4, 2, 10), { batchSize: 4, maxIterations: -1 }), 'INVALID_CONFIG', 'maxIterations');
    for (const options of [null, undefined]) expect(typedError(() => planShards(tables, topo, options as never)).code).toBe('INVALID_CONFIG');
    expectError(() => baselinePlan('bogus' as never, tables, topo, { batchSize: 4 }), 'INVALID_CONFIG', 'bogus');
  });

  it('take a batch of up to 2^24 samples per rank, as the CLI and the data sources do', () => {
    const plan = planShards(tables, topo, { batchSize: 2 ** 24, maxIterations: 5, timeBudgetMs: Infinity });
    expect(plan.batchSize).toBe(2 ** 24);
    expect(ShardPlan.fromJSON(JSON.stringify(plan.toJSON())).batchSize).toBe(2 ** 24);
    expectError(() => ShardPlan.fromJSON({ ...plan.toJSON(), batchSize: 2 ** 24 + 1 }), 'INVALID_PLAN', '$.batchSize');
    expectError(() => estimatePlan(plan, 2 ** 24 + 1), 'INVALID_ARGUMENT', 'batchSize');
    expectError(() => estimatePlan(plan, -1), 'INVALID_ARGUMENT', 'batchSize');
  });
});

describe('topology size', () => {
  it('more than 65,536 ranks is INVALID_CONFIG / INVALID_PLAN naming worldSize (not a RangeError from per-rank arrays)', () => {
    const big = smallTopology(2 ** 31, 2 ** 31);
    expectError(() => normalizeTopology(big), 'INVALID_CONFIG', 'topology.worldSize');
    expectError(() => planShards([{ name: 'a', rows: 10, dim: 4 }], big, { batchSize: 4 }), 'INVALID_CONFIG', 'topology.worldSize');
    expectError(() => topologyPreset('dgx-h100', { worldSize: 2 ** 40 }), 'INVALID_CONFIG', 'worldSize');
    expectError(
      () => ShardPlan.fromJSON({ format: 'embshard.plan', version: 2, topology: big, batchSize: 4, tables: [{ name: 'a', rows: 10, dim: 4, cluster: 'dp', shards: [] }] }),
      'INVALID_PLAN',
      '$.topology.worldSize',
    );
    expect(normalizeTopology(smallTopology(65536, 8)).worldSize).toBe(65536);
  });
});

describe('plan validation details', () => {
  it('access.top rejects unknown fields', () => {
    const spec = { name: 'a', rows: 10, dim: 4, access: { top: { counts: [3], total: 5, extra: 1 } } };
    expectError(() => planShards([spec as never], smallTopology(2, 2), { batchSize: 4 }), 'INVALID_CONFIG', 'tables[0].access.top.extra');
    const json = {
      format: 'embshard.plan', version: 2, topology: smallTopology(2, 2), batchSize: 4,
      tables: [{ ...spec, cluster: 'dp', shards: [] }],
    };
    expectError(() => ShardPlan.fromJSON(json), 'INVALID_PLAN', '$.tables[0].access.top.extra');
  });

  it('ownerOf takes a rank of the topology as fromRank', () => {
    const plan = ShardPlan.create({ topology: smallTopology(4, 2), batchSize: 4, tables: [{ table: { name: 'a', rows: 10, dim: 4 }, cluster: 'dp' }] });
    expect(plan.ownerOf('a', 3, 0, 2)).toBe(2);
    for (const r of [4, -1, 1.5]) expectError(() => plan.ownerOf('a', 3, 0, r), 'INVALID_ARGUMENT', 'fromRank');
  });
});

describe('workloads and the batch generator', () => {
  it('workload() knows only its presets, not the names of Object.prototype', () => {
    for (const name of ['toString', '__proto__', 'constructor', 'hasOwnProperty']) expectError(() => workload(name), 'INVALID_CONFIG', name);
  });

  it('reject bad options and bag laws with typed errors naming the field', () => {
    const w = workload('criteo-kaggle');
    const bad: [() => unknown, string, string][] = [
      [() => generateBatch(w, 0, { batchSize: 2, idType: 'int16' as never }), 'INVALID_ARGUMENT', 'idType'],
      [() => generateBatch(w, 0, { batchSize: 2, seed: 1.5 }), 'INVALID_ARGUMENT', 'seed'],
      [() => generateBatch(w, 0, { batchSize: 2, seed: 'x' as never }), 'INVALID_ARGUMENT', 'seed'],
      [() => generateBatch(w, 0, { batchSize: 2, step: -1 }), 'INVALID_ARGUMENT', 'step'],
      [() => generateBatch(w, -1, { batchSize: 2 }), 'INVALID_ARGUMENT', 'rank'],
      [() => generateBatch(w, 0.5, { batchSize: 2 }), 'INVALID_ARGUMENT', 'rank'],
      [() => generateBatch(w, 0, { batchSize: 2 ** 24 + 1 }), 'INVALID_SIZE', 'batchSize'],
      [() => generateBatches(w, 0, { batchSize: 2 }), 'INVALID_ARGUMENT', 'worldSize'],
      [() => generateBatches(w, 1.5, { batchSize: 2 }), 'INVALID_ARGUMENT', 'worldSize'],
    ];
    for (const [f, code, field] of bad) expectError(f, code, field);
    const one = (bag: unknown): Workload => ({ name: 'x', description: '', source: '', tables: [{ name: 'a', rows: 100, dim: 4 }], bags: { a: bag as never } });
    expectError(() => generateBatch(one({ kind: 'fixed', n: -1 }), 0, { batchSize: 4 }), 'INVALID_CONFIG', 'bags.a.n');
    expectError(() => generateBatch(one({ kind: 'fixed', n: 2.5 }), 0, { batchSize: 4 }), 'INVALID_CONFIG', 'bags.a.n');
    expectError(() => generateBatch(one({ kind: 'uniform', mean: 0 }), 0, { batchSize: 4 }), 'INVALID_CONFIG', 'bags.a.mean');
    expectError(() => generateBatch(one({ kind: 'poisson', mean: 2 }), 0, { batchSize: 4 }), 'INVALID_CONFIG', 'bags.a.kind');
  });

  it('draws ids of tables past 2^31 − 1 rows in range (int64), and refuses int32 ids for them', () => {
    const rows = 3e9;
    const w: Workload = { name: 'x', description: '', source: '', tables: [{ name: 'a', rows, dim: 4 }], bags: { a: { kind: 'fixed', n: 4 } } };
    const b = generateBatch(w, 0, { batchSize: 256, idType: 'int64', seed: 3 });
    const ids = Array.from(b.ids as BigInt64Array, Number);
    expect(ids).toHaveLength(1024);
    expect(ids.every((x) => Number.isInteger(x) && x >= 0 && x < rows)).toBe(true);
    // uniform over 3e9 rows: about half of 1,024 draws above 2^31 (binomial, ±5σ = ±80)
    expect(Math.abs(ids.filter((x) => x >= 2 ** 31).length - 1024 * (1 - 2 ** 31 / rows))).toBeLessThan(80);
    expectError(() => generateBatch(w, 0, { batchSize: 4 }), 'INVALID_ARGUMENT', 'idType');
    expectError(() => generateBatch(w, 0, { batchSize: 4, idType: 'int64', permuteIds: 1 }), 'INVALID_ARGUMENT', 'permuteIds');
  });
});

describe('embshard plan', () => {
  it('a number too large to be an exact integer is a usage error (2) naming the flag', async () => {
    const err = vi.spyOn(console, 'error').mockImplementation(() => {});
    try {
      for (const flag of ['--gpus', '--batch', '--time-budget-ms']) {
        err.mockClear();
        const argv = ['--model', 'criteo-kaggle', ...(flag === '--gpus' ? [] : ['--gpus', '8']), flag, '99999999999999999999'];
        expect(await runPlan(argv)).toBe(2);
        expect(String(err.mock.calls[0]?.[0])).toContain(`${flag} must be an integer`);
      }
    } finally {
      err.mockRestore();
    }
  });
});

describe('simulate: its arguments', () => {
  const topo = smallTopology(4, 2);
  it('a Load of the topology\'s ranks is simulated; anything else is INVALID_ARGUMENT naming what is wrong', () => {
    expect(simulate(new Load(topo), topo).time).toBe(0);
    expectError(() => simulate(null as unknown as Load, topo), 'INVALID_ARGUMENT', 'load');
    expectError(() => simulate({ W: 4, data: new Float64Array(4) } as unknown as Load, topo), 'INVALID_ARGUMENT', 'load');
    expectError(() => simulate(new Load(topo), null as unknown as Topology), 'INVALID_ARGUMENT', 'topology');
    expectError(() => simulate(new Load(topo), { ...topo, interNodeBandwidth: 0 }), 'INVALID_ARGUMENT', 'interNodeBandwidth');
    expectError(() => simulate(new Load(smallTopology(8, 2)), topo), 'INVALID_ARGUMENT', '8 ranks');
    expectError(() => simulate(new Load(topo), topo, 'yes' as unknown as boolean), 'INVALID_ARGUMENT', 'hierarchical');
  });
});

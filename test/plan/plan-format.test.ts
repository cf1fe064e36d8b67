// Plan JSON round trip, lookups, and validation errors that name the bad JSON path; table spec and
// topology validation.
import { totalmem } from 'node:os';
import { describe, expect, it } from 'vitest';
import { normalizeTable, normalizeTables } from '../../lib/plan/tables.js';
import { measureCpu, normalizeTopology, topologyPreset } from '../../lib/plan/topology.js';
import { ShardPlan, type PlanJSON } from '../../lib/plan/shard-plan.js';
import { smallTopology } from './helpers.js';

function base(): PlanJSON {
  return {
    format: 'embshard.plan',
    version: 1,
    topology: smallTopology(4, 2),
    batchSize: 8,
    wire: { forward: 'fp16', backward: 'bf16' },
    tables: [
      {
        name: 'a',
        rows: 100,
        dim: 16,
        features: ['fa', 'fb'],
        poolingFactors: [2, 1],
        cluster: 'ub',
        tiers: { replicated: 4, node: 6 },
        shards: [
          { rows: [10, 60], cols: [0, 8], rank: 0 },
          { rows: [10, 60], cols: [8, 16], rank: 3 },
          { rows: [60, 100], cols: [0, 16], rank: 1 },
        ],
      },
      { name: 'b', rows: 7, dim: 4, cluster: 'dp', shards: [] },
    ],
  };
}

function expectPlanError(mutate: (j: PlanJSON & Record<string, unknown>) => void, path: string, text?: string): void {
  const j = base() as PlanJSON & Record<string, unknown>;
  mutate(j);
  let err: unknown;
  try {
    ShardPlan.fromJSON(JSON.stringify(j));
  } catch (e) {
    err = e;
  }
  expect(err, path).toMatchObject({ code: 'INVALID_PLAN' });
  expect((err as Error).message).toContain(path);
  if (text) expect((err as Error).message).toContain(text);
}

describe('ShardPlan format', () => {
  it('round-trips through JSON and answers lookups', () => {
    const p = ShardPlan.fromJSON(JSON.stringify(base()));
    const again = ShardPlan.fromJSON(JSON.stringify(p.toJSON()));
    expect(again.toJSON()).toEqual(p.toJSON());
    expect(p.toJSON().tables[0]).toMatchObject({ dtype: 'fp32', pooling: 'sum', optimizer: 'sgd', weighted: false });
    expect(p.shardsOf('a')).toHaveLength(3);
    expect(p.shardsOf('a')[1]).toEqual({ table: 'a', rows: [10, 60], cols: [8, 16], rank: 3 });
    expect(p.rowGroupsOf('a').map((g) => g.rows)).toEqual([[10, 60], [60, 100]]);
    expect(p.ownersOf('a', 2, 0)).toEqual([0, 1, 2, 3]); // replicated tier
    expect(p.ownersOf('a', 4 + 3, 5)).toEqual([1, 3]); // node tier row 3 → local rank 1 of each node
    expect(p.ownerOf('a', 7, 5, 2)).toBe(3);
    expect(p.ownersOf('a', 20, 9)).toEqual([3]);
    expect(p.ownerOf('a', 99, 15)).toBe(1);
    expect(p.ownersOf('b', 6, 3)).toEqual([0, 1, 2, 3]);
    expect(p.clusterOf('b')).toBe('dp');
    expect(() => p.ownersOf('a', 100, 0)).toThrow(expect.objectContaining({ code: 'ID_OUT_OF_RANGE' }));
    expect(() => p.shardsOf('zz')).toThrow(expect.objectContaining({ code: 'UNKNOWN_TABLE' }));
  });

  it('explain() prints the ranks asked for and names a bad option', () => {
    const p = ShardPlan.fromJSON(JSON.stringify(base()));
    expect(p.topology.worldSize).toBe(4);
    expect(p.explain({ maxRanks: 1 })).toContain('... 3 more ranks');
    expect(p.explain()).not.toContain('more ranks');
    for (const maxRanks of [-1, 1.5, NaN]) expect(() => p.explain({ maxRanks })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('maxRanks') }));
    expect(() => p.explain({ title: 3 as never })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('title') }));
  });

  it('records the protocol: absent means flat (older plans), true round-trips, anything else is rejected', () => {
    const flat = ShardPlan.fromJSON(JSON.stringify(base()));
    expect(flat.hierarchical).toBe(false);
    expect('hierarchical' in flat.toJSON()).toBe(false);
    const hier = ShardPlan.fromJSON(JSON.stringify({ ...base(), hierarchical: true }));
    expect(hier.hierarchical).toBe(true);
    expect(ShardPlan.fromJSON(JSON.stringify(hier.toJSON())).hierarchical).toBe(true);
    expect(hier.withProtocol(false).toJSON()).toEqual(flat.toJSON());
    expect(flat.withProtocol(true).toJSON()).toEqual(hier.toJSON());
    expectPlanError((j) => (j.hierarchical = 'yes' as never), '$.hierarchical', 'true or false');
  });

  it('version 2 keeps a table\'s hot-id remap and shuffled-tail access; version 1 plans load but cannot carry a remap', () => {
    const v1 = ShardPlan.fromJSON(base());
    expect(v1.table('a').hotIds).toEqual([]);
    expect(v1.toJSON().version).toBe(2);
    const j = base() as PlanJSON & Record<string, unknown>;
    j.version = 2;
    j.tables[0]!.hotIds = [97, 3, 50, 0];
    j.tables[0]!.access = { zipf: 1, top: { counts: [9, 5, 4, 4], total: 40 }, tail: 'shuffled' };
    const p = ShardPlan.fromJSON(JSON.stringify(j));
    expect(p.table('a').hotIds).toEqual([97, 3, 50, 0]);
    expect(ShardPlan.fromJSON(JSON.parse(JSON.stringify(p.toJSON()))).toJSON()).toEqual(p.toJSON());
    expect(p.toJSON().tables[0]!.hotIds).toEqual([97, 3, 50, 0]);
    expect(p.toJSON().tables[0]!.access!.tail).toBe('shuffled');
    expectPlanError((x) => (x.tables[0]!.hotIds = [1]), '$.tables[0].hotIds', 'needs plan version 2');
    expectPlanError((x) => ((x.version = 2), (x.tables[0]!.hotIds = [1, 1])), '$.tables[0].hotIds[1]', 'listed twice');
    expectPlanError((x) => ((x.version = 2), (x.tables[0]!.access = { tail: 'sorted' as never })), '$.tables[0].access.tail');
  });

  it('create() reads tiers as a plan file does: a count left out is 0, a bad one is named', () => {
    const table = { name: 't', rows: 40, dim: 4 };
    const shards = [{ rows: [5, 40] as const, cols: [0, 4] as const, rank: 0 }];
    const made = (tiers: unknown) => ShardPlan.create({ topology: smallTopology(2, 2), batchSize: 4, tables: [{ table, cluster: 'rb', tiers: tiers as never, shards }] });
    expect(made({ replicated: 5 }).toJSON()).toEqual(made({ replicated: 5, node: 0 }).toJSON());
    expect(made({ replicated: 5 }).toJSON().tables[0]!.tiers).toEqual({ replicated: 5, node: 0 });
    expect(() => made({ replicated: 'five', node: 0 })).toThrow(expect.objectContaining({ code: 'INVALID_PLAN', message: expect.stringContaining('$.tables[0].tiers.replicated') }));
  });

  it('names the bad path of an invalid plan', () => {
    expectPlanError((j) => (j.format = 'other' as never), '$.format');
    expectPlanError((j) => (j.version = 4 as never), '$.version', 'unsupported version');
    expectPlanError((j) => ((j.topology as { worldSize: number }).worldSize = 0), '$.topology.worldSize');
    expectPlanError((j) => ((j.topology as { ranksPerNode: number }).ranksPerNode = 3), '$.topology.ranksPerNode');
    expectPlanError((j) => (j.batchSize = 1.5), '$.batchSize');
    expectPlanError((j) => (j.wire.forward = 'int8' as never), '$.wire.forward');
    expectPlanError((j) => (j.tables[0]!.rows = -1), '$.tables[0].rows');
    expectPlanError((j) => (j.tables[0]!.cluster = 'xx' as never), '$.tables[0].cluster');
    expectPlanError((j) => (j.tables[0]!.shards[2]!.rank = 4), '$.tables[0].shards[2].rank');
    expectPlanError((j) => (j.tables[0]!.shards[2]!.rows = [50, 100]), '$.tables[0].shards[2].rows', 'overlaps');
    expectPlanError((j) => (j.tables[0]!.shards[2]!.rows = [70, 100]), '$.tables[0].shards', 'rows [60, 70)');
    expectPlanError((j) => (j.tables[0]!.shards[1]!.cols = [9, 16]), '$.tables[0].shards', 'columns [8, 9)');
    expectPlanError((j) => (j.tables[0]!.shards[1]!.cols = [8, 17]), '$.tables[0].shards[1].cols');
    expectPlanError((j) => (j.tables[0]!.shards[0]!.rows = [5, 60]), '$.tables[0].shards[0].rows', 'hot tiers');
    expectPlanError((j) => (j.tables[0]!.tiers = { replicated: 60, node: 50 }), '$.tables[0].tiers');
    expectPlanError((j) => (j.tables[1]!.shards = [{ rows: [0, 7], cols: [0, 4], rank: 0 }]), '$.tables[1].shards', 'dp');
    expectPlanError((j) => ((j.tables[0] as unknown as Record<string, unknown>).colour = 1), '$.tables[0].colour', 'unknown field');
    expectPlanError((j) => (j.tables[1]!.features = ['fa']), '$.tables[1].features[0]', "already maps to table 'a'");
    expect(() => ShardPlan.fromJSON('{nope')).toThrow(expect.objectContaining({ code: 'INVALID_PLAN', message: expect.stringContaining('not valid JSON') }));
  });
});

describe('table spec and topology validation', () => {
  it('names the bad field', () => {
    expect(() => normalizeTable({ name: 't', rows: 0, dim: 4 }, 'tables[2]')).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringContaining('tables[2].rows') }));
    expect(() => normalizeTable({ name: 't', rows: 5, dim: 4, dtype: 'int8' })).toThrow(expect.objectContaining({ code: 'UNSUPPORTED_DTYPE', message: expect.stringContaining('table.dtype') }));
    expect(() => normalizeTable({ name: 't', rows: 5, dim: 4, optimizer: 'lamb' })).toThrow(expect.objectContaining({ code: 'UNSUPPORTED_OPTIMIZER' }));
    expect(() => normalizeTable({ name: 't', rows: 5, dim: 4, features: ['x'], poolingFactors: [1, 2] })).toThrow(expect.objectContaining({ message: expect.stringContaining('table.poolingFactors') }));
    expect(() => normalizeTable({ name: 't', rows: 5, dim: 4, access: { zipf: -1 } })).toThrow(expect.objectContaining({ message: expect.stringContaining('table.access.zipf') }));
    expect(() => normalizeTables([{ name: 't', rows: 5, dim: 4 }, { name: 't', rows: 5, dim: 4 }])).toThrow(expect.objectContaining({ message: expect.stringContaining('tables[1].name') }));
    expect(() => normalizeTopology({ ...smallTopology(8, 4), interNodeBandwidth: -1 })).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringContaining('topology.interNodeBandwidth') }));
    expect(() => normalizeTopology({ ...smallTopology(8, 4), memoryLimitBytes: 2e12 })).toThrow(expect.objectContaining({ message: expect.stringContaining('topology.memoryLimitBytes') }));
    expect(() => topologyPreset('dgx-b300', { worldSize: 8 })).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringContaining('preset') }));
  });

  it('builds the DGX presets from the public datasheet figures', () => {
    const t = topologyPreset('dgx-h100', { worldSize: 64 });
    expect(t).toMatchObject({ worldSize: 64, ranksPerNode: 8, deviceMemoryBytes: 80e9, memoryLimitBytes: 60e9, hbmBandwidth: 3.35e12, intraNodeBandwidth: 450e9, interNodeBandwidth: 50e9 });
    expect(topologyPreset('dgx-a100', { worldSize: 4 })).toMatchObject({ ranksPerNode: 4, interNodeBandwidth: 25e9 });
    expect(topologyPreset('dgx-h200', { worldSize: 16 })).toMatchObject({ deviceMemoryBytes: 141e9, hbmBandwidth: 4.8e12 });
    const cpu = topologyPreset('cpu', { worldSize: 2 });
    // measured once per process; the 2 ranks share the host's memory and bandwidths
    const measured = measureCpu();
    expect(cpu).toMatchObject({ hbmBandwidth: measured.gatherBandwidth / 2, intraNodeBandwidth: measured.seqBandwidth / 2, deviceMemoryBytes: totalmem() / 2 });
    expect(cpu.ranksPerNode).toBe(2);
  });
});

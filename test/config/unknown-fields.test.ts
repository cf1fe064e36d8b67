// unknown-fields.test.ts — every config object of the public API rejects a field it does not know with
// INVALID_CONFIG (INVALID_PLAN for plan files) naming the field, and accepts the same config without it,
// so a typo or an unsupported option never vanishes silently.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { tableFromArrays } from 'apache-arrow';
import { afterAll, describe, expect, it } from 'vitest';
import { DeviceArray, EmbeddingCollection, EmbshardError, JaggedBatch, type CollectionConfig } from '../../lib/index.js';
import { arrowSource, countSamples, criteoNpySource, criteoTsvSource, openSource, prefetch, resolveSynthetic, syntheticSource, workerSource } from '../../lib/data/index.js';
import { DenseModel, Trainer, embeddingsFor, resolveDenseSpec, resolveSchedule } from '../../lib/train/index.js';
import { createInProcessGroups, createMpiGroup, createNcclGroup, ShardedEmbeddingCollection } from '../../lib/sharded/index.js';
import {
  ShardPlan, explainPlan, generateBatch, normalizeTable, normalizeTopology, planShards, profileAccess, topologyPreset, workload,
} from '../../lib/plan/index.js';
import { smallTopology } from '../plan/helpers.js';
import { HeraldEmbeddingCollection } from '../../lib/herald/index.js';

/** Runs `f` (sync or async) and returns the error it raised. */
async function raised(f: () => unknown): Promise<EmbshardError> {
  try {
    await f();
  } catch (e) {
    expect(e).toBeInstanceOf(EmbshardError);
    return e as EmbshardError;
  }
  throw new Error('no error was raised');
}

/** `f` fails with `code` naming `field`, in the message and in details.path. */
async function rejects(field: string, f: () => unknown, code = 'INVALID_CONFIG'): Promise<void> {
  const e = await raised(f);
  expect(e.code).toBe(code);
  expect(e.details?.path).toBe(field);
  expect(e.message).toContain(`${field}: unknown field`);
}

const tables = [{ name: 't', rows: 10, dim: 4 }];
const dir = mkdtempSync(join(tmpdir(), 'embshard-fields-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('the collection config', () => {
  const good: CollectionConfig = { tables: [{ name: 't', rows: 10, dim: 4, pooling: 'mean', init: { type: 'normal', std: 0.1 } }], optimizer: { type: 'sgd', lr: 0.1 } };

  it('accepts its known fields', () => {
    expect(new EmbeddingCollection(good).tables.map((t) => t.name)).toEqual(['t']);
  });

  it('names a typo in a table, the root, the optimizer and the init', async () => {
    await rejects('tables[0].poolng', () => new EmbeddingCollection({ tables: [{ name: 't', rows: 10, dim: 4, poolng: 'mean' } as never], optimizer: { type: 'sgd', lr: 0.1 } }));
    await rejects('optimizer.momentum', () => new EmbeddingCollection({ tables, optimizer: { type: 'sgd', lr: 0.1, momentum: 0.9 } as never }));
    await rejects('devcie', () => new EmbeddingCollection({ tables, devcie: 'cpu' } as never));
    await rejects('tables[0].init.std', () => new EmbeddingCollection({ tables: [{ name: 't', rows: 10, dim: 4, init: { type: 'uniform', std: 1 } as never }] }));
    await rejects('tables[0].storage.cachebytes', () =>
      new EmbeddingCollection({ tables: [{ name: 't', rows: 10, dim: 4, storage: { kind: 'disk', path: join(dir, 'st'), cacheBytes: 4096, cachebytes: 1 } as never }] }));
    await rejects('tables[0].storage.path', () => new EmbeddingCollection({ tables: [{ name: 't', rows: 10, dim: 4, storage: { kind: 'memory', path: dir } as never }] }));
  });

  it('names an unknown load option', async () => {
    const ec = new EmbeddingCollection(good);
    await ec.save(join(dir, 'ec'));
    await rejects('options.devcie', () => EmbeddingCollection.load(join(dir, 'ec'), { devcie: 'cpu' } as never));
    expect((await EmbeddingCollection.load(join(dir, 'ec'), { device: 'cpu' })).tables.map((t) => t.name)).toEqual(['t']);
  });
});

describe('the trainer and the dense model', () => {
  const spec = { denseIn: 2, bottom: [4], top: [1], numSparse: 1, embDim: 4, interaction: 'dot' as const };

  it('accepts its known fields', () => {
    const t = new Trainer({ model: spec, embeddings: embeddingsFor(['t'], [10], { dim: 4 }), optimizer: { type: 'sgd', lr: 0.1 }, schedule: { warmupSteps: 2 } });
    expect(t.dense.spec.embDim).toBe(4);
  });

  it('names the field in every part of the trainer options', async () => {
    const emb = () => embeddingsFor(['t'], [10], { dim: 4 });
    await rejects('modle', () => new Trainer({ model: spec, embeddings: emb(), modle: 'x' } as never));
    await rejects('schedule.warmup', () => new Trainer({ model: spec, embeddings: emb(), schedule: { warmup: 2 } as never }));
    await rejects('schedule.decay', () => resolveSchedule({ decay: 3 } as never));
    await rejects('model.layers', () => resolveDenseSpec({ ...spec, layers: [1] } as never));
    await rejects('optimizer.momentum', () => new Trainer({ model: spec, embeddings: emb(), optimizer: { type: 'sgd', lr: 0.1, momentum: 0.9 } as never }));
    await rejects('options.sed', () => new DenseModel(spec, { sed: 1 } as never));
    await rejects('initscale', () => embeddingsFor(['t'], [10], { dim: 4, initscale: 1 } as never));
    await rejects('options.devcie', () => Trainer.load(join(dir, 'nowhere'), { devcie: 'cpu' } as never));
    await rejects('options.step', () => new Trainer({ model: spec, embeddings: emb() }).fit([], { step: 2 } as never));
    await rejects('options.maxBatch', () => new Trainer({ model: spec, embeddings: emb() }).evaluate([], { maxBatch: 2 } as never));
  });
});

describe('data sources', () => {
  it('accept their known fields', async () => {
    expect(resolveSynthetic({ batchSize: 4, cardinalities: [5], planted: { bias: 0 } }).batchSize).toBe(4);
    const s = syntheticSource({ batchSize: 4, cardinalities: [5], numBatches: 1 });
    for await (const b of prefetch(s, { depth: 2 })) expect(b.size).toBe(4);
  });

  it('name the field of every source option', async () => {
    const tsv = join(dir, 'a.tsv');
    writeFileSync(tsv, '1\t' + '1\t'.repeat(13) + 'a\t'.repeat(25) + 'a\n');
    await rejects('batchsize', () => resolveSynthetic({ batchSize: 4, batchsize: 4 } as never));
    await rejects('planted.scale', () => resolveSynthetic({ batchSize: 4, planted: { scale: 1 } as never }));
    await rejects('hashing', () => criteoTsvSource({ path: tsv, batchSize: 1, hashing: 'murmur' } as never));
    expect(criteoTsvSource({ path: tsv, batchSize: 1 }).batchSize).toBe(1);
    await rejects('day', () => criteoNpySource({ dir, batchSize: 1, day: 0 } as never));
    await rejects('files.label', () => criteoNpySource({ files: { dense: ['d'], sparse: ['s'], labels: ['l'], label: ['l'] } as never, batchSize: 1 }));
    await rejects('depht', () => prefetch(syntheticSource({ batchSize: 4 }), { depht: 2 } as never));
    await rejects('depht', () => workerSource({ kind: 'synthetic', options: { batchSize: 4 } }, { depht: 2 } as never));
    await rejects('spec.option', () => openSource({ kind: 'synthetic', options: { batchSize: 4 }, option: 1 } as never));
    await rejects('maxBatch', () => arrowSource(tableFromArrays({ label: new Float32Array([1]), c: new Int32Array([1]) }), { maxBatch: 1 } as never));
  });
});

describe('process groups and the sharded collection', () => {
  it('name the field of every group option', async () => {
    await rejects('options.ranksPernode', () => createInProcessGroups(2, { ranksPernode: 1 } as never));
    expect(createInProcessGroups(2, { ranksPerNode: 1 }).map((g) => g.rank)).toEqual([0, 1]);
    await rejects('options.timeout', () => createMpiGroup({ timeout: 1 } as never));
    await rejects('options.rank', () => createNcclGroup({ bootstrap: undefined, rank: 0 } as never));
    await rejects('DeviceArray options.devcie', () => DeviceArray.alloc('f32', 1, { devcie: 'cuda:0' } as never));
  });

  it('names an unknown sharded-collection field', async () => {
    const plan = planShards([{ name: 't', rows: 10, dim: 4 }], smallTopology(2, 2), { batchSize: 2 });
    const groups = createInProcessGroups(2);
    await rejects('comm.fwd', () => new ShardedEmbeddingCollection(plan, groups[0]!, { comm: { fwd: 'fp16' } } as never));
    await rejects('optimiser', () => new ShardedEmbeddingCollection(plan, groups[0]!, { optimiser: { type: 'sgd', lr: 1 } } as never));
    expect(groups.map((g) => new ShardedEmbeddingCollection(plan, g, { optimizer: { type: 'sgd', lr: 1 } }).pooledDim)).toEqual([4, 4]);
    const [one] = createInProcessGroups(1);
    const sc = new ShardedEmbeddingCollection(planShards([{ name: 't', rows: 10, dim: 4 }], smallTopology(1, 1), { batchSize: 2 }), one!);
    const b = JaggedBatch.fromLengths({ features: ['t'], batchSize: 1, lengths: Int32Array.from([1]), ids: Int32Array.from([1]) });
    await rejects('forward options.admitt', () => sc.forward(b, { admitt: false } as never), 'INVALID_ARGUMENT');
    expect((await sc.forward(b, { admit: false })).pooled.length).toBe(4);
    sc.dispose();
  });

  it('names an unknown Herald option', async () => {
    const [g] = createInProcessGroups(1);
    await rejects('options.cacheRow', () => new HeraldEmbeddingCollection({ tables }, g!, { cacheRows: 4, batchSize: 2, cacheRow: 4 } as never));
    expect(new HeraldEmbeddingCollection({ tables }, g!, { cacheRows: 4, batchSize: 2 }).pooledDim).toBe(4);
  });
});

describe('planner inputs', () => {
  const topo = smallTopology(2, 2);

  it('name the field of every planner option', async () => {
    await rejects('batchsize', () => planShards(tables, topo, { batchSize: 2, batchsize: 2 } as never));
    await rejects('wire.fwd', () => planShards(tables, topo, { batchSize: 2, wire: { fwd: 'fp16' } as never }));
    await rejects('table.poolng', () => normalizeTable({ name: 't', rows: 1, dim: 1, poolng: 'sum' }));
    await rejects('table.admission.mincount', () => normalizeTable({ name: 't', rows: 'dynamic', capacity: 4, dim: 1, admission: { minCount: 1, mincount: 2 } }));
    expect(normalizeTable({ name: 't', rows: 'dynamic', capacity: 4, dim: 1, admission: { minCount: 2 } }).dynamic?.minCount).toBe(2);
    await rejects('topology.nodes', () => normalizeTopology({ ...topo, nodes: 1 }));
    await rejects('memoryFrac', () => topologyPreset('dgx-h100', { worldSize: 8, memoryFrac: 0.5 } as never));
    const plan = planShards(tables, topo, { batchSize: 2 });
    await rejects('maxRank', () => explainPlan(plan, { maxRank: 1 } as never));
    await rejects('$.extra', () => ShardPlan.fromJSON({ ...plan.toJSON(), extra: 1 }), 'INVALID_PLAN');
    const w = workload('criteo-kaggle');
    await rejects('seeds', () => generateBatch(w, 0, { batchSize: 2, seeds: 1 } as never));
    const b = JaggedBatch.fromLengths({ features: ['t'], batchSize: 1, lengths: Int32Array.from([1]), ids: Int32Array.from([1]) });
    await rejects('topk', () => profileAccess([b], tables, { topk: 4 } as never));
    expect(await profileAccess([b], tables, { topK: 4 })).toHaveLength(1);
  });
});

describe('arguments of the wrong kind altogether', () => {
  // a config or argument that is not what the call takes at all (null, a number, an array) is a typed error
  // naming it, never a TypeError from deep inside
  const typed = async (code: string, f: () => unknown, message?: RegExp) => {
    const e = await raised(f);
    expect(e.code).toBe(code);
    if (message) expect(e.message).toMatch(message);
  };

  it('null, numbers and arrays where an options object belongs', async () => {
    const t = new Trainer({ model: { denseIn: 1, bottom: [4], top: [4, 1], numSparse: 1, embDim: 4, interaction: 'dot' }, embeddings: new EmbeddingCollection({ tables }) });
    await typed('INVALID_CONFIG', () => t.fit([], null as never), /options must be an object \(got null\)/);
    await typed('INVALID_CONFIG', () => t.evaluate([], 3 as never), /options must be an object \(got number\)/);
    await typed('INVALID_CONFIG', () => topologyPreset('dgx-h100', [] as never), /must be an object \(got an array\)/);
    await typed('INVALID_CONFIG', () => new EmbeddingCollection(null as never), /must be an object/);
  });

  it('batches, sources, plans and groups that are not one', async () => {
    const t = new Trainer({ model: { denseIn: 1, bottom: [4], top: [4, 1], numSparse: 1, embDim: 4, interaction: 'dot' }, embeddings: new EmbeddingCollection({ tables }) });
    await typed('INVALID_ARGUMENT', () => t.fit(undefined as never), /fit: batches must be an iterable/);
    await typed('INVALID_ARGUMENT', () => t.evaluate(0 as never), /evaluate: batches must be an iterable/);
    await typed('INVALID_ARGUMENT', () => JaggedBatch.fromLengths(undefined as never), /takes an object/);
    await typed('INVALID_ARGUMENT', () => JaggedBatch.fromBags(undefined as never, []), /features must be an array/);
    await typed('INVALID_ARGUMENT', () => JaggedBatch.fromBags(['t'], null as never), /bags must be an array/);
    await typed('INVALID_ARGUMENT', () => arrowSource(undefined as never), /an Arrow Table or an array of RecordBatches/);
    await typed('INVALID_ARGUMENT', () => arrowSource([1] as never), /an Arrow Table or an array of RecordBatches/);
    await typed('INVALID_ARGUMENT', () => embeddingsFor(null as never, [], { dim: 4 }), /features must be an array/);
    const [g] = createInProcessGroups(1);
    await typed('INVALID_ARGUMENT', () => new ShardedEmbeddingCollection(undefined as never, g!), /plan must be a ShardPlan/);
    const plan = planShards(tables, smallTopology(1, 1), { batchSize: 2 });
    await typed('INVALID_ARGUMENT', () => new ShardedEmbeddingCollection(plan, {} as never), /group must be a ProcessGroup/);
    await typed('INVALID_ARGUMENT', () => g!.allToAllV(Float32Array.of(1), undefined as never), /sendCounts must be an array/);
    const h = new HeraldEmbeddingCollection({ tables }, g!, { cacheRows: 4, batchSize: 2 });
    await typed('INVALID_ARGUMENT', () => h.localize(undefined as never), /localize\(batch\) needs a batch/);
    await typed('INVALID_ARGUMENT', () => h.backward(null as never, {}), /needs the output of this collection's forward\(\)/);
    await typed('INVALID_ARGUMENT', () => countSamples(0 as never), /countSamples: source must be a BatchSource/);
    g!.close();
  });
});

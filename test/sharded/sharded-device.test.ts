// The sharded runtime's device path (lib/sharded/device-exchange.ts). Where several ranks can each have a
// CUDA device (one GPU per rank, or the CUDA emulation under `npm run test:cuda-emu`, whose one device every
// rank shares), ranks with CUDA engines over an NCCL group keep their engine outputs, output and gradient
// messages and engine gradients in device memory, and (1) equal one CPU collection over the global batch
// (outputs, tables, optimizer state within 1e-5; bytes = measureTraffic) and (2) equal bitwise the same
// ranks run through host memory (in-process groups), for: a dp table, rb and ub tables split by rows and
// columns, replicated and node hot-row tiers, sum and mean pooling, sequence outputs, weighted bags, fp32
// and 16-bit wire values, one node and two under the hierarchical protocol (its relays in device memory),
// disk-backed shards; and (3) ranks whose outputs stay in device memory (forwardOnDevice, device
// gradients: the handoff to a dense model on the same GPU) equal bitwise those read back to the host.
// Plans it does not move (dynamic tables) run through host memory over NCCL exactly as over the
// in-process group. Everywhere: each collection says where its exchanges run and why not on the device.
import { mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it, expect } from 'vitest';
import { cudaBackend } from '../../lib/backends.js';
import { DeviceArray } from '../../lib/device-array.js';
import type { DeviceForwardOutput } from '../../lib/collection.js';
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { measureTraffic } from '../../lib/plan/traffic.js';
import { createInProcessGroups, createNcclGroup, type ProcessGroup } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection, collectionConfigOf, type ShardedConfig } from '../../lib/sharded/sharded.js';
import { gatherTable } from '../../lib/sharded/reshard.js';
import type { StorageBudget } from '../../lib/storage/budget.js';
import { tempDir } from '../temp-dir.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';
import * as D from './dynamic-scenario.js';

const lib = { JaggedBatch, ShardPlan };
const dir = tempDir('sharded-device');
const cuda = cudaBackend();
const emulated = process.env.EMBSHARD_CUDA_EMU === '1';
const W = 3;
const multi = cuda.available && (emulated || (cuda.devices?.length ?? 0) >= W);

async function ncclGroups(w = W, rpn = w): Promise<{ boot: ProcessGroup[]; g: ProcessGroup[] }> {
  const boot = createInProcessGroups(w, { ranksPerNode: rpn, timeoutMs: 60_000 });
  const g = await Promise.all(boot.map((b) => createNcclGroup({ bootstrap: b, device: emulated ? 0 : b.rank, timeoutMs: 60_000 })));
  return { boot, g };
}

interface Run {
  outs: Float32Array[][];
  tables: Map<string, { weights: Float32Array; state: Float32Array }>;
}

// A device output read back: pooled, and each sequence feature's values (with the batch's lengths).
async function hostView(sc: ShardedEmbeddingCollection, o: DeviceForwardOutput) {
  const B = o.batch.batchSize;
  const pooled = (await o.pooled.read(0, B * sc.pooledDim)) as Float32Array;
  const all = (await o.sequences.read()) as Float32Array;
  const sequences: Record<string, { values: Float32Array; lengths: Int32Array }> = {};
  let at = 0;
  for (const f of sc.sequenceFeatures) {
    const n = o.batch.feature(f).ids.length * sc.featureInfo.find((x) => x.name === f)!.dim;
    sequences[f] = { values: all.slice(at, at + n), lengths: o.batch.feature(f).lengths };
    at += n;
  }
  return { pooled, sequences };
}

// Host gradients as device arrays laid out as a device output (the sequences back to back, in order).
async function onDevice(sc: ShardedEmbeddingCollection, g: { pooled: Float32Array; sequences: Record<string, Float32Array> }) {
  const seq = sc.sequenceFeatures.map((f) => g.sequences[f]!);
  const n = seq.reduce((a, x) => a + x.length, 0), all = new Float32Array(Math.max(1, n));
  let at = 0;
  for (const x of seq) all.set(x, at), (at += x.length);
  return { pooled: await DeviceArray.from(g.pooled.length > 0 ? g.pooled : new Float32Array(1)), sequences: await DeviceArray.from(all) };
}

// `steps` training steps of the ranks on the scenario's batches; the oracle (a CPU collection over the global
// batch) steps alongside when given; returns every rank's pooled outputs per step and the gathered tables.
// With `handoff` the ranks keep their outputs and gradients in device memory (forwardOnDevice).
async function train(ranks: ShardedEmbeddingCollection[], plan: ShardPlan, steps: number, oracle?: EmbeddingCollection, handoff = false): Promise<Run & { outErr: number; trafficOk: boolean }> {
  const outs: Float32Array[][] = [];
  let outErr = 0, trafficOk = true;
  for (let step = 0; step < steps; step++) {
    const batches = ranks.map((_, r) => S.localBatch(lib, plan, r, step, { B: 5 + r, weighted: true }));
    if (oracle) {
      // the oracle's step also checks the outputs; the ranks' outputs are read before backward consumes them
      const o = await Promise.all(ranks.map((sc, r) => sc.forward(batches[r])));
      outs.push(o.map((x) => Float32Array.from(x.pooled)));
      const gout = await oracle.forward(S.globalBatch(lib, batches));
      outErr = Math.max(outErr, S.outputErr(o, gout, oracle, batches));
      const grads = o.map((x, r) => S.gradsFor(x, r, step));
      await Promise.all(ranks.map((sc, r) => sc.backward(o[r]!, grads[r])));
      await oracle.backward(gout, S.concatGrads(grads, oracle.sequenceFeatures));
    } else if (handoff) {
      const o = await Promise.all(ranks.map((sc, r) => sc.forwardOnDevice(batches[r])));
      const views = await Promise.all(o.map((x, r) => hostView(ranks[r]!, x)));
      outs.push(views.map((x) => x.pooled));
      const grads = await Promise.all(ranks.map((sc, r) => onDevice(sc, S.gradsFor(views[r], r, step))));
      await Promise.all(ranks.map((sc, r) => sc.backward(o[r]!, grads[r]!)));
      for (const x of grads) x.pooled.free(), x.sequences.free();
    } else {
      const o = await Promise.all(ranks.map((sc, r) => sc.forward(batches[r])));
      outs.push(o.map((x) => Float32Array.from(x.pooled)));
      await Promise.all(ranks.map((sc, r) => sc.backward(o[r]!, S.gradsFor(o[r], r, step))));
    }
    const predicted = measureTraffic(plan, batches).perRank;
    ranks.forEach((sc, r) => {
      if (JSON.stringify(sc.traffic) !== JSON.stringify(predicted[r])) trafficOk = false;
    });
  }
  const tables = new Map<string, { weights: Float32Array; state: Float32Array }>();
  // gatherTable is a collective: every rank takes part, and every rank gathers the same table
  for (const t of plan.tables) {
    const all = await Promise.all(ranks.map((sc) => gatherTable(sc, t.name)));
    for (const x of all) expect(x).toEqual(all[0]);
    tables.set(t.name, all[0]!);
  }
  return { outs, tables, outErr, trafficOk };
}

describe('the sharded runtime in device memory', () => {
  it('a collection says where its exchanges run, and why not on the device', () => {
    const plan: ShardPlan = S.makePlan(lib, 2, 2, { variant: 'A,Bt' });
    const groups = createInProcessGroups(2);
    const sc = groups.map((g) => new ShardedEmbeddingCollection(plan, g, { seed: 1 }));
    expect(sc[0]!.exchangeMemory).toBe('host');
    expect(sc[0]!.exchangeMemoryReason).toBe('the engine is on cpu');
    sc.forEach((x) => x.dispose());
    groups.forEach((g) => g.close());
  });

  describe.runIf(multi)(`${W} ranks with CUDA engines over NCCL${emulated ? ' (the emulator: all on its one device)' : ''}`, () => {
    const cfgOf = (g: ProcessGroup): ShardedConfig => ({ optimizer: { type: 'adagrad', lr: 0.1 }, seed: 11, device: `cuda:${g.cudaDevice ?? 0}` });

    // dp, rb and ub tables split by rows and columns, with and without replicated hot rows, sum and mean
    const mixedPlan = (w: number, rpn: number, hierarchical: boolean): ShardPlan => {
      const R = (k: number) => k % w;
      return ShardPlan.create({
        topology: S.topology(w, rpn),
        batchSize: 6,
        hierarchical,
        tables: [
          ...S.scenarioTables(w, 'A,Bt,C'),
          {
            table: { name: 'H', rows: 36, dim: 6, pooling: 'sum', features: ['h1'] },
            cluster: 'rb',
            tiers: { replicated: 5, node: 0 },
            shards: [{ rows: [5, 20], cols: [0, 6], rank: R(2) }, { rows: [20, 36], cols: [0, 3], rank: R(0) }, { rows: [20, 36], cols: [3, 6], rank: R(1) }],
          },
          {
            table: { name: 'I', rows: 44, dim: 4, pooling: 'mean', features: ['i1', 'i2'] },
            cluster: 'ub',
            tiers: { replicated: 3, node: 0 },
            shards: [{ rows: [3, 44], cols: [0, 2], rank: R(1) }, { rows: [3, 44], cols: [2, 4], rank: R(2) }],
          },
        ],
      });
    };

    // disk-backed shards under a budget that puts some on disk, each run its own table files (a file serves
    // one collection at a time); their caches live in the CUDA engine's device memory
    const onDisk = (run: string): StorageBudget => {
      const path = join(dir.dir, run);
      mkdirSync(path, { recursive: true });
      return { path, cacheBytes: 4096 };
    };
    const cases: { w: number; rpn: number; what: string; plan: () => ShardPlan; tol?: number; disk?: boolean }[] = [
      { w: W, rpn: W, what: 'dp, rb and ub tables split by rows and columns, replicated hot rows', plan: () => mixedPlan(W, W, false) },
      { w: 4, rpn: 2, what: 'the same, hierarchical protocol (relays in device memory)', plan: () => mixedPlan(4, 2, true) },
      { w: 4, rpn: 2, what: 'node tiers of rb and ub tables, hierarchical protocol', plan: (): ShardPlan => S.makePlan(lib, 4, 2, { variant: 'A,C,D,E', hierarchical: true }) },
      // 16-bit wire values round as on the host: bitwise the host path, and within bf16's bound of the oracle
      // (8 significant bits: relative rounding ≤ 2^-8 per value)
      {
        w: 4, rpn: 2, tol: 1.6e-2, what: 'fp16 outputs and bf16 gradients on the wire, hierarchical protocol, node tiers',
        plan: (): ShardPlan => S.makePlan(lib, 4, 2, { variant: 'A,Bt,C,D,E', hierarchical: true, wire: { forward: 'fp16', backward: 'bf16' } }),
      },
      { w: W, rpn: W, what: 'sequence outputs of rb and ub tables (pooling none) beside pooled ones', plan: (): ShardPlan => S.makePlan(lib, W, W, { variant: 'A,Bt,C,F,G' }) },
      // one node: the dp table's and the replicated tiers' rows are synced in device memory, on a 16-bit wire
      {
        w: W, rpn: W, tol: 1.6e-2, what: 'bf16 outputs and fp16 gradients on the wire, a dp table and replicated tiers synced in device memory',
        plan: (): ShardPlan => S.makePlan(lib, W, W, { variant: 'A,Bt,C,D,E', wire: { forward: 'bf16', backward: 'fp16' } }),
      },
      { w: 4, rpn: 2, what: 'every table of the scenario (sequences, node tiers), hierarchical protocol', plan: (): ShardPlan => S.makePlan(lib, 4, 2, { hierarchical: true }) },
      { w: W, rpn: W, disk: true, what: 'disk-backed shards', plan: (): ShardPlan => S.makePlan(lib, W, W, { variant: 'A,Bt,C' }) },
    ];
    for (const c of cases)
      it(`${c.w} ranks on ${c.w / c.rpn} node(s), ${c.what}, sum and mean, weighted bags: equal to one CPU collection, bytes = measureTraffic, and bitwise the host path`, async () => {
        const plan = c.plan();
        const { boot, g } = await ncclGroups(c.w, c.rpn);
        const ranks = g.map((x) => new ShardedEmbeddingCollection(plan, x, { ...cfgOf(x), ...(c.disk ? { storage: onDisk('nccl') } : {}) }));
        const oracle = new EmbeddingCollection(collectionConfigOf(plan, { optimizer: { type: 'adagrad', lr: 0.1 }, seed: 11 }));
        // the same ranks through host memory: CUDA engines over in-process groups
        const hostGroups = createInProcessGroups(c.w, { ranksPerNode: c.rpn, timeoutMs: 60_000 });
        const hostRanks = hostGroups.map((x) => new ShardedEmbeddingCollection(plan, x, { ...cfgOf(g[0]!), ...(c.disk ? { storage: onDisk('inprocess') } : {}) }));
        const handoffRanks: ShardedEmbeddingCollection[] = [];
        try {
          expect(ranks.map((x) => x.exchangeMemory)).toEqual(new Array(c.w).fill('device'));
          // the budget put some shards on disk: their table files exist
          if (c.disk) expect(readdirSync(join(dir.dir, 'nccl')).filter((f) => f.endsWith('.embtable')).length).toBeGreaterThan(0);
          expect(hostRanks[0]!.exchangeMemory).toBe('host');
          expect(hostRanks[0]!.exchangeMemoryReason).toContain('in-process');
          const before = g.map((x) => x.stats().allToAllV.calls);
          const dev = await train(ranks, plan, 3, oracle);
          const tol = c.tol ?? 1e-5;
          expect(dev.outErr).toBeLessThanOrEqual(tol);
          expect(dev.trafficOk).toBe(true);
          for (const t of plan.tables) {
            const ids = Array.from({ length: t.rows }, (_, i) => i);
            expect(S.relErr(dev.tables.get(t.name)!.weights, oracle.readRows(t.name, ids))).toBeLessThanOrEqual(tol);
            expect(S.relErr(dev.tables.get(t.name)!.state, oracle.readState(t.name, ids))).toBeLessThanOrEqual(tol);
          }
          // every step's output and gradient messages went through the group (the all-to-alls it counted)
          g.forEach((x, r) => expect(x.stats().allToAllV.calls - before[r]!).toBeGreaterThanOrEqual(3 * 3));
          // two nodes: the counters really see inter-node traffic
          if (c.w > c.rpn) expect(ranks.reduce((n, x) => n + x.traffic.forward.sentInter + x.traffic.backward.sentInter, 0)).toBeGreaterThan(0);
          const host = await train(hostRanks, plan, 3);
          expect(dev.outs).toEqual(host.outs);
          for (const t of plan.tables) expect(dev.tables.get(t.name)).toEqual(host.tables.get(t.name));
          // outputs and gradients left in device memory: bitwise the same steps
          handoffRanks.push(...g.map((x) => new ShardedEmbeddingCollection(plan, x, { ...cfgOf(x), ...(c.disk ? { storage: onDisk('handoff') } : {}) })));
          expect(handoffRanks.map((x) => x.outputsOnDevice)).toEqual(new Array(c.w).fill(true));
          const kept = await train(handoffRanks, plan, 3, undefined, true);
          expect(kept.outs).toEqual(dev.outs);
          for (const t of plan.tables) expect(kept.tables.get(t.name)).toEqual(dev.tables.get(t.name));
        } finally {
          [...ranks, ...hostRanks, ...handoffRanks].forEach((x) => x.dispose());
          oracle.dispose();
          [...g, ...boot, ...hostGroups].forEach((x) => x.close());
        }
      });

    it('a NaN in one rank\'s gradients, host or device arrays: every rank rejects the step, no table changes, the next step trains', async () => {
      const plan = mixedPlan(W, W, false);
      const { boot, g } = await ncclGroups();
      const ranks = g.map((x) => new ShardedEmbeddingCollection(plan, x, cfgOf(x)));
      try {
        expect(ranks.map((x) => x.exchangeMemory)).toEqual(new Array(W).fill('device'));
        const tables = async () => {
          const m = new Map<string, Float32Array>();
          for (const t of plan.tables) m.set(t.name, (await Promise.all(ranks.map((sc) => gatherTable(sc, t.name))))[0]!.weights);
          return m;
        };
        const before = await tables();
        for (const handoff of [false, true]) {
          const batches = ranks.map((_, r) => S.localBatch(lib, plan, r, 0, { B: 5 + r, weighted: true }));
          const o = handoff ? await Promise.all(ranks.map((sc, r) => sc.forwardOnDevice(batches[r]))) : await Promise.all(ranks.map((sc, r) => sc.forward(batches[r])));
          const views = handoff ? await Promise.all(o.map((x, r) => hostView(ranks[r]!, x as DeviceForwardOutput))) : o;
          const host = views.map((x, r) => S.gradsFor(x, r, 0));
          // Inf in column 0 of a bag of rank 1's feature h1 whose ids all lie in rows [20, 36): only the
          // shard of those rows' columns [0, 3) (rank 0) receives it, not ranks 1 and 2
          const h = batches[1].feature('h1');
          let bag = -1;
          for (let i = 0, at = 0; i < h.lengths.length && bag < 0; at += h.lengths[i]!, i++)
            if (h.lengths[i]! > 0 && Array.from(h.ids.subarray(at, at + h.lengths[i]!), Number).every((x) => x >= 20)) bag = i;
          expect(bag).toBeGreaterThanOrEqual(0);
          host[1].pooled[bag * ranks[1]!.pooledDim + ranks[1]!.featureInfo.find((f) => f.name === 'h1')!.offset] = Number.POSITIVE_INFINITY;
          const grads = handoff ? await Promise.all(ranks.map((sc, r) => onDevice(sc, host[r]))) : host;
          const res = await Promise.allSettled(ranks.map((sc, r) => sc.backward(o[r]!, grads[r]!)));
          expect(res.map((x) => x.status === 'rejected' && (x.reason as { code?: string }).code)).toEqual(new Array(W).fill('NON_FINITE_GRADIENT'));
          if (handoff) for (const x of grads as { pooled: DeviceArray; sequences: DeviceArray }[]) x.pooled.free(), x.sequences.free();
          expect(await tables()).toEqual(before);
        }
        const after = await train(ranks, plan, 1);
        expect([...after.tables.values()].some((t, i) => !t.weights.every((v, k) => v === [...before.values()][i]![k]))).toBe(true);
      } finally {
        ranks.forEach((x) => x.dispose());
        [...g, ...boot].forEach((x) => x.close());
      }
    });

    it('plans with dynamic tables run through host memory over NCCL, saying why, bitwise as over the in-process group', async () => {
      const spec = { dyn: 'rb' as const, pooling: 'sum' as const, capacity: 64, seqCapacity: 32 };
      const plan = D.makePlan(W, spec);
      const pool = D.idPool(200, 5);
      const { boot, g } = await ncclGroups();
      const hostGroups = createInProcessGroups(W, { timeoutMs: 60_000 });
      const run = async (groups: ProcessGroup[]) => {
        const ranks = groups.map((x) => new ShardedEmbeddingCollection(plan, x, cfgOf(g[0]!)));
        const outs: Float32Array[][] = [];
        try {
          for (let step = 0; step < 2; step++) {
            const o = await Promise.all(ranks.map((sc, r) => sc.forward(D.localBatch(pool, r, step))));
            outs.push(o.map((x) => Float32Array.from(x.pooled)));
            await Promise.all(ranks.map((sc, r) => sc.backward(o[r]!, S.gradsFor(o[r], r, step))));
          }
          return { outs, memory: ranks.map((x) => [x.exchangeMemory, x.exchangeMemoryReason]) };
        } finally {
          ranks.forEach((x) => x.dispose());
        }
      };
      try {
        const nccl = await run(g), local = await run(hostGroups);
        expect(nccl.memory).toEqual(new Array(W).fill(['host', "table 'dyn' is dynamic"]));
        expect(nccl.outs).toEqual(local.outs);
      } finally {
        [...g, ...boot, ...hostGroups].forEach((x) => x.close());
      }
    });
  });
});

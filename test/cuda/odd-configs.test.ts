// odd-configs.test.ts — the CUDA engine (a GPU, or the CUDA emulation under `npm run test:cuda-emu`) on the
// configurations at the edges, bitwise against the CPU engine where native/cuda/README.md promises it
// (initial tables, forward outputs, tables and optimizer state after every step while no row takes more
// than 1024 contributions, or when the partial sums of a hotter row are exact) and against the naive
// oracle: widths 1, 3, 7, 17, 130 and 1000 (not multiples of the 16-byte vectors, wider than one warp's
// 128 columns), a one-row table, a table shared by features of different bag lengths, sequence features,
// batch size 1, weighted bags with negative and zero weights, every optimizer with hyperparameters at their
// edges, fp16 / bf16 with and without stochastic rounding, learning-rate changes, empty batches, modulo ids,
// huge bags on one row (hot rows of every width); optimizer state written with writeState, then trained on.
// Then misuse: every refused call (host and device gradients, a backward past device memory) leaves the
// device tables exactly as they were, and the rows of a table that fills the device can still be read and
// written in full; DeviceArray's refusals (lengths, types, ranges, freed arrays) and copies (shared memory,
// concurrent calls); the device exchange ops' range checks where the products of large offsets and strides
// do not fit 64 bits.
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError, JaggedBatch } from '../../lib/index.js';
import type { OptimizerConfig, TableConfig } from '../../lib/index.js';
import { cudaBackend, resolveBackend } from '../../lib/backends.js';
import { DeviceArray } from '../../lib/device-array.js';
import { rng, worst } from '../embedding/oracle.js';
import { allRows, bitDiff, codeOf, expectSameBits, ids, oddTables, pair, randomBatch, randomGrads, snapshot } from '../embedding/helpers.js';

const cuda = cudaBackend();
if (!cuda.available) console.log(`test/cuda/odd-configs: skipped — the CUDA backend is unavailable here: ${cuda.reason}`);

const OPTIMIZERS: OptimizerConfig[] = [
  { type: 'sgd', lr: 0.05 },
  { type: 'sgd', lr: 0, weightDecay: 0.5 },
  { type: 'adagrad', lr: 0.05, eps: 1e-30, weightDecay: 0.1 },
  { type: 'rowwise_adagrad', lr: 0.05 },
  { type: 'rowwise_adagrad', lr: 0.05, eps: 1e-40, weightDecay: -0.05 },
  { type: 'adam', lr: 0.01, beta1: 0, beta2: 0 },
  { type: 'adam', lr: 0.01, beta1: 0.99, beta2: 0.9999, weightDecay: 0.3 },
  { type: 'adam', lr: 0, eps: 1e-12 },
];

describe.runIf(cuda.available)('CUDA engine on odd configurations', () => {
  for (const dtype of ['fp32', 'fp16', 'bf16'] as const)
    for (const opt of OPTIMIZERS)
      for (const sr of dtype === 'fp32' ? [false] : [false, true]) {
        it(`bitwise the CPU engine, and the oracle: ${dtype}${sr ? ' stochastic rounding' : ''} ${JSON.stringify(opt)}`, async () => {
          const optimizer = { ...opt, stochasticRounding: sr };
          const tables = oddTables(dtype);
          const { ec: gpu, oracle } = pair(tables, optimizer, 3, 'cuda:0');
          const cpu = new EmbeddingCollection({ tables, optimizer, seed: 3, device: 'cpu' });
          expectSameBits(snapshot(gpu), snapshot(cpu), 'initial tables');
          const r = rng(5 + opt.type.length);
          for (let step = 0; step < 4; step++) {
            if (step === 2) {
              for (const ec of [cpu, gpu]) ec.setLearningRate(0.02);
              oracle.opt.lr = Math.fround(0.02);
            }
            const { batch, ob } = randomBatch(gpu, r, { B: step === 1 ? 1 : 5, maxLen: 5, weights: step % 2 === 0, shuffle: true });
            if (ob.weights) for (let i = 0; i < ob.weights.length; i += 3) ob.weights[i] = i % 2 ? 0 : -1.5; // the batch holds the same array
            const [a, b] = [await cpu.forward(batch), await gpu.forward(batch)];
            expect(bitDiff(b.pooled, a.pooled), `pooled, step ${step}`).toBeNull();
            for (const f of ['s3a', 's3b']) expect(bitDiff(b.sequences[f]!.values, a.sequences[f]!.values), `${f}, step ${step}`).toBeNull();
            if (dtype === 'fp32') expect(worst(b.pooled, oracle.forward(ob).pooled, 2e-5, 1e-6), `oracle forward, step ${step}`).toBeLessThanOrEqual(1);
            const g = randomGrads(gpu, ob, r);
            const ra = await cpu.backward(a, { pooled: g.pooled, sequences: g.sequences });
            const rb = await gpu.backward(b, { pooled: g.pooled, sequences: g.sequences });
            expect(rb).toEqual(ra);
            oracle.backward(ob, g.pooled, g.seqMap);
            expectSameBits(snapshot(gpu), snapshot(cpu), `after step ${step + 1}`);
          }
          expect(gpu.step).toBe(4);
          if (!sr)
            gpu.tables.forEach((t, i) => {
              const [rt, at] = dtype === 'fp32' ? [2e-5, 1e-6] : dtype === 'fp16' ? [2 ** -10, 2 ** -24] : [2 ** -7, 1e-30];
              expect(worst(allRows(gpu, t.name), oracle.tables[i]!.w, rt, at), `oracle, table ${t.name}`).toBeLessThanOrEqual(1);
            });
          cpu.dispose();
          gpu.dispose();
        });
      }

  // One bag of n ids on the last row of a table (with the same row twice in another feature of the table):
  // weights −1, 0, 1 and integer gradients make every partial sum exact, so the hot-row path is bitwise the
  // CPU's sequential sum, for every width (more than one warp's 128 columns included) and dtype.
  for (const dim of [1, 7, 130, 1000])
    it(`a hot row of width ${dim}: 4096 + 2 contributions in one batch, bitwise the CPU engine`, async () => {
      for (const opt of [{ type: 'sgd', lr: 0.01 }, { type: 'adagrad', lr: 0.01 }, { type: 'rowwise_adagrad', lr: 0.01 }, { type: 'adam', lr: 0.01 }] as OptimizerConfig[])
        for (const [pooling, dtype, sr] of [['sum', 'fp32', false], ['mean', 'bf16', true]] as const) {
          const rows = 3, n = 4096;
          const tables: TableConfig[] = [{ name: 't', rows, dim, pooling, features: ['ta', 'tb'], dtype }, { name: 'u', rows: 3, dim: 5, pooling: 'none' }];
          const optimizer = { ...opt, stochasticRounding: sr };
          const cpu = new EmbeddingCollection({ tables, optimizer, seed: 4, device: 'cpu' });
          const gpu = new EmbeddingCollection({ tables, optimizer, seed: 4, device: 'cuda:0' });
          const idList = [...new Array<number>(n).fill(rows - 1), rows - 1, 0, rows - 1, 2, 2];
          const lengths = Int32Array.from([n, 3, 2]);
          const weights = Float32Array.from({ length: idList.length }, (_, i) => (i % 3) - 1);
          const batch = JaggedBatch.fromLengths({ features: ['ta', 'tb', 'u'], batchSize: 1, lengths, ids: BigInt64Array.from(idList, BigInt), weights });
          for (let step = 0; step < 2; step++) {
            const [a, b] = [await cpu.forward(batch), await gpu.forward(batch)];
            expect(bitDiff(b.pooled, a.pooled)).toBeNull();
            const pooled = Float32Array.from({ length: 2 * dim }, (_, i) => (i % 17) - 8);
            const sequences = { u: Float32Array.from({ length: 10 }, (_, i) => i - 4) };
            const ra = await cpu.backward(a, { pooled, sequences });
            expect(await gpu.backward(b, { pooled, sequences })).toEqual(ra);
            expect(ra.uniqueRows).toBe(3);
            expectSameBits(snapshot(gpu), snapshot(cpu), `${opt.type} ${pooling} ${dtype} step ${step + 1}`);
          }
          cpu.dispose();
          gpu.dispose();
        }
    });

  it('state written with writeState (duplicates: last wins) reads back exactly and trains on bitwise as on the CPU', async () => {
    for (const type of ['adagrad', 'rowwise_adagrad', 'adam'] as const)
      for (const dtype of ['fp32', 'fp16'] as const) {
        const tables: TableConfig[] = [{ name: 't', rows: 6, dim: 130, dtype }, { name: 'u', rows: 4, dim: 1, pooling: 'mean', dtype }];
        const cpu = new EmbeddingCollection({ tables, optimizer: { type, lr: 0.05 }, seed: 4, device: 'cpu' });
        const gpu = new EmbeddingCollection({ tables, optimizer: { type, lr: 0.05 }, seed: 4, device: 'cuda:0' });
        const r = rng(8);
        for (const t of tables) {
          const w = gpu.stateWidth(t.name);
          const rowIds = [...ids(t.rows as number), 0n, 2n];
          const vals = Float32Array.from({ length: rowIds.length * w }, () => Math.fround(r() * 0.5));
          for (const ec of [cpu, gpu]) ec.writeState(t.name, rowIds, vals);
          const want = vals.slice(0, (t.rows as number) * w);
          want.set(vals.subarray(((t.rows as number) + 0) * w, ((t.rows as number) + 1) * w), 0);
          want.set(vals.subarray(((t.rows as number) + 1) * w, ((t.rows as number) + 2) * w), 2 * w);
          expect(bitDiff(gpu.readState(t.name, ids(t.rows as number)), want), `${type} ${t.name}`).toBeNull();
        }
        for (let s = 0; s < 3; s++) {
          const { batch, ob } = randomBatch(gpu, r, { B: 3, maxLen: 4, weights: s === 1 });
          const g = randomGrads(gpu, ob, r);
          await cpu.backward(await cpu.forward(batch), g);
          await gpu.backward(await gpu.forward(batch), g);
          expectSameBits(snapshot(gpu), snapshot(cpu), `${type} ${dtype} step ${s + 1}`);
        }
        cpu.dispose();
        gpu.dispose();
      }
  });

  it('a hot row of a sequence feature and hot rows of two widths in one batch (partials of rows narrower than the widest)', async () => {
    for (const opt of [{ type: 'rowwise_adagrad', lr: 0.01, weightDecay: 0.25 }, { type: 'adam', lr: 0.01 }] as OptimizerConfig[]) {
      const tables: TableConfig[] = [{ name: 'w', rows: 4, dim: 1000 }, { name: 'q', rows: 3, dim: 5, pooling: 'none', dtype: 'fp16' }];
      const cpu = new EmbeddingCollection({ tables, optimizer: opt, seed: 9, device: 'cpu' });
      const gpu = new EmbeddingCollection({ tables, optimizer: opt, seed: 9, device: 'cuda:0' });
      const nw = 2500, nq = 3000;
      const idList = [...new Array<number>(nw).fill(1), 3, ...new Array<number>(nq).fill(2), 0];
      const batch = JaggedBatch.fromLengths({ features: ['w', 'q'], batchSize: 1, lengths: Int32Array.of(nw + 1, nq + 1), ids: BigInt64Array.from(idList, BigInt) });
      for (let step = 0; step < 2; step++) {
        const [a, b] = [await cpu.forward(batch), await gpu.forward(batch)];
        expect(bitDiff(b.pooled, a.pooled)).toBeNull();
        expect(bitDiff(b.sequences.q!.values, a.sequences.q!.values)).toBeNull();
        const pooled = Float32Array.from({ length: 1000 }, (_, i) => (i % 9) - 4);
        const sequences = { q: Float32Array.from({ length: (nq + 1) * 5 }, (_, i) => ((i * 7) % 11) - 5) };
        const ra = await cpu.backward(a, { pooled, sequences });
        expect(await gpu.backward(b, { pooled, sequences })).toEqual(ra);
        expect(ra.uniqueRows).toBe(4);
        expectSameBits(snapshot(gpu), snapshot(cpu), `${opt.type} step ${step + 1}`);
      }
      cpu.dispose();
      gpu.dispose();
    }
  });

  it('forwardOnDevice on odd widths holds forward()\'s bits; device gradients train bitwise as host gradients', async () => {
    const tables = oddTables('bf16');
    const optimizer: OptimizerConfig = { type: 'rowwise_adagrad', lr: 0.05, stochasticRounding: true };
    const host = new EmbeddingCollection({ tables, optimizer, seed: 5, device: 'cuda:0' });
    const dev = new EmbeddingCollection({ tables, optimizer, seed: 5, device: 'cuda:0' });
    const r = rng(21);
    for (let step = 0; step < 3; step++) {
      const { batch, ob } = randomBatch(host, r, { B: step === 0 ? 1 : 4, maxLen: 4, weights: step === 2, shuffle: true });
      const h = await host.forward(batch);
      const d = await dev.forwardOnDevice(batch);
      expect(bitDiff((await d.pooled.read(0, h.pooled.length)) as Float32Array, h.pooled), 'pooled').toBeNull();
      const seqHost = new Float32Array(dev.sequenceFeatures.reduce((n, f) => n + h.sequences[f]!.values.length, 0));
      let at = 0;
      for (const f of dev.sequenceFeatures) {
        seqHost.set(h.sequences[f]!.values, at);
        at += h.sequences[f]!.values.length;
      }
      expect(bitDiff((await d.sequences.read(0, seqHost.length)) as Float32Array, seqHost), 'sequences').toBeNull();
      const g = randomGrads(host, ob, r);
      const gs = new Float32Array(Math.max(1, seqHost.length));
      at = 0;
      for (const f of dev.sequenceFeatures) {
        gs.set(g.sequences[f]!, at);
        at += g.sequences[f]!.length;
      }
      const a = await host.backward(h, { pooled: g.pooled, sequences: g.sequences });
      expect(await dev.backward(d, { pooled: await DeviceArray.from(g.pooled), sequences: await DeviceArray.from(gs) })).toEqual(a);
      expectSameBits(snapshot(dev), snapshot(host), `step ${step + 1}`);
    }
    host.dispose();
    dev.dispose();
  });

  it('forwardOnDevice of a sequence-only collection and of a batch with no ids: placeholders, the same step as the host path', async () => {
    const tables: TableConfig[] = [{ name: 's', rows: 5, dim: 3, pooling: 'none' }];
    const optimizer: OptimizerConfig = { type: 'adagrad', lr: 0.1 };
    const host = new EmbeddingCollection({ tables, optimizer, seed: 2, device: 'cuda:0' });
    const dev = new EmbeddingCollection({ tables, optimizer, seed: 2, device: 'cuda:0' });
    for (const [lengths, idList] of [[[2], [4n, 4n]], [[0], []]] as [number[], bigint[]][]) {
      const batch = JaggedBatch.fromLengths({ features: ['s'], batchSize: 1, lengths: Int32Array.from(lengths), ids: BigInt64Array.from(idList) });
      const h = await host.forward(batch);
      const d = await dev.forwardOnDevice(batch);
      expect([d.pooled.length, d.sequences.length]).toEqual([1, Math.max(1, h.sequences.s!.values.length)]);
      expect(bitDiff((await d.sequences.read(0, h.sequences.s!.values.length)) as Float32Array, h.sequences.s!.values)).toBeNull();
      const gs = Float32Array.from({ length: h.sequences.s!.values.length }, (_, i) => i - 2.5);
      const a = await host.backward(h, { sequences: { s: gs } });
      expect(await dev.backward(d, { sequences: await DeviceArray.from(gs.length ? gs : new Float32Array(1)) })).toEqual(a);
      expect(dev.step).toBe(host.step);
      expectSameBits(snapshot(dev), snapshot(host), `lengths ${lengths}`);
    }
    host.dispose();
    dev.dispose();
  });

  it('the widest rows (dim 65536, fp32 and fp16): every optimizer bitwise the CPU engine', async () => {
    for (const opt of [{ type: 'sgd', lr: 0.1 }, { type: 'adagrad', lr: 0.1 }, { type: 'rowwise_adagrad', lr: 0.1, weightDecay: 0.5 }, { type: 'adam', lr: 0.1 }] as OptimizerConfig[]) {
      const tables: TableConfig[] = [{ name: 'x', rows: 3, dim: 65536, pooling: 'mean' }, { name: 'y', rows: 2, dim: 65536, dtype: 'fp16', pooling: 'none' }];
      const cpu = new EmbeddingCollection({ tables, optimizer: opt, seed: 3, device: 'cpu' });
      const gpu = new EmbeddingCollection({ tables, optimizer: opt, seed: 3, device: 'cuda:0' });
      const batch = JaggedBatch.fromLengths({ features: ['x', 'y'], batchSize: 2, lengths: Int32Array.of(3, 1, 1, 1), ids: BigInt64Array.of(2n, 0n, 2n, 1n, 1n, 1n), weights: Float32Array.of(0.5, -1, 2, 3, 1, 1) });
      const r = rng(opt.type.length);
      const [a, b] = [await cpu.forward(batch), await gpu.forward(batch)];
      expect(bitDiff(b.pooled, a.pooled)).toBeNull();
      expect(bitDiff(b.sequences.y!.values, a.sequences.y!.values)).toBeNull();
      const pooled = Float32Array.from({ length: 2 * 65536 }, () => r() * 2 - 1);
      const sequences = { y: Float32Array.from({ length: 2 * 65536 }, () => r() * 2 - 1) };
      expect(await gpu.backward(b, { pooled, sequences })).toEqual(await cpu.backward(a, { pooled, sequences }));
      expectSameBits(snapshot(gpu), snapshot(cpu), opt.type);
      cpu.dispose();
      gpu.dispose();
    }
  });

  it('a step set by hand (0, then 2^40) drives Adam\'s bias correction and the rounding bits as on the CPU', async () => {
    const tables: TableConfig[] = [{ name: 'h', rows: 5, dim: 33, dtype: 'fp16' }, { name: 'b', rows: 3, dim: 1000, dtype: 'bf16', pooling: 'mean' }];
    const optimizer: OptimizerConfig = { type: 'adam', lr: 0.01, weightDecay: 0.01, stochasticRounding: true };
    const cpu = new EmbeddingCollection({ tables, optimizer, seed: 12, device: 'cpu' });
    const gpu = new EmbeddingCollection({ tables, optimizer, seed: 12, device: 'cuda:0' });
    const r = rng(4);
    for (const step of [0, 2 ** 40, 3]) {
      for (const ec of [cpu, gpu]) ec.step = step;
      const { batch, ob } = randomBatch(gpu, r, { B: 3, maxLen: 3 });
      const g = randomGrads(gpu, ob, r);
      await cpu.backward(await cpu.forward(batch), g);
      await gpu.backward(await gpu.forward(batch), g);
      expect(gpu.step).toBe(step + 1);
      expectSameBits(snapshot(gpu), snapshot(cpu), `from step ${step}`);
    }
    cpu.dispose();
    gpu.dispose();
  });

  it('empty batches, all-empty bags, sequence-only collections and modulo ids behave as on the CPU', async () => {
    const tables: TableConfig[] = [
      { name: 'm', rows: 7, dim: 3, idPolicy: 'modulo' },
      { name: 's', rows: 5, dim: 17, pooling: 'none', idPolicy: 'modulo' },
    ];
    const optimizer: OptimizerConfig = { type: 'adam', lr: 0.1 };
    const cpu = new EmbeddingCollection({ tables, optimizer, seed: 6, device: 'cpu' });
    const gpu = new EmbeddingCollection({ tables, optimizer, seed: 6, device: 'cuda:0' });
    const batches = [
      JaggedBatch.fromLengths({ features: ['m', 's'], batchSize: 3, lengths: new Int32Array(6), ids: new BigInt64Array(0) }),
      JaggedBatch.fromLengths({ features: ['s', 'm'], batchSize: 1, lengths: Int32Array.of(3, 2), ids: BigInt64Array.of(-1n, 12n, 2n ** 62n + 3n, -8n, 7n) }),
      JaggedBatch.fromLengths({ features: ['m', 's'], batchSize: 2, lengths: Int32Array.of(0, 2, 0, 0), ids: Int32Array.of(-(2 ** 31), 2 ** 31 - 1) }),
    ];
    for (const batch of batches) {
      const [a, b] = [await cpu.forward(batch), await gpu.forward(batch)];
      expect(bitDiff(b.pooled, a.pooled)).toBeNull();
      expect(bitDiff(b.sequences.s!.values, a.sequences.s!.values)).toBeNull();
      const pooled = Float32Array.from({ length: a.pooled.length }, (_, i) => i - 1.5);
      const sequences = { s: Float32Array.from({ length: a.sequences.s!.values.length }, (_, i) => 0.25 * i - 1) };
      const ra = await cpu.backward(a, { pooled, sequences });
      expect(await gpu.backward(b, { pooled, sequences })).toEqual(ra);
      expect(gpu.step).toBe(cpu.step);
      expectSameBits(snapshot(gpu), snapshot(cpu), 'after a step');
    }
    cpu.dispose();
    gpu.dispose();
    const seqOnly = (device: string) => new EmbeddingCollection({ tables: [{ name: 's', rows: 5, dim: 3, pooling: 'none' }], optimizer, seed: 2, device });
    const [c2, g2] = [seqOnly('cpu'), seqOnly('cuda:0')];
    const one = JaggedBatch.fromLengths({ features: ['s'], batchSize: 1, lengths: Int32Array.of(2), ids: BigInt64Array.of(4n, 4n) });
    const [a, b] = [await c2.forward(one), await g2.forward(one)];
    expect(b.pooled.length).toBe(0);
    expect(bitDiff(b.sequences.s!.values, a.sequences.s!.values)).toBeNull();
    const gs = { sequences: { s: Float32Array.of(1, 2, 3, -4, 5, 6) } };
    expect(await g2.backward(b, gs)).toEqual(await c2.backward(a, gs));
    expectSameBits(snapshot(g2), snapshot(c2), 'sequence-only');
    c2.dispose();
    g2.dispose();
  });
});

describe.runIf(cuda.available)('CUDA engine: refused calls leave the device tables exactly as they were', () => {
  const tables: TableConfig[] = [
    { name: 'u', rows: 10, dim: 130, pooling: 'sum' },
    { name: 'i', rows: 6, dim: 3, pooling: 'mean', features: ['i1', 'i2'], dtype: 'bf16' },
    { name: 'h', rows: 5, dim: 2, pooling: 'none' },
  ];
  const F = ['u', 'i1', 'i2', 'h'];
  const batch = (idList: bigint[], lengths: number[], features = F, B = 2) =>
    JaggedBatch.fromLengths({ features, batchSize: B, lengths: Int32Array.from(lengths), ids: BigInt64Array.from(idList) });
  const good = () => batch([1n, 2n, 0n, 5n, 3n, 4n, 1n], [1, 1, 1, 1, 1, 0, 1, 1]);

  async function trained(device: string): Promise<EmbeddingCollection> {
    const ec = new EmbeddingCollection({ tables, optimizer: { type: 'adam', lr: 0.1 }, seed: 3, device });
    const out = await ec.forward(good());
    await ec.backward(out, { pooled: new Float32Array(2 * ec.pooledDim).fill(0.5), sequences: { h: new Float32Array(4).fill(0.5) } });
    return ec;
  }

  it('host calls: the same codes as the CPU engine, nothing changes', async () => {
    const cpu = await trained('cpu');
    const gpu = await trained('cuda:0');
    expectSameBits(snapshot(gpu), snapshot(cpu), 'trained');
    const before = snapshot(gpu);
    const cases: [string, (ec: EmbeddingCollection, out: Awaited<ReturnType<EmbeddingCollection['forward']>>) => unknown][] = [
      ['ID_OUT_OF_RANGE', (ec) => ec.forward(batch([10n, 2n, 0n, 5n, 3n, 4n, 1n], [1, 1, 1, 1, 1, 0, 1, 1]))],
      ['ID_OUT_OF_RANGE', (ec, out) => ec.backward({ ...out, batch: batch([1n, 2n, 0n, 5n, 3n, 4n, 9n], [1, 1, 1, 1, 1, 0, 1, 1]) }, { pooled: new Float32Array(2 * ec.pooledDim), sequences: { h: new Float32Array(4) } })],
      ['GRAD_SIZE_MISMATCH', (ec, out) => ec.backward(out, { pooled: new Float32Array(2 * ec.pooledDim - 1), sequences: { h: new Float32Array(4) } })],
      ['GRAD_SIZE_MISMATCH', (ec, out) => ec.backward(out, { pooled: new Float32Array(2 * ec.pooledDim), sequences: { h: new Float32Array(5) } })],
      ['NON_FINITE_GRADIENT', (ec, out) => ec.backward(out, { pooled: new Float32Array(2 * ec.pooledDim).fill(1), sequences: { h: Float32Array.of(1, 1, Number.POSITIVE_INFINITY, 1) } })],
      ['NON_FINITE_GRADIENT', (ec, out) => ec.backward(out, { pooled: new Float32Array(2 * ec.pooledDim).fill(-0).map((x, i) => (i === 2 * ec.pooledDim - 1 ? Number.NaN : x)), sequences: { h: new Float32Array(4) } })],
      ['ID_OUT_OF_RANGE', (ec) => ec.writeRows('u', [1n, 10n], new Float32Array(260).fill(9))],
      ['ID_OUT_OF_RANGE', (ec) => ec.writeRows('u', [-1n], new Float32Array(130).fill(9))],
      ['DIM_MISMATCH', (ec) => ec.writeRows('u', [1n, 2n], new Float32Array(259).fill(9))],
      ['ID_OUT_OF_RANGE', (ec) => ec.writeState('i', [0n, 6n], new Float32Array(12).fill(9))],
      ['DIM_MISMATCH', (ec) => ec.writeState('i', [0n, 1n], new Float32Array(11).fill(9))],
      ['UNKNOWN_TABLE', (ec) => ec.writeRows('zz', [0n], new Float32Array(3))],
    ];
    for (const [want, call] of cases) {
      const [oa, ob] = [await cpu.forward(good()), await gpu.forward(good())];
      const got = await codeOf(() => call(cpu, oa));
      expect(await codeOf(() => call(gpu, ob)), `${want}: ${call.toString()}`).toBe(got);
      expect(got, call.toString()).toBe(want);
      expectSameBits(snapshot(gpu), before, `after ${call.toString()}`);
      expect(gpu.step).toBe(1);
      await cpu.release(oa);
      await gpu.release(ob);
    }
    cpu.dispose();
    gpu.dispose();
  });

  it('a backward whose scratch does not fit in device memory is ALLOC_FAILED and changes nothing; smaller batches go on', async () => {
    const total = cuda.devices![0]!.totalMemory;
    if (total > 1 << 30) return; // sized for the emulated device's memory; a real GPU's is far larger
    const big = Math.floor((total - (5 << 20)) / 4000);
    const t2: TableConfig[] = [{ name: 'big', rows: big, dim: 1000, init: { type: 'constant', value: 0.5 } }, { name: 's', rows: 10, dim: 4 }];
    const optimizer: OptimizerConfig = { type: 'sgd', lr: 0.1 };
    const gpu = new EmbeddingCollection({ tables: t2, optimizer, seed: 1, device: 'cuda:0' });
    const cpu = new EmbeddingCollection({ tables: t2, optimizer, seed: 1, device: 'cpu' });
    const sBefore = gpu.readRows('s', ids(10));
    const n = 200_000;
    const huge = JaggedBatch.fromLengths({ features: ['big', 's'], batchSize: 1, lengths: Int32Array.of(0, n), ids: BigInt64Array.from({ length: n }, (_, i) => BigInt(i % 10)) });
    const out = await gpu.forward(huge);
    expect(await codeOf(() => gpu.backward(out, { pooled: new Float32Array(1004).fill(1) }))).toBe('ALLOC_FAILED');
    expect(bitDiff(gpu.readRows('s', ids(10)), sBefore)).toBeNull();
    expect(Array.from(gpu.readRows('big', [0n, BigInt(big - 1)])).every((x) => x === 0.5)).toBe(true);
    expect(gpu.step).toBe(0);
    const small = JaggedBatch.fromLengths({ features: ['big', 's'], batchSize: 2, lengths: Int32Array.of(1, 0, 3, 1), ids: BigInt64Array.of(BigInt(big - 1), 1n, 1n, 9n, 0n) });
    const pooled = Float32Array.from({ length: 2 * 1004 }, (_, i) => (i % 5) - 2);
    const [a, b] = [await cpu.forward(small), await gpu.forward(small)];
    expect(bitDiff(b.pooled, a.pooled)).toBeNull();
    expect(await gpu.backward(b, { pooled })).toEqual(await cpu.backward(a, { pooled }));
    expect(bitDiff(gpu.readRows('s', ids(10)), cpu.readRows('s', ids(10)))).toBeNull();
    expect(bitDiff(gpu.readRows('big', [BigInt(big - 1)]), cpu.readRows('big', [BigInt(big - 1)]))).toBeNull();
    // every row of the table that fills the device at once, and written back: row access works in pieces
    // that fit beside the tables
    const all = allRows(gpu, 'big');
    expect(bitDiff(all, allRows(cpu, 'big'))).toBeNull();
    all.fill(-0.25);
    for (const ec of [gpu, cpu]) ec.writeRows('big', ids(big), all);
    const some = [0n, 1n, BigInt(big >> 1), BigInt(big - 2), BigInt(big - 1)];
    expect(bitDiff(gpu.readRows('big', some), cpu.readRows('big', some))).toBeNull();
    gpu.dispose();
    cpu.dispose();
  });

  it('row values that are not finite: the same outcome as on the CPU engine', async () => {
    const cpu = await trained('cpu');
    const gpu = await trained('cuda:0');
    for (const v of [Number.NaN, Number.POSITIVE_INFINITY, -3.4e38]) {
      const vals = Float32Array.of(1, v, -2);
      const got = await codeOf(() => cpu.writeRows('i', [4n], vals));
      expect(await codeOf(() => gpu.writeRows('i', [4n], vals)), String(v)).toBe(got);
      expectSameBits(snapshot(gpu), snapshot(cpu), `after writing ${v}`);
    }
    cpu.dispose();
    gpu.dispose();
  });

  it('device gradients that are freed, short, of another type or of another collection change nothing', async () => {
    const gpu = await trained('cuda:0');
    const before = snapshot(gpu);
    const out = await gpu.forwardOnDevice(good());
    const P = 2 * gpu.pooledDim;
    const freed = DeviceArray.alloc('f32', P);
    freed.free();
    const seq = DeviceArray.alloc('f32', 4);
    const bad: [string, () => Promise<unknown>][] = [
      ['INVALID_ARGUMENT', () => gpu.backward(out, { pooled: freed, sequences: seq })],
      ['GRAD_SIZE_MISMATCH', () => gpu.backward(out, { pooled: DeviceArray.alloc('f32', P - 1), sequences: seq })],
      ['GRAD_SIZE_MISMATCH', () => gpu.backward(out, { pooled: DeviceArray.alloc('f64', P), sequences: seq })],
      ['GRAD_SIZE_MISMATCH', () => gpu.backward(out, { pooled: DeviceArray.alloc('f32', P), sequences: DeviceArray.alloc('f32', 3) })],
    ];
    for (const [want, call] of bad) {
      expect(await codeOf(call), call.toString()).toBe(want);
      expectSameBits(snapshot(gpu), before, call.toString());
      expect(gpu.step).toBe(1);
    }
    const nan = await DeviceArray.from(Float32Array.from({ length: P }, (_, i) => (i === P - 1 ? Number.NaN : 1)));
    expect(await codeOf(() => gpu.backward(out, { pooled: nan, sequences: seq }))).toBe('NON_FINITE_GRADIENT');
    expectSameBits(snapshot(gpu), before, 'a NaN in device gradients');
    // the output is still usable after the refusals
    const okGrad = await DeviceArray.from(new Float32Array(P).fill(0.25));
    expect((await gpu.backward(out, { pooled: okGrad, sequences: seq })).skipped).toBe(false);
    expect(gpu.step).toBe(2);
    gpu.dispose();
  });
});

describe.runIf(cuda.available)('DeviceArray misuse', () => {
  it('lengths: 0 works end to end; negative, fractional, unsafe and non-number lengths are INVALID_ARGUMENT naming length; past memory is ALLOC_FAILED', async () => {
    const z = DeviceArray.alloc('f64', 0);
    expect([z.length, z.byteLength]).toEqual([0, 0]);
    expect((await z.read()).length).toBe(0);
    await z.write(new Float64Array(0));
    z.zero();
    expect(await codeOf(() => z.read(1))).toBe('INVALID_ARGUMENT');
    expect(await codeOf(() => z.write(Float64Array.of(1)))).toBe('LENGTH_MISMATCH');
    z.free();
    z.free(); // a second free is harmless
    expect(z.freed).toBe(true);
    for (const n of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53, '4' as unknown as number]) {
      let err: unknown;
      try {
        DeviceArray.alloc('f32', n);
      } catch (e) {
        err = e;
      }
      expect(err, String(n)).toBeInstanceOf(EmbshardError);
      expect((err as EmbshardError).code).toBe('INVALID_ARGUMENT');
      expect((err as EmbshardError).message).toContain('length');
    }
    const total = cuda.devices![0]!.totalMemory;
    expect(await codeOf(() => DeviceArray.alloc('f64', Math.ceil(total / 8) + 1))).toBe('ALLOC_FAILED');
    expect(await codeOf(() => DeviceArray.alloc('i64', 2 ** 49))).toBe('ALLOC_FAILED');
  });

  it('element types: only the five names; names of Object members are INVALID_ARGUMENT naming the type', async () => {
    for (const t of ['toString', 'constructor', '__proto__', 'hasOwnProperty', 'F32', '', 'f16']) {
      let err: unknown;
      try {
        DeviceArray.alloc(t as never, 2);
      } catch (e) {
        err = e;
      }
      expect(err, t).toBeInstanceOf(EmbshardError);
      expect((err as EmbshardError).code, t).toBe('INVALID_ARGUMENT');
      expect((err as EmbshardError).message, t).toContain('type');
    }
    await expect(DeviceArray.from(Uint8Array.of(1) as never)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(DeviceArray.from([1, 2] as never)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
  });

  it('reads, writes and zeroing out of range or with bad offsets are refused and change nothing', async () => {
    const a = await DeviceArray.from(Int32Array.from([1, 2, 3, 4, 5, 6]));
    const bad: [string, () => unknown][] = [
      ['INVALID_ARGUMENT', () => a.write(Int32Array.of(9), -1)],
      ['INVALID_ARGUMENT', () => a.write(Int32Array.of(9), 1.5)],
      ['INVALID_ARGUMENT', () => a.write(Int32Array.of(9), Number.NaN)],
      ['INVALID_ARGUMENT', () => a.write(Int32Array.of(9), 7)],
      ['LENGTH_MISMATCH', () => a.write(Int32Array.of(9, 9), 5)],
      ['INVALID_ARGUMENT', () => a.write(Uint32Array.of(9) as never)],
      ['INVALID_ARGUMENT', () => a.write([9] as never)],
      ['INVALID_ARGUMENT', () => a.read(-1)],
      ['INVALID_ARGUMENT', () => a.read(7)],
      ['INVALID_ARGUMENT', () => a.read(0, -1)],
      ['INVALID_ARGUMENT', () => a.read(0, 0.5)],
      ['LENGTH_MISMATCH', () => a.read(4, 3)],
      ['LENGTH_MISMATCH', () => a.readInto(new Int32Array(7))],
      ['LENGTH_MISMATCH', () => a.readInto(new Int32Array(2), 5)],
      ['INVALID_ARGUMENT', () => a.readInto(new Float32Array(2))],
      ['INVALID_ARGUMENT', () => a.readInto(new Int32Array(1), -1)],
      ['INVALID_ARGUMENT', () => a.zero(-1)],
      ['INVALID_ARGUMENT', () => a.zero(7)],
      ['INVALID_ARGUMENT', () => a.zero(2, 5)],
      ['INVALID_ARGUMENT', () => a.zero(0, -1)],
    ];
    for (const [want, call] of bad) {
      expect(await codeOf(call), call.toString()).toBe(want);
      expect(Array.from(await a.read()), call.toString()).toEqual([1, 2, 3, 4, 5, 6]);
    }
    a.zero(2, 4);
    const into = new Int32Array(3).fill(-1);
    await a.readInto(into, 1);
    expect(Array.from(into)).toEqual([2, 0, 0]);
    a.free();
    for (const call of [() => a.read(), () => a.write(Int32Array.of(1)), () => a.zero(), () => a.readInto(new Int32Array(1))])
      expect(await codeOf(call), call.toString()).toBe('INVALID_ARGUMENT');
  });

  it('host arrays over a SharedArrayBuffer (at an offset too) are copied like any other', async () => {
    const shared = new Float64Array(new SharedArrayBuffer(8 * 8));
    shared.set([1.5, -2, 3, 4, 5, 6, 7, 8]);
    const a = await DeviceArray.from(shared.subarray(2, 6));
    expect(Array.from(await a.read())).toEqual([3, 4, 5, 6]);
    await a.write(shared.subarray(0, 2), 1);
    const into = new Float64Array(new SharedArrayBuffer(8 * 6)).subarray(2);
    await a.readInto(into);
    expect(Array.from(into)).toEqual([3, 1.5, -2, 6]);
    a.free();
  });

  it('concurrent copies: writes to disjoint ranges all land, reads see every write made before them, a free in flight waits for them', async () => {
    const n = 4096, parts = 16;
    const a = DeviceArray.alloc('f32', n);
    const want = Float32Array.from({ length: n }, (_, i) => i * 0.5 - 7);
    await Promise.all(Array.from({ length: parts }, (_, p) => a.write(want.subarray((p * n) / parts, ((p + 1) * n) / parts), (p * n) / parts)));
    const reads = await Promise.all(Array.from({ length: 8 }, (_, k) => a.read(k * 100, 1000)));
    reads.forEach((r, k) => expect(bitDiff(r as Float32Array, want.subarray(k * 100, k * 100 + 1000)), `read ${k}`).toBeNull());
    const b = DeviceArray.alloc('f32', n);
    const writing = b.write(want);
    const reading = a.read();
    b.free();
    a.free();
    await writing;
    expect(bitDiff((await reading) as Float32Array, want)).toBeNull();
    expect([a.freed, b.freed]).toEqual([true, true]);
  });
});

describe.runIf(cuda.available)('device exchange ops: ranges whose offsets and strides overflow 64 bits are refused', () => {
  const addon = cuda.available ? (resolveBackend('cuda:0') as unknown as Record<string, (...args: unknown[]) => unknown>) : {};

  it('copyDeviceBlocks, indexDeviceRows, poolDeviceRows, divideDeviceBags, sumDeviceRows: LENGTH_MISMATCH, nothing written', async () => {
    const src = await DeviceArray.from(Float32Array.from({ length: 64 }, (_, i) => i + 1));
    const dst = DeviceArray.alloc('f32', 64);
    const meta = DeviceArray.alloc('i32', 8192); // zeros: empty bags, no ids
    // (rows − 1) · stride = 2^12 · 2^52 = 2^64 wraps to 0 in 64-bit arithmetic (as does 2^11 · 2^53)
    const rows = 2 ** 12 + 1, stride = 2 ** 52;
    const calls: [string, () => unknown][] = [
      ['copyDeviceBlocks src', () => addon.copyDeviceBlocks!(src.native, dst.native, Float64Array.of(0, stride, 0, 1, rows, 1, 0))],
      ['copyDeviceBlocks dst', () => addon.copyDeviceBlocks!(src.native, dst.native, Float64Array.of(0, 0, 0, stride, rows, 1, 0))],
      ['indexDeviceRows', () => addon.indexDeviceRows!({ src: src.native, srcOffset: 0, srcStride: stride, dst: dst.native, dstOffset: 0, dstStride: 1, meta: meta.native, idxAt: 0, rows, cols: 1, mode: 'scatter' })],
      ['poolDeviceRows', () => addon.poolDeviceRows!({ rows: src.native, rowsAt: 0, dim: 1, meta: meta.native, inverseAt: 0, ids: 0, offsetsAt: 0, bags: rows, weights: null, dst: dst.native, stride, col: 0 })],
      ['divideDeviceBags', () => addon.divideDeviceBags!({ m: dst.native, stride, col: 0, dim: 1, meta: meta.native, lengthsAt: 0, bags: rows })],
      ['sumDeviceRows', () => addon.sumDeviceRows!({ src: src.native, stride: 1, meta: meta.native, startAt: 0, orderAt: 0, rowAt: 0, colAt: 0, ids: 0, scales: src.native, scalesAt: 0, rows: 2 ** 11, dim: 2 ** 53, dst: dst.native, dstAt: 0 })],
    ];
    for (const [what, call] of calls) {
      expect(await codeOf(call), what).toBe('LENGTH_MISMATCH');
      expect(Array.from(await dst.read()), what).toEqual(new Array(64).fill(0));
    }
    // in range: the same calls run
    addon.copyDeviceBlocks!(src.native, dst.native, Float64Array.of(0, 2, 0, 1, 3, 1, 0));
    expect(Array.from(await dst.read(0, 4))).toEqual([1, 3, 5, 0]);
    for (const a of [src, dst, meta]) a.free();
  });
});

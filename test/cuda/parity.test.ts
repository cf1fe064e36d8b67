// parity.test.ts — the CUDA backend against the CPU backend (and the naive oracle) on the same inputs.
// Tolerances (native/cuda/README.md): initial tables, fp32 forward outputs, and tables + optimizer
// state after updates are BITWISE equal (same math in the same order, no FMA contraction); the one
// exception is a row with more than 1024 contributions in a batch (summed as fixed-order partials),
// which is bitwise equal when the partial sums are exact and otherwise within the oracle's bound.
// Runs only where backends() finds a usable GPU; elsewhere it says why it is skipped, and checks that
// asking for 'cuda:0' fails with BACKEND_UNAVAILABLE (through the API and inside the CUDA addon).
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError, JaggedBatch } from '../../lib/index.js';
import type { OptimizerConfig, TableConfig } from '../../lib/index.js';
import { cudaBackend, probeCudaBinary } from '../../lib/backends.js';
import { cudaAddonCandidates, loadAddonFile } from '../../lib/native.js';
import type { NativeCollectionConfig } from '../../lib/binding.js';
import { rng, worst } from '../embedding/oracle.js';
import { bitDiff, expectSameBits, pair, randomBatch, randomGrads, snapshot } from '../embedding/helpers.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('cuda');

const cuda = cudaBackend();
if (!cuda.available) console.log(`test/cuda/parity: skipped — the CUDA backend is unavailable here: ${cuda.reason}`);

function twins(tables: TableConfig[], optimizer: OptimizerConfig, seed = 11): { cpu: EmbeddingCollection; gpu: EmbeddingCollection } {
  return {
    cpu: new EmbeddingCollection({ tables, optimizer, seed, device: 'cpu' }),
    gpu: new EmbeddingCollection({ tables, optimizer, seed, device: 'cuda:0' }),
  };
}

function tablesFor(dims: number[], dtype: 'fp32' | 'fp16' | 'bf16' = 'fp32'): TableConfig[] {
  return [
    { name: 'a', rows: 37, dim: dims[0]!, pooling: 'sum', dtype },
    { name: 'b', rows: 11, dim: dims[1]!, pooling: 'mean', features: ['b1', 'b2'], dtype },
    { name: 'c', rows: 23, dim: dims[2]!, pooling: 'none', dtype },
  ];
}

const OPTIMIZERS: OptimizerConfig[] = [
  { type: 'sgd', lr: 0.05 },
  { type: 'sgd', lr: 0.05, weightDecay: 0.1 },
  { type: 'adagrad', lr: 0.05, eps: 1e-8 },
  { type: 'rowwise_adagrad', lr: 0.05, eps: 1e-8, weightDecay: 0.01 },
  { type: 'adam', lr: 0.01, beta1: 0.9, beta2: 0.999 },
  { type: 'adam', lr: 0.01, weightDecay: 0.01 },
];

if (!cuda.available) describe('without a usable GPU', () => {
  it("new EmbeddingCollection({ device: 'cuda:0' }) fails with BACKEND_UNAVAILABLE and the reason", () => {
    let err: unknown;
    try {
      new EmbeddingCollection({ tables: [{ name: 't', rows: 4, dim: 4 }], device: 'cuda:0' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(EmbshardError);
    expect((err as EmbshardError).code).toBe('BACKEND_UNAVAILABLE');
    expect((err as EmbshardError).message).toContain(cuda.reason!);
  });

  const file = cudaAddonCandidates().find((f) => probeCudaBinary(f).ok);
  it.runIf(file !== undefined)('the CUDA addon itself refuses cuda:0 with BACKEND_UNAVAILABLE naming the CUDA error, and serves cpu', () => {
    const addon = loadAddonFile(file!);
    expect(addon.variant).toBe('cuda');
    const config: NativeCollectionConfig = {
      tables: [{ name: 't', rows: 5, dim: 3, dtype: 'fp32', idPolicy: 'error', init: { kind: 'uniform', a: -1, b: 1 } }],
      features: [{ name: 't', table: 0, pooling: 'sum' }],
      optimizer: { type: 'sgd', lr: 0.1, eps: 1e-8, beta1: 0.9, beta2: 0.999, weightDecay: 0, stochasticRounding: false, nonFinite: 'error' },
      seed: 1,
      initialize: true,
    };
    let err: unknown;
    try {
      new addon.Engine(config, 'cuda:0');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(EmbshardError);
    expect((err as EmbshardError).code).toBe('BACKEND_UNAVAILABLE');
    expect((err as EmbshardError).message).toMatch(/cuda:0 is unavailable: .*cuda/i);
    const e = new addon.Engine(config, 'cpu');
    expect(e.device).toBe('cpu');
    e.dispose();
  });
});

describe.runIf(cuda.available)('CUDA vs CPU', () => {
  it('initial tables are bitwise equal for every init kind and dtype', () => {
    for (const dtype of ['fp32', 'fp16', 'bf16'] as const) {
      const tables: TableConfig[] = [
        { name: 'u', rows: 300, dim: 7, dtype, init: { type: 'uniform', low: -0.3, high: 0.2 } },
        { name: 'n', rows: 200, dim: 16, dtype, init: { type: 'normal', mean: 0.1, std: 0.5 } },
        { name: 'k', rows: 10, dim: 3, dtype, init: { type: 'constant', value: 0.3 } },
      ];
      const { cpu, gpu } = twins(tables, { type: 'adam', lr: 0.01 }, 12345);
      expectSameBits(snapshot(gpu), snapshot(cpu), `init ${dtype}`);
      cpu.dispose();
      gpu.dispose();
    }
  });

  for (const dtype of ['fp32', 'fp16', 'bf16'] as const) {
    for (const dims of [[1, 3, 64], [129, 64, 3], [8, 30, 256], [128, 4, 7]]) {
      it(`forward is bitwise equal: ${dtype} dims ${dims}`, async () => {
        const r = rng(dims[0]! * 7 + dims[1]! + dtype.length);
        const { cpu, gpu } = twins(tablesFor(dims, dtype), { type: 'sgd', lr: 0.1 });
        for (const weights of [false, true]) {
          for (const idType of ['i64', 'i32', 'u32'] as const) {
            const { batch } = randomBatch(cpu, r, { B: 33, maxLen: 9, weights, idType, shuffle: true });
            const a = await cpu.forward(batch);
            const b = await gpu.forward(batch);
            expect(bitDiff(b.pooled, a.pooled), 'pooled').toBeNull();
            expect(bitDiff(b.sequences.c!.values, a.sequences.c!.values), 'sequence').toBeNull();
            expect(bitDiff(gpu.forwardSync(batch).pooled, a.pooled), 'sync pooled').toBeNull();
          }
        }
        cpu.dispose();
        gpu.dispose();
      });
    }
  }

  for (const opt of OPTIMIZERS) {
    for (const dtype of ['fp32', 'fp16', 'bf16'] as const) {
      for (const sr of dtype === 'fp32' ? [false] : [false, true]) {
        it(`training steps are bitwise equal: ${opt.type}${opt.weightDecay ? ' +wd' : ''} ${dtype}${sr ? ' stochastic rounding' : ''}`, async () => {
          const r = rng(opt.type.length * 13 + dtype.length + (sr ? 5 : 0));
          const { cpu, gpu } = twins(tablesFor([16, 3, 33], dtype), { ...opt, stochasticRounding: sr });
          for (let step = 0; step < 4; step++) {
            const { batch, ob } = randomBatch(cpu, r, { B: 17, maxLen: 7, weights: step % 2 === 1, shuffle: true });
            const g = randomGrads(cpu, ob, r);
            const [oa, ob2] = [await cpu.forward(batch), await gpu.forward(batch)];
            expect(bitDiff(ob2.pooled, oa.pooled)).toBeNull();
            const ra = await cpu.backward(oa, { pooled: g.pooled, sequences: g.sequences });
            const rb = await gpu.backward(ob2, { pooled: g.pooled, sequences: g.sequences });
            expect(rb).toEqual(ra);
            expectSameBits(snapshot(gpu), snapshot(cpu), `after step ${step + 1}`);
          }
          expect(gpu.step).toBe(4);
          cpu.dispose();
          gpu.dispose();
        });
      }
    }
  }

  it('CUDA training follows the naive oracle (fp32, every optimizer)', async () => {
    for (const opt of OPTIMIZERS) {
      const r = rng(99 + opt.type.length);
      const { ec, oracle } = pair(tablesFor([5, 64, 3]), opt, 3, 'cuda:0');
      for (let step = 0; step < 3; step++) {
        const { batch, ob } = randomBatch(ec, r, { B: 12, maxLen: 6, weights: step === 1 });
        const out = await ec.forward(batch);
        const ref = oracle.forward(ob);
        expect(worst(out.pooled, ref.pooled, 1e-6, 1e-7)).toBeLessThanOrEqual(1);
        const g = randomGrads(ec, ob, r);
        await ec.backward(out, { pooled: g.pooled, sequences: g.sequences });
        oracle.backward(ob, g.pooled, g.seqMap);
      }
      ec.tables.forEach((t, i) => {
        const all = BigInt64Array.from({ length: t.rows }, (_, k) => BigInt(k));
        expect(worst(ec.readRows(t.name, all), oracle.tables[i]!.w, 1e-5, 1e-6), `${opt.type} table ${t.name}`).toBeLessThanOrEqual(1);
      });
      ec.dispose();
    }
  });

  // One row looked up `count` times in one batch: more than 1024 contributions are summed as partials.
  function hotBatch(count: number, grads: (i: number) => number, dim: number) {
    const B = count;
    const lengths = new Int32Array(B).fill(1);
    const ids = new BigInt64Array(B).fill(3n);
    const batch = JaggedBatch.fromLengths({ features: ['h'], batchSize: B, lengths, ids });
    const pooled = Float32Array.from({ length: B * dim }, (_, i) => grads(i));
    return { batch, pooled };
  }

  for (const count of [1024, 1025, 5000, 70_001]) {
    it(`a hot row with ${count} contributions: bitwise equal when its partial sums are exact`, async () => {
      const dim = 40;
      const tables: TableConfig[] = [{ name: 'h', rows: 8, dim, init: { type: 'uniform', low: -1, high: 1 } }];
      for (const opt of [{ type: 'sgd', lr: 0.01 }, { type: 'rowwise_adagrad', lr: 0.01 }, { type: 'adam', lr: 0.01 }] as OptimizerConfig[]) {
        const { cpu, gpu } = twins(tables, opt);
        // multiples of 2^-8 in [-1, 1]: a sum of any contiguous run of them is exact in fp32 while it
        // stays below 2^16 in magnitude, which holds when every prefix sum stays below 2^15
        const { batch, pooled } = hotBatch(count, (i) => (((i * 2654435761) >>> 0) % 513 - 256) / 256, dim);
        for (let c = 0; c < dim; c++) {
          let prefix = 0;
          let max = 0;
          for (let k = 0; k < count; k++) max = Math.max(max, Math.abs((prefix += pooled[k * dim + c]!)));
          expect(max).toBeLessThan(2 ** 15);
        }
        const [oa, ob] = [await cpu.forward(batch), await gpu.forward(batch)];
        expect(bitDiff(ob.pooled, oa.pooled)).toBeNull();
        const ra = await cpu.backward(oa, { pooled });
        const rb = await gpu.backward(ob, { pooled });
        expect(rb).toEqual(ra);
        expect(rb.uniqueRows).toBe(1);
        expectSameBits(snapshot(gpu), snapshot(cpu), `${opt.type} hot row ×${count}`);
        cpu.dispose();
        gpu.dispose();
      }
    });
  }

  it('a hot row with 5000 random contributions stays within the summation-order bound of the CPU result', async () => {
    const dim = 24;
    const lr = 0.01;
    const tables: TableConfig[] = [{ name: 'h', rows: 8, dim }];
    const { cpu, gpu } = twins(tables, { type: 'sgd', lr });
    const r = rng(5);
    const { batch, pooled } = hotBatch(5000, () => Math.fround(r() * 2 - 1), dim);
    await cpu.backward(await cpu.forward(batch), { pooled });
    await gpu.backward(await gpu.forward(batch), { pooled });
    const a = cpu.readRows('h', [3n]);
    const b = gpu.readRows('h', [3n]);
    // |Δg| ≤ 2 · n · eps32 · Σ|g_i| for two summation orders of n terms; the update moves it by lr
    for (let c = 0; c < dim; c++) {
      let abs = 0;
      for (let k = 0; k < 5000; k++) abs += Math.abs(pooled[k * dim + c]!);
      expect(Math.abs(a[c]! - b[c]!)).toBeLessThanOrEqual(lr * 2 * 5000 * 2 ** -24 * abs + 2 ** -23 * Math.abs(a[c]!));
    }
    cpu.dispose();
    gpu.dispose();
  });

  it('row and state access: reads, writes with duplicate ids (last wins), dtype rounding', () => {
    for (const dtype of ['fp32', 'fp16', 'bf16'] as const) {
      const tables: TableConfig[] = [{ name: 'a', rows: 50, dim: 9, dtype }, { name: 'b', rows: 20, dim: 4, dtype }];
      const { cpu, gpu } = twins(tables, { type: 'adam', lr: 0.01 });
      const r = rng(dtype.length);
      const ids = [3n, 7n, 3n, 49n, 0n, 7n, 3n];
      const vals = Float32Array.from({ length: ids.length * 9 }, () => r() * 4 - 2);
      const st = Float32Array.from({ length: ids.length * 18 }, () => r());
      for (const ec of [cpu, gpu]) {
        ec.writeRows('a', ids, vals);
        ec.writeState('a', ids, st);
      }
      expectSameBits(snapshot(gpu), snapshot(cpu), `rows/state ${dtype}`);
      // the last occurrence of id 3 (index 6) is what both hold
      const row3 = gpu.readRows('a', [3n]);
      expect(bitDiff(row3, cpu.readRows('a', [3n]))).toBeNull();
      expect(bitDiff(gpu.readState('a', [3n]), st.slice(6 * 18, 7 * 18))).toBeNull();
      cpu.dispose();
      gpu.dispose();
    }
  });

  it('non-finite gradients: error leaves everything unchanged, skip skips the step', async () => {
    for (const nonFinite of ['error', 'skip'] as const) {
      const { cpu, gpu } = twins(tablesFor([4, 4, 4]), { type: 'adagrad', lr: 0.1, nonFinite });
      const r = rng(3);
      const { batch, ob } = randomBatch(gpu, r, { B: 6, maxLen: 4 });
      const g = randomGrads(gpu, ob, r);
      g.pooled[5] = Number.NaN;
      const before = snapshot(gpu);
      const out = await gpu.forward(batch);
      if (nonFinite === 'error') {
        await expect(gpu.backward(out, { pooled: g.pooled, sequences: g.sequences })).rejects.toMatchObject({ code: 'NON_FINITE_GRADIENT' });
      } else {
        expect(await gpu.backward(out, { pooled: g.pooled, sequences: g.sequences })).toEqual({ skipped: true, uniqueRows: 0 });
      }
      expect(gpu.step).toBe(0);
      expectSameBits(snapshot(gpu), before, `after a non-finite backward (${nonFinite})`);
      cpu.dispose();
      gpu.dispose();
    }
  });

  it('checkpoints move between devices bit for bit', async () => {
    const { cpu, gpu } = twins(tablesFor([6, 5, 3], 'bf16'), { type: 'rowwise_adagrad', lr: 0.1 });
    const r = rng(8);
    for (let s = 0; s < 2; s++) {
      const { batch, ob } = randomBatch(gpu, r, { B: 9, maxLen: 5 });
      const g = randomGrads(gpu, ob, r);
      await gpu.backward(await gpu.forward(batch), { pooled: g.pooled, sequences: g.sequences });
    }
    const dir = join(tmp.dir, 'ckpt');
    await gpu.save(dir);
    const onCpu = await EmbeddingCollection.load(dir, { device: 'cpu' });
    const onGpu = await EmbeddingCollection.load(dir, { device: 'cuda:0' });
    expectSameBits(snapshot(onCpu), snapshot(gpu), 'cuda → cpu');
    expectSameBits(snapshot(onGpu), snapshot(gpu), 'cuda → cuda');
    expect(onCpu.step).toBe(2);
    for (const ec of [cpu, gpu, onCpu, onGpu]) ec.dispose();
  });

  it('out of device memory is ALLOC_FAILED naming the table and the bytes', () => {
    let err: unknown;
    try {
      new EmbeddingCollection({ tables: [{ name: 'enormous', rows: 2 ** 40, dim: 256 }], device: 'cuda:0' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(EmbshardError);
    expect((err as EmbshardError).code).toBe('ALLOC_FAILED');
    expect((err as EmbshardError).message).toContain("table 'enormous'");
    expect((err as EmbshardError).message).toContain(String(2 ** 40 * 256 * 4));
  });

  it('dispose() returns the device memory: 60% of the GPU can be taken twice in a row', () => {
    const total = cuda.devices![0]!.totalMemory;
    const rows = Math.floor((0.6 * total) / (128 * 4));
    for (let k = 0; k < 2; k++) {
      const ec = new EmbeddingCollection({ tables: [{ name: 'big', rows, dim: 128, init: { type: 'constant', value: 0 } }], device: 'cuda:0' });
      expect(ec.memory.weightBytes).toBeGreaterThanOrEqual(rows * 512);
      ec.dispose();
    }
  });

  it('a device index past the last GPU is BACKEND_UNAVAILABLE', () => {
    let err: unknown;
    try {
      new EmbeddingCollection({ tables: [{ name: 't', rows: 4, dim: 4 }], device: `cuda:${cuda.devices!.length + 7}` });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(EmbshardError);
    expect((err as EmbshardError).code).toBe('BACKEND_UNAVAILABLE');
  });
});

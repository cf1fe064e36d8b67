// cuda-dense-edges.test.ts — the GPU dense model (DenseModel with device 'cuda:N') at the edges of its
// shapes, optimizers and inputs, against the CPU dense model on the same inputs (within the tolerances of
// docs/training.md: one step |gpu − cpu| ≤ 1e-5 + 1e-3·|cpu|, after updates ≤ 1e-4 + 1e-2·|cpu|) and the
// float64 forward pass of test/train/reference.ts; device inputs against the same numbers through host
// arrays (bitwise: the same kernels run in the same order). Runs where lib/backends.ts finds a usable GPU
// (or the CUDA emulation); skipped with the reason elsewhere.
import { describe, it, expect, onTestFinished } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cudaBackend, resolveBackend } from '../../lib/backends.js';
import { DeviceArray } from '../../lib/device-array.js';
import { DenseModel, type DenseModelSpec } from '../../lib/train/dense.js';
import { Trainer, embeddingsFor } from '../../lib/train/index.js';
import { SyntheticSource } from '../../lib/data/index.js';
import { createInProcessGroups, createNcclGroup } from '../../lib/sharded/group.js';
import type { DenseOptimizerType, NativeDenseOptimizer } from '../../lib/train/binding.js';
import * as ref from './reference.js';

const cuda = cudaBackend();
const gpuModel = cuda.available && typeof (resolveBackend('cuda:0') as unknown as { CudaDenseModel?: unknown }).CudaDenseModel === 'function';
const skipReason = !cuda.available ? `the CUDA backend is unavailable here: ${cuda.reason}` : 'the CUDA addon was built without cuBLAS (no GPU dense model)';
if (!gpuModel) console.log(`test/train/cuda-dense-edges: skipped — ${skipReason}`);

function inputs(spec: DenseModelSpec, B: number, seed: number) {
  const r = ref.rng(seed);
  const dense = ref.randArray(r, B * spec.denseIn, -1, 2);
  const sparse = ref.randArray(r, B * spec.numSparse * spec.embDim, -0.8, 0.8);
  const labels = Float32Array.from({ length: B }, () => (r() < 0.4 ? 1 : 0));
  return { dense, sparse, labels };
}

const within = (a: ArrayLike<number>, b: ArrayLike<number>, atol: number, rtol: number) => {
  expect(a.length).toBe(b.length);
  expect(ref.worstRatio(a, b, atol, rtol)).toBeLessThanOrEqual(1);
};
const bits = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
const sameBits = (a: Float32Array, b: Float32Array) => expect(Buffer.compare(bits(a), bits(b))).toBe(0);

const shapes: Record<string, DenseModelSpec> = {
  'all widths 1, no sparse features (concat)': { denseIn: 1, bottom: [1], top: [1], numSparse: 0, embDim: 1, interaction: 'concat' },
  'dot with one feature (numSparse 0)': { denseIn: 1, bottom: [3], top: [1], numSparse: 0, embDim: 3, interaction: 'dot' },
  'dot with two features (numSparse 1), odd widths': { denseIn: 3, bottom: [17, 3], top: [5, 1], numSparse: 1, embDim: 3, interaction: 'dot' },
  'dot with embDim 1': { denseIn: 2, bottom: [129, 1], top: [3, 1], numSparse: 4, embDim: 1, interaction: 'dot' },
  'cross of rank 1, embDim 1': { denseIn: 2, bottom: [3], top: [1], numSparse: 1, embDim: 1, interaction: 'cross', crossLayers: 2, crossRank: 1 },
  'cross without sparse features': { denseIn: 1, bottom: [1], top: [1], numSparse: 0, embDim: 1, interaction: 'cross', crossLayers: 1, crossRank: 1 },
  'width 1000 (concat)': { denseIn: 17, bottom: [1000], top: [129, 1], numSparse: 2, embDim: 1, interaction: 'concat' },
};

describe.runIf(gpuModel)('the GPU dense model at the edges of its shapes', () => {
  for (const [name, spec] of Object.entries(shapes))
    for (const opt of ['sgd', 'adagrad', 'adam'] as DenseOptimizerType[])
      it(`${name} / ${opt}: batch sizes 1, 5, 2, 9 in turn agree with the CPU model and the float64 forward`, async () => {
        const o = { optimizer: { type: opt, lr: opt === 'sgd' ? 0.1 : 0.01 }, seed: 11 };
        const cpu = new DenseModel(spec, o), gpu = new DenseModel(spec, { ...o, device: 'cuda:0' });
        sameBits(gpu.params, cpu.params);
        const sw = spec.numSparse * spec.embDim;
        let step = 0;
        for (const B of [1, 5, 2, 9]) {
          const { dense, sparse, labels } = inputs(spec, B, 40 + B);
          const [atol, rtol] = step === 0 ? [1e-5, 1e-3] : [1e-4, 1e-2];
          // the forward pass against the float64 reference on the GPU model's own parameters
          const z = await gpu.forward(dense, sw > 0 ? sparse : null, B);
          within(z, ref.denseForward(spec, gpu.params, dense, sparse, B), 1e-4, 1e-3);
          within(z, await cpu.forward(dense, sw > 0 ? sparse : null, B), atol, rtol);
          const run = async (m: DenseModel) => {
            const logits = new Float32Array(B), sparseGrad = sw > 0 ? new Float32Array(B * sw) : null;
            const r = await m.forwardBackward(dense, sw > 0 ? sparse : null, labels, B, { logits, sparseGrad, gradScale: 0.75 });
            return { loss: r.loss, logits, sparseGrad };
          };
          const a = await run(cpu), b = await run(gpu);
          expect(Math.abs(b.loss - a.loss)).toBeLessThanOrEqual(atol + rtol * Math.abs(a.loss));
          within(b.logits, a.logits, atol, rtol);
          if (sw > 0) within(b.sparseGrad!, a.sparseGrad!, atol, rtol);
          within(gpu.grads, cpu.grads, atol, rtol);
          await cpu.update();
          await gpu.update();
          step++;
          within(gpu.params, cpu.params, 1e-4, 1e-2);
          within(gpu.state, cpu.state, 1e-4, 1e-2);
        }
        expect(gpu.step).toBe(4);
        gpu.dispose();
      });
});

describe.runIf(gpuModel)('the GPU dense model: optimizers at the edges, written buffers, update with lr 0', () => {
  const spec: DenseModelSpec = { denseIn: 3, bottom: [7, 2], top: [5, 1], numSparse: 2, embDim: 2, interaction: 'dot' };
  const configs: NativeDenseOptimizer[] = [
    { type: 'sgd', lr: 0.5, weightDecay: 0.25 },
    { type: 'adagrad', lr: 2, eps: 1e-30 },
    { type: 'adagrad', lr: 0.01, eps: 10, weightDecay: 3 },
    { type: 'adam', lr: 0.1, beta1: 0, beta2: 0 },
    { type: 'adam', lr: 0.01, beta1: 0.999999, beta2: 0.9999999, eps: 1e-30 },
    { type: 'adam', lr: 1e-3, beta1: 0.5, beta2: 0.75, eps: 1, weightDecay: 1e-2 },
  ];
  for (const c of configs)
    it(`${JSON.stringify(c)}: written params / grads / state and a set step, then updates (lr 0 first) agree with the CPU model`, async () => {
      const cpu = new DenseModel(spec, { optimizer: c, seed: 3 }), gpu = new DenseModel(spec, { optimizer: c, seed: 3, device: 'cuda:0' });
      const r = ref.rng(17);
      const p = ref.randArray(r, cpu.params.length, -1, 1);
      const g = Float32Array.from(ref.randArray(r, p.length, -2, 2), (v, i) => (i % 7 === 0 ? 0 : v));
      const s = c.type === 'adam'
        ? Float32Array.from({ length: 2 * p.length }, (_, i) => (i < p.length ? r() - 0.5 : r()))
        : ref.randArray(r, cpu.state.length, 0, 3);
      for (const m of [cpu, gpu]) {
        m.setParams(p);
        m.setGrads(g);
        m.setState(s);
        m.step = 41;
      }
      sameBits(gpu.params, p);
      sameBits(gpu.grads, g);
      sameBits(gpu.state, s);
      // lr 0: the parameters stay bit for bit; the state moves as on the CPU
      await cpu.update(0);
      await gpu.update(0);
      sameBits(gpu.params, p);
      sameBits(cpu.params, p);
      expect(gpu.step).toBe(42);
      within(gpu.state, cpu.state, 1e-6, 1e-5);
      for (let k = 0; k < 3; k++) {
        await cpu.update();
        await gpu.update();
        within(gpu.params, cpu.params, 1e-5, 1e-4);
        within(gpu.state, cpu.state, 1e-5, 1e-4);
      }
      // then training steps with gradScale at its edges
      for (const gradScale of [0, 1e4, -1]) {
        const { dense, sparse, labels } = inputs(spec, 6, 9);
        const a = await cpu.forwardBackward(dense, sparse, labels, 6, { gradScale });
        const b = await gpu.forwardBackward(dense, sparse, labels, 6, { gradScale });
        expect(Math.abs(b.loss - a.loss)).toBeLessThanOrEqual(1e-4 + 1e-2 * Math.abs(a.loss));
        within(gpu.grads, cpu.grads, 1e-4, 1e-2);
        if (gradScale === 0) expect(gpu.grads.every((v) => v === 0)).toBe(true);
      }
      gpu.dispose();
    });
});

describe.runIf(gpuModel)('the GPU dense model: device inputs and bad arguments', () => {
  const spec: DenseModelSpec = { denseIn: 4, bottom: [6, 3], top: [4, 1], numSparse: 2, embDim: 3, interaction: 'dot' };
  const concat1: DenseModelSpec = { denseIn: 1, bottom: [1], top: [1], numSparse: 1, embDim: 1, interaction: 'concat' };

  it('pooled and sparseGrad as DeviceArrays give bitwise the host path, also for concat, B = 1 and a changed batch size', async () => {
    for (const s of [spec, concat1]) {
      const host = new DenseModel(s, { seed: 2, device: 'cuda:0', optimizer: { type: 'adagrad', lr: 0.1 } });
      const dev = new DenseModel(s, { seed: 2, device: 'cuda:0', optimizer: { type: 'adagrad', lr: 0.1 } });
      const sw = s.numSparse * s.embDim;
      for (const B of [1, 7, 3]) {
        const { dense, sparse, labels } = inputs(s, B, B);
        const dPooled = await DeviceArray.from(sparse), dGrad = DeviceArray.alloc('f32', B * sw);
        expect(await dev.forward(dense, dPooled, B)).toEqual(await host.forward(dense, sparse, B));
        const hGrad = new Float32Array(B * sw);
        const a = await host.forwardBackward(dense, sparse, labels, B, { sparseGrad: hGrad });
        const b = await dev.forwardBackward(dense, dPooled, labels, B, { sparseGrad: dGrad });
        expect(b.loss).toBe(a.loss);
        expect(await dGrad.read()).toEqual(hGrad);
        sameBits(dev.grads, host.grads);
        await host.update();
        await dev.update();
        dPooled.free();
        dGrad.free();
      }
      sameBits(dev.params, host.params);
    }
  });

  it('one DeviceArray as both pooled and sparseGrad is INVALID_ARGUMENT, and the model is left as it was', async () => {
    const m = new DenseModel(spec, { seed: 2, device: 'cuda:0', optimizer: { type: 'sgd', lr: 0.1 } });
    const B = 5;
    const { dense, sparse, labels } = inputs(spec, B, 1);
    const g0 = ref.randArray(ref.rng(5), m.params.length);
    m.setGrads(g0);
    const both = await DeviceArray.from(sparse);
    await expect(Promise.resolve().then(() => m.forwardBackward(dense, both, labels, B, { sparseGrad: both }))).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: expect.stringMatching(/sparseGrad.*sparse/),
    });
    sameBits(m.grads, g0);
    expect(await both.read()).toEqual(sparse);
    both.free();
  });

  it("the model's own gradients (deviceGrads()) as pooled or sparseGrad are INVALID_ARGUMENT, and the model is left as it was", async () => {
    // 5 parameters = B × sparseWidth for B = 5
    const m = new DenseModel(concat1, { seed: 2, device: 'cuda:0', optimizer: { type: 'sgd', lr: 0.1 } });
    const B = m.params.length;
    const { dense, sparse, labels } = inputs(concat1, B, 1);
    const g0 = ref.randArray(ref.rng(6), m.params.length);
    m.setGrads(g0);
    const own = m.deviceGrads()!;
    const call = (pooled: unknown, sparseGrad: unknown) =>
      Promise.resolve().then(() => m.native.forwardBackward(dense, pooled as Float32Array, labels, B, { sparseGrad: sparseGrad as Float32Array }));
    await expect(call(sparse, own)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('sparseGrad') });
    await expect(call(own, null)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('sparse') });
    sameBits(m.grads, g0);
  });

  it('freed, short, long and non-f32 DeviceArrays are refused before the model runs', async () => {
    const m = new DenseModel(spec, { seed: 2, device: 'cuda:0' });
    const B = 3;
    const { dense, sparse, labels } = inputs(spec, B, 2);
    const p0 = m.params.slice();
    const freed = await DeviceArray.from(sparse);
    freed.free();
    const long = DeviceArray.alloc('f32', B * 6 + 1), f64 = DeviceArray.alloc('f64', B * 6);
    expect(() => m.forward(dense, freed, B)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('sparse') }));
    expect(() => m.forwardBackward(dense, sparse, labels, B, { sparseGrad: freed })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('sparseGrad') }));
    expect(() => m.forward(dense, long, B)).toThrow(expect.objectContaining({ code: 'LENGTH_MISMATCH' }));
    expect(() => m.forwardBackward(dense, sparse, labels, B, { sparseGrad: f64 })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    sameBits(m.params, p0);
    long.free();
    f64.free();
  });

  it('NaN / ±Inf dense features are refused like the CPU model; host pooled by forward() only', async () => {
    const cpu = new DenseModel(spec, { seed: 2 }), gpu = new DenseModel(spec, { seed: 2, device: 'cuda:0' });
    const B = 2;
    const { dense, sparse, labels } = inputs(spec, B, 3);
    for (const bad of [NaN, Infinity, -Infinity]) {
      const d = dense.slice();
      d[5] = bad;
      const p = sparse.slice();
      p[7] = bad;
      for (const m of [cpu, gpu]) {
        expect(() => m.forward(d, sparse, B)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('dense[5]') }));
        expect(() => m.forwardBackward(d, sparse, labels, B)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('dense[5]') }));
        expect(() => m.forwardBottom(d, B)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
        expect(() => m.forward(dense, p, B)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('pooled[7]') }));
      }
      // forwardBackward lets pooled values through on both: its gradients come out non-finite alike
      await cpu.forwardBackward(dense, p, labels, B);
      await gpu.forwardBackward(dense, p, labels, B);
      const cg = cpu.grads, gg = gpu.grads;
      for (let i = 0; i < cg.length; i++) expect(Number.isFinite(gg[i])).toBe(Number.isFinite(cg[i]));
    }
  });

  it('a second call while one is in flight is INVALID_ARGUMENT; the first completes as alone', async () => {
    const cpu = new DenseModel(spec, { seed: 4 }), gpu = new DenseModel(spec, { seed: 4, device: 'cuda:0' });
    const B = 8;
    const { dense, sparse, labels } = inputs(spec, B, 4);
    const first = gpu.forwardBackward(dense, sparse, labels, B);
    expect(() => gpu.forward(dense, sparse, B)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => gpu.update()).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => gpu.setParams(new Float32Array(gpu.native.paramCount))).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => gpu.native.read('params', new Float32Array(gpu.native.paramCount))).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    const want = await cpu.forwardBackward(dense, sparse, labels, B);
    expect(Math.abs((await first).loss - want.loss)).toBeLessThanOrEqual(1e-5 + 1e-3 * want.loss);
    within(gpu.grads, cpu.grads, 1e-5, 1e-3);
  });

  it('every call after dispose() is DISPOSED', async () => {
    const m = new DenseModel(spec, { seed: 4, device: 'cuda:0' });
    const B = 2;
    const { dense, sparse, labels } = inputs(spec, B, 4);
    m.dispose();
    m.dispose();
    const disposed = expect.objectContaining({ code: 'DISPOSED' });
    expect(() => m.forward(dense, sparse, B)).toThrow(disposed);
    expect(() => m.forwardBackward(dense, sparse, labels, B)).toThrow(disposed);
    expect(() => m.forwardBottom(dense, B)).toThrow(disposed);
    expect(() => m.update()).toThrow(disposed);
    expect(() => m.params).toThrow(disposed);
    expect(() => m.setState(new Float32Array(0))).toThrow(disposed);
    expect(() => m.deviceGrads()).toThrow(disposed);
    expect(() => m.tensors).toThrow(disposed);
  });
});

describe.runIf(gpuModel)('dispose() of a GPU dense model with a call in flight', () => {
  it('every later call is DISPOSED at once, deviceGrads() included; the call in flight completes', async () => {
    const spec: DenseModelSpec = { denseIn: 2, bottom: [3], top: [2, 1], numSparse: 1, embDim: 3, interaction: 'dot' };
    const cpu = new DenseModel(spec, { seed: 8 }), m = new DenseModel(spec, { seed: 8, device: 'cuda:0' });
    const B = 3;
    const { dense, sparse, labels } = inputs(spec, B, 5);
    const n = m.native.paramCount;
    const call = m.forwardBackward(dense, sparse, labels, B);
    m.dispose();
    const disposed = expect.objectContaining({ code: 'DISPOSED' });
    expect(() => m.forward(dense, sparse, B)).toThrow(disposed);
    expect(() => m.forwardBackward(dense, sparse, labels, B)).toThrow(disposed);
    expect(() => m.update()).toThrow(disposed);
    expect(() => m.params).toThrow(disposed);
    expect(() => m.native.write('grads', new Float32Array(n))).toThrow(disposed);
    expect(() => m.deviceGrads()).toThrow(disposed);
    expect(() => m.tensors).toThrow(disposed);
    const want = await cpu.forwardBackward(dense, sparse, labels, B);
    expect(Math.abs((await call).loss - want.loss)).toBeLessThanOrEqual(1e-5 + 1e-3 * want.loss);
    expect(() => m.params).toThrow(disposed);
  });
});

describe.runIf(gpuModel)('deviceGrads() of a disposed GPU dense model', () => {
  it('a handle taken before dispose() keeps the gradients valid: a device all-reduce and a model reading them see their values', async () => {
    const spec: DenseModelSpec = { denseIn: 1, bottom: [1], top: [1], numSparse: 1, embDim: 1, interaction: 'concat' };
    const m = new DenseModel(spec, { seed: 3, device: 'cuda:0', optimizer: { type: 'sgd', lr: 0.1 } });
    const B = m.params.length; // 5 parameters = B × sparseWidth
    const { dense, sparse, labels } = inputs(spec, B, 9);
    await m.forwardBackward(dense, sparse, labels, B);
    const grads = m.grads.slice();
    const handle = m.deviceGrads()!;
    m.dispose();
    // a one-rank NCCL group sums the handle's memory in place (the sum of one rank: its values)
    const [boot] = createInProcessGroups(1);
    const g = await createNcclGroup({ bootstrap: boot!, device: 0, timeoutMs: 60_000 });
    try {
      await g.allReduceDevice(handle, 'sum');
    } finally {
      g.close();
      boot!.close();
    }
    // another model reads the handle as its pooled embeddings: the logits of the host copy, bit for bit
    const reader = new DenseModel(spec, { seed: 4, device: 'cuda:0' });
    const want = await reader.forward(dense, grads, B);
    expect(await reader.native.forward(dense, handle as unknown as Float32Array, B)).toEqual(want);
    reader.dispose();
  });
});

describe.runIf(gpuModel)('the GPU dense model out of device memory', () => {
  it('a batch whose backward scratch does not fit is ALLOC_FAILED and leaves the gradients as they were; smaller batches still run', async () => {
    const total = cuda.devices![0]!.totalMemory;
    // one cross layer over D = W: the forward keeps 4 [B × W] arrays, the backward needs 6 more; B·W·4 bytes = total / 8
    const W = 1024 * Math.max(1, Math.round(Math.sqrt(total / 2 ** 26))), B = Math.ceil(total / 8 / 4 / W);
    const spec: DenseModelSpec = { denseIn: 1, bottom: [W], top: [1], numSparse: 0, embDim: 1, interaction: 'cross', crossLayers: 1, crossRank: 1 };
    const m = new DenseModel(spec, { seed: 1, device: 'cuda:0', optimizer: { type: 'sgd', lr: 0.1 } });
    onTestFinished(() => m.dispose()); // its device memory goes back whatever the outcome
    const g0 = ref.randArray(ref.rng(8), m.params.length), p0 = m.params.slice();
    m.setGrads(g0);
    const big = inputs(spec, B, 1);
    await expect(m.forwardBackward(big.dense, null, big.labels, B)).rejects.toMatchObject({ code: 'ALLOC_FAILED', message: expect.stringContaining('cuda:0') });
    sameBits(m.grads, g0);
    sameBits(m.params, p0);
    // activations that do not fit: the forward pass and the bottom MLP alone are ALLOC_FAILED too
    const huge = inputs(spec, 4 * B, 3);
    await expect(m.forward(huge.dense, null, 4 * B)).rejects.toMatchObject({ code: 'ALLOC_FAILED' });
    await expect(m.forwardBottom(huge.dense, 4 * B)).rejects.toMatchObject({ code: 'ALLOC_FAILED' });
    await expect(m.native.forwardBackward(huge.dense, null, huge.labels, 4 * B, { bottomReady: true })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    sameBits(m.grads, g0);
    const cpu = new DenseModel(spec, { seed: 1, optimizer: { type: 'sgd', lr: 0.1 } });
    const small = inputs(spec, 3, 2);
    const a = await cpu.forwardBackward(small.dense, null, small.labels, 3), b = await m.forwardBackward(small.dense, null, small.labels, 3);
    expect(Math.abs(b.loss - a.loss)).toBeLessThanOrEqual(1e-5 + 1e-3 * a.loss);
    within(m.grads, cpu.grads, 1e-5, 1e-3);
  });
});

describe.runIf(gpuModel)('a GPU dense model too large for the device', () => {
  it('is ALLOC_FAILED wherever its allocations stop, and gives back what it had allocated: a model of 60% of the device fits after it', () => {
    const total = cuda.devices![0]!.totalMemory;
    const denseIn = 1000, sgdWidth = (f: number) => Math.floor((f * total) / 4 / denseIn);
    const spec = (width: number): DenseModelSpec => ({ denseIn, bottom: [width, 2], top: [1], numSparse: 0, embDim: 1, interaction: 'concat' });
    // parameters (0.4 of the device) fit, their gradients too, adam's state (0.8 more) does not
    for (let k = 0; k < 3; k++)
      expect(() => new DenseModel(spec(sgdWidth(0.4)), { device: 'cuda:0', optimizer: { type: 'adam', lr: 0.1 } })).toThrow(
        expect.objectContaining({ code: 'ALLOC_FAILED', message: expect.stringContaining('cuda:0') }),
      );
    // parameters fit, their gradients do not
    expect(() => new DenseModel(spec(sgdWidth(0.6)), { device: 'cuda:0', optimizer: { type: 'sgd', lr: 0.1 } })).toThrow(
      expect.objectContaining({ code: 'ALLOC_FAILED' }),
    );
    const m = new DenseModel(spec(sgdWidth(0.2)), { device: 'cuda:0', optimizer: { type: 'adagrad', lr: 0.1 } }); // 0.6 of the device
    expect(m.native.tensors[0]!.size).toBe(denseIn * sgdWidth(0.2));
    m.dispose();
  });
});

describe.runIf(gpuModel)('GPU Trainer checkpoints on the CPU and back', () => {
  it('a GPU-trained run loads on the CPU with bitwise params and state, and back on the GPU with the same bytes', async () => {
    const spec: DenseModelSpec = { denseIn: 13, bottom: [9, 4], top: [6, 1], numSparse: 3, embDim: 4, interaction: 'dot' };
    const src = new SyntheticSource({ batchSize: 16, cardinalities: [30, 30, 30], seed: 7 });
    const gpu = new Trainer({
      model: spec,
      embeddings: embeddingsFor(src.features, src.tableRows, { dim: 4, optimizer: { type: 'adagrad', lr: 0.05 }, seed: 2 }),
      optimizer: { type: 'adam', lr: 0.01 },
      seed: 3,
      device: 'cuda:0',
    });
    for (let k = 0; k < 3; k++) await gpu.step(src.batch(k));
    const root = mkdtempSync(join(tmpdir(), 'embshard-cuda-edges-'));
    try {
      await gpu.save(join(root, 'gpu'));
      const onCpu = await Trainer.load(join(root, 'gpu'));
      expect(onCpu.dense.device).toBe('cpu');
      sameBits(onCpu.dense.params, gpu.dense.params);
      sameBits(onCpu.dense.state, gpu.dense.state);
      await onCpu.save(join(root, 'cpu'));
      const back = await Trainer.load(join(root, 'cpu'), { device: 'cuda:0' });
      sameBits(back.dense.params, gpu.dense.params);
      sameBits(back.dense.state, gpu.dense.state);
      expect(back.stepCount).toBe(3);
      expect(Buffer.compare(readFileSync(join(root, 'cpu', 'dense.bin')), readFileSync(join(root, 'gpu', 'dense.bin')))).toBe(0);
      // both continue alike
      const [a, b] = [await gpu.step(src.batch(3)), await back.step(src.batch(3))];
      expect(b).toBe(a);
      sameBits(back.dense.params, gpu.dense.params);
      gpu.dispose();
      back.dispose();
      onCpu.dispose();
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

describe.runIf(gpuModel)('the GPU dense model: calls that overlap', () => {
  const spec: DenseModelSpec = { denseIn: 3, bottom: [5, 2], top: [3, 1], numSparse: 2, embDim: 2, interaction: 'dot' };

  it('a DeviceArray freed while the call that reads or writes it is in flight is held by the call until it settles', async () => {
    const host = new DenseModel(spec, { seed: 6, device: 'cuda:0' }), dev = new DenseModel(spec, { seed: 6, device: 'cuda:0' });
    const B = 4;
    const { dense, sparse, labels } = inputs(spec, B, 12);
    const want = await host.forward(dense, sparse, B);
    const pooled = await DeviceArray.from(sparse);
    const call = dev.forward(dense, pooled, B);
    pooled.free();
    expect(await call).toEqual(want);
    const hGrad = new Float32Array(B * 4);
    const a = await host.forwardBackward(dense, sparse, labels, B, { sparseGrad: hGrad });
    const p2 = await DeviceArray.from(sparse), g2 = DeviceArray.alloc('f32', B * 4);
    const fb = dev.forwardBackward(dense, p2, labels, B, { sparseGrad: g2 });
    p2.free();
    expect((await fb).loss).toBe(a.loss);
    sameBits(dev.grads, host.grads);
    g2.free();
  });

  it('two GPU models in flight at once give what each gives alone', async () => {
    const make = (seed: number) => new DenseModel(spec, { seed, device: 'cuda:0', optimizer: { type: 'adam', lr: 0.01 } });
    const B = 6;
    const x = inputs(spec, B, 1), y = inputs(spec, B, 2);
    const alone = async (seed: number, v: typeof x) => {
      const m = make(seed);
      const r = await m.forwardBackward(v.dense, v.sparse, v.labels, B);
      await m.update();
      return { loss: r.loss, params: m.params.slice() };
    };
    const a = await alone(1, x), b = await alone(2, y);
    const m1 = make(1), m2 = make(2);
    const [r1, r2] = await Promise.all([m1.forwardBackward(x.dense, x.sparse, x.labels, B), m2.forwardBackward(y.dense, y.sparse, y.labels, B)]);
    await Promise.all([m1.update(), m2.update()]);
    expect([r1.loss, r2.loss]).toEqual([a.loss, b.loss]);
    sameBits(m1.params, a.params);
    sameBits(m2.params, b.params);
  });
});

interface DenseCudaOps {
  gemm(ta: boolean, tb: boolean, M: number, N: number, K: number, alpha: number, A: Float32Array, B: Float32Array, beta: number, C: Float32Array): void;
  linearForward(x: Float32Array, B: number, i: number, o: number, W: Float32Array, b: Float32Array | null, relu: boolean): Float32Array;
  linearBackward(x: Float32Array, dy: Float32Array, B: number, i: number, o: number, W: Float32Array): { dW: Float32Array; db: Float32Array; dx: Float32Array };
  dotInteractionForward(x: Float32Array, e: Float32Array, B: number, d: number, F: number): Float32Array;
  dotInteractionBackward(x: Float32Array, e: Float32Array, g: Float32Array, B: number, d: number, F: number): { dx: Float32Array; de: Float32Array };
}
const ops = cuda.available ? (resolveBackend('cuda:0') as unknown as { denseCudaOps?: DenseCudaOps }).denseCudaOps : undefined;

describe.runIf(ops !== undefined)('the GPU dense layers at the edges of their shapes', () => {
  const r = ref.rng(77);
  it('gemm with beta 0 never reads C (NaN there stays out); 1 × 1 × 1', () => {
    const C = Float32Array.of(NaN);
    ops!.gemm(true, true, 1, 1, 1, 2, Float32Array.of(3), Float32Array.of(-0.5), 0, C);
    expect(Array.from(C)).toEqual([-3]);
  });

  // three M × M operands of 0.4 of the device each: the third allocation fails (host arrays that large are
  // out of reach of a test on a device of more than 4 GiB, such as a real GPU's)
  const total = cuda.available ? cuda.devices![0]!.totalMemory : 0;
  const M = Math.ceil(Math.sqrt((0.4 * total) / 4));
  it.runIf(total <= 2 ** 32)('operands larger than the device are ALLOC_FAILED naming the device, and leave nothing allocated behind', () => {
    const A = new Float32Array(M * M), C = new Float32Array(M * M);
    for (let k = 0; k < 2; k++)
      expect(() => ops!.gemm(false, false, M, M, M, 1, A, A, 0, C)).toThrow(
        expect.objectContaining({ code: 'ALLOC_FAILED', message: expect.stringContaining('cuda:0') }),
      );
    // what the failed calls had allocated went back: two operands of 0.4 fit
    const half = Math.floor(M / 2), x = ref.randArray(r, half * M), W = ref.randArray(r, 2 * M);
    expect(ops!.linearForward(x, half, M, 2, W, null, false).length).toBe(2 * half);
  });

  it('linear layers of width 1 and batch 1, with and without bias, against the float64 reference', () => {
    for (const [B, I, O] of [[1, 1, 1], [1, 3, 1], [2, 1, 17]] as const) {
      const x = ref.randArray(r, B * I), W = ref.randArray(r, O * I), b = ref.randArray(r, O), g = ref.randArray(r, B * O);
      for (const bias of [b, null]) {
        const y = ref.linear(x, B, I, O, W, bias);
        expect(ref.worstRatio(ops!.linearForward(x, B, I, O, W, bias, false), y, 1e-6, 1e-5)).toBeLessThanOrEqual(1);
        expect(ref.worstRatio(ops!.linearForward(x, B, I, O, W, bias, true), ref.relu(y), 1e-6, 1e-5)).toBeLessThanOrEqual(1);
      }
      const got = ops!.linearBackward(x, g, B, I, O, W);
      const dW = new Float64Array(O * I), db = new Float64Array(O), dx = new Float64Array(B * I);
      for (let s = 0; s < B; s++)
        for (let o = 0; o < O; o++) {
          db[o] += g[s * O + o]!;
          for (let i = 0; i < I; i++) (dW[o * I + i] += g[s * O + o]! * x[s * I + i]!), (dx[s * I + i] += g[s * O + o]! * W[o * I + i]!);
        }
      expect(ref.worstRatio(got.dW, dW, 1e-6, 1e-5)).toBeLessThanOrEqual(1);
      expect(ref.worstRatio(got.db, db, 1e-6, 1e-5)).toBeLessThanOrEqual(1);
      expect(ref.worstRatio(got.dx, dx, 1e-6, 1e-5)).toBeLessThanOrEqual(1);
    }
  });

  it('the dot interaction with 1, 2 and 3 vectors of width 1 or 3, batch 1 and 2, against the float64 reference and finite differences', () => {
    for (const [B, d, F] of [[1, 1, 0], [1, 3, 1], [2, 1, 2], [2, 3, 0]] as const) {
      const w = d + ((F + 1) * F) / 2;
      const x = ref.randArray(r, B * d), e = ref.randArray(r, B * F * d), g = ref.randArray(r, B * w);
      expect(ref.worstRatio(ops!.dotInteractionForward(x, e, B, d, F), ref.dotInteraction(x, e, B, d, F), 1e-6, 1e-5)).toBeLessThanOrEqual(1);
      const got = ops!.dotInteractionBackward(x, e, g, B, d, F);
      const X = Float64Array.from(x), E = Float64Array.from(e);
      const L = () => {
        const z = ref.dotInteraction(X, E, B, d, F);
        let s = 0;
        for (let i = 0; i < z.length; i++) s += g[i]! * z[i]!;
        return s;
      };
      expect(ref.worstRatio(got.dx, ref.fdGradient(L, X), 2e-4, 2e-4)).toBeLessThanOrEqual(1);
      expect(got.de.length).toBe(B * F * d);
      if (F > 0) expect(ref.worstRatio(got.de, ref.fdGradient(L, E), 2e-4, 2e-4)).toBeLessThanOrEqual(1);
    }
  });
});

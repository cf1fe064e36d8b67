// cuda-model.test.ts — the whole dense model on a GPU (DenseModel / Trainer with device 'cuda:N') against
// the CPU dense model on the same inputs, which test/train/model.test.ts checks against the float64
// reference and finite differences. Tolerances: the initialisation is computed on the host and uploaded,
// so starting parameters are bit-identical; after that cuBLAS and OpenBLAS sum the GEMMs in different
// orders (and the GPU contracts a·b + c into FMAs), so logits, loss and gradients agree to float
// rounding: |gpu − cpu| ≤ 1e-5 + 1e-3·|cpu| per element after one step and ≤ 1e-4 + 1e-2·|cpu| after
// five updates. Checkpoints cross devices byte for byte (CPU-saved → GPU-loaded → saved again gives the
// same dense.bin). These parts run only where lib/backends.ts finds a usable GPU (and the CUDA addon has
// the GPU dense model); elsewhere they are skipped with the reason printed. What needs no GPU — the
// BACKEND_UNAVAILABLE answer with its reason, and the buffer setters — runs everywhere.
import { describe, it, expect } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cudaBackend, resolveBackend } from '../../lib/backends.js';
import { DenseModel, type DenseModelSpec } from '../../lib/train/dense.js';
import { Trainer, embeddingsFor } from '../../lib/train/index.js';
import { SyntheticSource } from '../../lib/data/index.js';
import { isEmbshardError } from '../../lib/errors.js';
import type { DenseOptimizerType } from '../../lib/train/binding.js';
import * as ref from './reference.js';

const cuda = cudaBackend();
const gpuModel = cuda.available && typeof (resolveBackend('cuda:0') as unknown as { CudaDenseModel?: unknown }).CudaDenseModel === 'function';
const skipReason = !cuda.available ? `the CUDA backend is unavailable here: ${cuda.reason}` : 'the CUDA addon was built without cuBLAS (no GPU dense model)';
if (!gpuModel) console.log(`test/train/cuda-model: GPU comparisons skipped — ${skipReason}`);

const specs: Record<string, DenseModelSpec> = {
  dot: { denseIn: 13, bottom: [64, 16], top: [48, 24, 1], numSparse: 6, embDim: 16, interaction: 'dot' },
  cross: { denseIn: 13, bottom: [32, 8], top: [40, 1], numSparse: 5, embDim: 8, interaction: 'cross', crossLayers: 3, crossRank: 12 },
  concat: { denseIn: 7, bottom: [20], top: [16, 1], numSparse: 3, embDim: 4, interaction: 'concat' },
};

function inputs(spec: DenseModelSpec, B: number, seed: number) {
  const r = ref.rng(seed);
  const dense = ref.randArray(r, B * spec.denseIn, 0, 2);
  const sparse = ref.randArray(r, B * spec.numSparse * spec.embDim, -0.5, 0.5);
  const labels = Float32Array.from({ length: B }, () => (r() < 0.3 ? 1 : 0));
  return { dense, sparse, labels };
}

const expectClose = (a: Float32Array, b: Float32Array, atol: number, rtol: number) => {
  expect(a.length).toBe(b.length);
  expect(ref.worstRatio(a, b, atol, rtol)).toBeLessThanOrEqual(1);
};

describe('the dense model where no GPU is usable', () => {
  if (!gpuModel) it(`device 'cuda:0' is BACKEND_UNAVAILABLE with the reason (here: ${skipReason})`, () => {
    for (const make of [
      () => new DenseModel(specs.dot!, { device: 'cuda:0' }),
      () => {
        const src = new SyntheticSource({ batchSize: 8, cardinalities: [50, 50, 50, 50, 50, 50], seed: 1 });
        const emb = embeddingsFor(src.features, src.tableRows, { dim: 16, optimizer: { type: 'sgd', lr: 0.1 } });
        return new Trainer({ model: specs.dot!, embeddings: emb, device: 'cuda:0' });
      },
    ]) {
      try {
        make();
        expect.unreachable();
      } catch (e) {
        expect(isEmbshardError(e) && e.code === 'BACKEND_UNAVAILABLE').toBe(true);
        expect((e as Error).message).toContain('cuda:0');
      }
    }
  });

  it('an unknown device string is BACKEND_UNAVAILABLE naming it', () => {
    try {
      new DenseModel(specs.dot!, { device: 'tpu:0' });
      expect.unreachable();
    } catch (e) {
      expect(isEmbshardError(e) && e.code === 'BACKEND_UNAVAILABLE' && (e as Error).message.includes('tpu:0')).toBe(true);
    }
  });

  it('setParams / setState / setGrads replace the buffers and check their length first (CPU)', () => {
    const m = new DenseModel(specs.dot!, { optimizer: { type: 'adam', lr: 0.01 }, seed: 2 });
    const p = Float32Array.from({ length: m.params.length }, (_, i) => i * 1e-3);
    m.setParams(p);
    expect(m.params).toEqual(p);
    const st = Float32Array.from({ length: m.state.length }, (_, i) => (i % 7) * 0.5);
    m.setState(st);
    expect(m.state).toEqual(st);
    const g = m.grads;
    m.setGrads(g); // the live buffer itself: a no-op
    expect(m.grads).toBe(g);
    const before = m.params.slice();
    try {
      m.setParams(new Float32Array(3));
      expect.unreachable();
    } catch (e) {
      expect(isEmbshardError(e) && e.code === 'LENGTH_MISMATCH' && (e as Error).message.includes('params')).toBe(true);
    }
    expect(m.params).toEqual(before);
  });
});

describe.runIf(gpuModel)('the dense model on a GPU against the CPU dense model', () => {
  for (const [name, spec] of Object.entries(specs))
    for (const opt of ['sgd', 'adagrad', 'adam'] as DenseOptimizerType[])
      it(`${name} / ${opt}: same initial weights; logits, loss, all gradients and 5 updates agree`, async () => {
        const o = { optimizer: { type: opt, lr: opt === 'sgd' ? 0.1 : 0.01 }, seed: 5 };
        const cpu = new DenseModel(spec, o), gpu = new DenseModel(spec, { ...o, device: 'cuda:0' });
        expect(gpu.tensors).toEqual(cpu.tensors);
        expect(Buffer.compare(Buffer.from(gpu.params.buffer), Buffer.from(cpu.params.buffer))).toBe(0);
        const B = 37;
        for (let step = 0; step < 5; step++) {
          const { dense, sparse, labels } = inputs(spec, B, 100 + step);
          const out = (m: DenseModel) => {
            const logits = new Float32Array(B), sg = new Float32Array(sparse.length);
            return m.forwardBackward(dense, sparse, labels, B, { logits, sparseGrad: sg, gradScale: 0.5 }).then((r) => ({ r, logits, sg }));
          };
          const a = await out(cpu), b = await out(gpu);
          const [atol, rtol] = step === 0 ? [1e-5, 1e-3] : [1e-4, 1e-2];
          expect(Math.abs(b.r.loss - a.r.loss)).toBeLessThanOrEqual(atol + rtol * Math.abs(a.r.loss));
          expectClose(b.logits, a.logits, atol, rtol);
          expectClose(b.sg, a.sg, atol, rtol);
          expectClose(gpu.grads, cpu.grads, atol, rtol);
          expectClose(await gpu.forward(dense, sparse, B), await cpu.forward(dense, sparse, B), atol, rtol);
          await cpu.update();
          await gpu.update();
          expect(gpu.step).toBe(cpu.step);
          expectClose(gpu.params, cpu.params, atol, rtol);
          expectClose(gpu.state, cpu.state, atol, rtol);
        }
      });

  it('is deterministic: two GPU models with one seed give bit-identical losses and weights', async () => {
    const spec = specs.cross!;
    const run = async () => {
      const m = new DenseModel(spec, { optimizer: { type: 'adagrad', lr: 0.02 }, seed: 9, device: 'cuda:0' });
      const losses: number[] = [];
      for (let k = 0; k < 4; k++) {
        const { dense, sparse, labels } = inputs(spec, 64, k);
        losses.push((await m.forwardBackward(dense, sparse, labels, 64)).loss);
        await m.update();
      }
      return { losses, params: m.params.slice() };
    };
    const a = await run(), b = await run();
    expect(b.losses).toEqual(a.losses);
    expect(Buffer.compare(Buffer.from(b.params.buffer), Buffer.from(a.params.buffer))).toBe(0);
  });

  it('forwardBottom + forwardBackward({ bottomReady }) is bitwise one forwardBackward; a stale or missing bottom output is INVALID_ARGUMENT', async () => {
    const spec = specs.dot!;
    const run = async (split: boolean) => {
      const m = new DenseModel(spec, { optimizer: { type: 'adam', lr: 0.01 }, seed: 4, device: 'cuda:0' });
      const losses: number[] = [];
      for (let k = 0; k < 3; k++) {
        const { dense, sparse, labels } = inputs(spec, 16, 50 + k);
        const sg = new Float32Array(sparse.length);
        if (split) await m.forwardBottom(dense, 16);
        losses.push((await m.forwardBackward(dense, sparse, labels, 16, { sparseGrad: sg, bottomReady: split })).loss);
        await m.update();
      }
      return { losses, params: m.params.slice() };
    };
    const a = await run(true), b = await run(false);
    expect(a.losses).toEqual(b.losses);
    expect(Buffer.compare(Buffer.from(a.params.buffer), Buffer.from(b.params.buffer))).toBe(0);
    const m = new DenseModel(spec, { optimizer: { type: 'sgd', lr: 0.1 }, device: 'cuda:0' });
    const { dense, sparse, labels } = inputs(spec, 8, 1);
    await expect(m.native.forwardBackward(dense, sparse, labels, 8, { bottomReady: true })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await m.forwardBottom(dense, 8);
    m.setParams(m.params.slice());
    await expect(m.native.forwardBackward(dense, sparse, labels, 8, { bottomReady: true })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
  });

  it('setParams / setState / setGrads reach the device; bad lengths are LENGTH_MISMATCH before any copy', () => {
    const m = new DenseModel(specs.dot!, { optimizer: { type: 'adam', lr: 0.01 }, device: 'cuda:0' });
    const p = Float32Array.from({ length: m.params.length }, (_, i) => Math.sin(i));
    const s = Float32Array.from({ length: m.state.length }, (_, i) => Math.cos(i));
    const g = Float32Array.from({ length: m.params.length }, (_, i) => i % 5);
    m.setParams(p);
    m.setState(s);
    m.setGrads(g);
    expect(m.params).toEqual(p);
    expect(m.state).toEqual(s);
    expect(m.grads).toEqual(g);
    try {
      m.setState(new Float32Array(1));
      expect.unreachable();
    } catch (e) {
      expect(isEmbshardError(e) && e.code === 'LENGTH_MISMATCH').toBe(true);
    }
    expect(m.state).toEqual(s);
  });

  it('a missing GPU index is BACKEND_UNAVAILABLE', () => {
    try {
      new DenseModel(specs.dot!, { device: 'cuda:99' });
      expect.unreachable();
    } catch (e) {
      expect(isEmbshardError(e) && e.code === 'BACKEND_UNAVAILABLE').toBe(true);
    }
  });

  it('Trainer checkpoints cross devices byte for byte, and a GPU trainer tracks the CPU one', async () => {
    const cards = [60, 60, 60, 60, 60, 60];
    const src = new SyntheticSource({ batchSize: 64, cardinalities: cards, seed: 4 });
    const make = (device: string) =>
      new Trainer({
        model: specs.dot!,
        embeddings: embeddingsFor(src.features, src.tableRows, { dim: 16, optimizer: { type: 'adagrad', lr: 0.05 }, seed: 2 }),
        optimizer: { type: 'adagrad', lr: 0.02 },
        seed: 3,
        device,
      });
    const cpu = make('cpu'), gpu = make('cuda:0');
    for (let k = 0; k < 5; k++) {
      const lc = await cpu.step(src.batch(k)), lg = await gpu.step(src.batch(k));
      expect(Math.abs(lg - lc)).toBeLessThanOrEqual(1e-4 + 1e-2 * lc);
    }
    const root = mkdtempSync(join(tmpdir(), 'embshard-cuda-ck-'));
    try {
      await cpu.save(join(root, 'cpu'));
      const onGpu = await Trainer.load(join(root, 'cpu'), { device: 'cuda:0' });
      expect(onGpu.dense.device).toBe('cuda:0');
      expect(onGpu.stepCount).toBe(5);
      expect(Buffer.compare(Buffer.from(onGpu.dense.params.buffer), Buffer.from(cpu.dense.params.buffer))).toBe(0);
      expect(Buffer.compare(Buffer.from(onGpu.dense.state.buffer), Buffer.from(cpu.dense.state.buffer))).toBe(0);
      await onGpu.save(join(root, 'gpu'));
      const bin = (d: string) => readFileSync(join(root, d, 'dense.bin'));
      expect(Buffer.compare(bin('gpu'), bin('cpu'))).toBe(0);
      const back = await Trainer.load(join(root, 'gpu'));
      expect(back.dense.device).toBe('cpu');
      expect(Buffer.compare(Buffer.from(back.dense.params.buffer), Buffer.from(cpu.dense.params.buffer))).toBe(0);
      // the GPU-loaded trainer continues like the CPU one, to float rounding
      const [a, b] = [await cpu.step(src.batch(5)), await onGpu.step(src.batch(5))];
      expect(Math.abs(b - a)).toBeLessThanOrEqual(1e-5 + 1e-3 * a);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

describe.runIf(gpuModel)('dispose() of a GPU dense model', () => {
  it('returns its device memory at once: a model of 60% of the GPU can be built twice in a row; later calls are DISPOSED', async () => {
    const total = cuda.devices![0]!.totalMemory;
    // parameters + gradients + adagrad state: 12 bytes per parameter, nearly all in the first layer
    const denseIn = 1000, width = Math.floor((0.6 * total) / 12 / denseIn);
    const spec: DenseModelSpec = { denseIn, bottom: [width, 4], top: [4, 1], numSparse: 1, embDim: 4, interaction: 'concat' };
    let m: DenseModel | undefined;
    for (let k = 0; k < 2; k++) {
      m = new DenseModel(spec, { device: 'cuda:0', optimizer: { type: 'adagrad', lr: 0.1 } });
      expect(m.native.tensors[0]!.size).toBe(denseIn * width);
      m.dispose();
    }
    expect(() => m!.params).toThrow(expect.objectContaining({ code: 'DISPOSED' }));
    // more than the GPU holds: ALLOC_FAILED naming the device and the bytes
    expect(() => new DenseModel({ ...spec, bottom: [2 * width, 4] }, { device: 'cuda:0', optimizer: { type: 'adagrad', lr: 0.1 } })).toThrow(
      expect.objectContaining({ code: 'ALLOC_FAILED', message: expect.stringMatching(/^cuda:0: cannot allocate \d+ bytes for the dense model/) }),
    );
    expect(() => m!.forward(new Float32Array(denseIn), new Float32Array(4), 1)).toThrow(expect.objectContaining({ code: 'DISPOSED' }));
  });

  it('while a call is in flight: the call completes, then the memory goes back', async () => {
    const spec = specs.dot!, B = 16;
    const { dense, sparse, labels } = inputs(spec, B, 3);
    const m = new DenseModel(spec, { device: 'cuda:0', seed: 2 });
    const cpu = new DenseModel(spec, { seed: 2 });
    const call = m.forwardBackward(dense, sparse, labels, B);
    m.dispose();
    const want = await cpu.forwardBackward(dense, sparse, labels, B);
    expect((await call).loss).toBeCloseTo(want.loss, 5);
    await expect(Promise.resolve().then(() => m.update())).rejects.toMatchObject({ code: 'DISPOSED' });
  });
});

// device-handoff.test.ts — pooled embeddings and their gradients handed between an EmbeddingCollection and
// a dense model on the same GPU in device memory (forwardOnDevice, backward with DeviceArray gradients,
// DenseModel.forward / forwardBackward with DeviceArrays). The oracle is the same computation through host
// arrays, which the rest of the suite checks against the CPU and naive references: the device path runs
// the same kernels on the same device in the same order, so every value must be bitwise equal to it.
// Where no CUDA device exists (no GPU, not the emulation of `npm run test:cuda-emu`) these parts are
// skipped; what needs no device (the errors of a CPU collection / model) runs everywhere.
import { describe, it, expect } from 'vitest';
import { cudaBackend, resolveBackend } from '../../lib/backends.js';
import { DeviceArray } from '../../lib/device-array.js';
import { EmbeddingCollection, type CollectionConfig } from '../../lib/index.js';
import { JaggedBatch } from '../../lib/batch.js';
import { DenseModel, type DenseModelSpec } from '../../lib/train/dense.js';
import { Trainer, embeddingsFor } from '../../lib/train/index.js';
import { SyntheticSource } from '../../lib/data/index.js';
import * as ref from './reference.js';

const cuda = cudaBackend();
const gpuDense = cuda.available && typeof (resolveBackend('cuda:0') as unknown as { CudaDenseModel?: unknown }).CudaDenseModel === 'function';
const reason = !cuda.available ? `the CUDA backend is unavailable here: ${cuda.reason}` : 'the CUDA addon was built without cuBLAS (no GPU dense model)';
if (!gpuDense) console.log(`test/train/device-handoff: device parts skipped — ${reason}`);

const spec: DenseModelSpec = { denseIn: 5, bottom: [16, 8], top: [12, 1], numSparse: 3, embDim: 8, interaction: 'dot' };
const crossSpec: DenseModelSpec = { denseIn: 5, bottom: [8], top: [10, 1], numSparse: 3, embDim: 8, interaction: 'cross', crossLayers: 2, crossRank: 4 };

function collectionConfig(device: string): CollectionConfig {
  return {
    device,
    seed: 3,
    optimizer: { type: 'adagrad', lr: 0.05 },
    tables: [
      { name: 'a', rows: 40, dim: 8, features: ['fa'] },
      { name: 'b', rows: 25, dim: 8, pooling: 'mean', features: ['fb'] },
      { name: 's', rows: 25, dim: 8, pooling: 'none', features: ['fs'] },
      { name: 'c', rows: 30, dim: 8, features: ['fc'] },
    ],
  };
}

function batchOf(seed: number, B: number): JaggedBatch {
  const r = ref.rng(seed);
  const features = ['fa', 'fb', 'fs', 'fc'];
  const rows = [40, 25, 25, 30];
  const lengths = Int32Array.from({ length: features.length * B }, () => Math.floor(r() * 4));
  const ids: number[] = [];
  lengths.forEach((n, i) => {
    for (let k = 0; k < n; k++) ids.push(Math.floor(r() * rows[Math.floor(i / B)]!));
  });
  return JaggedBatch.fromLengths({ features, batchSize: B, lengths, ids: Int32Array.from(ids) });
}

async function download(a: DeviceArray, n: number): Promise<Float32Array> {
  const out = (await a.read()) as Float32Array;
  return out.subarray(0, n);
}

describe('device handoff where it cannot run', () => {
  it('a CPU collection refuses forwardOnDevice and device gradients with BACKEND_UNAVAILABLE', async () => {
    const ec = new EmbeddingCollection(collectionConfig('cpu'));
    expect(ec.outputsOnDevice).toBe(false);
    await expect(ec.forwardOnDevice(batchOf(1, 4))).rejects.toMatchObject({ code: 'BACKEND_UNAVAILABLE', message: expect.stringContaining("'cuda:N'") });
    ec.dispose();
  });

  it.runIf(gpuDense)('a CPU dense model refuses a DeviceArray, naming the argument', async () => {
    const m = new DenseModel(spec, { seed: 1 });
    const B = 4, pooled = DeviceArray.alloc('f32', B * 24);
    const dense = new Float32Array(B * 5), labels = new Float32Array(B);
    expect(() => m.forwardBackward(dense, pooled, labels, B)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('pooled') }));
    expect(() => m.forwardBackward(dense, new Float32Array(B * 24), labels, B, { sparseGrad: pooled })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('sparseGrad') }));
    pooled.free();
  });
});

describe.runIf(gpuDense)('device handoff on cuda:0', () => {
  for (const [name, s] of [['dot', spec], ['cross', crossSpec]] as const) {
    it(`${name}: forward and forwardBackward read pooled embeddings from, and write their gradients to, device memory bitwise as through the host`, async () => {
      const B = 6;
      const r = ref.rng(7);
      const dense = ref.randArray(r, B * s.denseIn, 0, 1);
      const pooled = ref.randArray(r, B * 24, -0.5, 0.5);
      const labels = Float32Array.from({ length: B }, (_, i) => i % 2);
      const host = new DenseModel(s, { seed: 4, device: 'cuda:0', optimizer: { type: 'adam', lr: 0.01 } });
      const dev = new DenseModel(s, { seed: 4, device: 'cuda:0', optimizer: { type: 'adam', lr: 0.01 } });
      const dPooled = await DeviceArray.from(pooled);
      const dGrad = DeviceArray.alloc('f32', B * 24);
      expect(await dev.forward(dense, dPooled, B)).toEqual(await host.forward(dense, pooled, B));
      for (let step = 0; step < 3; step++) {
        const hGrad = new Float32Array(B * 24);
        const a = await host.forwardBackward(dense, pooled, labels, B, { sparseGrad: hGrad, gradScale: 0.5 });
        const b = await dev.forwardBackward(dense, dPooled, labels, B, { sparseGrad: dGrad, gradScale: 0.5 });
        expect(b.loss).toBe(a.loss);
        expect(await download(dGrad, B * 24)).toEqual(hGrad);
        expect(dev.grads).toEqual(host.grads);
        await host.update();
        await dev.update();
      }
      expect(dev.params).toEqual(host.params);
      // bad device buffers are refused before the model runs
      const short = DeviceArray.alloc('f32', B * 24 - 1), ints = DeviceArray.alloc('i32', B * 24);
      expect(() => dev.forwardBackward(dense, short, labels, B)).toThrow(expect.objectContaining({ code: 'LENGTH_MISMATCH', message: expect.stringContaining('sparse') }));
      expect(() => dev.forwardBackward(dense, dPooled, labels, B, { sparseGrad: ints })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('sparseGrad') }));
      expect(dev.params).toEqual(host.params);
      for (const x of [dPooled, dGrad, short, ints]) x.free();
    });
  }

  it('forwardOnDevice holds forward()\'s values; a backward with device gradients updates the tables bitwise as host gradients do', async () => {
    const host = new EmbeddingCollection(collectionConfig('cuda:0'));
    const dev = new EmbeddingCollection(collectionConfig('cuda:0'));
    expect(dev.outputsOnDevice).toBe(true);
    const B = 5;
    for (let step = 0; step < 3; step++) {
      const batch = batchOf(10 + step, B);
      const h = await host.forward(batch);
      const d = await dev.forwardOnDevice(batch);
      const seqHost = h.sequences.fs!.values;
      expect(await download(d.pooled, B * dev.pooledDim)).toEqual(h.pooled);
      expect(await download(d.sequences, seqHost.length)).toEqual(seqHost);
      const r = ref.rng(100 + step);
      const gp = ref.randArray(r, B * host.pooledDim, -1, 1), gs = ref.randArray(r, seqHost.length, -1, 1);
      const a = await host.backward(h, { pooled: gp, sequences: { fs: gs } });
      const b = await dev.backward(d, { pooled: await DeviceArray.from(gp), sequences: await DeviceArray.from(gs) });
      expect(b).toEqual(a);
    }
    for (const t of ['a', 'b', 's', 'c']) {
      const ids = Int32Array.from({ length: 25 }, (_, i) => i);
      expect(dev.readRows(t, ids)).toEqual(host.readRows(t, ids));
      expect(dev.readState(t, ids)).toEqual(host.readState(t, ids));
    }
    host.dispose();
    dev.dispose();
  });

  it('a consumed output\'s arrays serve the next forward; keepOutput keeps them until release; bad gradients change nothing', async () => {
    const ec = new EmbeddingCollection(collectionConfig('cuda:0'));
    const B = 4, batch = batchOf(3, B);
    const seqLen = batch.feature('fs').ids.length * 8;
    const grads = { pooled: DeviceArray.alloc('f32', B * ec.pooledDim), sequences: DeviceArray.alloc('f32', Math.max(1, seqLen)) };
    const o1 = await ec.forwardOnDevice(batch);
    await ec.backward(o1, grads);
    const o2 = await ec.forwardOnDevice(batch);
    expect(o2.pooled).toBe(o1.pooled); // handed back by the backward, reused
    await ec.backward(o2, grads, { keepOutput: true });
    const o3 = await ec.forwardOnDevice(batch);
    expect(o3.pooled).not.toBe(o2.pooled); // o2 is kept
    expect(await ec.release(o2)).toBe(2);
    expect(await ec.release(o2)).toBe(0); // released once
    const before = ec.readRows('a', Int32Array.from({ length: 40 }, (_, i) => i));
    const short = DeviceArray.alloc('f32', B * ec.pooledDim - 1);
    await expect(ec.backward(o3, { pooled: short, sequences: grads.sequences })).rejects.toMatchObject({ code: 'GRAD_SIZE_MISMATCH', message: expect.stringContaining('pooled') });
    await expect(ec.backward(o3, { pooled: grads.pooled })).rejects.toMatchObject({ code: 'GRAD_SIZE_MISMATCH', message: expect.stringContaining('sequences') });
    await expect(ec.backward(o3, { pooled: DeviceArray.alloc('i32', B * ec.pooledDim), sequences: grads.sequences })).rejects.toMatchObject({ code: 'GRAD_SIZE_MISMATCH' });
    expect(ec.readRows('a', Int32Array.from({ length: 40 }, (_, i) => i))).toEqual(before);
    await ec.backward(o3, grads);
    ec.dispose();
  });

  it('dynamic tables keep forward() on the host: forwardOnDevice is INVALID_ARGUMENT', async () => {
    const ec = new EmbeddingCollection({ device: 'cuda:0', optimizer: { type: 'sgd', lr: 0.1 }, tables: [{ name: 'd', rows: 'dynamic', capacity: 64, dim: 8, features: ['fd'] }] });
    expect(ec.outputsOnDevice).toBe(false);
    const b = JaggedBatch.fromLengths({ features: ['fd'], batchSize: 2, lengths: Int32Array.from([1, 1]), ids: Int32Array.from([5, 9]) });
    await expect(ec.forwardOnDevice(b)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('dynamic') });
    ec.dispose();
  });

  it('a Trainer with both halves on cuda:0 hands over in device memory and trains, predicts and evaluates bitwise as through the host', async () => {
    const src = new SyntheticSource({ batchSize: 32, cardinalities: [60, 40, 50], numDense: 5, seed: 5 });
    const make = () => embeddingsFor(src.features, src.tableRows, { dim: 8, optimizer: { type: 'adagrad', lr: 0.05 }, seed: 2, device: 'cuda:0' });
    const embDev = make(), embHost = make();
    const opts = { model: spec, device: 'cuda:0', seed: 9, optimizer: { type: 'adagrad' as const, lr: 0.02 } };
    const tDev = new Trainer({ ...opts, embeddings: embDev });
    const tHost = new Trainer({ ...opts, embeddings: embHost, handoff: 'host' });
    expect(tDev.handoff).toBe('device');
    expect(tHost.handoff).toBe('host');
    expect(() => new Trainer({ ...opts, embeddings: embHost, handoff: 'gpu' as never })).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringContaining('handoff') }));
    for (let k = 0; k < 4; k++) {
      const batch = src.batch(k);
      expect(await tDev.step(batch)).toBe(await tHost.step(batch));
    }
    expect(tDev.dense.params).toEqual(tHost.dense.params);
    // predictions and evaluation hand over the same way
    const held = [src.batch(10), src.batch(11)];
    expect(await tDev.predict(held[0]!)).toEqual(await tHost.predict(held[0]!));
    expect(await tDev.evaluate(held)).toEqual(await tHost.evaluate(held));
    for (const t of embDev.config.tables.map((x) => x.name)) {
      const ids = Int32Array.from({ length: 40 }, (_, i) => i);
      expect(embDev.readRows(t, ids)).toEqual(embHost.readRows(t, ids));
    }
    // dispose() frees both halves and the handoff's device gradient buffer; later steps are DISPOSED
    for (const t of [tDev, tHost]) {
      t.dispose();
      await expect(t.step(src.batch(12))).rejects.toMatchObject({ code: 'DISPOSED' });
    }
    expect(embDev.disposed && embHost.disposed).toBe(true);
  });
});

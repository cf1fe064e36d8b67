// model.test.ts — the whole dense model (bottom MLP → dot | cross | concat → top MLP → BCE) against the
// float64 reference: logits, loss, and every parameter's and every pooled-embedding input's gradient
// against central finite differences of the reference loss. Plus presets, layouts and input checks.
import { describe, it, expect } from 'vitest';
import { DenseModel, PRESETS, parseLayers, resolveDenseSpec, type DenseModelSpec } from '../../lib/train/dense.js';
import { EmbshardError } from '../../lib/errors.js';
import * as ref from './reference.js';
import { Trainer, embeddingsFor } from '../../lib/train/index.js';

const tiny: Record<string, DenseModelSpec> = {
  dot: { denseIn: 3, bottom: [5, 3], top: [4, 1], numSparse: 3, embDim: 3, interaction: 'dot' },
  cross: { denseIn: 3, bottom: [4, 2], top: [3, 1], numSparse: 2, embDim: 3, interaction: 'cross', crossLayers: 2, crossRank: 2 },
  concat: { denseIn: 2, bottom: [3], top: [4, 2, 1], numSparse: 2, embDim: 2, interaction: 'concat' },
};

describe('DenseModel against the reference', () => {
  for (const [name, spec] of Object.entries(tiny)) {
    it(`${name}: logits, loss and all gradients match finite differences of the float64 reference`, async () => {
      const r = ref.rng(11);
      const m = new DenseModel(spec, { optimizer: { type: 'sgd', lr: 0.1 }, seed: 3 });
      expect(m.tensors.map((t) => [t.name, t.offset, t.size])).toEqual(ref.refTensors(spec).map((t) => [t.name, t.offset, t.size]));
      const B = 4;
      const dense = ref.randArray(r, B * spec.denseIn, 0, 2);
      const sparse = ref.randArray(r, B * spec.numSparse * spec.embDim);
      const labels = Float32Array.of(1, 0, 0, 1);
      const logits = new Float32Array(B), sg = new Float32Array(sparse.length);
      const res = await m.forwardBackward(dense, sparse, labels, B, { sparseGrad: sg, logits });

      const P = Float64Array.from(m.params), S = Float64Array.from(sparse);
      const wantLogits = ref.denseForward(spec, P, dense, S, B);
      expect(ref.worstRatio(logits, wantLogits, 1e-5, 1e-4)).toBeLessThanOrEqual(1);
      expect(ref.worstRatio(await m.forward(dense, sparse, B), wantLogits, 1e-5, 1e-4)).toBeLessThanOrEqual(1);
      const L = () => ref.bce(ref.denseForward(spec, P, dense, S, B), labels);
      expect(res.loss).toBeCloseTo(L(), 5);
      expect(ref.worstRatio(m.grads, ref.fdGradient(L, P), 2e-5, 2e-3)).toBeLessThanOrEqual(1);
      expect(ref.worstRatio(sg, ref.fdGradient(L, S), 2e-5, 2e-3)).toBeLessThanOrEqual(1);
    });
  }

  it('gradScale scales every gradient (data-parallel averaging)', async () => {
    const spec = tiny.dot!;
    const r = ref.rng(12);
    const B = 3;
    const dense = ref.randArray(r, B * spec.denseIn), sparse = ref.randArray(r, B * spec.numSparse * spec.embDim), y = Float32Array.of(1, 0, 1);
    const a = new DenseModel(spec, { seed: 1 }), b = new DenseModel(spec, { seed: 1 });
    const ga = new Float32Array(sparse.length), gb = new Float32Array(sparse.length);
    await a.forwardBackward(dense, sparse, y, B, { sparseGrad: ga });
    await b.forwardBackward(dense, sparse, y, B, { sparseGrad: gb, gradScale: 0.25 });
    expect(ref.worstRatio(b.grads, Array.from(a.grads, (v) => v * 0.25), 1e-9, 1e-6)).toBeLessThanOrEqual(1);
    expect(ref.worstRatio(gb, Array.from(ga, (v) => v * 0.25), 1e-9, 1e-6)).toBeLessThanOrEqual(1);
  });

  it('forwardBottom then forwardBackward with bottomReady: the reference\'s logits and bitwise the same loss and gradients as one call', async () => {
    for (const spec of Object.values(tiny)) {
      const r = ref.rng(5);
      const B = 4;
      const dense = ref.randArray(r, B * spec.denseIn, 0, 2);
      const sparse = ref.randArray(r, B * spec.numSparse * spec.embDim);
      const labels = Float32Array.of(0, 1, 1, 0);
      const run = async (split: boolean) => {
        const m = new DenseModel(spec, { optimizer: { type: 'adam', lr: 0.01 }, seed: 9 });
        const losses: number[] = [];
        const logits = new Float32Array(B), sg = new Float32Array(sparse.length);
        for (let k = 0; k < 2; k++) {
          if (split) await m.forwardBottom(dense, B);
          losses.push((await m.forwardBackward(dense, sparse, labels, B, { sparseGrad: sg, logits, bottomReady: split })).loss);
          if (k === 0) expect(ref.worstRatio(logits, ref.denseForward(spec, Float64Array.from(m.params), dense, Float64Array.from(sparse), B), 1e-5, 1e-4)).toBeLessThanOrEqual(1);
          await m.update();
        }
        return { losses, params: Float32Array.from(m.params), grads: Float32Array.from(m.grads), sg: Float32Array.from(sg) };
      };
      const a = await run(true), b = await run(false);
      expect(a.losses).toEqual(b.losses);
      for (const k of ['params', 'grads', 'sg'] as const) expect(Buffer.compare(Buffer.from(a[k].buffer), Buffer.from(b[k].buffer))).toBe(0);
    }
  });

  it('bottomReady without a kept bottom output (none, another array, after update or setParams) is INVALID_ARGUMENT', async () => {
    const spec = tiny.dot!;
    const B = 2;
    const m = new DenseModel(spec, { optimizer: { type: 'sgd', lr: 0.1 }, seed: 1 });
    const dense = new Float32Array(B * spec.denseIn).fill(0.5), other = Float32Array.from(dense);
    const sparse = new Float32Array(B * spec.numSparse * spec.embDim).fill(0.1), labels = Float32Array.of(1, 0);
    const before = Float32Array.from(m.params);
    const fb = () => m.forwardBackward(dense, sparse, labels, B, { bottomReady: true });
    await expect(fb()).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/bottomReady/) });
    // the native model checks it too (a caller that skips the JS wrapper)
    await expect(m.native.forwardBackward(dense, sparse, labels, B, { bottomReady: true })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await m.forwardBottom(other, B);
    await expect(fb()).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await m.forwardBottom(dense, B);
    await m.update();
    await expect(fb()).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await m.forwardBottom(dense, B);
    m.setParams(before);
    await expect(fb()).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(() => m.forwardBottom(new Float32Array(3), B)).toThrow(expect.objectContaining({ code: 'LENGTH_MISMATCH' }));
    expect(Buffer.compare(Buffer.from(m.params.buffer), Buffer.from(before.buffer))).toBe(0);
  });

  it('update applies the optimizer to the gradients and counts steps', async () => {
    const spec = tiny.concat!;
    const m = new DenseModel(spec, { optimizer: { type: 'sgd', lr: 0.5 }, seed: 2 });
    const r = ref.rng(13);
    const B = 2;
    await m.forwardBackward(ref.randArray(r, B * 2), ref.randArray(r, B * 4), Float32Array.of(0, 1), B);
    const before = Float64Array.from(m.params), g = Float64Array.from(m.grads);
    await m.update(0.2);
    expect(m.step).toBe(1);
    expect(ref.worstRatio(m.params, before.map((p, i) => p - 0.2 * g[i]!), 1e-7, 1e-6)).toBeLessThanOrEqual(1);
  });
});

describe('initialisation', () => {
  it('is a pure function of the seed', () => {
    const a = new DenseModel('dlrm-criteo-kaggle', { seed: 5 }), b = new DenseModel('dlrm-criteo-kaggle', { seed: 5 });
    const c = new DenseModel('dlrm-criteo-kaggle', { seed: 6 });
    expect(Buffer.compare(Buffer.from(a.params.buffer), Buffer.from(b.params.buffer))).toBe(0);
    expect(Buffer.compare(Buffer.from(a.params.buffer), Buffer.from(c.params.buffer))).not.toBe(0);
  });

  it('draws weights with DLRM scales: std √(2/(fan_in+fan_out)) (sample std within 3 %)', () => {
    const m = new DenseModel('dlrm-criteo-kaggle', { seed: 1 });
    const w = m.tensor('top.0.weight'); // 512 × 367
    let s = 0, s2 = 0;
    for (const v of w) {
      s += v;
      s2 += v * v;
    }
    const mean = s / w.length, std = Math.sqrt(s2 / w.length - mean * mean);
    expect(Math.abs(mean)).toBeLessThan(0.002);
    expect(std / Math.sqrt(2 / (512 + 367))).toBeGreaterThan(0.97);
    expect(std / Math.sqrt(2 / (512 + 367))).toBeLessThan(1.03);
  });
});

describe('presets and specs', () => {
  const count = (s: DenseModelSpec) => {
    let n = 0, inDim = s.denseIn;
    for (const w of s.bottom) (n += (inDim + 1) * w), (inDim = w);
    const d = s.bottom[s.bottom.length - 1]!;
    const D = s.interaction === 'dot' ? d + ((s.numSparse + 1) * s.numSparse) / 2 : d + s.numSparse * s.embDim;
    if (s.interaction === 'cross') n += s.crossLayers! * (2 * D * s.crossRank! + D);
    inDim = D;
    for (const w of s.top) (n += (inDim + 1) * w), (inDim = w);
    return n;
  };

  it('dlrm-criteo-kaggle: 367 interaction columns, 475,985 parameters', () => {
    const m = new DenseModel('dlrm-criteo-kaggle');
    expect(m.native.interactionWidth).toBe(16 + (27 * 26) / 2);
    expect(m.params.length).toBe(count(PRESETS['dlrm-criteo-kaggle'].spec));
    expect(m.params.length).toBe(475_985);
  });

  it('dlrm-dcnv2: cross input 26·128 + 128 = 3456, 16,044,545 parameters, adagrad state as large', () => {
    const m = new DenseModel('dlrm-dcnv2');
    expect(m.native.interactionWidth).toBe(3456);
    expect(m.params.length).toBe(count(PRESETS['dlrm-dcnv2'].spec));
    expect(m.params.length).toBe(16_044_545);
    expect(m.state.length).toBe(m.params.length);
  });

  it('parses DLRM layer lists and rejects bad ones', () => {
    expect(parseLayers('13-512-256-64-16')).toEqual([13, 512, 256, 64, 16]);
    expect(() => parseLayers('13-0-4')).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG' }));
    expect(() => parseLayers('13--4')).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG' }));
  });

  it('rejects bad specs with INVALID_CONFIG naming the field', () => {
    const bad = (o: Partial<DenseModelSpec>, field: RegExp) => {
      try {
        resolveDenseSpec({ ...tiny.dot!, ...o });
      } catch (e) {
        expect(e).toBeInstanceOf(EmbshardError);
        expect((e as EmbshardError).code).toBe('INVALID_CONFIG');
        expect((e as Error).message).toMatch(field);
        return;
      }
      throw new Error('no error');
    };
    bad({ top: [4, 2] }, /top/);
    bad({ embDim: 4 }, /embDim/);
    bad({ bottom: [] }, /bottom/);
    bad({ interaction: 'fm' as 'dot' }, /interaction/);
    bad({ interaction: 'cross' }, /crossLayers/);
    expect(() => new DenseModel('dlrm-nope' as 'dlrm-dcnv2')).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG' }));
    // absurd sizes: INVALID_SIZE naming the field and the value as given
    expect(() => new DenseModel({ ...tiny.dot!, bottom: [1e9, 3] })).toThrow(expect.objectContaining({ code: 'INVALID_SIZE', message: 'bottom[0] must be an integer in [1, 1048576] (got 1000000000)' }));
    expect(() => new DenseModel({ ...tiny.cross!, crossLayers: 1e6 })).toThrow(
      expect.objectContaining({ code: 'INVALID_SIZE', message: 'crossLayers must be an integer in [1, 64] (got 1000000)' }),
    );
  });
});

describe('input checks (before any state changes)', () => {
  const spec = tiny.dot!;
  it('wrong sizes, bad labels, a second call in flight', async () => {
    const m = new DenseModel(spec, { seed: 1 });
    const before = m.params.slice();
    const B = 2;
    const dense = new Float32Array(B * 3), sparse = new Float32Array(B * 9);
    await expect(async () => m.forwardBackward(new Float32Array(5), sparse, Float32Array.of(0, 1), B)).rejects.toThrow(
      expect.objectContaining({ code: 'LENGTH_MISMATCH', message: expect.stringMatching(/dense/) }),
    );
    await expect(async () => m.forwardBackward(dense, new Float32Array(3), Float32Array.of(0, 1), B)).rejects.toThrow(
      expect.objectContaining({ code: 'LENGTH_MISMATCH', message: expect.stringMatching(/sparse/) }),
    );
    await expect(async () => m.forwardBackward(dense, sparse, Float32Array.of(0, 2), B)).rejects.toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/labels\[1\]/) }),
    );
    await expect(async () => m.forwardBackward(dense, sparse, Float32Array.of(0, NaN), B)).rejects.toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
    await expect(async () => m.update(-1)).rejects.toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(m.params).toEqual(before);
    expect(m.step).toBe(0);
    const first = m.forwardBackward(dense, sparse, Float32Array.of(0, 1), B);
    expect(() => m.forwardBackward(dense, sparse, Float32Array.of(0, 1), B)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    await first;
  });

  it.skipIf(process.env.EMBSHARD_CUDA_EMU === '1')('the dense model refuses devices other than cpu with BACKEND_UNAVAILABLE where no CUDA device is offered', () => {
    expect(() => new DenseModel(spec, { device: 'cuda:0' })).toThrow(expect.objectContaining({ code: 'BACKEND_UNAVAILABLE' }));
  });
});

describe('dispose()', () => {
  it('frees the model (after the call in flight, which completes); later calls are DISPOSED; the Trainer disposes both halves', async () => {
    const spec: DenseModelSpec = { denseIn: 3, bottom: [5, 4], top: [6, 1], numSparse: 2, embDim: 4, interaction: 'dot' };
    const B = 4, dense = Float32Array.from({ length: B * 3 }, (_, i) => i / 10), sparse = Float32Array.from({ length: B * 8 }, (_, i) => Math.sin(i));
    const labels = Float32Array.of(0, 1, 1, 0);
    const m = new DenseModel(spec, { seed: 1 }), twin = new DenseModel(spec, { seed: 1 });
    const call = m.forwardBackward(dense, sparse, labels, B);
    m.dispose();
    // while the call is still in flight, every other use is DISPOSED too (not "another call in flight")
    expect(() => m.forward(dense, sparse, B)).toThrow(expect.objectContaining({ code: 'DISPOSED' }));
    expect(() => m.tensors).toThrow(expect.objectContaining({ code: 'DISPOSED' }));
    expect((await call).loss).toBe((await twin.forwardBackward(dense, sparse, labels, B)).loss);
    expect(() => m.forward(dense, sparse, B)).toThrow(expect.objectContaining({ code: 'DISPOSED' }));
    expect(() => m.update()).toThrow(expect.objectContaining({ code: 'DISPOSED' }));
    expect(() => m.tensors).toThrow(expect.objectContaining({ code: 'DISPOSED' }));
    m.dispose(); // twice is harmless
    const emb = embeddingsFor(['a', 'b'], [10, 10], { dim: 4 });
    const t = new Trainer({ model: spec, embeddings: emb });
    t.dispose();
    expect(emb.disposed).toBe(true);
    expect(() => t.dense.tensors).toThrow(expect.objectContaining({ code: 'DISPOSED' }));
  });
});


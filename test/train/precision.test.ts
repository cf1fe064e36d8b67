// precision.test.ts — mixed precision ('bf16': every GEMM takes bf16 inputs and accumulates in fp32;
// weights, gradients and optimizer state stay fp32) against two independent oracles:
//  1. the float64 reference applied to the bf16-rounded GEMM inputs (reference.ts's bf16(), written from
//     the definition of round-to-nearest-even at 8 significant bits) — equal up to fp32 accumulation;
//  2. the fp32 result — within the error bf16's 8-bit mantissa allows: each rounded input is off by at most
//     2⁻⁸ relative, so a product a·b by at most 2⁻⁷ + 2⁻¹⁶, and a dot product Σ a·b by (2⁻⁷ + 2⁻¹⁶)·Σ|a||b|.
// For the whole model the layer errors compound through the network; there the check is the norm-wise
// relative error of logits and gradients against fp32, bounded by (number of GEMMs on the path)·2⁻⁷ — twice
// that for the pooled-embedding gradient, which the dot interaction's backward forms from nearly cancelling
// terms at initialisation (the bound is relative to |Σ a·b|, the rounding error scales with Σ|a||b|).
import { describe, it, expect } from 'vitest';
import { denseAddon } from '../../lib/train/binding.js';
import { DenseModel, type DenseModelSpec } from '../../lib/train/dense.js';
import * as ref from './reference.js';

const ops = denseAddon('cpu').denseOps;
const U = 2 ** -7 + 2 ** -16; // relative error bound of one product of two bf16-rounded numbers

// max_i |got_i − want_i| / bound_i ≤ 1
function withinBound(got: ArrayLike<number>, want: ArrayLike<number>, bound: ArrayLike<number>, slack = 1e-6): number {
  let worst = 0;
  for (let i = 0; i < got.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want[i]!) / (bound[i]! + slack));
  return worst;
}

const abs = (x: ArrayLike<number>) => Float64Array.from(x, Math.abs);

describe('bf16 linear layer', () => {
  const r = ref.rng(21);
  const B = 24, I = 40, O = 17;
  const x = ref.randArray(r, B * I), W = ref.randArray(r, O * I), b = ref.randArray(r, O), g = ref.randArray(r, B * O);
  const xr = ref.bf16Array(x), Wr = ref.bf16Array(W), gr = ref.bf16Array(g);

  it('forward: (bf16 x)·(bf16 W)ᵀ + b in fp32, within U·Σ|x||W| of the fp32 layer', () => {
    const y = ops.linearForward(x, B, I, O, W, b, false, 'bf16');
    expect(ref.worstRatio(y, ref.linear(xr, B, I, O, Wr, b), 1e-5, 1e-5)).toBeLessThanOrEqual(1);
    const bound = ref.linear(abs(x), B, I, O, abs(W), null).map((v) => U * v);
    expect(withinBound(y, ref.linear(x, B, I, O, W, b), bound)).toBeLessThanOrEqual(1);
  });

  it('backward: dW = (bf16 dy)ᵀ·(bf16 x), dx = (bf16 dy)·(bf16 W), db in fp32 from the unrounded dy', () => {
    const got = ops.linearBackward(x, g, B, I, O, W, 'bf16');
    const fp = ops.linearBackward(x, g, B, I, O, W, 'fp32');
    const dW = new Float64Array(O * I), dx = new Float64Array(B * I), dWb = new Float64Array(O * I), dxb = new Float64Array(B * I);
    for (let s = 0; s < B; s++)
      for (let o = 0; o < O; o++)
        for (let i = 0; i < I; i++) {
          dW[o * I + i] += gr[s * O + o]! * xr[s * I + i]!;
          dx[s * I + i] += gr[s * O + o]! * Wr[o * I + i]!;
          dWb[o * I + i] += U * Math.abs(g[s * O + o]! * x[s * I + i]!);
          dxb[s * I + i] += U * Math.abs(g[s * O + o]! * W[o * I + i]!);
        }
    expect(ref.worstRatio(got.dW, dW, 1e-5, 1e-5)).toBeLessThanOrEqual(1);
    expect(ref.worstRatio(got.dx, dx, 1e-5, 1e-5)).toBeLessThanOrEqual(1);
    expect(Array.from(got.db)).toEqual(Array.from(fp.db)); // the bias gradient is no GEMM: fp32 exactly
    expect(withinBound(got.dW, fp.dW, dWb)).toBeLessThanOrEqual(1);
    expect(withinBound(got.dx, fp.dx, dxb)).toBeLessThanOrEqual(1);
  });
});

describe('bf16 dot interaction (batched GEMMs)', () => {
  const r = ref.rng(22);
  const B = 6, d = 8, F = 5, w = d + ((F + 1) * F) / 2;
  const x = ref.randArray(r, B * d), e = ref.randArray(r, B * F * d);

  it('forward: x passes through in fp32; the pairs are dot products of bf16-rounded vectors', () => {
    const out = ops.dotInteractionForward(x, e, B, d, F, 'bf16');
    const want = ref.dotInteraction(ref.bf16Array(x), ref.bf16Array(e), B, d, F);
    for (let s = 0; s < B; s++) for (let k = 0; k < d; k++) want[s * w + k] = x[s * d + k]!;
    expect(ref.worstRatio(out, want, 1e-5, 1e-5)).toBeLessThanOrEqual(1);
    const bound = ref.dotInteraction(abs(x), abs(e), B, d, F).map((v) => U * v);
    expect(withinBound(out, ref.dotInteraction(x, e, B, d, F), bound)).toBeLessThanOrEqual(1);
  });

  it('backward: within U·Σ|g||T| of the fp32 gradients', () => {
    const g = ref.randArray(r, B * w);
    const got = ops.dotInteractionBackward(x, e, g, B, d, F, 'bf16');
    const fp = ops.dotInteractionBackward(x, e, g, B, d, F, 'fp32');
    // |∂/∂T_i| ≤ Σ_j |g_ij||T_j|: the same backward on absolute values, scaled by U
    const ab = ops.dotInteractionBackward(Float32Array.from(x, Math.abs), Float32Array.from(e, Math.abs), Float32Array.from(g, Math.abs), B, d, F, 'fp32');
    const passAbs = new Float64Array(B * d);
    for (let s = 0; s < B; s++) for (let k = 0; k < d; k++) passAbs[s * d + k] = Math.abs(g[s * w + k]!);
    const dxBound = Float64Array.from(ab.dx, (v, i) => U * (v - passAbs[i]!));
    expect(withinBound(got.dx, fp.dx, dxBound)).toBeLessThanOrEqual(1);
    expect(withinBound(got.de, fp.de, Float64Array.from(ab.de, (v) => U * v))).toBeLessThanOrEqual(1);
    expect(ref.relNorm(got.de, fp.de)).toBeGreaterThan(0); // really computed in bf16
  });
});

describe('bf16 DenseModel', () => {
  const specs: Record<string, { spec: DenseModelSpec; gemms: number }> = {
    // GEMMs on the longest gradient path: forward layers + their backward data GEMMs + the weight GEMM
    dot: { spec: { denseIn: 13, bottom: [64, 16], top: [64, 32, 1], numSparse: 8, embDim: 16, interaction: 'dot' }, gemms: 12 },
    cross: { spec: { denseIn: 13, bottom: [32, 16], top: [32, 1], numSparse: 4, embDim: 16, interaction: 'cross', crossLayers: 2, crossRank: 8 }, gemms: 16 },
  };
  for (const [name, { spec, gemms }] of Object.entries(specs))
    it(`${name}: logits, loss and gradients within ${gemms}·2⁻⁷ (norm-wise) of the fp32 model; weights and state stay fp32`, async () => {
      const r = ref.rng(23);
      const B = 64;
      const dense = ref.randArray(r, B * spec.denseIn, 0, 2), sparse = ref.randArray(r, B * spec.numSparse * spec.embDim);
      const labels = Float32Array.from({ length: B }, (_, i) => (i % 3 === 0 ? 1 : 0));
      const run = async (precision: 'fp32' | 'bf16') => {
        const m = new DenseModel(spec, { optimizer: { type: 'adagrad', lr: 0.01 }, seed: 5, precision });
        const logits = new Float32Array(B), sg = new Float32Array(sparse.length);
        const res = await m.forwardBackward(dense, sparse, labels, B, { logits, sparseGrad: sg });
        return { m, logits, sg, loss: res.loss, grads: m.grads.slice() };
      };
      const f = await run('fp32'), h = await run('bf16');
      expect(h.m.precision).toBe('bf16');
      expect(h.m.params).toBeInstanceOf(Float32Array);
      expect(h.m.params).toEqual(f.m.params); // same fp32 master weights from the same seed
      const tol = gemms * 2 ** -7;
      expect(ref.relNorm(h.logits, f.logits)).toBeLessThanOrEqual(tol);
      expect(Math.abs(h.loss - f.loss) / f.loss).toBeLessThanOrEqual(tol);
      expect(ref.relNorm(h.grads, f.grads)).toBeLessThanOrEqual(tol);
      expect(ref.relNorm(h.sg, f.sg)).toBeLessThanOrEqual(2 * tol);
      expect(ref.relNorm(h.grads, f.grads)).toBeGreaterThan(0); // not silently fp32
      await h.m.update();
      expect(h.m.state.length).toBe(h.m.params.length); // adagrad accumulators, fp32
    });

  it('rejects an unknown precision with INVALID_CONFIG naming the field, and bf16 on a GPU device', () => {
    const spec = specs.dot!.spec;
    expect(() => new DenseModel(spec, { precision: 'fp16' as 'bf16' })).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringMatching(/precision/) }));
    expect(() => new DenseModel(spec, { precision: 'bf16', device: 'cuda:0' })).toThrow(expect.objectContaining({ code: 'BACKEND_UNAVAILABLE' }));
  });
});

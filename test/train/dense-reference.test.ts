// dense-reference.test.ts — the whole CPU DenseModel against an analytic float64 backpropagation written
// here from the math (no finite differences, nothing from the addon): logits, loss, the gradient of every
// parameter and of the pooled embeddings, over odd shapes (batch 1, widths 1 and not multiples of 8 / 16,
// one-layer MLPs, no embeddings, many embedding features, rank-1 cross layers), extreme logits, gradScale as
// the sum-loss gradient, and mixed precision against the same reference with every GEMM input rounded to
// bf16 (reference.ts's bf16(), from the definition), on every GEMM backend built. The layout comes from
// reference.ts's refTensors.
import { describe, it, expect } from 'vitest';
import { DenseModel, type DenseModelSpec } from '../../lib/train/dense.js';
import { denseAddon } from '../../lib/train/binding.js';
import * as ref from './reference.js';

const ops = denseAddon('cpu').denseOps;
const BACKENDS = (['onednn', 'openblas', 'naive'] as const).filter((b) => ops.gemmInfo().built[b]);

/** Runs `body` with every dense GEMM on `backend`. */
async function onBackend<T>(backend: (typeof BACKENDS)[number], body: () => Promise<T>): Promise<T> {
  ops.forceGemmBackend(backend);
  try {
    return await body();
  } finally {
    ops.forceGemmBackend(null);
  }
}

type F64 = Float64Array;

/** The reference's GEMM-input rounding: bf16 round-to-nearest-even, or none. */
type Round = (a: ArrayLike<number>) => F64;
const exact: Round = (a) => Float64Array.from(a);
const toBf16: Round = (a) => Float64Array.from(a, ref.bf16);

/** C [M × N] = A [M × K] · Bᵀ (B stored [N × K]). */
function mulT(A: F64, Bt: F64, M: number, N: number, K: number): F64 {
  const C = new Float64Array(M * N);
  for (let m = 0; m < M; m++)
    for (let n = 0; n < N; n++) {
      let s = 0;
      for (let k = 0; k < K; k++) s += A[m * K + k]! * Bt[n * K + k]!;
      C[m * N + n] = s;
    }
  return C;
}

/** y = R(x)·R(W)ᵀ + b. */
function linF(R: Round, x: F64, B: number, inDim: number, outDim: number, W: F64, b: F64 | null): F64 {
  const y = mulT(R(x), R(W), B, outDim, inDim);
  if (b) for (let s = 0; s < B; s++) for (let o = 0; o < outDim; o++) y[s * outDim + o] += b[o]!;
  return y;
}

/** dW = R(dy)ᵀ·R(x), db = Σ_s dy (no GEMM: unrounded), dx = R(dy)·R(W). */
function linB(R: Round, x: F64, dy: F64, B: number, inDim: number, outDim: number, W: F64): { dW: F64; db: F64; dx: F64 } {
  const xr = R(x), dyr = R(dy), Wr = R(W);
  const dW = new Float64Array(outDim * inDim), db = new Float64Array(outDim), dx = new Float64Array(B * inDim);
  for (let s = 0; s < B; s++)
    for (let o = 0; o < outDim; o++) {
      const g = dyr[s * outDim + o]!;
      db[o] += dy[s * outDim + o]!;
      for (let i = 0; i < inDim; i++) {
        dW[o * inDim + i] += g * xr[s * inDim + i]!;
        dx[s * inDim + i] += g * Wr[o * inDim + i]!;
      }
    }
  return { dW, db, dx };
}

const reluOf = (y: F64): F64 => y.map((v) => (v > 0 ? v : 0));
/** dy where the layer's output is positive. */
const maskBy = (y: F64, dy: F64): F64 => dy.map((g, i) => (y[i]! > 0 ? g : 0));

export interface RefStep {
  logits: F64;
  loss: number;
  /** ∂(gradScale·loss)/∂params in the model's flat layout. */
  grads: F64;
  /** ∂(gradScale·loss)/∂pooled. */
  dSparse: F64;
}

/**
 * Forward and backward of the dense model in float64: bottom MLP (Linear + ReLU) → dot | concat [→ DCNv2
 * cross] → top MLP (Linear + ReLU, the last Linear only) → mean BCE of the logits (the stable softplus form).
 * `R` rounds every GEMM input (bf16 mixed precision), or nothing.
 */
export function refStep(s: DenseModelSpec, params: ArrayLike<number>, dense: ArrayLike<number>, sparse: ArrayLike<number>,
  labels: ArrayLike<number>, B: number, o: { gradScale?: number; R?: Round } = {}): RefStep {
  const R = o.R ?? exact, scale = o.gradScale ?? 1;
  const ts = new Map(ref.refTensors(s).map((t) => [t.name, t]));
  const P = (name: string) => Float64Array.from(Array.prototype.slice.call(params, ts.get(name)!.offset, ts.get(name)!.offset + ts.get(name)!.size) as number[]);
  const grads = new Float64Array(params.length);
  const put = (name: string, g: F64) => grads.set(g, ts.get(name)!.offset);
  const F = s.numSparse, d = s.bottom[s.bottom.length - 1]!, e = Float64Array.from(sparse);

  // bottom MLP
  const bot: F64[] = [];
  let h = Float64Array.from(dense), inDim = s.denseIn;
  s.bottom.forEach((w, i) => {
    h = reluOf(linF(R, h, B, inDim, w, P(`bottom.${i}.weight`), P(`bottom.${i}.bias`)));
    bot.push(h);
    inDim = w;
  });
  // interaction: T_b = [x_b; e_b1 … e_bF] (dot) or [x_b, e_b] (concat)
  const n = F + 1;
  const D = s.interaction === 'dot' ? d + (n * F) / 2 : d + F * s.embDim;
  const z0 = new Float64Array(B * D);
  const Tb = (b: number) => {
    const T = new Float64Array(n * d);
    T.set(h.subarray(b * d, b * d + d), 0);
    T.set(e.subarray(b * F * d, (b + 1) * F * d), d);
    return T;
  };
  for (let b = 0; b < B; b++) {
    z0.set(h.subarray(b * d, b * d + d), b * D);
    if (s.interaction === 'dot') {
      const T = Tb(b), Tr = R(T);
      let p = d;
      for (let i = 1; i < n; i++)
        for (let j = 0; j < i; j++) {
          let acc = 0;
          for (let k = 0; k < d; k++) acc += Tr[i * d + k]! * Tr[j * d + k]!;
          z0[b * D + p++] = acc;
        }
    } else z0.set(e.subarray(b * F * s.embDim, (b + 1) * F * s.embDim), b * D + d);
  }
  // cross layers: x_{l+1} = x0 ⊙ (U·(V·x_l) + b) + x_l
  const L = s.interaction === 'cross' ? s.crossLayers! : 0, r = s.crossRank ?? 0;
  const xs: F64[] = [z0], vs: F64[] = [], ws: F64[] = [];
  for (let l = 0; l < L; l++) {
    const v = linF(R, xs[l]!, B, D, r, P(`cross.${l}.V`), null);
    const w = linF(R, v, B, r, D, P(`cross.${l}.U`), P(`cross.${l}.bias`));
    vs.push(v);
    ws.push(w);
    xs.push(w.map((wi, i) => z0[i]! * wi + xs[l]![i]!));
  }
  // top MLP
  const top: F64[] = [];
  let t = xs[L]!;
  inDim = D;
  s.top.forEach((w, i) => {
    const y = linF(R, t, B, inDim, w, P(`top.${i}.weight`), P(`top.${i}.bias`));
    t = i + 1 < s.top.length ? reluOf(y) : y;
    top.push(t);
    inDim = w;
  });
  const logits = t;

  // loss and ∂loss/∂logit
  let loss = 0;
  let g: F64 = new Float64Array(B);
  for (let b = 0; b < B; b++) {
    const zb = logits[b]!, y = labels[b]!;
    loss += Math.max(zb, 0) - zb * y + Math.log1p(Math.exp(-Math.abs(zb)));
    const sig = zb >= 0 ? 1 / (1 + Math.exp(-zb)) : Math.exp(zb) / (1 + Math.exp(zb));
    g[b] = (scale * (sig - y)) / B;
  }
  loss /= B;
  // top MLP backward
  for (let k = s.top.length - 1; k >= 0; k--) {
    const out = s.top[k]!, inW = k === 0 ? D : s.top[k - 1]!;
    if (k + 1 < s.top.length) g = maskBy(top[k]!, g);
    const lb = linB(R, k === 0 ? xs[L]! : top[k - 1]!, g, B, inW, out, P(`top.${k}.weight`));
    put(`top.${k}.weight`, lb.dW);
    put(`top.${k}.bias`, lb.db);
    g = lb.dx;
  }
  // cross backward: g is ∂/∂x_{l+1}
  const acc = new Float64Array(B * D);
  for (let l = L - 1; l >= 0; l--) {
    const dw = g.map((gi, i) => gi * z0[i]!);
    for (let i = 0; i < B * D; i++) acc[i] += g[i]! * ws[l]![i]!;
    const lu = linB(R, vs[l]!, dw, B, r, D, P(`cross.${l}.U`));
    const lv = linB(R, xs[l]!, lu.dx, B, D, r, P(`cross.${l}.V`));
    put(`cross.${l}.U`, lu.dW);
    put(`cross.${l}.bias`, lu.db);
    put(`cross.${l}.V`, lv.dW);
    g = g.map((gi, i) => gi + lv.dx[i]!);
  }
  g = g.map((gi, i) => gi + acc[i]!);
  // interaction backward
  const dx = new Float64Array(B * d), dSparse = new Float64Array(e.length);
  for (let b = 0; b < B; b++) {
    for (let k = 0; k < d; k++) dx[b * d + k] = g[b * D + k]!;
    if (s.interaction === 'dot') {
      // z_ij = T_i·T_j: ∂/∂T_i += g_ij T_j and ∂/∂T_j += g_ij T_i, as the GEMM S·T with S = G + Gᵀ
      const S = new Float64Array(n * n);
      let p = d;
      for (let i = 1; i < n; i++) for (let j = 0; j < i; j++) S[i * n + j] = S[j * n + i] = g[b * D + p++]!;
      const dT = mulT(R(S), transpose(R(Tb(b)), n, d), n, d, n);
      for (let k = 0; k < d; k++) dx[b * d + k] += dT[k]!;
      dSparse.set(dT.subarray(d), b * F * d);
    } else dSparse.set(g.subarray(b * D + d, (b + 1) * D), b * F * s.embDim);
  }
  // bottom MLP backward
  g = dx;
  for (let k = s.bottom.length - 1; k >= 0; k--) {
    const out = s.bottom[k]!, inW = k === 0 ? s.denseIn : s.bottom[k - 1]!;
    g = maskBy(bot[k]!, g);
    const lb = linB(R, k === 0 ? Float64Array.from(dense) : bot[k - 1]!, g, B, inW, out, P(`bottom.${k}.weight`));
    put(`bottom.${k}.weight`, lb.dW);
    put(`bottom.${k}.bias`, lb.db);
    g = lb.dx;
  }
  return { logits, loss, grads, dSparse };
}

function transpose(A: F64, rows: number, cols: number): F64 {
  const T = new Float64Array(rows * cols);
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) T[j * rows + i] = A[i * cols + j]!;
  return T;
}

function maxAbs(a: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]!));
  return m;
}

/** Every element within 1e-4·max|want| + 1e-3·|want| (fp32 accumulation against float64). */
function close(got: ArrayLike<number>, want: ArrayLike<number>): number {
  return ref.worstRatio(got, want, 1e-4 * maxAbs(want) + 1e-30, 1e-3);
}

interface Case {
  spec: DenseModelSpec;
  B: number;
  labels?: 'zeros' | 'ones' | 'mixed';
}

const cases: Record<string, Case> = {
  'batch 1, every width 1, one layer each side': { spec: { denseIn: 1, bottom: [1], top: [1], numSparse: 1, embDim: 1, interaction: 'dot' }, B: 1 },
  'dot, 40 embedding features of width 3, three top layers': { spec: { denseIn: 5, bottom: [7, 3], top: [9, 5, 1], numSparse: 40, embDim: 3, interaction: 'dot' }, B: 3 },
  'dot without embeddings (numSparse 0)': { spec: { denseIn: 4, bottom: [6], top: [1], numSparse: 0, embDim: 6, interaction: 'dot' }, B: 5, labels: 'ones' },
  'dot, widths 17 and 9 and batch 130 (split over threads)': { spec: { denseIn: 13, bottom: [17, 9], top: [31, 1], numSparse: 5, embDim: 9, interaction: 'dot' }, B: 130 },
  'cross of rank 1, three layers, a single top layer': { spec: { denseIn: 3, bottom: [5], top: [1], numSparse: 2, embDim: 3, interaction: 'cross', crossLayers: 3, crossRank: 1 }, B: 4, labels: 'zeros' },
  'cross without embeddings, rank above the width': { spec: { denseIn: 2, bottom: [3, 2], top: [4, 1], numSparse: 0, embDim: 1, interaction: 'cross', crossLayers: 2, crossRank: 5 }, B: 1 },
  'concat, widths not multiples of 8 / 16': { spec: { denseIn: 7, bottom: [17, 9], top: [33, 1], numSparse: 3, embDim: 5, interaction: 'concat' }, B: 19 },
};

function inputs(c: Case, seed: number) {
  const r = ref.rng(seed);
  const { spec, B } = c;
  const dense = ref.randArray(r, B * spec.denseIn, 0, 2);
  const sparse = ref.randArray(r, B * spec.numSparse * spec.embDim);
  const labels = Float32Array.from({ length: B }, (_, i) => (c.labels === 'zeros' ? 0 : c.labels === 'ones' ? 1 : (i * 7) % 3 === 0 ? 1 : 0));
  return { dense, sparse, labels };
}

describe('DenseModel against the analytic float64 backpropagation', () => {
  for (const [backend, [name, c]] of BACKENDS.flatMap((b) => Object.entries(cases).map((e) => [b, e] as const)))
    it(`${backend}, ${name}: logits, loss, every parameter's and the pooled embeddings' gradients`, () => onBackend(backend, async () => {
      const { spec, B } = c;
      const m = new DenseModel(spec, { optimizer: { type: 'sgd', lr: 0.1 }, seed: 7 });
      try {
        expect(m.tensors.map((t) => [t.name, t.offset, t.size])).toEqual(ref.refTensors(spec).map((t) => [t.name, t.offset, t.size]));
        const { dense, sparse, labels } = inputs(c, 31);
        const want = refStep(spec, m.params, dense, sparse, labels, B);
        const logits = new Float32Array(B), sg = new Float32Array(sparse.length);
        const res = await m.forwardBackward(dense, spec.numSparse > 0 ? sparse : null, labels, B, { logits, sparseGrad: spec.numSparse > 0 ? sg : null });
        expect(close(logits, want.logits)).toBeLessThanOrEqual(1);
        expect(close(await m.forward(dense, spec.numSparse > 0 ? sparse : null, B), want.logits)).toBeLessThanOrEqual(1);
        expect(Math.abs(res.loss - want.loss)).toBeLessThanOrEqual(1e-5 * Math.max(1, want.loss));
        for (const t of m.tensors)
          expect(close(m.tensor(t.name, 'grads'), want.grads.subarray(t.offset, t.offset + t.size)), t.name).toBeLessThanOrEqual(1);
        expect(close(sg, want.dSparse)).toBeLessThanOrEqual(1);
        expect(maxAbs(want.grads)).toBeGreaterThan(0); // the comparison is not of zeros
      } finally {
        m.dispose();
      }
    }));

  it('gradScale = B gives the gradient of the summed loss (the reference with every gradient B times larger)', async () => {
    const c = cases['dot, 40 embedding features of width 3, three top layers']!;
    const { spec, B } = c;
    const m = new DenseModel(spec, { seed: 2 });
    const { dense, sparse, labels } = inputs(c, 5);
    const want = refStep(spec, m.params, dense, sparse, labels, B, { gradScale: B });
    const sg = new Float32Array(sparse.length);
    const res = await m.forwardBackward(dense, sparse, labels, B, { sparseGrad: sg, gradScale: B });
    expect(Math.abs(res.loss - want.loss)).toBeLessThanOrEqual(1e-5 * want.loss); // the loss itself stays the mean
    expect(close(m.grads, want.grads)).toBeLessThanOrEqual(1);
    expect(close(sg, want.dSparse)).toBeLessThanOrEqual(1);
    m.dispose();
  });

  it('extreme logits (|z| from 100 to 1e4, both labels): loss and gradients finite and equal to the reference', async () => {
    // one top layer over concat: logit = w·[x, e] + b, so a large bias and weights put it anywhere
    const spec: DenseModelSpec = { denseIn: 2, bottom: [3], top: [1], numSparse: 1, embDim: 2, interaction: 'concat' };
    const m = new DenseModel(spec, { seed: 4 });
    const B = 8;
    const r = ref.rng(9);
    const dense = ref.randArray(r, B * 2, 0, 1);
    const sparse = Float32Array.from({ length: B * 2 }, (_, i) => [150, -150, 1e3, -1e3, 1e4, -1e4, 120, -120][i >> 1]! / 2);
    const labels = Float32Array.of(1, 0, 0, 1, 1, 1, 0, 0);
    const p = Float32Array.from(m.params);
    const w = m.tensors.find((t) => t.name === 'top.0.weight')!;
    p.fill(0, w.offset, w.offset + 3); // the bottom output does not move the logit…
    p[w.offset + 3] = 1; // …the embedding does: z = e_0 + e_1 = ±100 … ±1e4
    p[w.offset + 4] = 1;
    m.setParams(p);
    const want = refStep(spec, p, dense, sparse, labels, B);
    expect(Math.min(...Array.from(want.logits, Math.abs))).toBeGreaterThanOrEqual(100);
    const logits = new Float32Array(B), sg = new Float32Array(sparse.length);
    const res = await m.forwardBackward(dense, sparse, labels, B, { logits, sparseGrad: sg });
    expect(Number.isFinite(res.loss)).toBe(true);
    expect(m.grads.every(Number.isFinite) && sg.every(Number.isFinite)).toBe(true);
    expect(Math.abs(res.loss - want.loss)).toBeLessThanOrEqual(1e-6 * want.loss);
    expect(close(logits, want.logits)).toBeLessThanOrEqual(1);
    expect(close(m.grads, want.grads)).toBeLessThanOrEqual(1);
    expect(close(sg, want.dSparse)).toBeLessThanOrEqual(1);
    m.dispose();
  });
});

describe('bf16 DenseModel against the reference with bf16-rounded GEMM inputs', () => {
  const bfCases = ['dot, widths 17 and 9 and batch 130 (split over threads)', 'cross of rank 1, three layers, a single top layer', 'concat, widths not multiples of 8 / 16'];
  for (const [backend, name] of BACKENDS.flatMap((b) => bfCases.map((n) => [b, n] as const)))
    it(`${backend}, ${name}: much nearer the rounded reference than the fp32 one; fp32 master weights`, () => onBackend(backend, async () => {
      const c = cases[name]!;
      const { spec, B } = c;
      const m = new DenseModel(spec, { seed: 7, precision: 'bf16', optimizer: { type: 'sgd', lr: 0.5 } });
      const { dense, sparse, labels } = inputs(c, 31);
      const p0 = Float32Array.from(m.params);
      const rounded = refStep(spec, p0, dense, sparse, labels, B, { R: toBf16 });
      const full = refStep(spec, p0, dense, sparse, labels, B);
      const logits = new Float32Array(B), sg = new Float32Array(sparse.length);
      await m.forwardBackward(dense, sparse, labels, B, { logits, sparseGrad: sg });
      // a rounding boundary can fall between fp32 and float64 intermediates: norm-wise, well below bf16's 2⁻⁸
      for (const [got, want, fp] of [[logits, rounded.logits, full.logits], [m.grads, rounded.grads, full.grads], [sg, rounded.dSparse, full.dSparse]] as const) {
        expect(ref.relNorm(got, want)).toBeLessThanOrEqual(1e-3);
        expect(ref.relNorm(got, want)).toBeLessThan(ref.relNorm(got, fp) / 4);
      }
      // the update is fp32 on fp32 master weights: p − lr·g exactly as float32 computes it
      const g = Float32Array.from(m.grads);
      await m.update();
      const want = p0.map((v, i) => Math.fround(v - Math.fround(0.5 * g[i]!)));
      expect(Buffer.compare(Buffer.from(m.params.buffer), Buffer.from(want.buffer))).toBe(0);
      expect(m.params.some((v) => v !== ref.bf16(v))).toBe(true); // not bf16 weights
      m.dispose();
    }));
});

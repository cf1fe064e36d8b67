// layers.test.ts — every dense kernel against the float64 reference (test/train/reference.ts): forward
// values, and gradients against central finite differences of Σ g ⊙ layer(·) for a fixed random g.
// Tolerances: float32 kernels vs float64 math, atol 2e-4 + rtol 2e-4 (FD error at h = 1e-6 is ~1e-9).
import { describe, it, expect } from 'vitest';
import { denseAddon } from '../../lib/train/binding.js';
import { loadAddon } from '../../lib/native.js';
import { EmbshardError } from '../../lib/errors.js';
import * as ref from './reference.js';

const ops = denseAddon('cpu').denseOps;
const TOL = [2e-4, 2e-4] as const;

function dot(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
  return s;
}

const BACKENDS = (['onednn', 'openblas', 'naive'] as const).filter((b) => ops.gemmInfo().built[b]);

// The naive float64 product alpha·op(A_i)·op(B_i) + bias + beta·C_i, ReLU'd when asked, for every batch entry.
function naiveGemm(ta: boolean, tb: boolean, M: number, N: number, K: number, alpha: number, A: ArrayLike<number>, Bm: ArrayLike<number>,
  beta: number, C0: ArrayLike<number>, o: { bias?: ArrayLike<number>; relu?: boolean; batch?: number } = {}): Float64Array {
  const nb = o.batch ?? 1;
  const want = new Float64Array(nb * M * N);
  for (let i = 0; i < nb; i++)
    for (let m = 0; m < M; m++)
      for (let n = 0; n < N; n++) {
        let s = 0;
        for (let k = 0; k < K; k++)
          s += (ta ? A[i * M * K + k * M + m]! : A[i * M * K + m * K + k]!) * (tb ? Bm[i * K * N + n * K + k]! : Bm[i * K * N + k * N + n]!);
        let v = alpha * s + beta * C0[i * M * N + m * N + n]! + (o.bias ? o.bias[n]! : 0);
        if (o.relu) v = Math.max(v, 0);
        want[i * M * N + m * N + n] = v;
      }
  return want;
}

describe('gemm', () => {
  const r = ref.rng(1);
  it('reports its backend, why, and which are built; oneDNN is the default where it is built', () => {
    const info = ops.gemmInfo();
    expect(BACKENDS).toContain(info.backend);
    expect(info.built.naive).toBe(true);
    expect(info.reason.length).toBeGreaterThan(0);
    if (info.built.onednn) {
      expect(info.backend).toBe('onednn');
      expect(info.reason).toMatch(/^oneDNN \d+\.\d+/);
    } else expect(info.reason).toMatch(/libdnnl-dev/);
  });

  for (const backend of BACKENDS)
    for (const [ta, tb] of [[false, false], [false, true], [true, false], [true, true]] as const)
      it(`${backend} transA=${ta} transB=${tb} matches the naive product`, () => {
        const M = 37, N = 530, K = 301; // odd sizes crossing the naive kernel's 32 / 256 / 512 blocks
        const A = ref.randArray(r, M * K), B = ref.randArray(r, K * N), C0 = ref.randArray(r, M * N);
        const C = C0.slice();
        ops.gemm(ta, tb, M, N, K, 0.5, A, B, 0.25, C, { backend });
        expect(ref.worstRatio(C, naiveGemm(ta, tb, M, N, K, 0.5, A, B, 0.25, C0), 1e-4, 1e-4)).toBeLessThanOrEqual(1);
      });

  for (const backend of BACKENDS)
    it(`${backend}: fused bias + ReLU over a batch of products equals the naive batched product`, () => {
      const M = 9, N = 23, K = 17, batch = 5;
      const A = ref.randArray(r, batch * M * K), B = ref.randArray(r, batch * K * N), bias = ref.randArray(r, N);
      for (const tb of [false, true]) {
        const C = new Float32Array(batch * M * N).fill(NaN);
        ops.gemm(false, tb, M, N, K, 1, A, B, 0, C, { backend, bias, relu: true, batch });
        const want = naiveGemm(false, tb, M, N, K, 1, A, B, 0, new Float64Array(batch * M * N), { bias, relu: true, batch });
        expect(want.some((v) => v === 0) && want.some((v) => v > 0)).toBe(true); // the ReLU clamps some, not all
        expect(ref.worstRatio(C, want, 1e-5, 1e-5)).toBeLessThanOrEqual(1);
      }
    });

  // bf16 inputs (8 significant bits, round to nearest even) with fp32 accumulation: the result is the
  // product of the bf16-rounded inputs up to fp32 accumulation error, and differs from the fp32 product
  // by at most (2·2⁻⁸ + 2⁻¹⁶)·Σ|a||b| (each input's relative rounding error is ≤ 2⁻⁸).
  for (const backend of BACKENDS)
    it(`${backend} bf16: the product of the bf16-rounded inputs, within 2⁻⁷·Σ|a||b| of the fp32 product`, () => {
      const M = 33, N = 70, K = 129;
      const A = ref.randArray(r, M * K), B = ref.randArray(r, K * N);
      for (const [ta, tb] of [[false, true], [true, false]] as const) {
        const C = new Float32Array(M * N);
        ops.gemm(ta, tb, M, N, K, 1, A, B, 0, C, { backend, precision: 'bf16' });
        const rounded = naiveGemm(ta, tb, M, N, K, 1, ref.bf16Array(A), ref.bf16Array(B), 0, C);
        expect(ref.worstRatio(C, rounded, 1e-5, 1e-5)).toBeLessThanOrEqual(1);
        const exact = naiveGemm(ta, tb, M, N, K, 1, A, B, 0, C);
        const absA = A.map(Math.abs), absB = B.map(Math.abs);
        const bound = naiveGemm(ta, tb, M, N, K, 2 ** -7 + 2 ** -16, absA, absB, 0, C);
        let worst = 0;
        for (let i = 0; i < C.length; i++) worst = Math.max(worst, Math.abs(C[i]! - exact[i]!) / (bound[i]! + 1e-6));
        expect(worst).toBeLessThanOrEqual(1);
        expect(ref.worstRatio(C, exact, 1e-6, 1e-6)).toBeGreaterThan(1); // bf16 really is coarser than fp32
      }
    });

  it('follows the thread pool size: 1 thread and the default both give the naive product, each repeatably', () => {
    const M = 300, N = 200, K = 150;
    const A = ref.randArray(r, M * K), B = ref.randArray(r, K * N);
    const want = naiveGemm(false, true, M, N, K, 1, A, B, 0, new Float64Array(M * N));
    const addon = loadAddon(), before = addon.threads();
    try {
      for (const n of [1, before]) {
        addon.setThreads(n);
        const C1 = new Float32Array(M * N), C2 = new Float32Array(M * N);
        ops.gemm(false, true, M, N, K, 1, A, B, 0, C1);
        ops.gemm(false, true, M, N, K, 1, A, B, 0, C2);
        expect(ref.worstRatio(C1, want, 1e-4, 1e-4)).toBeLessThanOrEqual(1);
        expect(Buffer.compare(Buffer.from(C1.buffer), Buffer.from(C2.buffer))).toBe(0);
      }
    } finally {
      addon.setThreads(before);
    }
  });

  it('bf16 rounding is round-to-nearest-even at the 8th significant bit (closed form)', () => {
    // 1 + 2⁻⁸ is a tie between 1 and 1 + 2⁻⁷: the even neighbour 1; 1 + 3·2⁻⁸ rounds up to 1 + 2⁻⁶.
    const C = new Float32Array(2);
    ops.gemm(false, false, 2, 1, 1, 1, Float32Array.of(1 + 2 ** -8, 1 + 3 * 2 ** -8), Float32Array.of(1), 0, C, { precision: 'bf16' });
    expect(Array.from(C)).toEqual([1, 1 + 2 ** -6]);
    expect([ref.bf16(1 + 2 ** -8), ref.bf16(1 + 3 * 2 ** -8)]).toEqual([1, 1 + 2 ** -6]);
  });

  it('beta = 0 overwrites C even when it holds NaN, on every backend', () => {
    for (const backend of BACKENDS) {
      const C = new Float32Array(6).fill(NaN);
      ops.gemm(false, false, 2, 3, 1, 1, Float32Array.of(1, 2), Float32Array.of(1, 2, 3), 0, C, { backend });
      expect(Array.from(C)).toEqual([1, 2, 3, 2, 4, 6]);
    }
  });

  it('forceGemmBackend moves every dense layer onto one backend and back', () => {
    const before = ops.gemmInfo().backend;
    try {
      ops.forceGemmBackend('naive');
      expect(ops.gemmInfo().backend).toBe('naive');
      expect(ops.gemmInfo().reason).toMatch(/forced/);
    } finally {
      ops.forceGemmBackend(null);
    }
    expect(ops.gemmInfo().backend).toBe(before);
    expect(() => ops.forceGemmBackend('mkl' as 'naive')).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });

  it('rejects a wrongly sized operand with LENGTH_MISMATCH naming it, and an unknown precision with INVALID_CONFIG', () => {
    const e = (() => {
      try {
        ops.gemm(false, false, 2, 2, 2, 1, new Float32Array(4), new Float32Array(3), 0, new Float32Array(4));
      } catch (err) {
        return err;
      }
    })();
    expect(e).toBeInstanceOf(EmbshardError);
    expect((e as EmbshardError).code).toBe('LENGTH_MISMATCH');
    expect((e as Error).message).toMatch(/\bB\b/);
    expect(() => ops.gemm(false, false, 1, 1, 1, 1, new Float32Array(1), new Float32Array(1), 0, new Float32Array(1), { precision: 'fp16' as 'bf16' }))
      .toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringMatching(/precision/) }));
  });
});

describe('linear', () => {
  const r = ref.rng(2);
  const B = 5, I = 7, O = 4;
  const x = ref.randArray(r, B * I), W = ref.randArray(r, O * I), b = ref.randArray(r, O), g = ref.randArray(r, B * O);

  it('forward equals x·Wᵀ + b, with and without bias, and ReLU(x·Wᵀ + b) with the fused activation', () => {
    expect(ref.worstRatio(ops.linearForward(x, B, I, O, W, b), ref.linear(x, B, I, O, W, b), ...TOL)).toBeLessThanOrEqual(1);
    expect(ref.worstRatio(ops.linearForward(x, B, I, O, W, null), ref.linear(x, B, I, O, W, null), ...TOL)).toBeLessThanOrEqual(1);
    expect(ref.worstRatio(ops.linearForward(x, B, I, O, W, b, true), ref.relu(ref.linear(x, B, I, O, W, b)), ...TOL)).toBeLessThanOrEqual(1);
  });

  it('dW, db, dx match finite differences', () => {
    const got = ops.linearBackward(x, g, B, I, O, W);
    const X = Float64Array.from(x), Wd = Float64Array.from(W), bd = Float64Array.from(b);
    const L = () => dot(g, ref.linear(X, B, I, O, Wd, bd));
    expect(ref.worstRatio(got.dW, ref.fdGradient(L, Wd), ...TOL)).toBeLessThanOrEqual(1);
    expect(ref.worstRatio(got.db, ref.fdGradient(L, bd), ...TOL)).toBeLessThanOrEqual(1);
    expect(ref.worstRatio(got.dx, ref.fdGradient(L, X), ...TOL)).toBeLessThanOrEqual(1);
  });

  it('gives the same result on every GEMM backend', () => {
    const Bb = 64, Ib = 300, Ob = 130;
    const xb = ref.randArray(r, Bb * Ib), Wb = ref.randArray(r, Ob * Ib), bb = ref.randArray(r, Ob), gb = ref.randArray(r, Bb * Ob);
    const want = ref.linear(xb, Bb, Ib, Ob, Wb, bb);
    try {
      for (const backend of BACKENDS) {
        ops.forceGemmBackend(backend);
        expect(ref.worstRatio(ops.linearForward(xb, Bb, Ib, Ob, Wb, bb), want, 1e-4, 1e-4)).toBeLessThanOrEqual(1);
        const bw = ops.linearBackward(xb, gb, Bb, Ib, Ob, Wb);
        // dx = g·W, checked against the naive product
        const dx = new Float64Array(Bb * Ib);
        for (let s = 0; s < Bb; s++) for (let i = 0; i < Ib; i++) {
          let acc = 0;
          for (let o = 0; o < Ob; o++) acc += gb[s * Ob + o]! * Wb[o * Ib + i]!;
          dx[s * Ib + i] = acc;
        }
        expect(ref.worstRatio(bw.dx, dx, 1e-4, 1e-4)).toBeLessThanOrEqual(1);
      }
    } finally {
      ops.forceGemmBackend(null);
    }
  });
});

describe('relu', () => {
  it('forward clamps and backward passes the gradient where the output is positive (finite differences)', () => {
    const r = ref.rng(3);
    // keep |x| ≥ 0.05 so the finite difference never straddles the kink
    const x = Float32Array.from(ref.randArray(r, 40), (v) => (v >= 0 ? v + 0.05 : v - 0.05));
    const g = ref.randArray(r, 40);
    const y = ops.reluForward(x);
    expect(Array.from(y)).toEqual(Array.from(ref.relu(x)).map(Math.fround));
    const X = Float64Array.from(x);
    const fd = ref.fdGradient(() => dot(g, ref.relu(X)), X);
    expect(ref.worstRatio(ops.reluBackward(y, g), fd, ...TOL)).toBeLessThanOrEqual(1);
  });
});

describe('dot interaction', () => {
  const r = ref.rng(4);
  const B = 3, d = 4, F = 5;
  const x = ref.randArray(r, B * d), e = ref.randArray(r, B * F * d);
  const w = d + ((F + 1) * F) / 2;

  it('has width d + (F+1)F/2 and equals the strict lower triangle of T·Tᵀ after x', () => {
    const out = ops.dotInteractionForward(x, e, B, d, F);
    expect(out.length).toBe(B * w);
    expect(ref.worstRatio(out, ref.dotInteraction(x, e, B, d, F), ...TOL)).toBeLessThanOrEqual(1);
    // closed-form spot check: the first pair is x·e_1 of sample 0
    let x0e1 = 0;
    for (let k = 0; k < d; k++) x0e1 += x[k]! * e[k]!;
    expect(out[d]).toBeCloseTo(x0e1, 5);
  });

  it('dx and de match finite differences', () => {
    const g = ref.randArray(r, B * w);
    const got = ops.dotInteractionBackward(x, e, g, B, d, F);
    const X = Float64Array.from(x), E = Float64Array.from(e);
    const L = () => dot(g, ref.dotInteraction(X, E, B, d, F));
    expect(ref.worstRatio(got.dx, ref.fdGradient(L, X), ...TOL)).toBeLessThanOrEqual(1);
    expect(ref.worstRatio(got.de, ref.fdGradient(L, E), ...TOL)).toBeLessThanOrEqual(1);
  });

  it('a batch large enough to be split across threads gives the reference result, forward and backward', () => {
    const Bl = 2048, dl = 4, Fl = 3, wl = dl + ((Fl + 1) * Fl) / 2;
    const xl = ref.randArray(r, Bl * dl), el = ref.randArray(r, Bl * Fl * dl), gl = ref.randArray(r, Bl * wl);
    expect(ref.worstRatio(ops.dotInteractionForward(xl, el, Bl, dl, Fl), ref.dotInteraction(xl, el, Bl, dl, Fl), ...TOL)).toBeLessThanOrEqual(1);
    // backward against the product rule written out: ∂z_ij/∂T_i = T_j, plus x's pass-through
    const n = Fl + 1, dT = new Float64Array(Bl * n * dl);
    const T = (s: number, i: number, k: number) => (i === 0 ? xl[s * dl + k]! : el[s * Fl * dl + (i - 1) * dl + k]!);
    for (let s = 0; s < Bl; s++) {
      for (let k = 0; k < dl; k++) dT[s * n * dl + k] = gl[s * wl + k]!;
      let p = dl;
      for (let i = 1; i < n; i++)
        for (let j = 0; j < i; j++, p++)
          for (let k = 0; k < dl; k++) {
            dT[(s * n + i) * dl + k] += gl[s * wl + p]! * T(s, j, k);
            dT[(s * n + j) * dl + k] += gl[s * wl + p]! * T(s, i, k);
          }
    }
    const got = ops.dotInteractionBackward(xl, el, gl, Bl, dl, Fl);
    const wantDx = new Float64Array(Bl * dl), wantDe = new Float64Array(Bl * Fl * dl);
    for (let s = 0; s < Bl; s++) {
      for (let k = 0; k < dl; k++) wantDx[s * dl + k] = dT[s * n * dl + k]!;
      for (let k = 0; k < Fl * dl; k++) wantDe[s * Fl * dl + k] = dT[s * n * dl + dl + k]!;
    }
    expect(ref.worstRatio(got.dx, wantDx, ...TOL)).toBeLessThanOrEqual(1);
    expect(ref.worstRatio(got.de, wantDe, ...TOL)).toBeLessThanOrEqual(1);
  });

  it('Criteo Kaggle shape: 26 features of dim 16 give 367 columns', () => {
    const out = ops.dotInteractionForward(new Float32Array(16), new Float32Array(26 * 16), 1, 16, 26);
    expect(out.length).toBe(367);
  });
});

describe('DCNv2 low-rank cross layers', () => {
  const r = ref.rng(5);
  const B = 3, D = 6, rank = 2;
  const x0 = ref.randArray(r, B * D);
  const layers = [0, 1, 2].map(() => ({ V: ref.randArray(r, rank * D), U: ref.randArray(r, D * rank), b: ref.randArray(r, D) }));

  it('forward equals x_{l+1} = x0 ⊙ (U V x_l + b) + x_l', () => {
    expect(ref.worstRatio(ops.crossForward(x0, B, D, rank, layers), ref.cross(x0, B, D, rank, layers), ...TOL)).toBeLessThanOrEqual(1);
  });

  it('gradients of x0, V, U and b match finite differences', () => {
    const g = ref.randArray(r, B * D);
    const got = ops.crossBackward(x0, g, B, D, rank, layers);
    const X = Float64Array.from(x0);
    const L64 = layers.map((l) => ({ V: Float64Array.from(l.V), U: Float64Array.from(l.U), b: Float64Array.from(l.b) }));
    const L = () => dot(g, ref.cross(X, B, D, rank, L64));
    expect(ref.worstRatio(got.dx0, ref.fdGradient(L, X), ...TOL)).toBeLessThanOrEqual(1);
    L64.forEach((l, i) => {
      expect(ref.worstRatio(got.layers[i]!.V, ref.fdGradient(L, l.V), ...TOL)).toBeLessThanOrEqual(1);
      expect(ref.worstRatio(got.layers[i]!.U, ref.fdGradient(L, l.U), ...TOL)).toBeLessThanOrEqual(1);
      expect(ref.worstRatio(got.layers[i]!.b, ref.fdGradient(L, l.b), ...TOL)).toBeLessThanOrEqual(1);
    });
  });
});

describe('sigmoid + binary cross-entropy from logits', () => {
  it('loss and dz match the textbook formula and its finite differences', () => {
    const r = ref.rng(6);
    const z = ref.randArray(r, 16, -4, 4);
    const y = Float32Array.from({ length: 16 }, (_, i) => i % 3 === 0 ? 1 : 0);
    const got = ops.bce(z, y);
    expect(got.loss).toBeCloseTo(ref.bce(z, y), 6);
    const Z = Float64Array.from(z);
    expect(ref.worstRatio(got.dz, ref.fdGradient(() => ref.bce(Z, y), Z), 1e-6, 1e-4)).toBeLessThanOrEqual(1);
  });

  it('stays finite and exact at extreme logits (closed form)', () => {
    const got = ops.bce(Float32Array.of(100, -100, 100, -100), Float32Array.of(1, 1, 0, 0));
    // per sample: log1p(e^-100) ≈ 3.7e-44, 100, 100, 3.7e-44 → mean 50
    expect(got.loss).toBeCloseTo(50, 10);
    expect(Array.from(got.dz).map((v) => Math.round(v * 4 * 1e6) / 1e6)).toEqual([0, -1, 1, 0]);
    expect(got.dz.every(Number.isFinite)).toBe(true);
  });
});

describe("a step's input check: the first value outside a range", () => {
  it('finds the first value outside [lo, hi] (NaN outside every range) as a linear scan does, in every chunk', () => {
    const r = ref.rng(8);
    const naive = (a: Float32Array, lo: number, hi: number) => a.findIndex((v) => !(v >= lo && v <= hi));
    const FLT_MAX = 3.4028234663852886e38;
    for (const n of [0, 1, 7, 4096, 4097, 10_000]) {
      const a = ref.randArray(r, n, 0, 1);
      expect(ops.firstOutside(a, 0, 1)).toBe(naive(a, 0, 1));
      for (const [at, v] of [[n - 1, NaN], [Math.floor(n / 2), 1.0000001], [Math.floor(n / 3), -0], [5000, Infinity], [4096, -1e-30]] as const) {
        if (at < 0 || at >= n) continue;
        const b = Float32Array.from(a);
        b[at] = v;
        for (const [lo, hi] of [[0, 1], [-FLT_MAX, FLT_MAX]]) expect(ops.firstOutside(b, lo!, hi!)).toBe(naive(b, lo!, hi!));
      }
    }
  });
});

describe('dense optimizers', () => {
  const r = ref.rng(7);
  const n = 50;
  const steps = [ref.randArray(r, n), ref.randArray(r, n), ref.randArray(r, n)];
  const p0 = ref.randArray(r, n);

  function run(type: 'sgd' | 'adagrad' | 'adam', cfg: { lr: number; eps?: number; beta1?: number; beta2?: number; weightDecay?: number }) {
    const p = p0.slice();
    const state = new Float32Array(type === 'sgd' ? 0 : type === 'adagrad' ? n : 2 * n);
    steps.forEach((g, t) => ops.optimizerStep({ type, ...cfg }, t + 1, p, g, state));
    return p;
  }

  it('sgd: w −= lr·(g + wd·w)', () => {
    const lr = 0.1, wd = 0.01;
    const want = Float64Array.from(p0);
    for (const g of steps) for (let i = 0; i < n; i++) want[i] = want[i]! - lr * (g[i]! + wd * want[i]!);
    expect(ref.worstRatio(run('sgd', { lr, weightDecay: wd }), want, 1e-6, 1e-5)).toBeLessThanOrEqual(1);
  });

  it('adagrad: s += g²; w −= lr·g/(√s + eps), accumulator starting at 0', () => {
    const lr = 0.05, eps = 1e-8;
    const want = Float64Array.from(p0), s = new Float64Array(n);
    for (const g of steps)
      for (let i = 0; i < n; i++) {
        s[i] = s[i]! + g[i]! * g[i]!;
        want[i] = want[i]! - (lr * g[i]!) / (Math.sqrt(s[i]!) + eps);
      }
    expect(ref.worstRatio(run('adagrad', { lr, eps }), want, 1e-6, 1e-5)).toBeLessThanOrEqual(1);
  });

  it('adam: bias-corrected moments', () => {
    const lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    const want = Float64Array.from(p0), m = new Float64Array(n), v = new Float64Array(n);
    steps.forEach((g, k) => {
      const t = k + 1;
      for (let i = 0; i < n; i++) {
        m[i] = b1 * m[i]! + (1 - b1) * g[i]!;
        v[i] = b2 * v[i]! + (1 - b2) * g[i]! * g[i]!;
        want[i] = want[i]! - (lr * (m[i]! / (1 - b1 ** t))) / (Math.sqrt(v[i]! / (1 - b2 ** t)) + eps);
      }
    });
    expect(ref.worstRatio(run('adam', { lr, beta1: b1, beta2: b2, eps }), want, 1e-6, 1e-4)).toBeLessThanOrEqual(1);
  });

  it('rejects an unknown optimizer with UNSUPPORTED_OPTIMIZER and leaves params untouched', () => {
    const p = p0.slice();
    expect(() => ops.optimizerStep({ type: 'lamb' as 'sgd', lr: 0.1 }, 1, p, steps[0]!, new Float32Array(0))).toThrow(
      expect.objectContaining({ code: 'UNSUPPORTED_OPTIMIZER' }),
    );
    expect(p).toEqual(p0);
  });
});

// cuda-layers.test.ts — the GPU twins of the dense layers (denseCudaOps, CUDA addon) against the same
// float64 reference and finite differences as the CPU layers. Runs only where lib/backends.ts finds a
// usable GPU; elsewhere it prints why it is skipped.
import { describe, it, expect } from 'vitest';
import { cudaBackend, resolveBackend } from '../../lib/backends.js';
import * as ref from './reference.js';

interface DenseCudaOps {
  available(): boolean;
  gemm(ta: boolean, tb: boolean, M: number, N: number, K: number, alpha: number, A: Float32Array, B: Float32Array, beta: number, C: Float32Array): void;
  linearForward(x: Float32Array, B: number, i: number, o: number, W: Float32Array, b: Float32Array | null, relu: boolean): Float32Array;
  linearBackward(x: Float32Array, dy: Float32Array, B: number, i: number, o: number, W: Float32Array): { dW: Float32Array; db: Float32Array; dx: Float32Array };
  reluBackward(y: Float32Array, dy: Float32Array): Float32Array;
  dotInteractionForward(x: Float32Array, e: Float32Array, B: number, d: number, F: number): Float32Array;
  dotInteractionBackward(x: Float32Array, e: Float32Array, g: Float32Array, B: number, d: number, F: number): { dx: Float32Array; de: Float32Array };
  bce(z: Float32Array, y: Float32Array): { loss: number; dz: Float32Array };
  optimizerStep(c: { type: string; lr: number }, t: number, p: Float32Array, g: Float32Array, s: Float32Array): void;
}

const cuda = cudaBackend();
if (!cuda.available) console.log(`test/train/cuda-layers: skipped — the CUDA backend is unavailable here: ${cuda.reason}`);
const ops = cuda.available ? (resolveBackend('cuda:0') as unknown as { denseCudaOps: DenseCudaOps }).denseCudaOps : undefined;
const TOL = [2e-4, 2e-4] as const;
const dot = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
  return s;
};

describe.skipIf(!ops)('dense layers on the GPU', () => {
  const r = ref.rng(31);

  it('gemm (all transposes) matches the naive product', () => {
    for (const [ta, tb] of [[false, false], [false, true], [true, false], [true, true]] as const) {
      const M = 33, N = 70, K = 41;
      const A = ref.randArray(r, M * K), B = ref.randArray(r, K * N), C0 = ref.randArray(r, M * N), C = C0.slice();
      ops!.gemm(ta, tb, M, N, K, 0.5, A, B, 0.25, C);
      const want = new Float64Array(M * N);
      for (let m = 0; m < M; m++) for (let n = 0; n < N; n++) {
        let s = 0;
        for (let k = 0; k < K; k++) s += (ta ? A[k * M + m]! : A[m * K + k]!) * (tb ? B[n * K + k]! : B[k * N + n]!);
        want[m * N + n] = 0.5 * s + 0.25 * C0[m * N + n]!;
      }
      expect(ref.worstRatio(C, want, 1e-4, 1e-4)).toBeLessThanOrEqual(1);
    }
  });

  it('linear forward (cuBLASLt bias / relu+bias epilogues) and backward match the reference', () => {
    const B = 5, I = 7, O = 4;
    const x = ref.randArray(r, B * I), W = ref.randArray(r, O * I), b = ref.randArray(r, O), g = ref.randArray(r, B * O);
    const y = ref.linear(x, B, I, O, W, b);
    expect(ref.worstRatio(ops!.linearForward(x, B, I, O, W, b, false), y, ...TOL)).toBeLessThanOrEqual(1);
    expect(ref.worstRatio(ops!.linearForward(x, B, I, O, W, b, true), ref.relu(y), ...TOL)).toBeLessThanOrEqual(1);
    const got = ops!.linearBackward(x, g, B, I, O, W);
    const X = Float64Array.from(x), Wd = Float64Array.from(W), bd = Float64Array.from(b);
    const L = () => dot(g, ref.linear(X, B, I, O, Wd, bd));
    expect(ref.worstRatio(got.dW, ref.fdGradient(L, Wd), ...TOL)).toBeLessThanOrEqual(1);
    expect(ref.worstRatio(got.db, ref.fdGradient(L, bd), ...TOL)).toBeLessThanOrEqual(1);
    expect(ref.worstRatio(got.dx, ref.fdGradient(L, X), ...TOL)).toBeLessThanOrEqual(1);
  });

  it('dot interaction forward and backward match the reference', () => {
    const B = 3, d = 4, F = 5;
    const x = ref.randArray(r, B * d), e = ref.randArray(r, B * F * d), g = ref.randArray(r, B * (d + 15));
    expect(ref.worstRatio(ops!.dotInteractionForward(x, e, B, d, F), ref.dotInteraction(x, e, B, d, F), ...TOL)).toBeLessThanOrEqual(1);
    const got = ops!.dotInteractionBackward(x, e, g, B, d, F);
    const X = Float64Array.from(x), E = Float64Array.from(e);
    const L = () => dot(g, ref.dotInteraction(X, E, B, d, F));
    expect(ref.worstRatio(got.dx, ref.fdGradient(L, X), ...TOL)).toBeLessThanOrEqual(1);
    expect(ref.worstRatio(got.de, ref.fdGradient(L, E), ...TOL)).toBeLessThanOrEqual(1);
  });

  it('relu backward, BCE and the optimizers match the CPU definitions', () => {
    const y = Float32Array.of(1, 0, 2, 0), dy = Float32Array.of(5, 6, 7, 8);
    expect(Array.from(ops!.reluBackward(y, dy))).toEqual([5, 0, 7, 0]);
    const z = ref.randArray(r, 16, -4, 4), lab = Float32Array.from({ length: 16 }, (_, i) => i % 2);
    const b = ops!.bce(z, lab);
    expect(b.loss).toBeCloseTo(ref.bce(z, lab), 6);
    const p = ref.randArray(r, 10), gr = ref.randArray(r, 10), s = new Float32Array(10);
    const want = Float64Array.from(p), acc = new Float64Array(10);
    for (let i = 0; i < 10; i++) (acc[i] = gr[i]! * gr[i]!), (want[i] = want[i]! - (0.1 * gr[i]!) / (Math.sqrt(acc[i]!) + 1e-8));
    ops!.optimizerStep({ type: 'adagrad', lr: 0.1 }, 1, p, gr, s);
    expect(ref.worstRatio(p, want, 1e-6, 1e-5)).toBeLessThanOrEqual(1);
  });
});

// dense-api.test.ts — the CPU DenseModel used as a hostile caller would: absurd layer sizes (a typed error
// before any allocation, and memory the system refuses as ALLOC_FAILED — both in child processes, since
// the failure they guard against ends the process), hyper-parameters beyond float32, NaN / ±Inf inputs,
// output arrays that share memory with inputs, writes while a call is in flight; every rejection leaves the
// model as it was. Also what every GEMM backend must share with IEEE arithmetic (0·NaN is NaN, so a NaN
// input reaches the gradients), the optimizers' closed forms over several steps through the model, a
// checkpoint-style round trip, and thread-count independence.
import { describe, it, expect } from 'vitest';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { DenseModel, type DenseModelSpec, type DenseOptimizerConfig } from '../../lib/train/dense.js';
import { denseAddon } from '../../lib/train/binding.js';
import { loadAddon, packageRoot } from '../../lib/native.js';
import * as ref from './reference.js';

const ops = denseAddon('cpu').denseOps;
const BACKENDS = (['onednn', 'openblas', 'naive'] as const).filter((b) => ops.gemmInfo().built[b]);
const spec: DenseModelSpec = { denseIn: 3, bottom: [5, 3], top: [4, 1], numSparse: 3, embDim: 3, interaction: 'dot' };

function batch(seed: number, B: number, s: DenseModelSpec = spec) {
  const r = ref.rng(seed);
  return {
    dense: ref.randArray(r, B * s.denseIn, 0, 2),
    sparse: ref.randArray(r, B * s.numSparse * s.embDim),
    labels: Float32Array.from({ length: B }, (_, i) => i % 2),
  };
}

const bits = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
const same = (a: Float32Array, b: Float32Array) => Buffer.compare(bits(a), bits(b)) === 0;

/** A fresh node that builds a DenseModel of `model` from the compiled package (under a `ulimit -v` in KiB); its stdout. */
function inChild(model: DenseModelSpec, ulimitKiB?: number): { status: number | null; out: string; err: string } {
  const dist = join(packageRoot, 'dist', 'lib', 'train', 'dense.js');
  const script = `
    const { DenseModel } = await import(${JSON.stringify(dist)});
    try { new DenseModel(${JSON.stringify(model)}, { optimizer: { type: 'sgd', lr: 0.1 } }); console.log('built'); }
    catch (e) { console.log(JSON.stringify({ name: e.name, code: e.code, message: e.message })); }`;
  // sh sets the limit, then becomes node with the arguments after the command string
  const r = spawnSync('/bin/sh', ['-c', `${ulimitKiB ? `ulimit -v ${ulimitKiB} && ` : ''}exec "$0" "$@"`, process.execPath, '--input-type=module', '-e', script], { encoding: 'utf8' });
  return { status: r.status, out: r.stdout.trim(), err: r.stderr };
}

describe('layer sizes', () => {
  it('0, negative, fractional, NaN, infinite or string widths are INVALID_CONFIG naming the field', () => {
    for (const w of [0, -3, 2.5, NaN, Infinity, '8'] as unknown as number[]) {
      for (const [field, s] of [['bottom[1]', { ...spec, bottom: [5, w] }], ['top[0]', { ...spec, top: [w, 1] }], ['denseIn', { ...spec, denseIn: w }]] as const)
        expect(() => new DenseModel(s), `${field} = ${String(w)}`).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringContaining(`model.${field}`) }));
      expect(() => new DenseModel({ ...spec, interaction: 'cross', crossLayers: 1, crossRank: w })).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringContaining('model.crossRank') }));
    }
  });

  it('a model whose buffers could not be Float32Arrays is INVALID_SIZE before anything is allocated', () => {
    // each width is allowed, the product is not: 2^40 bottom weights; 2^20 × 8.4M top weights after 4096 features
    for (const model of [
      { denseIn: 1 << 20, bottom: [1 << 20], top: [1], numSparse: 0, embDim: 1, interaction: 'dot' },
      { denseIn: 13, bottom: [16], top: [1 << 20, 1], numSparse: 4096, embDim: 16, interaction: 'dot' },
    ] as DenseModelSpec[]) {
      const r = inChild(model);
      expect(r.status, r.err).toBe(0);
      expect(JSON.parse(r.out)).toMatchObject({ name: 'EmbshardError', code: 'INVALID_SIZE', message: expect.stringMatching(/parameters/) });
    }
  });

  it('parameters the system has no memory for are ALLOC_FAILED, not the end of the process (a child with a capped address space)', () => {
    // 2^30 parameters (4 GiB) in an address space of 2 GiB
    const r = inChild({ denseIn: 1024, bottom: [1 << 20], top: [1], numSparse: 0, embDim: 1, interaction: 'dot' }, 2_000_000);
    expect(r.status, r.err).toBe(0);
    expect(JSON.parse(r.out)).toMatchObject({ name: 'EmbshardError', code: 'ALLOC_FAILED', message: expect.stringMatching(/parameters/) });
  });
});

describe('values', () => {
  it('optimizer values missing, not numbers, beyond float32, or betas that are 1 in float32 are INVALID_CONFIG naming them; update lr and gradScale beyond float32 INVALID_ARGUMENT; the model is unchanged', async () => {
    const cases = [['lr', {}], ['lr', { lr: '0.1' }], ['lr', { lr: 1e39 }], ['weightDecay', { lr: 0.1, weightDecay: 1e39 }], ['eps', { lr: 0.1, eps: 1e39 }], ['beta2', { lr: 0.1, beta2: -1e39 }], ['beta1', { lr: 0.1, beta1: 0.99999999 }]] as const;
    for (const [field, o] of cases)
      expect(() => new DenseModel(spec, { optimizer: { type: 'adam', ...o } as never }), JSON.stringify(o)).toThrow(expect.objectContaining({ code: 'INVALID_CONFIG', message: expect.stringMatching(new RegExp(`^optimizer\\.${field} `)) }));
    // 1 − 2^-25 is below 1 in double and 1 in float32: the message says so
    expect(() => new DenseModel(spec, { optimizer: { type: 'adam', lr: 0.1, beta1: 1 - 2 ** -25 } })).toThrow(/rounds to 1/);
    new DenseModel(spec, { optimizer: { type: 'adam', lr: 0.1, beta1: 1 - 2 ** -24 } }).dispose(); // the largest float32 below 1
    const m = new DenseModel(spec, { optimizer: { type: 'sgd', lr: 0.1 }, seed: 1 });
    const { dense, sparse, labels } = batch(1, 2);
    await m.forwardBackward(dense, sparse, labels, 2);
    const p = Float32Array.from(m.params), g = Float32Array.from(m.grads);
    expect(() => m.update(1e39)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/^lr /) }));
    expect(() => m.forwardBackward(dense, sparse, labels, 2, { gradScale: -1e39 })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/gradScale/) }));
    expect(same(m.params, p) && same(m.grads, g) && m.step === 0).toBe(true);
    await m.update(3.4e38); // the largest float32 values are fine
    m.dispose();
  });

  it('a NaN or ±Inf dense feature is INVALID_ARGUMENT naming it, from forward, forwardBottom and forwardBackward; nothing changes', async () => {
    const m = new DenseModel(spec, { optimizer: { type: 'adagrad', lr: 0.1 }, seed: 1 });
    const B = 3;
    const { dense, sparse, labels } = batch(2, B);
    await m.forwardBackward(dense, sparse, labels, B);
    const p = Float32Array.from(m.params), g = Float32Array.from(m.grads), s = Float32Array.from(m.state);
    for (const v of [NaN, Infinity, -Infinity]) {
      const bad = Float32Array.from(dense);
      bad[7] = v; // sample 2, feature 1
      const named = expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/^dense\[7\] \(sample 2, feature 1\) is (NaN|-?Infinity)/) });
      expect(() => m.forward(bad, sparse, B)).toThrow(named);
      expect(() => m.forwardBottom(bad, B)).toThrow(named);
      expect(() => m.forwardBackward(bad, sparse, labels, B)).toThrow(named);
    }
    expect(same(m.params, p) && same(m.grads, g) && same(m.state, s)).toBe(true);
    // the model still works, and gives the gradients of before
    await m.forwardBackward(dense, sparse, labels, B);
    expect(same(m.grads, g)).toBe(true);
    m.dispose();
  });

  it('a NaN or ±Inf pooled embedding given to forward is INVALID_ARGUMENT naming it (a top ReLU would turn it into a finite, wrong logit)', async () => {
    const m = new DenseModel(spec, { seed: 1 });
    const B = 3;
    const { dense, sparse } = batch(2, B);
    const width = sparse.length / B;
    const good = await m.forward(dense, sparse, B);
    for (const v of [NaN, Infinity, -Infinity]) {
      const bad = Float32Array.from(sparse);
      bad[width + 2] = v; // sample 1, column 2
      expect(() => m.forward(dense, bad, B)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(new RegExp(`^pooled\\[${width + 2}\\] \\(sample 1, column 2\\) is (NaN|-?Infinity)`)) }));
    }
    expect(same(await m.forward(dense, sparse, B), good)).toBe(true);
    m.dispose();
  });

  for (const backend of BACKENDS)
    it(`${backend}: 0·NaN and 0·Inf are NaN in a GEMM, so a NaN pooled embedding makes the dense gradients NaN`, async () => {
      for (const v of [NaN, Infinity]) {
        const C = new Float32Array(2);
        ops.gemm(false, false, 2, 1, 1, 1, Float32Array.of(0, 1), Float32Array.of(v), 0, C, { backend });
        expect(Number.isNaN(C[0])).toBe(true);
        ops.gemm(true, false, 2, 1, 1, 1, Float32Array.of(0, 1), Float32Array.of(v), 0, C, { backend });
        expect(Number.isNaN(C[0])).toBe(true);
      }
      ops.forceGemmBackend(backend);
      try {
        // the NaN sample's top ReLU outputs are 0, so its logit and the loss stay finite: the non-finite
        // gradients are what shows the NaN (a trainer's step check relies on them)
        const m = new DenseModel(spec, { seed: 1 });
        const { dense, sparse, labels } = batch(3, 2);
        sparse[0] = NaN;
        await m.forwardBackward(dense, sparse, labels, 2);
        expect(m.grads.some(Number.isNaN)).toBe(true);
        m.dispose();
      } finally {
        ops.forceGemmBackend(null);
      }
    });
});

describe('outputs apart from inputs', () => {
  it('logits or sparseGrad sharing memory with an input or each other is INVALID_ARGUMENT naming both; nothing changes', async () => {
    const s1: DenseModelSpec = { ...spec, denseIn: 1 }; // dense [B × 1] has the logits' length
    const m = new DenseModel(s1, { seed: 1 });
    const B = 4;
    const { dense, sparse, labels } = batch(5, B, s1);
    const sg = new Float32Array(sparse.length);
    await m.forwardBackward(dense, sparse, labels, B);
    const g = Float32Array.from(m.grads), l = Float32Array.from(labels), d = Float32Array.from(dense);
    const both = new Float32Array(B + sparse.length); // one buffer, two views that overlap by one value
    for (const [opts, names] of [
      [{ logits: labels }, /^logits shares memory with labels/],
      [{ logits: dense }, /^logits shares memory with dense/],
      [{ sparseGrad: sparse }, /^sparseGrad shares memory with sparse/],
      [{ logits: both.subarray(0, B), sparseGrad: both.subarray(B - 1, B - 1 + sparse.length) }, /^logits shares memory with sparseGrad/],
      [{ logits: new Float32Array(sparse.buffer, 4, B) }, /^logits shares memory with sparse/],
    ] as const)
      expect(() => m.forwardBackward(dense, sparse, labels, B, { ...opts })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(names) }));
    expect(same(m.grads, g) && same(labels, l) && same(dense, d)).toBe(true);
    // arrays of their own, also views of one buffer side by side, are fine
    await m.forwardBackward(dense, sparse, labels, B, { logits: both.subarray(0, B), sparseGrad: both.subarray(B) });
    expect(same(m.grads, g)).toBe(true);
    await m.forwardBackward(dense, sparse, labels, B, { sparseGrad: sg });
    m.dispose();
  });
});

describe('calls in flight', () => {
  it('setParams, setGrads and setState are INVALID_ARGUMENT while a call is in flight, and the call computes with the old values', async () => {
    const m = new DenseModel(spec, { optimizer: { type: 'adagrad', lr: 0.1, eps: 1e-8 }, seed: 1 });
    const { dense, sparse, labels } = batch(4, 2);
    await m.forwardBackward(dense, sparse, labels, 2);
    const p = Float64Array.from(m.params), g = Float64Array.from(m.grads);
    const zeros = new Float32Array(m.params.length);
    const call = m.update();
    expect(() => m.setParams(zeros)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/^params .*in flight/) }));
    expect(() => m.setGrads(zeros)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/^grads /) }));
    expect(() => m.setState(zeros)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/^state /) }));
    expect(() => m.update()).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' })); // one call at a time
    await call;
    // one adagrad step from the values before: s = g², w −= lr·g/(|g| + eps)
    const want = p.map((w, i) => w - (0.1 * g[i]!) / (Math.abs(g[i]!) + 1e-8));
    expect(ref.worstRatio(m.params, want, 1e-6, 1e-5)).toBeLessThanOrEqual(1);
    m.setParams(zeros); // settled: writes are fine again, also after a rejected call
    expect(m.params.every((v) => v === 0)).toBe(true);
    await expect(m.forwardBackward(dense, sparse, labels, 2, { bottomReady: true })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    m.setParams(Float32Array.from(p));
    m.dispose();
  });
});

describe('optimizers through the model, several steps against the closed form', () => {
  // fixed gradients written with setGrads, so each update is the optimizer's rule alone
  const n = ref.refTensors(spec).reduce((s, t) => s + t.size, 0);
  const r = ref.rng(40);
  const G = [0, 1, 2, 3].map(() => ref.randArray(r, n));
  const run = async (optimizer: DenseOptimizerConfig, lrs: (number | undefined)[]) => {
    const m = new DenseModel(spec, { optimizer, seed: 2 });
    const p0 = Float64Array.from(m.params);
    for (const [k, lr] of lrs.entries()) {
      m.setGrads(G[k]!);
      await m.update(lr);
    }
    const out = { p0, params: Float64Array.from(m.params), state: Float64Array.from(m.state), step: m.step };
    m.dispose();
    return out;
  };

  it('sgd with weight decay; lr 0 leaves the weights bitwise as they were', async () => {
    const lrs = [0.1, 0.05, undefined, 0];
    const got = await run({ type: 'sgd', lr: 0.2, weightDecay: 0.01 }, lrs);
    const w = Float64Array.from(got.p0);
    lrs.forEach((lr, k) => {
      for (let i = 0; i < n; i++) w[i] = w[i]! - (lr ?? 0.2) * (G[k]![i]! + 0.01 * w[i]!);
    });
    expect(ref.worstRatio(got.params, w, 1e-7, 1e-5)).toBeLessThanOrEqual(1);
    const still = await run({ type: 'sgd', lr: 0.2, weightDecay: 0.5 }, [0, 0]);
    expect(Array.from(still.params)).toEqual(Array.from(still.p0));
  });

  it('adagrad with eps and weight decay: the accumulator grows at lr 0 too', async () => {
    const lrs = [0.1, 0, 0.3, undefined], eps = 1e-3, wd = 0.02;
    const got = await run({ type: 'adagrad', lr: 0.05, eps, weightDecay: wd }, lrs);
    const w = Float64Array.from(got.p0), s = new Float64Array(n);
    lrs.forEach((lr, k) => {
      for (let i = 0; i < n; i++) {
        const g = G[k]![i]! + wd * w[i]!;
        s[i] += g * g;
        w[i] = w[i]! - ((lr ?? 0.05) * g) / (Math.sqrt(s[i]!) + eps);
      }
    });
    expect(ref.worstRatio(got.params, w, 1e-7, 1e-5)).toBeLessThanOrEqual(1);
    expect(ref.worstRatio(got.state, s, 1e-7, 1e-5)).toBeLessThanOrEqual(1);
  });

  it('adam: both moments (momentum β1, β2), bias correction by the model\'s step count, eps, weight decay', async () => {
    const lrs = [0.01, 0.02, 0, undefined], b1 = 0.8, b2 = 0.95, eps = 1e-4, wd = 0.1;
    const got = await run({ type: 'adam', lr: 0.005, beta1: b1, beta2: b2, eps, weightDecay: wd }, lrs);
    expect(got.step).toBe(4);
    const w = Float64Array.from(got.p0), m = new Float64Array(n), v = new Float64Array(n);
    lrs.forEach((lr, k) => {
      const t = k + 1;
      for (let i = 0; i < n; i++) {
        const g = G[k]![i]! + wd * w[i]!;
        m[i] = b1 * m[i]! + (1 - b1) * g;
        v[i] = b2 * v[i]! + (1 - b2) * g * g;
        w[i] = w[i]! - ((lr ?? 0.005) * (m[i]! / (1 - b1 ** t))) / (Math.sqrt(v[i]! / (1 - b2 ** t)) + eps);
      }
    });
    expect(ref.worstRatio(got.params, w, 1e-6, 1e-4)).toBeLessThanOrEqual(1);
    expect(ref.worstRatio(got.state.subarray(0, n), m, 1e-7, 1e-4)).toBeLessThanOrEqual(1);
    expect(ref.worstRatio(got.state.subarray(n), v, 1e-8, 1e-4)).toBeLessThanOrEqual(1);
  });
});

describe('round trip and determinism', () => {
  it('params, state and step copied into a model built without initialisation continue bitwise as the original', async () => {
    for (const precision of ['fp32', 'bf16'] as const) {
      const opts = { optimizer: { type: 'adam' as const, lr: 0.01 }, seed: 5, precision };
      const a = new DenseModel(spec, opts);
      const steps = [0, 1, 2, 3, 4].map((k) => batch(50 + k, 4));
      const step = async (m: DenseModel, k: number) => {
        const x = steps[k]!;
        const l = (await m.forwardBackward(x.dense, x.sparse, x.labels, 4)).loss;
        await m.update();
        return l;
      };
      for (let k = 0; k < 3; k++) await step(a, k);
      const b = new DenseModel(spec, { ...opts, initialize: false });
      expect(b.params.every((v) => v === 0)).toBe(true);
      b.setParams(Float32Array.from(a.params));
      b.setState(Float32Array.from(a.state));
      b.step = a.step;
      for (let k = 3; k < 5; k++) expect(await step(b, k)).toBe(await step(a, k));
      expect(same(a.params, b.params) && same(a.state, b.state)).toBe(true);
      a.dispose();
      b.dispose();
    }
  });

  for (const backend of BACKENDS)
    it(`${backend}: 1, 2 and 3 threads and repeated runs give bitwise the same losses, gradients and weights (fp32 and bf16)`, async () => {
      const big: DenseModelSpec = { denseIn: 13, bottom: [40, 16], top: [48, 17, 1], numSparse: 6, embDim: 16, interaction: 'dot' };
      const cross: DenseModelSpec = { denseIn: 13, bottom: [24], top: [20, 1], numSparse: 3, embDim: 8, interaction: 'cross', crossLayers: 2, crossRank: 3 };
      const addon = loadAddon(), before = addon.threads();
      ops.forceGemmBackend(backend);
      try {
        for (const s of [big, cross])
          for (const precision of ['fp32', 'bf16'] as const) {
            const B = 160;
            const x = batch(60, B, s);
            const runs: { losses: number[]; params: Float32Array; sg: Float32Array }[] = [];
            for (const threads of [1, 2, 3, 1]) {
              addon.setThreads(threads);
              const m = new DenseModel(s, { optimizer: { type: 'adagrad', lr: 0.05 }, seed: 3, precision });
              const sg = new Float32Array(x.sparse.length), losses: number[] = [];
              for (let k = 0; k < 3; k++) {
                losses.push((await m.forwardBackward(x.dense, x.sparse, x.labels, B, { sparseGrad: sg })).loss);
                await m.update();
              }
              runs.push({ losses, params: Float32Array.from(m.params), sg });
              m.dispose();
            }
            for (const r of runs.slice(1)) {
              expect(r.losses).toEqual(runs[0]!.losses);
              expect(same(r.params, runs[0]!.params) && same(r.sg, runs[0]!.sg)).toBe(true);
            }
          }
      } finally {
        addon.setThreads(before);
        ops.forceGemmBackend(null);
      }
    });
});

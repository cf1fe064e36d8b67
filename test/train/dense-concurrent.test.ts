// dense-concurrent.test.ts — two CPU dense models of the same shape stepping at the same time (as the
// ranks of an in-process group do, each on its own worker thread) give bitwise the losses, gradients
// and weights of the same models stepped one after the other: the GEMM backend keeps no state that two
// concurrent calls of one shape could share.
import { describe, it, expect } from 'vitest';
import { DenseModel, type DenseModelSpec } from '../../lib/train/dense.js';
import { denseAddon } from '../../lib/train/binding.js';
import * as ref from './reference.js';

const ops = denseAddon('cpu').denseOps;
const BACKENDS = (['onednn', 'openblas', 'naive'] as const).filter((b) => ops.gemmInfo().built[b]);

const specs: DenseModelSpec[] = [
  { denseIn: 3, bottom: [5, 4], top: [6, 1], numSparse: 3, embDim: 4, interaction: 'dot' },
  { denseIn: 13, bottom: [64, 16], top: [96, 32, 1], numSparse: 8, embDim: 16, interaction: 'dot' },
];

async function run(spec: DenseModelSpec, B: number, concurrent: boolean, steps: number) {
  const models = [0, 1].map(() => new DenseModel(spec, { optimizer: { type: 'adagrad', lr: 0.05 }, seed: 3 }));
  const inputs = [0, 1].map((m) => {
    const r = ref.rng(17 + m);
    return {
      dense: ref.randArray(r, B * spec.denseIn, 0, 2),
      pooled: ref.randArray(r, B * spec.numSparse * spec.embDim, -0.5, 0.5),
      labels: Float32Array.from({ length: B }, () => (r() < 0.4 ? 1 : 0)),
    };
  });
  const losses: number[][] = [[], []];
  const one = async (m: number) => {
    const x = inputs[m]!;
    const r = await models[m]!.forwardBackward(x.dense, x.pooled, x.labels, B, { sparseGrad: new Float32Array(x.pooled.length) });
    losses[m]!.push(r.loss);
    await models[m]!.update(0.05);
  };
  for (let s = 0; s < steps; s++) {
    if (concurrent) await Promise.all([one(0), one(1)]);
    else for (const m of [0, 1]) await one(m);
  }
  return { losses, params: models.map((d) => Float32Array.from(d.params)) };
}

describe('DenseModel on concurrent threads', () => {
  for (const backend of BACKENDS)
    for (const [i, spec] of specs.entries()) {
      it(`${backend}: two models of one shape stepping at once match the sequential run bitwise (spec ${i})`, async () => {
        const B = 8, steps = 40;
        ops.forceGemmBackend(backend);
        try {
          const want = await run(spec, B, false, steps);
          for (let rep = 0; rep < 5; rep++) {
            const got = await run(spec, B, true, steps);
            expect(got.losses).toEqual(want.losses);
            for (const m of [0, 1]) expect(Buffer.compare(Buffer.from(got.params[m]!.buffer), Buffer.from(want.params[m]!.buffer))).toBe(0);
          }
        } finally {
          ops.forceGemmBackend(null);
        }
      });
    }
});

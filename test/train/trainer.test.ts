// trainer.test.ts — the Trainer end to end: learning a planted synthetic model to within 0.01 of the
// planted model's own AUC on held-out data; save → load → continue giving bit-identical losses and
// weights to an uninterrupted run (and a load after a save cut off between its renames); the LR schedule (closed form) reaching both optimizers; evaluate
// against metrics computed from the model's own logits (0 / 1 and soft labels); the metrics callback.
import { describe, it, expect } from 'vitest';
import { mkdtempSync, renameSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SyntheticSource, arrowSource, batchesToTable, plantedAUC, type Batch } from '../../lib/data/index.js';
import { tableFromIPC, tableToIPC } from 'apache-arrow';
import { Trainer, embeddingsFor, lrFactor, resolveSchedule, type StepMetrics } from '../../lib/train/index.js';
import { EmbshardError } from '../../lib/errors.js';
import type { DenseModelSpec } from '../../lib/train/dense.js';

const F = 8, ROWS = 500, DIM = 8;
const spec: DenseModelSpec = { denseIn: 13, bottom: [32, DIM], top: [32, 1], numSparse: F, embDim: DIM, interaction: 'dot' };
const cards = Array.from({ length: F }, () => ROWS);

function source(batchSize: number, extra: { sampleOffset?: number; numBatches?: number } = {}) {
  return new SyntheticSource({ batchSize, cardinalities: cards, seed: 1, ...extra });
}

function makeTrainer(opt: 'adagrad' | 'adam' | 'sgd', lr: number, schedule = {}) {
  const src = source(64);
  const emb = embeddingsFor(src.features, src.tableRows, { dim: DIM, optimizer: { type: opt === 'adam' ? 'adam' : opt, lr }, seed: 3 });
  return new Trainer({ model: spec, embeddings: emb, optimizer: { type: opt, lr }, seed: 7, schedule });
}

describe('Trainer on planted synthetic data', () => {
  it('reaches within 0.01 of the planted model\'s AUC on held-out samples', async () => {
    const train = source(512);
    const held: Batch[] = [];
    for await (const b of source(4096, { sampleOffset: 1e9, numBatches: 4 })) held.push(b);
    const best = plantedAUC(held).realized;
    const emb = embeddingsFor(train.features, train.tableRows, { dim: DIM, optimizer: { type: 'adagrad', lr: 0.05 }, seed: 1 });
    const t = new Trainer({ model: spec, embeddings: emb, optimizer: { type: 'adagrad', lr: 0.05 }, seed: 1 });
    for (let k = 0; k < 2000; k++) await t.step(train.batch(k));
    const ev = await t.evaluate(held);
    expect(ev.samples).toBe(16384);
    expect(best).toBeGreaterThan(0.8); // the planted signal is strong enough to be meaningful
    expect(ev.auc).toBeGreaterThan(best - 0.01);
    expect(ev.auc).toBeLessThanOrEqual(best + 0.005); // nothing beats the Bayes-optimal score beyond noise
  }, 60_000);
});

describe('save → load → continue', () => {
  for (const opt of ['adagrad', 'adam'] as const)
    it(`${opt}: gives bit-identical losses and weights to an uninterrupted run`, async () => {
      const data = source(64);
      const schedule = { warmupSteps: 3, decayStartStep: 5, decaySteps: 6 };
      const a = makeTrainer(opt, 0.02, schedule);
      const lossesA: number[] = [];
      for (let k = 0; k < 10; k++) lossesA.push(await a.step(data.batch(k)));

      const dir = mkdtempSync(join(tmpdir(), 'embshard-trainer-'));
      try {
        const b = makeTrainer(opt, 0.02, schedule);
        const lossesB: number[] = [];
        for (let k = 0; k < 4; k++) lossesB.push(await b.step(data.batch(k)));
        await b.save(join(dir, 'ck'));
        await b.step(data.batch(99)); // the live trainer moves on; the checkpoint must not
        const c = await Trainer.load(join(dir, 'ck'));
        expect(c.stepCount).toBe(4);
        for (let k = 4; k < 10; k++) lossesB.push(await c.step(data.batch(k)));
        expect(lossesB).toEqual(lossesA); // exact equality, not closeness
        expect(Buffer.compare(Buffer.from(c.dense.params.buffer), Buffer.from(a.dense.params.buffer))).toBe(0);
        expect(Buffer.compare(Buffer.from(c.dense.state.buffer), Buffer.from(a.dense.state.buffer))).toBe(0);
        const ids = Array.from({ length: ROWS }, (_, i) => i);
        const ea = a.embeddings as unknown as { readRows(t: string, ids: number[]): Float32Array };
        const ec = c.embeddings as unknown as { readRows(t: string, ids: number[]): Float32Array };
        expect(Buffer.compare(Buffer.from(ec.readRows('cat_3', ids).buffer), Buffer.from(ea.readRows('cat_3', ids).buffer))).toBe(0);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

  it('a save cut off between its two renames (process gone): load reads the new checkpoint beside the path', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-trainer-'));
    try {
      const data = source(64);
      const t = makeTrainer('sgd', 0.01);
      await t.step(data.batch(0));
      await t.save(join(dir, 'ck'));
      await t.step(data.batch(1));
      await t.save(join(dir, 'ck-new'));
      // what a save killed between its renames leaves: the old folder aside, the new one complete (pid > 2^22: gone)
      renameSync(join(dir, 'ck'), join(dir, '.ck.old-4194400-0a0b0c0d'));
      renameSync(join(dir, 'ck-new'), join(dir, '.ck.tmp-4194400-0a0b0c0d'));
      const c = await Trainer.load(join(dir, 'ck'));
      expect(c.stepCount).toBe(2);
      expect(Buffer.compare(Buffer.from(c.dense.params.buffer), Buffer.from(t.dense.params.buffer))).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('trainer.json altered after the save is CHECKPOINT_CORRUPT; unsealed (as earlier versions wrote it) it loads, unless a field is mangled', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-trainer-'));
    try {
      const t = makeTrainer('adagrad', 0.01);
      for await (const b of source(64, { numBatches: 2 })) await t.step(b);
      const ck = join(dir, 'ck');
      await t.save(ck);
      const path = join(ck, 'trainer.json');
      const { manifestSha256: seal, ...fields } = JSON.parse(readFileSync(path, 'utf8')) as Record<string, any>;
      const codeOf = async (m: object, options: object = {}): Promise<string> => {
        writeFileSync(path, JSON.stringify(m, null, 2));
        try {
          const t2 = await Trainer.load(ck, options);
          expect(Buffer.compare(Buffer.from(t2.dense.params.buffer), Buffer.from(t.dense.params.buffer))).toBe(0);
          expect([t2.stepCount, t2.denseBaseLr]).toEqual([t.stepCount, t.denseBaseLr]);
          t2.dispose();
          return 'loaded';
        } catch (e) {
          expect(e).toBeInstanceOf(EmbshardError);
          return (e as EmbshardError).code;
        }
      };
      expect(await codeOf({ ...fields, manifestSha256: seal })).toBe('loaded');
      expect(await codeOf({ ...fields, denseBaseLr: 0.5, manifestSha256: seal })).toBe('CHECKPOINT_CORRUPT');
      expect(await codeOf({ ...fields, steps: 0, manifestSha256: seal })).toBe('CHECKPOINT_CORRUPT');
      expect(await codeOf(fields)).toBe('loaded');
      // unsealed, a field renamed (each was read as missing or ignored), of the wrong kind, or a value the model refuses
      const { seed, denseStep, ...rest } = fields;
      expect(await codeOf({ ...rest, seee: seed, denseStep })).toBe('CHECKPOINT_CORRUPT');
      expect(await codeOf({ ...rest, seed, denseStap: denseStep })).toBe('CHECKPOINT_CORRUPT');
      expect(await codeOf({ ...fields, dense: { ...fields.dense, file: undefined, fole: 'dense.bin' } })).toBe('CHECKPOINT_CORRUPT');
      expect(await codeOf({ ...fields, model: { ...fields.model, interaction: 'dOt' } })).toBe('CHECKPOINT_CORRUPT');
      expect(await codeOf({ ...fields, optimizer: { ...fields.optimizer, bepa2: 0.9 } })).toBe('CHECKPOINT_CORRUPT');
      expect(await codeOf({ ...fields, embeddingBaseLr: -1 })).toBe('CHECKPOINT_CORRUPT');
      // a bad option of the caller's stays the caller's error
      expect(await codeOf({ ...fields, manifestSha256: seal }, { precision: 'fp8' })).toBe('INVALID_CONFIG');
      t.dispose();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a corrupted dense file is refused with CHECKPOINT_CORRUPT; a missing folder with CHECKPOINT_MISSING', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-trainer-'));
    try {
      const t = makeTrainer('sgd', 0.01);
      await t.save(join(dir, 'ck'));
      const f = join(dir, 'ck', 'dense.bin');
      const buf = readFileSync(f);
      buf[100] = buf[100]! ^ 0xff;
      writeFileSync(f, buf);
      await expect(Trainer.load(join(dir, 'ck'))).rejects.toThrow(expect.objectContaining({ code: 'CHECKPOINT_CORRUPT' }));
      await expect(Trainer.load(join(dir, 'nope'))).rejects.toThrow(expect.objectContaining({ code: 'CHECKPOINT_MISSING' }));
      for (const bad of [undefined, 7, '']) {
        await expect(t.save(bad as never)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
        await expect(Trainer.load(bad as never)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      }
      // a file in place of the folder
      await expect(Trainer.load(f)).rejects.toThrow(expect.objectContaining({ code: 'CHECKPOINT_MISSING', message: expect.stringMatching(/a file stands where its path names a folder/) }));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('learning-rate schedule', () => {
  it('warmup, constant, then quadratic decay (closed form)', () => {
    const s = resolveSchedule({ warmupSteps: 4, decayStartStep: 10, decaySteps: 5 });
    expect([0, 1, 2, 3, 4, 9].map((t) => lrFactor(s, t))).toEqual([0.25, 0.5, 0.75, 1, 1, 1]);
    [1, 0.64, 0.16, 0.04, 0, 0].forEach((want, i) => expect(lrFactor(s, [10, 11, 13, 14, 15, 100][i]!)).toBeCloseTo(want, 12));
    expect(() => resolveSchedule({ warmupSteps: -1 })).toThrow(EmbshardError);
  });

  it('without decayStartStep the decay begins where the warmup ends: no jump at the end of the warmup', () => {
    const s = resolveSchedule({ warmupSteps: 100, decaySteps: 500 });
    expect(s.decayStartStep).toBe(100);
    // closed form: (t+1)/100 in the warmup, then ((500 − (t − 100)) / 500)^2
    [[98, 0.99], [99, 1], [100, 1], [101, (499 / 500) ** 2], [350, 0.25], [600, 0]].forEach(([t, want]) => expect(lrFactor(s, t!)).toBeCloseTo(want!, 12));
    // given, it is taken as it is (as checkpoints store it)
    expect(resolveSchedule({ warmupSteps: 100, decayStartStep: 0, decaySteps: 500 }).decayStartStep).toBe(0);
  });

  it('fit: the same losses as step() by hand; stops at `steps` and closes the source', async () => {
    const data = source(32);
    const byHand = makeTrainer('adam', 0.01);
    const want: number[] = [];
    for (let k = 0; k < 3; k++) want.push(await byHand.step(data.batch(k)));
    const t = makeTrainer('adam', 0.01);
    const got: number[] = [];
    let closed = false;
    const batches = (function* () {
      try {
        for (let k = 0; ; k++) yield data.batch(k);
      } finally {
        closed = true;
      }
    })();
    const r = await t.fit(batches, { steps: 3, onStep: (s) => void got.push(s.loss) });
    expect(got).toEqual(want);
    expect(r).toMatchObject({ steps: 3, samples: 96 });
    expect(closed).toBe(true);
    expect(t.stepCount).toBe(3);
    // a source that ends first: every batch trained once
    const short = await makeTrainer('sgd', 0.1).fit([data.batch(0), data.batch(1)]);
    expect(short).toMatchObject({ steps: 2, samples: 64 });
  });

  it('drives both optimizers, reported through the metrics callback', async () => {
    const seen: StepMetrics[] = [];
    const t = makeTrainer('sgd', 0.1, { warmupSteps: 2 });
    t.onMetrics = (m) => seen.push(m);
    const data = source(64);
    for (let k = 0; k < 3; k++) await t.step(data.batch(k));
    expect(seen.map((m) => m.step)).toEqual([1, 2, 3]);
    expect(seen.map((m) => m.denseLr)).toEqual([0.05, 0.1, 0.1]);
    expect(seen.map((m) => m.embeddingLr)).toEqual([0.05, 0.1, 0.1]);
    expect(t.embeddings.learningRate).toBeCloseTo(0.1, 7);
    for (const m of seen) {
      expect(m.batchSize).toBe(64);
      // the parts of a step account for its whole time, and the rate is the batch over that time
      // (communicationTotal is not a part: total collective time, overlapped or not; none without a group)
      const { total, communicationTotal, ...parts } = m.times;
      expect(communicationTotal).toBe(0);
      expect(Object.values(parts).reduce((x, y) => x + y, 0)).toBeCloseTo(total, 6);
      expect(m.samplesPerSec).toBeCloseTo((64 * 1000) / total, 6);
    }
  });
});

describe('evaluate', () => {
  it('returns the logloss and AUC of the model\'s own logits (checked by brute force)', async () => {
    const t = makeTrainer('adagrad', 0.05);
    const data = source(128);
    for (let k = 0; k < 20; k++) await t.step(data.batch(k));
    const held = [data.batch(500), data.batch(501)];
    const ev = await t.evaluate(held);
    // brute-force oracle from logits computed batch by batch
    const z: number[] = [], y: number[] = [];
    for (const b of held) {
      const out = await t.embeddings.forward(b.sparse);
      z.push(...(await t.dense.forward(b.dense, out.pooled, b.size)));
      y.push(...b.labels);
    }
    let ll = 0;
    for (let i = 0; i < z.length; i++) {
      const p = 1 / (1 + Math.exp(-z[i]!));
      ll -= y[i]! ? Math.log(p) : Math.log(1 - p);
    }
    let wins = 0, pairs = 0;
    for (let i = 0; i < z.length; i++) if (y[i]) for (let j = 0; j < z.length; j++) if (!y[j]) {
      pairs++;
      wins += z[i]! > z[j]! ? 1 : z[i] === z[j] ? 0.5 : 0;
    }
    expect(ev.samples).toBe(256);
    expect(ev.logloss).toBeCloseTo(ll / z.length, 5);
    expect(ev.auc).toBeCloseTo(wins / pairs, 9);
    // soft labels (click probabilities, as step() takes them): the weighted pair count over i ≠ j and the
    // cross-entropy with y in [0, 1]; ctr is the mean label
    const soft = held.map((b, k) => ({ ...b, labels: Float32Array.from(b.labels, (l, i) => ((i + k) % 3 === 0 ? 0.25 + 0.5 * l : l)) }));
    const ys = soft.flatMap((b) => Array.from(b.labels));
    const evs = await t.evaluate(soft);
    let lls = 0, num = 0, den = 0;
    for (let i = 0; i < z.length; i++) {
      const p = 1 / (1 + Math.exp(-z[i]!));
      lls -= ys[i]! * Math.log(p) + (1 - ys[i]!) * Math.log(1 - p);
      for (let j = 0; j < z.length; j++) {
        if (i === j) continue;
        const w = ys[i]! * (1 - ys[j]!);
        den += w;
        num += w * (z[i]! > z[j]! ? 1 : z[i] === z[j] ? 0.5 : 0);
      }
    }
    expect(evs.logloss).toBeCloseTo(lls / z.length, 5);
    expect(evs.auc).toBeCloseTo(num / den, 9);
    expect(evs.ctr).toBeCloseTo(ys.reduce((a, b) => a + b, 0) / ys.length, 6);
    await expect(t.evaluate([])).rejects.toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    for (const maxBatches of [-1, 1.5, NaN, '2'])
      expect(() => t.evaluate([], { maxBatches } as never)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('options.maxBatches') }));
    expect(() => t.evaluate([], { predictions: 1 } as never)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('options.predictions') }));
  });
});

describe('Arrow path', () => {
  it('training from Arrow RecordBatches (through an IPC round trip) gives the same losses as the plain batches', async () => {
    const data = source(64);
    const plain = [0, 1, 2, 3, 4].map((k) => data.batch(k));
    const table = tableFromIPC(tableToIPC(batchesToTable(plain)));
    const a = makeTrainer('adagrad', 0.05), b = makeTrainer('adagrad', 0.05);
    const la: number[] = [], lb: number[] = [];
    for (const batch of plain) la.push(await a.step(batch));
    for await (const batch of arrowSource(table)) lb.push(await b.step(batch));
    expect(lb.length).toBe(5);
    expect(lb).toEqual(la);
  });
});

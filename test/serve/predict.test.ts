// predict.test.ts — Trainer.predict: the probabilities evaluate() scores (and the logloss a naive formula
// gives from them), no update, labels not needed; checkpoints carry the model's inputs and are verified
// on load; `embshard predict` writes CSV and Arrow files equal to Trainer.predict on the same samples, all
// of them or the first --samples N (which endless synthetic data requires); the server's model slot frees a
// reloaded-away model, tables and dense model, once its last lease comes back.
import { describe, it, expect, vi, afterEach, beforeAll, afterAll } from 'vitest';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { tableFromIPC } from 'apache-arrow';
import { CriteoTsvSource } from '../../lib/data/criteo-tsv.js';
import { SyntheticSource } from '../../lib/data/synthetic.js';
import { embeddingsFor } from '../../lib/train/embeddings.js';
import { Trainer } from '../../lib/train/trainer.js';
import { runPredict } from '../../lib/cli/predict.js';
import { runTrain } from '../../lib/cli/train.js';
import type { Batch } from '../../lib/data/types.js';
import type { EmbeddingCollection } from '../../lib/collection.js';
import { writeCriteoTsv } from './fixture.js';
import { ModelSlot } from '../../lib/serve/model-slot.js';
import { manifestFields, sealedManifest } from '../manifest-seal.js';

let dir: string, file: string;
const ROWS = 64;

async function batchesOf(path: string, B: number): Promise<Batch[]> {
  const out: Batch[] = [];
  for await (const b of new CriteoTsvSource({ path, batchSize: B, maxRows: ROWS })) out.push(b);
  return out;
}

async function trained(): Promise<Trainer> {
  const src = new CriteoTsvSource({ path: file, batchSize: 32, maxRows: ROWS });
  const emb = embeddingsFor(src.features, src.tableRows, { dim: 4, optimizer: { type: 'adagrad', lr: 0.1 }, seed: 3 });
  const t = new Trainer({ model: { denseIn: 13, bottom: [8, 4], top: [8, 1], numSparse: 26, embDim: 4, interaction: 'dot' }, embeddings: emb, optimizer: { type: 'adagrad', lr: 0.05 }, seed: 3 });
  for await (const b of src) await t.step(b);
  return t;
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'embshard-predict-'));
  file = join(dir, 'd.txt');
  writeCriteoTsv(file, 150);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));
afterEach(() => vi.restoreAllMocks());

describe('Trainer.predict', () => {
  it('equals evaluate()’s predictions, whose naive logloss is evaluate()’s logloss; nothing is updated', async () => {
    const t = await trained();
    const batches = await batchesOf(file, 40);
    const ev = await t.evaluate(batches, { predictions: true });
    const before = t.dense.params.slice();
    const emb = t.embeddings as EmbeddingCollection;
    const allRows = Int32Array.from({ length: ROWS }, (_, i) => i);
    const rows0 = emb.readRows('cat_0', allRows);
    const got: number[] = [];
    for (const b of batches) got.push(...(await t.predict({ dense: b.dense, sparse: b.sparse, size: b.size })));
    expect(got.length).toBe(150);
    expect(Float32Array.from(got)).toEqual(ev.predictions);
    // logloss from the probabilities, written from the definition
    let ll = 0, k = 0;
    for (const b of batches) for (let i = 0; i < b.size; i++, k++) {
      const p = got[k]!, y = b.labels[i]!;
      ll -= y * Math.log(p) + (1 - y) * Math.log(1 - p);
    }
    expect(ll / 150).toBeCloseTo(ev.logloss, 5);
    expect(t.dense.params).toEqual(before);
    expect(emb.readRows('cat_0', allRows)).toEqual(rows0);
    expect(got.every((p) => p > 0 && p < 1)).toBe(true);
    await expect(t.predict({ dense: new Float32Array(12), sparse: batches[0]!.sparse, size: 1 })).rejects.toThrow(/batch.sparse.batchSize|dense/);
    t.embeddings.dispose?.();
  }, 60_000);

  it('a checkpoint carries the model inputs, verified on load; the loaded model predicts the same', async () => {
    const t = await trained();
    const ck = join(dir, 'ck-a');
    await t.save(ck);
    const m = manifestFields(readFileSync(join(ck, 'trainer.json'), 'utf8'));
    expect(m.inputs).toEqual({ sparse: Array.from({ length: 26 }, (_, i) => `cat_${i}`), numDense: 13, tableRows: [...new CriteoTsvSource({ path: file, batchSize: 1, maxRows: ROWS }).tableRows], hash: 'modulo' });
    const [b] = await batchesOf(file, 50);
    const t2 = await Trainer.load(ck);
    expect(await t2.predict(b!)).toEqual(await t.predict(b!));
    for (const edit of [
      (x: typeof m) => (x.inputs.tableRows[3] = 65),
      (x: typeof m) => (x.inputs.sparse[0] = 'other'),
      (x: typeof m) => (x.inputs.numDense = 12),
      (x: typeof m) => (x.inputs.extra = 1),
    ]) {
      const bad = structuredClone(m);
      edit(bad);
      writeFileSync(join(ck, 'trainer.json'), sealedManifest(bad)); // sealed again: the inputs check is what refuses it
      await expect(Trainer.load(ck)).rejects.toMatchObject({ code: 'CHECKPOINT_CORRUPT' });
    }
    t.embeddings.dispose?.();
    t2.embeddings.dispose?.();
  }, 60_000);

  it('embshard predict writes CSV and Arrow files equal to Trainer.predict', async () => {
    const t = await trained();
    const ck = join(dir, 'ck-b');
    await t.save(ck);
    const want: number[] = [];
    for (const b of await batchesOf(file, 64)) want.push(...(await t.predict(b)));
    vi.spyOn(console, 'log').mockImplementation(() => undefined);
    const csv = join(dir, 'p.csv'), arrow = join(dir, 'p.arrow');
    expect(await runPredict(['--checkpoint', ck, '--data', `criteo-tsv:${file}`, '--out', csv, '--batch', '64'])).toBe(0);
    const lines = readFileSync(csv, 'utf8').trim().split('\n');
    expect(lines[0]).toBe('probability');
    expect(Float32Array.from(lines.slice(1).map(Number))).toEqual(Float32Array.from(want));
    expect(await runPredict(['--checkpoint', ck, '--data', `criteo-tsv:${file}`, '--out', arrow, '--batch', '64'])).toBe(0);
    const table = tableFromIPC(readFileSync(arrow));
    expect(table.numRows).toBe(150);
    expect(Float32Array.from(table.getChild('probability')!.toArray() as Float32Array)).toEqual(Float32Array.from(want));
    // --samples N: the first N samples only, the batch that reaches N cut (100 = 64 + 36)
    expect(await runPredict(['--checkpoint', ck, '--data', `criteo-tsv:${file}`, '--out', csv, '--batch', '64', '--samples', '100'])).toBe(0);
    const first = readFileSync(csv, 'utf8').trim().split('\n');
    expect(first[0]).toBe('probability');
    expect(Float32Array.from(first.slice(1).map(Number))).toEqual(Float32Array.from(want.slice(0, 100)));
    expect(await runPredict(['--checkpoint', ck, '--data', `criteo-tsv:${file}`, '--out', arrow, '--batch', '64', '--samples', '128'])).toBe(0);
    expect(Float32Array.from(tableFromIPC(readFileSync(arrow)).getChild('probability')!.toArray() as Float32Array)).toEqual(Float32Array.from(want.slice(0, 128)));
    // more samples than the source holds: all of them
    expect(await runPredict(['--checkpoint', ck, '--data', `criteo-tsv:${file}`, '--out', csv, '--batch', '64', '--samples', '1000'])).toBe(0);
    expect(readFileSync(csv, 'utf8').trim().split('\n').length).toBe(151);
    vi.spyOn(console, 'error').mockImplementation(() => undefined);
    expect(await runPredict(['--checkpoint', join(dir, 'nope'), '--data', `criteo-tsv:${file}`, '--out', csv])).toBe(1);
    expect(await runPredict(['--checkpoint', ck, '--out', csv])).toBe(2);
    expect(await runPredict(['--checkpoint', ck, '--data', `criteo-tsv:${file}`, '--out', csv, '--samples', '0'])).toBe(2);
    // an --out in a missing folder: 1 with one IO_ERROR line, no stream error left unhandled
    const err = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    err.mockClear();
    const missing = join(dir, 'no-such-folder', 'p.csv');
    expect(await runPredict(['--checkpoint', ck, '--data', `criteo-tsv:${file}`, '--out', missing])).toBe(1);
    expect(err.mock.calls.map((c) => String(c[0]))).toEqual([`embshard predict: IO_ERROR: open '${missing}' failed (ENOENT)`]);
    // malformed lines: the good lines' rows, in order, and a warning naming the skipped lines; nothing
    // but malformed lines is an error
    const mixed = join(dir, 'mixed.txt');
    writeCriteoTsv(mixed, 150, 50); // a malformed line after every 50 good ones
    err.mockClear();
    expect(await runPredict(['--checkpoint', ck, '--data', `criteo-tsv:${mixed}`, '--out', csv, '--batch', '64'])).toBe(0);
    expect(Float32Array.from(readFileSync(csv, 'utf8').trim().split('\n').slice(1).map(Number))).toEqual(Float32Array.from(want));
    expect(err.mock.calls.map((c) => String(c[0]))).toEqual([
      'embshard predict: 3 malformed line(s) of 153 skipped ({"columns":3}; first: line 51, line 102, line 153): they have no row in the output, which holds one per good line, in order',
    ]);
    writeFileSync(mixed, 'not\ta\tsample\n');
    err.mockClear();
    expect(await runPredict(['--checkpoint', ck, '--data', `criteo-tsv:${mixed}`, '--out', csv])).toBe(1);
    expect(String(err.mock.calls[0]![0])).toMatch(/INVALID_ARGUMENT: --data criteo-tsv:.*: no samples to predict; 1 malformed line\(s\) of 1 skipped/);
    t.embeddings.dispose?.();
  }, 60_000);

  it('a model trained by embshard train on dynamic tables saves its inputs; embshard predict scores with it', async () => {
    const ck = join(dir, 'ck-dynamic');
    vi.spyOn(console, 'log').mockImplementation(() => undefined);
    vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    const err = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    const rc = await runTrain(['--model', 'custom', '--bottom', '13-8-4', '--top', '8-1', '--data', 'synthetic', '--dynamic-capacity', '512',
      '--steps', '3', '--batch', '64', '--eval-batches', '0', '--save', ck, '--quiet']);
    expect(rc, err.mock.calls.flat().join(' ')).toBe(0);
    const t = await Trainer.load(ck);
    const src = new SyntheticSource({ batchSize: 50, preset: 'criteo-kaggle', seed: 0, rank: 0, worldSize: 1 });
    expect(t.inputs).toEqual({ sparse: [...src.features], numDense: 13, tableRows: [...src.tableRows], hash: 'modulo' });
    const want: number[] = [];
    for await (const b of src) {
      want.push(...(await t.predict(b)));
      if (want.length >= 100) break;
    }
    await src.close?.();
    const csv = join(dir, 'dynamic.csv');
    expect(await runPredict(['--checkpoint', ck, '--data', 'synthetic', '--out', csv, '--batch', '50', '--samples', '100']), err.mock.calls.flat().join(' ')).toBe(0);
    const lines = readFileSync(csv, 'utf8').trim().split('\n');
    expect(Float32Array.from(lines.slice(1).map(Number))).toEqual(Float32Array.from(want));
    t.embeddings.dispose?.();
  }, 60_000);

  it('embshard predict on synthetic data (which never ends) needs --samples and stops there', async () => {
    const opts = { batchSize: 100, preset: 'criteo-kaggle' as const, seed: 0, rank: 0, worldSize: 1, maxRows: ROWS };
    const src = new SyntheticSource(opts);
    const emb = embeddingsFor(src.features, src.tableRows, { dim: 4, optimizer: { type: 'adagrad', lr: 0.1 }, seed: 5 });
    const t = new Trainer({ model: { denseIn: 13, bottom: [8, 4], top: [8, 1], numSparse: 26, embDim: 4, interaction: 'dot' }, embeddings: emb, optimizer: { type: 'adagrad', lr: 0.05 }, seed: 5 });
    const ck = join(dir, 'ck-synthetic');
    await t.save(ck);
    // the oracle: the first 250 samples of the same synthetic stream, scored by the model
    const want: number[] = [];
    for await (const b of src) {
      want.push(...(await t.predict(b)));
      if (want.length >= 250) break;
    }
    await src.close?.();
    const err = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    vi.spyOn(console, 'log').mockImplementation(() => undefined);
    const csv = join(dir, 'synthetic.csv');
    expect(await runPredict(['--checkpoint', ck, '--data', 'synthetic', '--max-rows', String(ROWS), '--out', csv])).toBe(2);
    expect(err.mock.calls.flat().join(' ')).toMatch(/synthetic never ends: give --samples N/);
    expect(await runPredict(['--checkpoint', ck, '--data', 'synthetic', '--max-rows', String(ROWS), '--out', csv, '--batch', '100', '--samples', '250'])).toBe(0);
    const lines = readFileSync(csv, 'utf8').trim().split('\n');
    expect(lines.length).toBe(251);
    expect(Float32Array.from(lines.slice(1).map(Number))).toEqual(Float32Array.from(want.slice(0, 250)));
    t.embeddings.dispose?.();
  }, 60_000);
});

describe('the served model slot', () => {
  it('frees a reloaded-away model (tables and dense model) only after its last lease comes back', async () => {
    const t = await trained();
    const [a, b] = [join(dir, 'slot-a'), join(dir, 'slot-b')];
    await t.save(a);
    await t.save(b);
    t.dispose();
    const slot = await ModelSlot.open(a);
    const lease = slot.acquire();
    const old = lease.model.trainer;
    await slot.reload(b);
    expect(slot.current.checkpoint).toBe(b);
    expect((old.embeddings as EmbeddingCollection).disposed).toBe(false);
    expect(old.dense.tensors.length).toBeGreaterThan(0); // still usable by the request that holds it
    lease.release();
    expect((old.embeddings as EmbeddingCollection).disposed).toBe(true);
    expect(() => old.dense.tensors).toThrow(expect.objectContaining({ code: 'DISPOSED' }));
    const now = slot.current.trainer;
    slot.close();
    expect(() => now.dense.tensors).toThrow(expect.objectContaining({ code: 'DISPOSED' }));
  }, 60_000);
});

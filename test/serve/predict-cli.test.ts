// predict-cli.test.ts — `embshard predict` when the user errs: an --out that names a file the run reads
// (the data, by any path to it, or a checkpoint file) is refused before it is opened, and the file is left
// as it was; a batch the model refuses (a NaN dense value in the data) ends the command with its code and
// the samples it covers, exit 1, rather than as an unhandled rejection while the batch before it is written;
// a criteo-tsv: path that is a folder is said to be one.
import { describe, it, expect, vi, afterEach, beforeAll, afterAll } from 'vitest';
import { linkSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Table, tableToIPC } from 'apache-arrow';
import { CriteoTsvSource } from '../../lib/data/criteo-tsv.js';
import { batchToArrow } from '../../lib/data/arrow.js';
import { runPredict } from '../../lib/cli/predict.js';
import type { Batch } from '../../lib/data/types.js';
import { capture } from '../train/capture.js';
import { trainOn, writeCriteoTsv } from './fixture.js';

const ROWS = 64;
let dir: string, file: string, ck: string, batch: Batch;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'embshard-predict-cli-'));
  file = join(dir, 'd.txt');
  writeCriteoTsv(file, 64);
  const t = await trainOn(file, { batchSize: 32, seed: 3, maxRows: ROWS });
  ck = join(dir, 'ck');
  await t.save(ck);
  t.dispose();
  for await (const b of new CriteoTsvSource({ path: file, batchSize: 64, maxRows: ROWS })) batch = b;
}, 60_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));
afterEach(() => vi.restoreAllMocks());

describe('embshard predict, misused', () => {
  it('refuses an --out that is a file the run reads, and leaves the file as it was', async () => {
    const data = readFileSync(file);
    const link = join(dir, 'link.txt');
    linkSync(file, link);
    const manifest = readFileSync(join(ck, 'trainer.json'));
    for (const [spec, out] of [
      [`criteo-tsv:${file}`, file],
      [`criteo-tsv:${file}`, `${dir}/./d.txt`],
      [`criteo-tsv:${file}`, link],
      [`criteo-tsv:${join(dir, 'other.txt')},${file}`, file],
      [`criteo-tsv:${file}`, join(ck, 'trainer.json')],
    ]) {
      if (spec.includes('other.txt')) writeCriteoTsv(join(dir, 'other.txt'), 8);
      const c = capture();
      const rc = await runPredict(['--checkpoint', ck, '--data', spec, '--out', out]);
      vi.restoreAllMocks();
      expect([out, rc]).toEqual([out, 1]);
      expect(c.err.join('')).toMatch(/INVALID_ARGUMENT: --out .* which this run reads \(--data or --checkpoint\)/);
    }
    expect(readFileSync(file).equals(data)).toBe(true);
    expect(readFileSync(join(ck, 'trainer.json')).equals(manifest)).toBe(true);
    // another file is written as ever
    const csv = join(dir, 'p.csv');
    expect(await runPredict(['--checkpoint', ck, '--data', `criteo-tsv:${file}`, '--out', csv, '--quiet'])).toBe(0);
    expect(readFileSync(csv, 'utf8').trim().split('\n').length).toBe(65);
  });

  it('says a --data criteo-tsv: path that is a folder is a folder, not a missing file', async () => {
    const c = capture();
    const rc = await runPredict(['--checkpoint', ck, '--data', `criteo-tsv:${dir}`, '--out', join(dir, 'f.csv')]);
    vi.restoreAllMocks();
    expect(rc).toBe(1);
    expect(c.err.join('')).toContain(`embshard predict: IO_ERROR: path: '${dir}' is a directory, not a file`);
    expect(c.err.join('')).not.toMatch(/no such file/);
  });

  it('ends with the code of a batch the model refuses, naming its samples, when the batch before it is being written', async () => {
    // sample 21 (the second batch of 16) has a NaN dense value
    const dense = Float32Array.from(batch.dense);
    dense[21 * 13 + 4] = Number.NaN;
    const arrow = join(dir, 'nan.arrow');
    writeFileSync(arrow, tableToIPC(new Table(batchToArrow({ ...batch, dense })), 'file'));
    const rejections: unknown[] = [];
    const onRejection = (e: unknown) => rejections.push(e);
    process.on('unhandledRejection', onRejection);
    try {
      const c = capture();
      const rc = await runPredict(['--checkpoint', ck, '--data', `arrow:${arrow}`, '--out', join(dir, 'n.csv'), '--batch', '16']);
      await new Promise((r) => setTimeout(r, 100));
      vi.restoreAllMocks();
      expect(rejections).toEqual([]);
      expect(rc).toBe(1);
      expect(c.err.join('')).toMatch(/^embshard predict: INVALID_ARGUMENT: samples \[16, 32\) of --data: batch\.dense\[69\] \(sample 5, dense feature 4\) is NaN/);
    } finally {
      process.off('unhandledRejection', onRejection);
    }
  });
});

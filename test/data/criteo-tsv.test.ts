// criteo-tsv.test.ts — the streamed Criteo TSV reader on a fixture with 6 good and 9 malformed lines:
// exact report (counts, line numbers, reasons), parsed values against a naive split-based oracle, chunk
// boundaries anywhere, CRLF, missing values, both hash modes, .gz input, several files, the worker path.
import { describe, it, expect } from 'vitest';
import { readFileSync, writeFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CriteoTsvParser, CriteoTsvSource, resolveCriteoTsv } from '../../lib/data/criteo-tsv.js';
import { workerSource } from '../../lib/data/worker-source.js';
import { fmix32, hash2 } from '../../lib/random/rng.js';
import { isEmbshardError } from '../../lib/errors.js';
import type { Batch } from '../../lib/data/types.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('tsv');

const FIXTURE = fileURLToPath(new URL('../fixtures/data/criteo-sample.tsv', import.meta.url));
const GOOD_LINES = [1, 2, 4, 9, 12, 15];
const BAD: [number, string][] = [
  [3, 'columns'], [5, 'label'], [6, 'integer'], [7, 'blank'], [8, 'categorical'], [10, 'categorical'], [11, 'label'], [13, 'integer'], [14, 'columns'],
];
const ROWS = Array.from({ length: 26 }, (_, f) => 1000 + 37 * f);

interface Row {
  label: number;
  dense: number[];
  cats: (number | null)[]; // raw 32-bit values, null = missing
}

/** The oracle: split the fixture's good lines on tabs and convert fields the obvious way. */
function oracleRows(): Row[] {
  const lines = readFileSync(FIXTURE, 'latin1').split('\n');
  return GOOD_LINES.map((n) => {
    const cols = lines[n - 1]!.replace(/\r$/, '').split('\t');
    expect(cols).toHaveLength(40);
    return {
      label: Number(cols[0]),
      dense: cols.slice(1, 14).map((s) => Math.log(1 + Math.max(s === '' ? 0 : Number(s), 0))),
      cats: cols.slice(14).map((s) => (s === '' ? null : parseInt(s, 16))),
    };
  });
}

async function collect(src: AsyncIterable<Batch>): Promise<Batch[]> {
  const out: Batch[] = [];
  for await (const b of src) out.push(b);
  return out;
}

function checkAgainstOracle(batches: Batch[], hashId: (v: number, f: number) => number, missing: 'zero' | 'empty'): void {
  const rows = oracleRows();
  expect(batches.map((b) => b.size)).toEqual([4, 2]);
  let r = 0;
  for (const b of batches) {
    for (let i = 0; i < b.size; i++, r++) {
      const o = rows[r]!;
      expect(b.labels[i]).toBe(o.label);
      for (let j = 0; j < 13; j++) expect(b.dense[i * 13 + j]).toBeCloseTo(o.dense[j]!, 5);
      for (let f = 0; f < 26; f++) {
        const bag = b.sparse.feature(`cat_${f}`);
        const v = o.cats[f]!;
        if (v === null && missing === 'empty') {
          expect(bag.lengths[i]).toBe(0);
          continue;
        }
        expect(bag.lengths[i]).toBe(1);
        let start = 0;
        for (let t = 0; t < i; t++) start += bag.lengths[t]!;
        expect(Number(bag.ids[start])).toBe(hashId(v ?? 0, f));
      }
    }
  }
  expect(r).toBe(6);
}

describe('Criteo TSV reader', () => {
  it('counts and skips malformed lines with their numbers and reasons, never throwing', async () => {
    const src = new CriteoTsvSource({ path: FIXTURE, batchSize: 4, tableRows: ROWS });
    const batches = await collect(src);
    const rep = src.report()!;
    expect(rep.lines).toBe(15);
    expect(rep.samples).toBe(6);
    expect(rep.malformed).toBe(9);
    expect(rep.byReason).toEqual({ columns: 2, label: 2, integer: 2, blank: 1, categorical: 2 });
    expect(rep.issues.map((i) => [i.line, i.reason])).toEqual(BAD);
    expect(rep.issues.find((i) => i.line === 6)!.message).toMatch(/column I5 'abc'/);
    expect(rep.issues.find((i) => i.line === 8)!.message).toMatch(/column C3 'xyz!'/);
    expect(rep.issues.find((i) => i.line === 3)!.message).toMatch(/found 38/);
    expect(rep.issues.find((i) => i.line === 14)!.message).toMatch(/found 41/);
    checkAgainstOracle(batches, (v, f) => v % ROWS[f]!, 'zero');
  });

  it('parses the same whatever the chunk boundaries (1, 3, 64 bytes)', async () => {
    for (const chunkSize of [1, 3, 64]) {
      const src = new CriteoTsvSource({ path: FIXTURE, batchSize: 4, tableRows: ROWS, chunkSize });
      checkAgainstOracle(await collect(src), (v, f) => v % ROWS[f]!, 'zero');
      expect(src.report()!.malformed).toBe(9);
    }
  });

  it("hash 'murmur' is fmix32(v xor salt_f) mod rows; missing 'empty' gives empty bags", async () => {
    const m = await collect(new CriteoTsvSource({ path: FIXTURE, batchSize: 4, tableRows: ROWS, hash: 'murmur' }));
    checkAgainstOracle(m, (v, f) => fmix32(v ^ hash2(0xc817e0, f)) % ROWS[f]!, 'zero');
    const e = await collect(new CriteoTsvSource({ path: FIXTURE, batchSize: 4, tableRows: ROWS, missingCategorical: 'empty' }));
    checkAgainstOracle(e, (v, f) => v % ROWS[f]!, 'empty');
    expect(e[0]!.sparse.numIds).toBe(4 * 26 - 2); // line 2 misses C3 and C26
  });

  it('reads .gz files and several files in order, naming the file in each issue', async () => {
    const dir = tmp.dir;
    const gz = join(dir, 'sample.tsv.gz');
    writeFileSync(gz, gzipSync(readFileSync(FIXTURE)));
    const src = new CriteoTsvSource({ path: [FIXTURE, gz], batchSize: 6, tableRows: ROWS, dropLast: true });
    const batches = await collect(src);
    expect(batches.map((b) => b.size)).toEqual([6, 6]);
    expect(Array.from(batches[1]!.sparse.ids)).toEqual(Array.from(batches[0]!.sparse.ids));
    expect(Array.from(batches[1]!.dense)).toEqual(Array.from(batches[0]!.dense));
    const rep = src.report()!;
    expect(rep.malformed).toBe(18);
    expect(rep.issues.filter((i) => i.file === gz).map((i) => i.line)).toEqual(BAD.map((b) => b[0]));
  });

  it('reads label-less files (Kaggle test.txt) with hasLabel false', () => {
    const lines = readFileSync(FIXTURE, 'latin1').split('\n');
    const text = GOOD_LINES.map((n) => lines[n - 1]!.replace(/\r$/, '').split('\t').slice(1).join('\t')).join('\n') + '\n';
    const p = new CriteoTsvParser(resolveCriteoTsv({ path: FIXTURE, batchSize: 3, tableRows: ROWS, hasLabel: false }));
    const out = [...p.push(Buffer.from(text, 'latin1'))];
    const last = p.finish();
    if (last) out.push(last);
    expect(out.map((b) => b.size)).toEqual([3, 3]);
    expect(p.report.malformed).toBe(0);
    expect(Array.from(out[0]!.labels)).toEqual([0, 0, 0]);
    expect(out[1]!.dense[2 * 13 + 3]).toBeCloseTo(oracleRows()[5]!.dense[3]!, 5);
  });

  it('streams through a worker thread to the same batches and report', async () => {
    const spec = { kind: 'criteo-tsv' as const, options: { path: FIXTURE, batchSize: 4, tableRows: ROWS } };
    const ws = await workerSource(spec, { depth: 1 });
    const batches = await collect(ws);
    checkAgainstOracle(batches, (v, f) => v % ROWS[f]!, 'zero');
    expect(ws.report()!.issues.map((i) => [i.line, i.reason])).toEqual(BAD);
  });

  it('rejects bad options before reading', () => {
    const code = (f: () => unknown): string => {
      try {
        f();
      } catch (e) {
        expect(isEmbshardError(e)).toBe(true);
        return (e as { code: string }).code + ': ' + (e as Error).message;
      }
      return 'no error';
    };
    expect(code(() => new CriteoTsvSource({ path: '/no/such/file.tsv', batchSize: 4 }))).toMatch(/^IO_ERROR: path: no such file '\/no\/such\/file.tsv'$/);
    // a folder exists but is no file: said so, not 'no such file'
    const folder = tmp.dir;
    expect(code(() => new CriteoTsvSource({ path: folder, batchSize: 4 }))).toBe(`IO_ERROR: path: '${folder}' is a directory, not a file (name the TSV files in it)`);
    expect(code(() => new CriteoTsvSource({ path: [FIXTURE, folder], batchSize: 4 }))).toMatch(/^IO_ERROR: path: '.*' is a directory, not a file/);
    expect(code(() => new CriteoTsvSource({ path: FIXTURE, batchSize: 4, tableRows: [1, 2] }))).toMatch(/^LENGTH_MISMATCH: tableRows/);
    expect(code(() => new CriteoTsvSource({ path: FIXTURE, batchSize: -1 }))).toMatch(/^INVALID_SIZE: batchSize/);
    expect(code(() => new CriteoTsvSource({ path: FIXTURE, batchSize: 4, hash: 'md5' as never }))).toMatch(/^INVALID_ARGUMENT: hash/);
  });
});

// bench/data.ts — throughput of the data pipeline on this machine: synthetic generation (ids/s,
// samples/s) per preset, Criteo TSV parsing, torchrec .npy reading, the Arrow path, and a worker-thread
// source against the in-thread one. Writes bench/results/data.json and prints a markdown table.
// Run: npm run build:ts && node dist/bench/data.js   (EMBSHARD_BENCH_QUICK=1 for a short run)
import { mkdirSync, writeFileSync, statSync, openSync, writeSync, closeSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import {
  CriteoNpySource, CriteoTsvSource, SyntheticSource, arrowSource, batchesToTable, workerSource, writeCriteoNpyDay,
  type Batch, type BatchSource, type SyntheticOptions,
} from '../lib/data/index.js';
import { tableFromIPC, tableToIPC } from 'apache-arrow';
import { benchArgs, benchTempDir } from './report.js';

benchArgs(`usage: embshard bench data   (npm run bench:data)
Throughput of the data pipeline: synthetic generation, Criteo TSV parsing, torchrec .npy days, Arrow, worker
threads. Writes bench/results/data.json. EMBSHARD_BENCH_QUICK=1: a short run.`);

const quick = process.env.EMBSHARD_BENCH_QUICK === '1';
interface Row {
  name: string;
  batchSize: number;
  batches: number;
  samplesPerSec: number;
  idsPerSec: number;
  seconds: number;
  note: string;
}
const rows: Row[] = [];

async function drain(src: AsyncIterable<Batch>, maxBatches = Infinity): Promise<{ batches: number; samples: number; ids: number; seconds: number }> {
  const t0 = performance.now();
  let batches = 0, samples = 0, ids = 0;
  for await (const b of src) {
    batches++;
    samples += b.size;
    ids += b.sparse.numIds;
    if (batches >= maxBatches) break;
  }
  return { batches, samples, ids, seconds: (performance.now() - t0) / 1000 };
}

function record(name: string, batchSize: number, r: Awaited<ReturnType<typeof drain>>, note = ''): void {
  rows.push({ name, batchSize, batches: r.batches, samplesPerSec: r.samples / r.seconds, idsPerSec: r.ids / r.seconds, seconds: r.seconds, note });
  console.error(`${name}: ${(r.samples / r.seconds).toFixed(0)} samples/s, ${(r.ids / r.seconds / 1e6).toFixed(2)} M ids/s`);
}

async function synthetic(): Promise<void> {
  const cases: [string, SyntheticOptions][] = [
    ['synthetic criteo-kaggle (one-hot)', { preset: 'criteo-kaggle', batchSize: 8192, numBatches: quick ? 3 : 12 }],
    ['synthetic mlperf-dcnv2 (214 ids/sample)', { preset: 'mlperf-dcnv2', batchSize: 2048, numBatches: quick ? 2 : 8 }],
    ['synthetic dlrm-benchmark (8×100 ids, 512 dense)', { preset: 'dlrm-benchmark', batchSize: 2048, numBatches: quick ? 2 : 8 }],
  ];
  for (const [name, o] of cases) {
    new SyntheticSource({ ...o, numBatches: 1 }).batch(0); // warm up the JIT
    record(name, o.batchSize, await drain(new SyntheticSource(o)), `alpha 1.1, planted labels`);
  }
  const o: SyntheticOptions = { preset: 'mlperf-dcnv2', batchSize: 2048, numBatches: quick ? 4 : 16 };
  const ws = await workerSource({ kind: 'synthetic', options: o }, { depth: 4 });
  const t0 = performance.now();
  const it = ws[Symbol.asyncIterator]();
  await it.next();
  const startMs = performance.now() - t0;
  const rest = await drain({ [Symbol.asyncIterator]: () => it });
  record('synthetic mlperf-dcnv2 via worker thread', 2048, rest, `after the first batch (worker start + 1 batch: ${startMs.toFixed(0)} ms); buffers transferred`);
}

function writeTsv(path: string, lines: number): void {
  const fd = openSync(path, 'w');
  let s = 0x1234567;
  const rnd = (): number => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0), s);
  const chunk: string[] = [];
  for (let i = 0; i < lines; i++) {
    const f: string[] = [String(rnd() & 1)];
    for (let j = 0; j < 13; j++) f.push(rnd() % 7 === 0 ? '' : String(rnd() % 1000));
    for (let j = 0; j < 26; j++) f.push(rnd() % 11 === 0 ? '' : (rnd() >>> 0).toString(16).padStart(8, '0'));
    chunk.push(f.join('\t'));
    if (chunk.length === 10000) {
      writeSync(fd, chunk.join('\n') + '\n');
      chunk.length = 0;
    }
  }
  if (chunk.length) writeSync(fd, chunk.join('\n') + '\n');
  closeSync(fd);
}

async function files(dir: string): Promise<void> {
  const lines = quick ? 50_000 : 300_000;
  const tsv = join(dir, 'day.tsv');
  writeTsv(tsv, lines);
  const mb = statSync(tsv).size / 1e6;
  const src = new CriteoTsvSource({ path: tsv, batchSize: 8192 });
  const r = await drain(src);
  record('Criteo TSV parse (in thread)', 8192, r, `${(mb / r.seconds).toFixed(0)} MB/s of text`);
  const ws = await workerSource({ kind: 'criteo-tsv', options: { path: tsv, batchSize: 8192 } }, { depth: 4 });
  record('Criteo TSV parse (worker thread)', 8192, await drain(ws), 'includes worker start-up');

  const batches: Batch[] = [];
  for await (const b of new CriteoTsvSource({ path: tsv, batchSize: 8192 })) batches.push(b);
  await writeCriteoNpyDay(dir, 0, batches);
  const npy = new CriteoNpySource({ dir, days: [0], batchSize: 8192, hashes: new CriteoTsvSource({ path: tsv, batchSize: 1 }).tableRows });
  record('torchrec .npy day read', 8192, await drain(npy), 'positioned reads, transpose + floor-mod');

  const table = batchesToTable(batches);
  record('Arrow RecordBatches (in memory)', 8192, await drain(arrowSource(table)), 'zero-copy views');
  const ipc = tableFromIPC(tableToIPC(table));
  record('Arrow RecordBatches (after IPC)', 8192, await drain(arrowSource(ipc)), 'one memcpy per feature for ids');
}

async function main(): Promise<void> {
  const { dir, remove } = benchTempDir('embshard-bench-data-');
  try {
    await synthetic();
    await files(dir);
  } finally {
    remove();
  }
  const out = join(packageRoot, 'bench', 'results');
  mkdirSync(out, { recursive: true });
  const meta = { node: process.version, cpus: cpus().length, cpu: cpus()[0]?.model ?? 'unknown', quick, date: new Date().toISOString() };
  writeFileSync(join(out, 'data.json'), JSON.stringify({ meta, rows }, null, 2) + '\n');
  console.log(`\n### Data pipeline throughput (${meta.cpus} × ${meta.cpu}, Node ${meta.node})\n`);
  console.log('| source | batch | batches | samples/s | M ids/s | note |');
  console.log('|---|---:|---:|---:|---:|---|');
  for (const r of rows)
    console.log(`| ${r.name} | ${r.batchSize} | ${r.batches} | ${Math.round(r.samplesPerSec).toLocaleString('en-US')} | ${(r.idsPerSec / 1e6).toFixed(2)} | ${r.note} |`);
  console.log(`\nwritten ${join(out, 'data.json')}`);
}

await main();
export type { BatchSource };

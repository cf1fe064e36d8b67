// bench/serve.ts — the inference server under bounded load (autocannon against 127.0.0.1): requests/s,
// samples/s and p50/p99 latency of POST /v1/predict for the DLRM Criteo-Kaggle model, with batch-of-1
// and batch-of-64 requests at several concurrency levels (closed loop), open-loop runs at fixed rates of
// single-sample requests (bench/paced-load.ts; the latency target: p99 < 10 ms at 1,000 requests/s), and
// GET /healthz beside them as the probe of what HTTP alone costs on this machine at the same moment. The server runs in its own process (`embshard serve`),
// the load generator in this one. Writes bench/results/serve.{json,md}.
// Run: npm run bench:serve   (EMBSHARD_BENCH_QUICK=1: shorter runs; EMBSHARD_BENCH_FULL=1: the full
// Kaggle cardinalities, 33.8M rows, instead of tables capped at 1M rows)
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { packageRoot } from '../lib/native.js';
import { CAT_FEATURE_NAMES, CRITEO_KAGGLE_CARDINALITIES } from '../lib/data/criteo.js';
import { embeddingsFor } from '../lib/train/embeddings.js';
import { Trainer } from '../lib/train/trainer.js';
import { benchArgs, benchTempDir, machine, onInterrupt, table, writeResults } from './report.js';
import { pacedLoad } from './paced-load.js';

benchArgs(`usage: node dist/bench/serve.js   (npm run bench:serve)
The inference server (embshard serve, in its own process) under closed- and open-loop load.
Writes bench/results/serve.{json,md}. EMBSHARD_BENCH_QUICK=1: shorter runs; EMBSHARD_BENCH_FULL=1: the full
Kaggle cardinalities instead of tables capped at 1M rows.`);

const quick = process.env.EMBSHARD_BENCH_QUICK === '1';
const full = process.env.EMBSHARD_BENCH_FULL === '1';
const DURATION = quick ? 2 : 6;
const CAP = 1_000_000;

interface Run {
  name: string;
  samplesPerRequest: number;
  connections: number;
  /** Requests/s asked for (fixed-rate runs). */
  rate?: number;
  requestsPerSec: number;
  samplesPerSec: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
}

/** A JSON request body of B random samples (fixed seed): 13 dense values, one id per feature. */
function body(B: number, rows: readonly number[]): string {
  let s = 0x9e3779b9;
  const rnd = () => ((s = (Math.imul(s ^ (s >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0) / 2 ** 32);
  const dense = Array.from({ length: B }, () => Array.from({ length: 13 }, () => +(rnd() * 5).toFixed(3)));
  const sparse = Object.fromEntries(CAT_FEATURE_NAMES.map((f, j) => [f, Array.from({ length: B }, () => [Math.floor(rnd() * rows[j]!)])]));
  return JSON.stringify({ dense, sparse });
}

async function startServer(checkpoint: string): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [join(packageRoot, 'dist', 'lib', 'cli', 'main.js'), 'serve', '--checkpoint', checkpoint, '--port', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
  const url = await new Promise<string>((resolve, reject) => {
    let err = '';
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      const m = / on (http:\/\/127\.0\.0\.1:\d+)/.exec(err);
      if (m) resolve(m[1]!);
    });
    child.on('exit', (code) => reject(new Error(`embshard serve exited with ${code}: ${err}`)));
  });
  return { url, child };
}

async function load(url: string, name: string, o: { path: string; body?: string; samples: number; connections: number; rate?: number; duration?: number }): Promise<Run> {
  const r = await autocannon({
    url: `${url}${o.path}`,
    method: o.body ? 'POST' : 'GET',
    ...(o.body ? { body: o.body, headers: { 'content-type': 'application/json' } } : {}),
    connections: o.connections,
    duration: o.duration ?? DURATION,
    ...(o.rate ? { overallRate: o.rate } : {}),
  });
  const run: Run = {
    name, samplesPerRequest: o.samples, connections: o.connections, ...(o.rate ? { rate: o.rate } : {}),
    requestsPerSec: r.requests.average, samplesPerSec: r.requests.average * o.samples,
    p50Ms: r.latency.p50, p99Ms: r.latency.p99, errors: r.errors + r.non2xx + r.timeouts,
  };
  console.error(`${name} c=${o.connections}${o.rate ? ` rate=${o.rate}` : ''}: ${run.requestsPerSec.toFixed(0)} req/s, p50 ${run.p50Ms} ms, p99 ${run.p99Ms} ms, errors ${run.errors}`);
  return run;
}

async function main(): Promise<void> {
  const rows = CRITEO_KAGGLE_CARDINALITIES.map((r) => (full ? r : Math.min(r, CAP)));
  const { dir, remove } = benchTempDir('embshard-bench-serve-');
  const ck = join(dir, 'model');
  const emb = embeddingsFor(CAT_FEATURE_NAMES, rows, { dim: 16, optimizer: { type: 'sgd', lr: 0.1 }, seed: 1 });
  const trainer = new Trainer({ model: 'dlrm-criteo-kaggle', embeddings: emb, seed: 1 });
  await trainer.save(ck);
  emb.dispose();
  const { url, child } = await startServer(ck);
  // an interrupted bench stops its server too
  const forget = onInterrupt(() => child.kill('SIGTERM'));
  const runs: Run[] = [];
  try {
    const one = body(1, rows), many = body(64, rows);
    await load(url, 'warm-up', { path: '/v1/predict', body: one, samples: 1, connections: 8, duration: 1 });
    for (const c of quick ? [1, 16] : [1, 8, 32, 64]) {
      runs.push(await load(url, 'predict, 1 sample', { path: '/v1/predict', body: one, samples: 1, connections: c }));
      runs.push(await load(url, 'predict, 64 samples', { path: '/v1/predict', body: many, samples: 64, connections: c }));
    }
    for (const rate of [500, 1000, 2000]) {
      const r = await pacedLoad({ url, path: '/v1/predict', body: one, rate, seconds: quick ? 3 : 10 });
      console.error(`paced ${rate}/s: ${r.achievedPerSec.toFixed(0)} req/s, p50 ${r.p50Ms.toFixed(2)} ms, p99 ${r.p99Ms.toFixed(2)} ms, errors ${r.errors}`);
      runs.push({
        name: 'predict, 1 sample, open loop', samplesPerRequest: 1, connections: 0, rate, requestsPerSec: r.achievedPerSec, samplesPerSec: r.achievedPerSec,
        p50Ms: +r.p50Ms.toFixed(2), p99Ms: +r.p99Ms.toFixed(2), errors: r.errors,
      });
    }
    const h = await pacedLoad({ url, path: '/healthz', rate: 1000, seconds: quick ? 3 : 10 });
    console.error(`paced healthz 1000/s: p50 ${h.p50Ms.toFixed(2)} ms, p99 ${h.p99Ms.toFixed(2)} ms`);
    runs.push({ name: 'healthz (HTTP alone, probe), open loop', samplesPerRequest: 0, connections: 0, rate: 1000, requestsPerSec: h.achievedPerSec, samplesPerSec: 0, p50Ms: +h.p50Ms.toFixed(2), p99Ms: +h.p99Ms.toFixed(2), errors: h.errors });
    runs.push(await load(url, 'healthz (HTTP alone, probe)', { path: '/healthz', samples: 0, connections: 32 }));
  } finally {
    forget();
    child.kill('SIGTERM');
    remove();
  }
  const target = runs.find((r) => r.rate === 1000 && r.samplesPerRequest === 1)!;
  const floor = runs.find((r) => r.rate === 1000 && r.samplesPerRequest === 0)!;
  const probe = runs[runs.length - 1]!;
  const busiest = runs.filter((r) => r.samplesPerRequest === 1 && !r.rate).sort((x, y) => y.connections - x.connections)[0]!;
  const m = machine() as { cpu: string; cores: number; node: string };
  const meta = {
    ...m,
    model: 'dlrm-criteo-kaggle (bottom 13-512-256-64-16, dot, top 512-256-1, 26 tables of dim 16)',
    tableRows: rows.reduce((a, b) => a + b, 0),
    tables: full ? 'Criteo Kaggle cardinalities' : `Criteo Kaggle cardinalities capped at ${CAP.toLocaleString('en-US')} rows`,
    durationSec: DURATION, quick,
    server: 'embshard serve (own process), defaults: max batch 1024 samples, max wait 0 ms',
  };
  const md = [
    `### Inference server: POST /v1/predict, ${meta.model}`,
    '',
    `${m.cores} × ${m.cpu}, Node ${m.node}; ${meta.tables} (${meta.tableRows.toLocaleString('en-US')} rows); autocannon in this process, the server in another; ${DURATION} s per run.`,
    'Absolute numbers depend on the machine and its load at the moment; the healthz probe beside them shows what HTTP alone reaches at that moment.',
    '',
    table(
      ['run', 'samples/request', 'connections', 'requests/s', 'samples/s', 'p50 (ms)', 'p99 (ms)', 'errors'],
      runs.map((r) => [r.name + (r.rate ? ` (${r.rate}/s asked)` : ''), r.samplesPerRequest, r.connections || 'as needed', Math.round(r.requestsPerSec), Math.round(r.samplesPerSec), r.p50Ms, r.p99Ms, r.errors]),
    ),
    '',
    `Target p99 < 10 ms at 1,000 single-sample requests/s: measured p99 ${target.p99Ms} ms at ${Math.round(target.requestsPerSec)} requests/s (${target.p99Ms < 10 && target.requestsPerSec >= 950 ? 'met' : 'not met'} in this run); GET /healthz at the same rate, beside it: p50 ${floor.p50Ms} ms, p99 ${floor.p99Ms} ms.`,
    `Single-sample predict at ${busiest.connections} connections against HTTP alone (healthz, 32 connections): ${Math.round(busiest.requestsPerSec)} vs ${Math.round(probe.requestsPerSec)} requests/s (${(busiest.requestsPerSec / probe.requestsPerSec).toFixed(2)}×).`,
  ].join('\n');
  writeResults('serve', { meta, runs }, md);
}

await main();

// bench/train.ts — end-to-end training throughput (samples/s) with the time of a step split into data,
// embedding forward, dense forward, dense backward, communication, embedding backward (+ its fused
// optimizer) and the dense optimizer update. Shapes: the DLRM benchmark (dlrm_s_benchmark.sh: 8 tables ×
// 1M rows, dim 64, bottom 512-512-64, top 1024-1024-1024-1, 100 ids per bag, batch 2048) at full size,
// DLRM Criteo Kaggle at batch 2048, and the dense half of DLRM-DCNv2 alone (its tables do not fit here),
// plus the dense model on OpenBLAS against the blocked fallback GEMM.
// Scaling for a 2-core CPU: full shapes, but a handful of measured steps (not the script's 1000 batches).
// Data is generated in this thread before each step and timed on its own (the CLI overlaps it in a
// worker). One process: communication is 0 (no ranks to all-reduce with).
// Writes bench/results/train.json and prints a markdown table.
// Run: npm run build:ts && node dist/bench/train.js   (EMBSHARD_BENCH_QUICK=1 for a short run)
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { loadAddon, packageRoot } from '../lib/native.js';
import { SyntheticSource, type SyntheticOptions } from '../lib/data/index.js';
import { DenseModel, Trainer, embeddingsFor, type DenseModelSpec, type PresetName, type StepTimes } from '../lib/train/index.js';
import { denseAddon } from '../lib/train/binding.js';

const quick = process.env.EMBSHARD_BENCH_QUICK === '1';
const WARMUP = 2, STEPS = quick ? 3 : 10;

interface Row {
  name: string;
  batchSize: number;
  steps: number;
  samplesPerSec: number;
  /** mean milliseconds per step */
  ms: { data: number } & StepTimes;
  note: string;
}
const rows: Row[] = [];

const zero = (): { data: number } & StepTimes => ({
  data: 0, embeddingForward: 0, denseForward: 0, denseBackward: 0, communication: 0, communicationTotal: 0, embeddingBackward: 0, denseUpdate: 0, total: 0,
});

async function endToEnd(name: string, model: PresetName, data: SyntheticOptions, opt: 'sgd' | 'adagrad', lr: number, note: string): Promise<void> {
  const src = new SyntheticSource(data);
  const dim = model === 'dlrm-benchmark' ? 64 : model === 'dlrm-dcnv2' ? 128 : 16;
  const emb = embeddingsFor(src.features, src.tableRows, { dim, optimizer: { type: opt, lr }, seed: 1 });
  const t = new Trainer({ model, embeddings: emb, optimizer: { type: opt, lr }, seed: 1 });
  const ms = zero();
  for (let k = 0; k < WARMUP + STEPS; k++) {
    const t0 = performance.now();
    const b = src.batch(k);
    const dataMs = performance.now() - t0;
    await t.step(b);
    if (k < WARMUP) continue;
    ms.data += dataMs;
    const tt = t.lastTimes!;
    for (const key of Object.keys(tt) as (keyof StepTimes)[]) ms[key] += tt[key];
  }
  for (const key of Object.keys(ms) as (keyof typeof ms)[]) ms[key] /= STEPS;
  const B = data.batchSize;
  rows.push({ name, batchSize: B, steps: STEPS, samplesPerSec: (B * 1000) / (ms.total + ms.data), ms, note });
  console.error(`${name}: ${((B * 1000) / (ms.total + ms.data)).toFixed(0)} samples/s`);
  emb.dispose();
}

async function denseOnly(name: string, spec: DenseModelSpec | PresetName, B: number, fallback: boolean, note: string): Promise<void> {
  const ops = denseAddon('cpu').denseOps;
  ops.forceGemmFallback(fallback);
  try {
    const m = new DenseModel(spec, { optimizer: { type: 'adagrad', lr: 0.005 }, seed: 1 });
    const s = m.spec;
    const dense = new Float32Array(B * s.denseIn).map((_, i) => ((i * 2654435761) % 1000) / 1000);
    const pooled = new Float32Array(B * m.sparseWidth).map((_, i) => (((i * 40503) % 2001) - 1000) / 1e5);
    const labels = new Float32Array(B).map((_, i) => i % 4 === 0 ? 1 : 0);
    const sg = new Float32Array(pooled.length);
    const ms = zero();
    for (let k = 0; k < WARMUP + STEPS; k++) {
      const t0 = performance.now();
      const r = await m.forwardBackward(dense, pooled, labels, B, { sparseGrad: sg });
      const t1 = performance.now();
      await m.update();
      const t2 = performance.now();
      if (k < WARMUP) continue;
      ms.denseForward += r.forwardMs;
      ms.denseBackward += t1 - t0 - r.forwardMs;
      ms.denseUpdate += t2 - t1;
      ms.total += t2 - t0;
    }
    for (const key of Object.keys(ms) as (keyof typeof ms)[]) ms[key] /= STEPS;
    rows.push({ name, batchSize: B, steps: STEPS, samplesPerSec: (B * 1000) / ms.total, ms, note });
    console.error(`${name}: ${((B * 1000) / ms.total).toFixed(0)} samples/s`);
  } finally {
    ops.forceGemmFallback(false);
  }
}

async function main(): Promise<void> {
  const blas = denseAddon('cpu').denseOps.gemmInfo().blas;
  await endToEnd('DLRM benchmark, end to end', 'dlrm-benchmark', { preset: 'dlrm-benchmark', batchSize: 2048, seed: 1 }, 'sgd', 0.01,
    '8 × 1M rows × 64, 100 ids/bag, SGD');
  await endToEnd('DLRM Criteo Kaggle, end to end', 'dlrm-criteo-kaggle', { preset: 'criteo-kaggle', batchSize: 2048, maxRows: 1_000_000, seed: 1 }, 'adagrad', 0.005,
    '26 tables capped at 1M rows × 16, one-hot, Adagrad');
  await denseOnly('DLRM-DCNv2 dense half only', 'dlrm-dcnv2', 2048, false, 'MLPerf shape, 3 cross layers rank 512, Adagrad; random pooled input');
  await denseOnly(`DLRM Kaggle dense half, ${blas ? 'OpenBLAS' : 'no BLAS built'}`, 'dlrm-criteo-kaggle', 2048, false, 'GEMM dispatch as built');
  await denseOnly('DLRM Kaggle dense half, blocked fallback GEMM', 'dlrm-criteo-kaggle', 2048, true, 'forced fallback');

  const meta = { cpus: cpus().length, cpu: cpus()[0]?.model ?? 'unknown', node: process.version, threads: loadAddon().threads(), blas, warmup: WARMUP, steps: STEPS, date: new Date().toISOString() };
  const out = join(packageRoot, 'bench', 'results');
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'train.json'), JSON.stringify({ meta, rows }, null, 2) + '\n');
  const f = (x: number) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));
  console.log(`\n### Training step throughput (${meta.cpus} × ${meta.cpu}, ${meta.threads} threads, Node ${meta.node}; mean of ${STEPS} steps after ${WARMUP} warm-up)\n`);
  console.log('| run | batch | samples/s | data ms | emb fwd ms | dense fwd ms | dense bwd ms | comm ms | emb bwd+opt ms | dense opt ms | note |');
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|');
  for (const r of rows)
    console.log(
      `| ${r.name} | ${r.batchSize} | ${Math.round(r.samplesPerSec).toLocaleString('en-US')} | ${f(r.ms.data)} | ${f(r.ms.embeddingForward)} | ${f(r.ms.denseForward)} | ` +
        `${f(r.ms.denseBackward)} | ${f(r.ms.communication)} | ${f(r.ms.embeddingBackward)} | ${f(r.ms.denseUpdate)} | ${r.note} |`,
    );
  console.log(`\nwritten ${join(out, 'train.json')}`);
}

await main();

// bench/train.ts — training throughput (samples/s) with the time of a step split into data, embedding
// forward, dense forward, dense backward, communication, embedding backward (+ its fused optimizer) and the
// dense optimizer update, in fp32 and bf16 precision; and the dense layers' GEMM throughput against a probe
// of this machine's GEMM peak measured in the same run (a large square oneDNN matmul, best of several, fp32
// and bf16, before and after the rows, the better reading kept), so the ratio holds however loaded the machine is.
// Shapes: the DLRM benchmark (dlrm_s_benchmark.sh: 8 tables × 1M rows, dim 64, bottom 512-512-64, top
// 1024-1024-1024-1, 100 ids per bag, batch 2048) and DLRM Criteo Kaggle (26 tables capped at 1M rows, dim
// 16) end to end; the dense half of DLRM-DCNv2 alone (its tables do not fit here); and the dense halves on
// each GEMM backend built in (oneDNN, OpenBLAS, the naive kernel), which says where each one wins.
// Scaling for a small CPU: full shapes, a handful of measured steps. Data is generated in this thread
// before each step and timed on its own (the CLI overlaps it in a worker). One process: communication is 0.
// Writes bench/results/train.json and bench/results/train.md (the markdown tables, also printed).
// With --device cuda:N the end-to-end shapes train wholly on that GPU (fp32: tables and dense model there),
// each twice, step by step in turn: the pooled embeddings handed to the dense model in device memory (the
// Trainer's default there) and through host arrays (`handoff: 'host'`); the ratio of the two is this
// machine's cost of the host round trip. Writes bench/results/train-cuda.{json,md}.
// Run: npm run bench:train [-- --device cuda:0]   (EMBSHARD_BENCH_QUICK=1 for a short run)
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { loadAddon, packageRoot } from '../lib/native.js';
import { SyntheticSource, type SyntheticOptions } from '../lib/data/index.js';
import { DenseModel, Trainer, embeddingsFor, resolveDenseSpec, type DenseModelSpec, type PresetName, type StepTimes } from '../lib/train/index.js';
import { denseAddon, type GemmBackendName, type Precision } from '../lib/train/binding.js';
import { backends } from '../lib/index.js';
import { benchArgs, benchDevice, machine, table, writeResults } from './report.js';

const USAGE = `usage: embshard bench train [--device cpu|cuda:N]   (npm run bench:train [-- …])
Training throughput and the split of a step's time (fp32 and bf16), and the dense layers' GEMM throughput
against this machine's GEMM peak. Writes bench/results/train.{json,md} (with --device cuda:N:
train-cuda.{json,md}). EMBSHARD_BENCH_QUICK=1: a short run.`;
const device = benchDevice(benchArgs(USAGE, { options: ['--device'] }), USAGE);

const quick = process.env.EMBSHARD_BENCH_QUICK === '1';
const loadAtStart = loadavg()[0]!;
const WARMUP = 2, STEPS = quick ? 3 : 8;
const ops = denseAddon('cpu').denseOps;

type Times = { data: number } & StepTimes;
interface Row {
  name: string;
  precision: Precision;
  backend: GemmBackendName;
  batchSize: number;
  steps: number;
  samplesPerSec: number;
  /** mean milliseconds per step */
  ms: Times;
  /** GEMM flops of one dense forward + backward */
  denseGflop: number;
  /** those flops over the fastest step's dense forward + backward time (best against best, like the probe) */
  denseGflops: number;
  /** the fastest step's dense forward + backward, ms */
  bestDenseMs: number;
  /** denseGflops / the probe's GEMM peak of the same precision, probed right before and after this row */
  ofProbe: number;
  /** that probe, GFLOP/s */
  probeGflops: number;
  note: string;
}
const rows: Row[] = [];
const probe: Record<Precision, number> = { fp32: 0, bf16: 0 };

const zero = (): Times => ({
  data: 0, embeddingForward: 0, denseForward: 0, denseBackward: 0, communication: 0, communicationTotal: 0, embeddingBackward: 0, denseUpdate: 0, total: 0,
});

/** GEMM flops of one forward + backward of the dense model (2·M·N·K per product). */
function denseFlops(s: DenseModelSpec, B: number): number {
  let f = 0;
  const linear = (inDim: number, out: number, first: boolean) => {
    f += 2 * B * inDim * out * (first ? 2 : 3); // forward, dW, and dx unless it is the input layer
  };
  let inDim = s.denseIn;
  s.bottom.forEach((w, i) => {
    linear(inDim, w, i === 0);
    inDim = w;
  });
  const d = s.bottom[s.bottom.length - 1]!, n = s.numSparse + 1;
  let D: number;
  if (s.interaction === 'dot') {
    f += 2 * (2 * B * n * n * d); // Z = T·Tᵀ and dT = S·T
    D = d + (n * (n - 1)) / 2;
  } else {
    D = d + s.numSparse * s.embDim;
    for (let l = 0; l < (s.crossLayers ?? 0); l++) {
      linear(D, s.crossRank!, false);
      linear(s.crossRank!, D, false);
    }
  }
  inDim = D;
  for (const w of s.top) {
    linear(inDim, w, false);
    inDim = w;
  }
  return f;
}

/** Best-of-`reps` GFLOP/s of an n × n × n oneDNN matmul in `precision`. */
function gemmPeak(precision: Precision, n: number, reps: number): number {
  const A = new Float32Array(n * n).map((_, i) => ((i * 7919) % 1000) / 1000 - 0.5);
  const B = new Float32Array(n * n).map((_, i) => ((i * 104729) % 1000) / 1000 - 0.5);
  const C = new Float32Array(n * n);
  const backend: GemmBackendName = ops.gemmInfo().built.onednn ? 'onednn' : ops.gemmInfo().backend;
  let best = Infinity;
  for (let r = 0; r < reps + 1; r++) {
    const t0 = performance.now();
    ops.gemm(false, false, n, n, n, 1, A, B, 0, C, { backend, precision });
    const ms = performance.now() - t0;
    if (r > 0) best = Math.min(best, ms); // the first run creates the primitive
  }
  return (2 * n * n * n) / (best * 1e6);
}

// The GEMM peak of `precision` around one row: a short probe right before and after it, the better kept,
// so that the row's ratio compares it with the machine as it was while the row ran.
function localProbe(precision: Precision): number {
  return gemmPeak(precision, quick ? 768 : 1024, 3);
}

function finish(r: Omit<Row, 'denseGflops' | 'ofProbe' | 'probeGflops'>, before: number): void {
  const gflops = (r.denseGflop * 1e3) / r.bestDenseMs; // Gflop per second
  const local = Math.max(before, localProbe(r.precision));
  const row: Row = { ...r, denseGflops: gflops, probeGflops: local, ofProbe: gflops / local };
  rows.push(row);
  console.error(`${r.name} [${r.precision}, ${r.backend}]: ${r.samplesPerSec.toFixed(0)} samples/s, dense GEMMs ${gflops.toFixed(1)} GFLOP/s (${(row.ofProbe * 100).toFixed(0)}% of the probe around it, ${local.toFixed(1)} GFLOP/s)`);
}

async function endToEnd(name: string, model: PresetName, data: SyntheticOptions, opt: 'sgd' | 'adagrad', lr: number, precision: Precision, note: string): Promise<void> {
  const src = new SyntheticSource(data);
  const dim = model === 'dlrm-benchmark' ? 64 : 16;
  const emb = embeddingsFor(src.features, src.tableRows, { dim, optimizer: { type: opt, lr }, seed: 1 });
  const t = new Trainer({ model, embeddings: emb, optimizer: { type: opt, lr }, seed: 1, precision });
  const before = localProbe(precision);
  const ms = zero();
  let bestDenseMs = Infinity;
  for (let k = 0; k < WARMUP + STEPS; k++) {
    const t0 = performance.now();
    const b = src.batch(k);
    const dataMs = performance.now() - t0;
    await t.step(b);
    if (k < WARMUP) continue;
    ms.data += dataMs;
    const tt = t.lastTimes!;
    bestDenseMs = Math.min(bestDenseMs, tt.denseForward + tt.denseBackward);
    for (const key of Object.keys(tt) as (keyof StepTimes)[]) ms[key] += tt[key];
  }
  for (const key of Object.keys(ms) as (keyof Times)[]) ms[key] /= STEPS;
  const B = data.batchSize;
  finish({
    name, precision, backend: ops.gemmInfo().backend, batchSize: B, steps: STEPS, samplesPerSec: (B * 1000) / (ms.total + ms.data), ms, bestDenseMs,
    denseGflop: denseFlops(t.dense.spec, B) / 1e9, note,
  }, before);
  emb.dispose();
}

async function denseOnly(name: string, model: PresetName, B: number, precision: Precision, backend: GemmBackendName | null, note: string, steps = STEPS): Promise<void> {
  ops.forceGemmBackend(backend);
  try {
    const m = new DenseModel(model, { optimizer: { type: 'adagrad', lr: 0.005 }, seed: 1, precision });
    const s = m.spec;
    const dense = new Float32Array(B * s.denseIn).map((_, i) => ((i * 2654435761) % 1000) / 1000);
    const pooled = new Float32Array(B * m.sparseWidth).map((_, i) => (((i * 40503) % 2001) - 1000) / 1e5);
    const labels = new Float32Array(B).map((_, i) => (i % 4 === 0 ? 1 : 0));
    const sg = new Float32Array(pooled.length);
    const before = localProbe(precision);
    const ms = zero();
    let bestDenseMs = Infinity;
    for (let k = 0; k < 1 + steps; k++) {
      const t0 = performance.now();
      const r = await m.forwardBackward(dense, pooled, labels, B, { sparseGrad: sg });
      const t1 = performance.now();
      await m.update();
      const t2 = performance.now();
      if (k < 1) continue;
      bestDenseMs = Math.min(bestDenseMs, t1 - t0);
      ms.denseForward += r.forwardMs;
      ms.denseBackward += t1 - t0 - r.forwardMs;
      ms.denseUpdate += t2 - t1;
      ms.total += t2 - t0;
    }
    for (const key of Object.keys(ms) as (keyof Times)[]) ms[key] /= steps;
    finish({
      name, precision, backend: ops.gemmInfo().backend, batchSize: B, steps, samplesPerSec: (B * 1000) / ms.total, ms, bestDenseMs,
      denseGflop: denseFlops(resolveDenseSpec(model), B) / 1e9, note,
    }, before);
  } finally {
    ops.forceGemmBackend(null);
  }
}

async function main(): Promise<void> {
  const info = ops.gemmInfo();
  const N = quick ? 1024 : 1536, REPS = quick ? 3 : 8;
  const runProbe = (when: string) => {
    for (const p of ['fp32', 'bf16'] as const) probe[p] = Math.max(probe[p], gemmPeak(p, N, REPS));
    console.error(`GEMM probe ${when} (${N}³ matmul, best of ${REPS}): fp32 ${probe.fp32.toFixed(1)} GFLOP/s, bf16 ${probe.bf16.toFixed(1)} GFLOP/s`);
  };
  runProbe('before');

  for (const precision of ['fp32', 'bf16'] as const) {
    await endToEnd('DLRM Criteo Kaggle, end to end', 'dlrm-criteo-kaggle', { preset: 'criteo-kaggle', batchSize: 2048, maxRows: 1_000_000, seed: 1 }, 'adagrad', 0.005, precision,
      '26 tables capped at 1M rows × 16, one-hot, Adagrad');
    await endToEnd('DLRM benchmark, end to end', 'dlrm-benchmark', { preset: 'dlrm-benchmark', batchSize: 2048, seed: 1 }, 'sgd', 0.01, precision,
      '8 × 1M rows × 64, 100 ids/bag, SGD');
  }
  for (const precision of ['fp32', 'bf16'] as const)
    await denseOnly('DLRM-DCNv2 dense half', 'dlrm-dcnv2', 2048, precision, null, 'MLPerf shape, 3 cross layers rank 512, Adagrad; random pooled input', quick ? 2 : 3);
  // Each backend built in, on each dense half: where one beats another.
  for (const model of ['dlrm-criteo-kaggle', 'dlrm-benchmark'] as const)
    for (const backend of (['onednn', 'openblas', 'naive'] as const).filter((b) => info.built[b]))
      await denseOnly(`${model} dense half`, model, 2048, 'fp32', backend, 'backend comparison', backend === 'naive' ? 2 : STEPS);

  runProbe('after');

  const meta = {
    cpus: cpus().length, cpu: cpus()[0]?.model ?? 'unknown', node: process.version, threads: loadAddon().threads(), loadAtStart, dense: info,
    probe: { n: N, reps: REPS, fp32GFlops: probe.fp32, bf16GFlops: probe.bf16 }, warmup: WARMUP, steps: STEPS, date: new Date().toISOString(),
  };
  const f = (x: number) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));
  const lines = [
    `### Training step throughput (${meta.cpus} × ${meta.cpu}, ${meta.threads} threads, 1-minute load average ${loadAtStart.toFixed(2)} at the start, Node ${meta.node}; dense layers on ${info.reason}; mean of ${STEPS} steps after ${WARMUP} warm-up)`,
    '',
    `GEMM peak probe of the run (${N}×${N}×${N} oneDNN matmul, best of ${REPS}, before and after all rows, the better kept): fp32 **${probe.fp32.toFixed(1)} GFLOP/s**, bf16 **${probe.bf16.toFixed(1)} GFLOP/s**.`,
    '',
    '| run | precision | GEMMs on | batch | samples/s | data ms | emb fwd ms | dense fwd ms | dense bwd ms | emb bwd+opt ms | dense opt ms | dense GEMM GFLOP/s | probe around it | of probe | note |',
    '|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
    ...rows.map((r) =>
      `| ${r.name} | ${r.precision} | ${r.backend} | ${r.batchSize} | ${Math.round(r.samplesPerSec).toLocaleString('en-US')} | ${f(r.ms.data)} | ${f(r.ms.embeddingForward)} | ` +
        `${f(r.ms.denseForward)} | ${f(r.ms.denseBackward)} | ${f(r.ms.embeddingBackward)} | ${f(r.ms.denseUpdate)} | ${r.denseGflops.toFixed(1)} | ${r.probeGflops.toFixed(1)} | ${(r.ofProbe * 100).toFixed(0)}% | ${r.note} |`),
    '',
    `Times are means over the measured steps. "dense GEMM GFLOP/s" = the GEMM flops of one dense forward + backward (linear layers, interaction, cross layers) over the fastest measured step's dense forward + backward time (best against best, as the probe is), which also holds the non-GEMM work (ReLU backward, bias sums, loss); "probe around it" is a ${quick ? 768 : 1024}³ oneDNN matmul of the same precision run right before and after the row (best of 3 each, the better kept), and "of probe" divides the first by it — a ratio to the machine as it was during the row, which matters on a shared machine whose speed swings during a run.`,
  ];
  const out = join(packageRoot, 'bench', 'results');
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'train.json'), JSON.stringify({ meta, rows }, null, 2) + '\n');
  writeFileSync(join(out, 'train.md'), lines.join('\n') + '\n');
  console.log('\n' + lines.join('\n'));
  console.log(`\nwritten ${join(out, 'train.json')} and train.md`);
}

// The end-to-end shapes on a GPU: the device handoff against the host one, the two trainers stepping in
// turn on the same batches (the same numbers, bit for bit), so both see the machine as it is.
async function gpuMain(device: string): Promise<void> {
  const info = backends().find((b) => b.name === 'cuda');
  if (!info?.available) {
    console.error(`device ${device} is unavailable: ${info?.reason ?? 'no CUDA backend'}`);
    process.exit(2);
  }
  const shapes = [
    { name: 'DLRM Criteo Kaggle', model: 'dlrm-criteo-kaggle' as const, data: { preset: 'criteo-kaggle', batchSize: 2048, maxRows: 1_000_000, seed: 1 } as SyntheticOptions, opt: 'adagrad' as const, lr: 0.005, dim: 16 },
    { name: 'DLRM benchmark', model: 'dlrm-benchmark' as const, data: { preset: 'dlrm-benchmark', batchSize: 2048, seed: 1 } as SyntheticOptions, opt: 'sgd' as const, lr: 0.01, dim: 64 },
  ];
  const out: Record<string, unknown>[] = [];
  for (const sh of shapes) {
    const src = new SyntheticSource(sh.data);
    const make = (handoff: 'auto' | 'host') => {
      const emb = embeddingsFor(src.features, src.tableRows, { dim: sh.dim, optimizer: { type: sh.opt, lr: sh.lr }, seed: 1, device });
      return { emb, t: new Trainer({ model: sh.model, embeddings: emb, optimizer: { type: sh.opt, lr: sh.lr }, seed: 1, device, handoff }) };
    };
    const runs = { device: make('auto'), host: make('host') };
    const ms = { device: zero(), host: zero() };
    for (let k = 0; k < WARMUP + STEPS; k++) {
      const b = src.batch(k);
      for (const which of ['device', 'host'] as const) {
        await runs[which].t.step(b);
        if (k < WARMUP) continue;
        const tt = runs[which].t.lastTimes!;
        for (const key of Object.keys(tt) as (keyof StepTimes)[]) ms[which][key] += tt[key] / STEPS;
      }
    }
    const B = sh.data.batchSize;
    for (const which of ['device', 'host'] as const) {
      out.push({ shape: sh.name, handoff: runs[which].t.handoff, batch: B, samplesPerSec: (B * 1000) / ms[which].total, ...ms[which] });
      runs[which].emb.dispose();
    }
    console.error(`${sh.name}: device handoff ${ms.device.total.toFixed(2)} ms/step, host ${ms.host.total.toFixed(2)} ms/step`);
  }
  const f = (x: unknown) => (x as number).toFixed(2);
  const md = [
    `### Training on ${device} (${(info as { devices?: { name: string }[] }).devices?.[0]?.name ?? 'GPU'}), fp32, mean of ${STEPS} steps after ${WARMUP} warm-up; tables and dense model on the GPU`,
    '',
    table(['shape', 'handoff', 'batch', 'samples/s', 'emb fwd ms', 'dense fwd ms', 'dense bwd ms', 'emb bwd+opt ms', 'dense opt ms', 'step ms', 'step / device step'],
      out.map((r, i) => {
        const dev = out[i - (i % 2)]!;
        return [r.shape as string, r.handoff as string, r.batch as number, Math.round(r.samplesPerSec as number), f(r.embeddingForward), f(r.denseForward), f(r.denseBackward), f(r.embeddingBackward), f(r.denseUpdate), f(r.total), ((r.total as number) / (dev.total as number)).toFixed(3)];
      })),
    '',
    '"device": the pooled embeddings and their gradients stay in GPU memory between the collection and the dense model; "host": both cross to host arrays and back every step. The two trainers step in turn on the same batches and compute the same numbers.',
  ].join('\n');
  writeResults('train-cuda', { machine: machine(), device, steps: STEPS, warmup: WARMUP, rows: out }, md);
}

if (device !== 'cpu') await gpuMain(device);
else await main();

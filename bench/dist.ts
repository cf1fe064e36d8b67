// bench/dist.ts — sharded training across ranks on this machine: for each plan type (dp, table-wise rb,
// row-wise rb, column-wise rb, row-wise ub, rb with hot-row tiers) at 1, 2 and 4 MPI ranks: steps/s,
// payload bytes per step (exact counters), and the achieved all-to-all bandwidth of the runtime's
// exchanges against a raw blocking MPI_Alltoallv of the same per-peer sizes; the whole Trainer (a DLRM
// over row-sharded tables) with and without overlap: steps/s, exposed vs total communication per step,
// dense all-reduce bytes per rank per step against the gradient's size; and the dense-gradient all-reduce
// of the DLRM-DCNv2 model (the bandwidth-optimal default and the deterministic gather-and-sum): bytes each
// rank sends per step against the gradient's size, from the group's stats(), and bandwidth against a raw
// MPI_Allreduce of the same buffer. The machine may be shared with other work, so every comparison is
// made within one run: the two sides interleaved, repeated, and compared by their medians.
// `node dist/bench/dist.js` launches `mpirun -np N node dist/bench/dist.js --worker <plan>` per case,
// writes bench/results/dist.json and bench/results/dist.md, and prints the markdown.
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { JaggedBatch } from '../lib/batch.js';
import { ShardPlan } from '../lib/plan/shard-plan.js';
import type { TableSpec } from '../lib/plan/types.js';
import { createMpiGroup, type CollectiveOptions, type CommArray, type ProcessGroup } from '../lib/sharded/group.js';
import { ShardedEmbeddingCollection } from '../lib/sharded/sharded.js';
import { DenseModel, type DenseModelSpec } from '../lib/train/dense.js';
import { Trainer, type StepTimes } from '../lib/train/trainer.js';
import type { Batch } from '../lib/data/types.js';
import { benchArgs, envInt, envInts, machine } from './report.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = here.endsWith(join('dist', 'bench')) ? join(here, '..', '..') : join(here, '..');
const PLANS = ['dp', 'table', 'row-rb', 'col-rb', 'row-ub', 'hot-rb'] as const;
type PlanType = (typeof PLANS)[number];
const RANKS = envInts('EMBSHARD_BENCH_RANKS', [1, 2, 4]);
const TABLES = 4, ROWS = 200_000, DIM = 64, B = 2048, POOL = 8;
const WARMUP = 2, STEPS = envInt('EMBSHARD_BENCH_STEPS', 8);

function median(xs: number[]): number {
  const v = xs.filter(Number.isFinite).sort((a, b) => a - b);
  if (v.length === 0) return NaN;
  const m = v.length >> 1;
  return v.length % 2 ? v[m]! : (v[m - 1]! + v[m]!) / 2;
}

function planFor(type: PlanType, W: number): ShardPlan {
  const topology = { name: 'cpu-local', worldSize: W, ranksPerNode: W, deviceMemoryBytes: 1e12, memoryLimitBytes: 1e12, hbmBandwidth: 1e10, intraNodeBandwidth: 1e10, interNodeBandwidth: 1e10 };
  const tables = Array.from({ length: TABLES }, (_, i) => {
    const table: TableSpec = { name: `t${i}`, rows: ROWS, dim: DIM, pooling: 'sum', features: [`f${i}`] };
    const rowSplit = (n: number) => Array.from({ length: n }, (_, k) => ({ rows: [Math.floor((ROWS * k) / n), Math.floor((ROWS * (k + 1)) / n)] as [number, number], cols: [0, DIM] as [number, number], rank: k }));
    switch (type) {
      case 'dp': return { table, cluster: 'dp' as const };
      case 'table': return { table, cluster: 'rb' as const, shards: [{ rows: [0, ROWS] as [number, number], cols: [0, DIM] as [number, number], rank: i % W }] };
      case 'row-rb': return { table, cluster: 'rb' as const, shards: rowSplit(W) };
      case 'row-ub': return { table, cluster: 'ub' as const, shards: rowSplit(W) };
      case 'col-rb':
        return { table, cluster: 'rb' as const, shards: Array.from({ length: W }, (_, k) => ({ rows: [0, ROWS] as [number, number], cols: [(DIM * k) / W, (DIM * (k + 1)) / W] as [number, number], rank: k })) };
      case 'hot-rb': {
        const hot = 1024;
        return { table, cluster: 'rb' as const, tiers: { replicated: hot, node: 0 }, shards: rowSplit(W).map((s, k) => ({ ...s, rows: [k === 0 ? hot : s.rows[0], s.rows[1]] as [number, number] })) };
      }
    }
  });
  return ShardPlan.create({ topology, batchSize: B, tables });
}

/** Zipf-like skewed ids (hot rows first), seeded per rank and step. */
function batchFor(plan: ShardPlan, rank: number, step: number): JaggedBatch {
  let s = (rank * 7919 + step * 104729 + 1) >>> 0;
  const next = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296);
  const F = plan.tables.length;
  const lengths = new Int32Array(F * B).fill(POOL);
  const ids = new BigInt64Array(F * B * POOL);
  for (let i = 0; i < ids.length; i++) ids[i] = BigInt(Math.floor(ROWS * next() ** 3));
  return JaggedBatch.fromLengths({ features: plan.tables.map((t) => t.features[0]!), batchSize: B, lengths, ids });
}

interface Exchange {
  send: Float64Array;
  recv: Float64Array;
  bytes: number;
  /** the runtime passed the receive counts (no count phase) */
  known: boolean;
}

async function worker(type: PlanType): Promise<void> {
  const g = await createMpiGroup({ timeoutMs: 120_000 });
  const plan = planFor(type, g.size);
  const sc = new ShardedEmbeddingCollection(plan, g, { optimizer: { type: 'adagrad', lr: 0.01 } });
  // time every all-to-all the runtime issues, and keep the sizes of one step's to replay them raw
  let a2aSec = 0, a2aBytes = 0;
  let record: Exchange[] | null = null;
  const inner = g.allToAllV.bind(g);
  (g as { allToAllV: ProcessGroup['allToAllV'] }).allToAllV = async <T extends CommArray>(send: T, counts: ArrayLike<number>, opts?: CollectiveOptions) => {
    const t0 = process.hrtime.bigint();
    const r = await inner(send, counts, opts);
    const dt = Number(process.hrtime.bigint() - t0) / 1e9;
    if (opts?.uncounted) return r; // metadata (segment counts), not payload
    const bpe = send.BYTES_PER_ELEMENT;
    const bytes = send.byteLength;
    a2aSec += dt;
    a2aBytes += bytes;
    if (record) record.push({ send: Float64Array.from(counts, (c) => c * bpe), recv: Float64Array.from(r.counts, (c) => c * bpe), bytes, known: opts?.recvCounts !== undefined });
    return r;
  };
  const step = async (k: number) => {
    const out = await sc.forward(batchFor(plan, g.rank, k));
    await sc.backward(out, { pooled: new Float32Array(out.pooled.length).fill(1e-3) });
  };
  for (let k = 0; k < WARMUP; k++) await step(k);
  record = [];
  await step(WARMUP);
  const exchanges = record;
  record = null;
  const bytesPerStep = sc.traffic.forward.sentIntra + sc.traffic.forward.sentInter + sc.traffic.backward.sentIntra + sc.traffic.backward.sentInter;
  await g.barrier();
  a2aSec = 0;
  a2aBytes = 0;
  const t0 = process.hrtime.bigint();
  for (let k = 0; k < STEPS; k++) await step(WARMUP + 1 + k);
  await g.barrier();
  const sec = Number(process.hrtime.bigint() - t0) / 1e9;
  // the same exchanges back to back, (a) through the runtime's group (count phase, data phase, promise,
  // timed from JS) and (b) as a plain MPI_Alltoallv timed around the MPI call only; interleaved so both
  // see the same machine load, the side that goes first alternating from one repetition to the next.
  // Each exchange's send and receive buffers are made and written once, before the repetitions, so
  // neither side pays the first touch of fresh pages (the runtime's receive buffers come from its pool).
  // Each repetition replays one step's exchanges both ways; the medians over repetitions are reported.
  const repBw: number[] = [], rawBw: number[] = [], ratio: number[] = [];
  const stepBytes = exchanges.reduce((a, ex) => a + ex.bytes, 0);
  const buffers = exchanges.map((ex) => ({
    send: new Uint8Array(ex.bytes).fill(1),
    recv: new Uint8Array(ex.recv.reduce((a, b) => a + b, 0)).fill(1),
    sendCounts: Array.from(ex.send),
    opts: ex.known ? { recvCounts: Array.from(ex.recv) } : undefined,
  }));
  for (let rep = 0; rep < 2 * STEPS; rep++) {
    let rawSec = 0, repSec = 0;
    for (let x = 0; x < exchanges.length; x++) {
      const ex = exchanges[x]!, { send, recv, sendCounts, opts } = buffers[x]!;
      const replay = async () => {
        await g.barrier();
        const t1 = process.hrtime.bigint();
        const res = await inner(send, sendCounts, opts);
        g.release(res.data);
        repSec += Number(process.hrtime.bigint() - t1) / 1e9;
      };
      const raw = async () => {
        await g.barrier();
        rawSec += await g.rawAllToAllV(send, ex.send, recv, ex.recv);
      };
      if (rep % 2 === 0) {
        await replay();
        await raw();
      } else {
        await raw();
        await replay();
      }
    }
    if (stepBytes > 0) {
      repBw.push(stepBytes / repSec);
      rawBw.push(stepBytes / rawSec);
      ratio.push(rawSec / repSec);
    }
  }
  const stats = Float64Array.from([bytesPerStep, a2aBytes > 0 ? a2aBytes / a2aSec : NaN, median(rawBw), a2aSec / STEPS, median(repBw), median(ratio)]);
  const K = stats.length;
  const all = await g.allGather(stats, { uncounted: true });
  if (g.rank === 0) {
    const W = g.size;
    const mean = (k: number) => Array.from({ length: W }, (_, r) => all.data[r * K + k]!).reduce((a, b) => a + b, 0) / W;
    const num = (x: number) => (Number.isFinite(x) ? x : null);
    console.log(JSON.stringify({ plan: type, ranks: W, stepsPerSec: STEPS / sec, bytesPerStep: mean(0), a2aBytesPerSec: num(mean(1)), rawBytesPerSec: num(mean(2)), a2aSecPerStep: mean(3), replayBytesPerSec: num(mean(4)), replayOverRaw: num(mean(5)), exchangesPerStep: exchanges.length }));
  }
  sc.dispose();
  g.close();
}

/** The Trainer's DLRM: dot interaction over the four tables (bottom 13-512-256-64, top 1024-512-1). */
const TRAIN_SPEC: DenseModelSpec = { denseIn: 13, bottom: [512, 256, DIM], top: [1024, 512, 1], numSparse: TABLES, embDim: DIM, interaction: 'dot' };

function trainBatch(plan: ShardPlan, rank: number, step: number): Batch {
  let s = (rank * 31 + step * 7 + 5) >>> 0;
  const next = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296);
  return {
    dense: Float32Array.from({ length: B * TRAIN_SPEC.denseIn }, next),
    sparse: batchFor(plan, rank, step),
    labels: Float32Array.from({ length: B }, () => (next() < 0.25 ? 1 : 0)),
    size: B,
  };
}

/**
 * Two Trainers over the same row-sharded tables and group, one with overlap and one without, stepping in
 * turn on the same batches (so both see the same machine load): per-rank medians of the step time, the
 * exposed and the total communication, and the dense all-reduce's bytes per step.
 */
async function trainerWorker(): Promise<void> {
  const g = await createMpiGroup({ timeoutMs: 300_000 });
  const plan = planFor('row-rb', g.size);
  const make = (overlap: boolean) =>
    new Trainer({ model: TRAIN_SPEC, plan, group: g, optimizer: { type: 'adagrad', lr: 0.01 }, embeddingOptimizer: { type: 'adagrad', lr: 0.01 }, seed: 1, overlap });
  const off = make(false), on = make(true);
  const n = WARMUP + STEPS;
  const batches = Array.from({ length: n }, (_, k) => trainBatch(plan, g.rank, k));
  const times: Record<'off' | 'on', StepTimes[]> = { off: [], on: [] };
  const speedup: number[] = [];
  const before = g.stats().allReduce.sent;
  for (let k = 0; k < n; k++) {
    await g.barrier();
    await off.step(batches[k]!);
    await g.barrier();
    await on.step(batches[k]!, k + 1 < n ? batches[k + 1] : undefined);
    if (k < WARMUP) continue;
    times.off.push(off.lastTimes!);
    times.on.push(on.lastTimes!);
    speedup.push(off.lastTimes!.total / on.lastTimes!.total);
  }
  const arSentPerStep = (g.stats().allReduce.sent - before) / (2 * n);
  const gradientBytes = off.dense.params.byteLength;
  const med = (which: 'off' | 'on', k: keyof StepTimes) => median(times[which].map((t) => t[k]));
  const mine = Float64Array.from([
    med('off', 'total'), med('on', 'total'), med('off', 'communication'), med('off', 'communicationTotal'),
    med('on', 'communication'), med('on', 'communicationTotal'), median(speedup), arSentPerStep,
  ]);
  const K = mine.length;
  const all = await g.allGather(mine, { uncounted: true });
  if (g.rank === 0) {
    const W = g.size;
    const col = (k: number) => Array.from({ length: W }, (_, r) => all.data[r * K + k]!);
    const mean = (k: number) => col(k).reduce((a, b) => a + b, 0) / W;
    // a step ends when its slowest rank is done
    console.log(JSON.stringify({
      trainer: true, ranks: W, gradientBytes, stepsPerSecOff: 1000 / Math.max(...col(0)), stepsPerSecOn: 1000 / Math.max(...col(1)),
      speedup: mean(6), exposedOffMs: mean(2), totalOffMs: mean(3), exposedOnMs: mean(4), totalOnMs: mean(5), allReduceSentPerStep: mean(7),
    }));
  }
  off.embeddings.dispose?.();
  on.embeddings.dispose?.();
  g.close();
}

/** The dense-gradient all-reduce of DLRM-DCNv2, both ways, against a raw MPI_Allreduce of the same size. */
async function allReduceWorker(): Promise<void> {
  const g = await createMpiGroup({ timeoutMs: 120_000 });
  const grads = Float32Array.from(new DenseModel('dlrm-dcnv2').grads);
  const buf = new Float32Array(grads.length);
  const STEPS_AR = Math.max(3, Math.floor(STEPS / 2));
  const row: Record<string, number> = { ranks: g.size, gradientBytes: grads.byteLength };
  for (const deterministic of [false, true]) {
    buf.set(grads);
    await g.allReduce(buf, 'sum', { deterministic }); // warm-up
    const before = g.stats().allReduce;
    // each iteration: the group's all-reduce, then a raw MPI_Allreduce of the same buffer; medians reported
    const bw: number[] = [], rawBw: number[] = [], ratio: number[] = [];
    for (let k = 0; k < STEPS_AR; k++) {
      buf.set(grads);
      await g.barrier();
      const t0 = process.hrtime.bigint();
      await g.allReduce(buf, 'sum', { deterministic });
      const sec = Number(process.hrtime.bigint() - t0) / 1e9;
      buf.set(grads);
      await g.barrier();
      const rawSec = await g.rawAllReduce(buf);
      // algorithm bandwidth: the gradient's bytes over the time of one all-reduce
      bw.push(grads.byteLength / sec);
      rawBw.push(grads.byteLength / rawSec);
      ratio.push(rawSec / sec);
    }
    const after = g.stats().allReduce;
    const key = deterministic ? 'deterministic' : 'fast';
    row[`${key}SentPerStep`] = (after.sent - before.sent) / STEPS_AR;
    row[`${key}RecvPerStep`] = (after.recv - before.recv) / STEPS_AR;
    row[`${key}AlgBytesPerSec`] = median(bw);
    row[`${key}RawAlgBytesPerSec`] = median(rawBw);
    row[`${key}OverRaw`] = median(ratio);
  }
  const mine = Float64Array.from([row.fastAlgBytesPerSec!, row.fastRawAlgBytesPerSec!, row.deterministicAlgBytesPerSec!, row.fastOverRaw!]);
  const K = mine.length;
  const all = await g.allGather(mine, { uncounted: true });
  if (g.rank === 0) {
    const mean = (k: number) => Array.from({ length: g.size }, (_, r) => all.data[r * K + k]!).reduce((a, b) => a + b, 0) / g.size;
    console.log(JSON.stringify({ allReduce: true, ...row, fastAlgBytesPerSec: mean(0), fastRawAlgBytesPerSec: mean(1), deterministicAlgBytesPerSec: mean(2), fastOverRaw: mean(3) }));
  }
  g.close();
}

function mpiLine(W: number, args: string[], prefix: string): string | undefined {
  const r = spawnSync('mpirun', ['--allow-run-as-root', '--oversubscribe', '-np', String(W), process.execPath, fileURLToPath(import.meta.url), ...args], { cwd: root, encoding: 'utf8', timeout: 600_000 });
  const line = (r.stdout ?? '').split('\n').find((l) => l.startsWith(prefix));
  if (!line) console.error(`${args.join(' ')} @ ${W} ranks failed (exit ${r.status}):\n${r.stdout}\n${r.stderr}`);
  return line;
}

function main(): void {
  const loadAtStart = loadavg()[0]!;
  const rows: Record<string, number | string>[] = [];
  for (const W of RANKS)
    for (const type of PLANS) {
      const line = mpiLine(W, ['--worker', type], '{"plan"');
      rows.push(line ? (JSON.parse(line) as Record<string, number | string>) : { plan: type, ranks: W, error: 'no result' });
    }
  const trainRows: Record<string, number>[] = [];
  for (const W of RANKS) {
    const line = mpiLine(W, ['--trainer'], '{"trainer"');
    if (line) trainRows.push(JSON.parse(line) as Record<string, number>);
  }
  const arRows: Record<string, number>[] = [];
  for (const W of RANKS) {
    if (W < 2) continue;
    const line = mpiLine(W, ['--allreduce'], '{"allReduce"');
    if (line) arRows.push(JSON.parse(line) as Record<string, number>);
  }
  const fmt = (x: unknown, d = 1) => (typeof x === 'number' && Number.isFinite(x) ? x.toFixed(d) : '—');
  const mb = (x: unknown) => (typeof x === 'number' ? fmt(x / 1e6) : '—');
  const pct1 = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) ? `${fmt(x * 100, 0)}%` : '—');
  const md = [
    `Sharded training on this machine (${TABLES} tables × ${ROWS} rows × dim ${DIM}, batch ${B} per rank, ${POOL} ids per bag, adagrad; MPI ranks on one node; ${STEPS} timed steps)`,
    '',
    `The machine (${String(machine().cores)} cores, 1-minute load average ${loadAtStart.toFixed(2)} when the run began) may be shared with other jobs, so absolute times are noisy; every ratio compares two measurements taken in the same run, interleaved (one after the other, repeatedly, each side's median taken), never against an earlier run.`,
    '',
    `Trainer, DLRM over the row-sharded tables (bottom ${TRAIN_SPEC.denseIn}-${TRAIN_SPEC.bottom.join('-')}, dot, top ${TRAIN_SPEC.top.join('-')}; ${trainRows[0] ? fmt(trainRows[0].gradientBytes! / 1e6, 2) : '—'} MB of dense gradients): overlap on and off, stepping in turn`,
    '',
    '| ranks | steps/s, overlap off | steps/s, overlap on | speed-up (median of step pairs) | exposed / total comm. ms per step, off | exposed / total comm. ms per step, on | all-reduce sent / gradient |',
    '|---:|---:|---:|---:|---:|---:|---:|',
    ...trainRows.map((r) =>
      `| ${r.ranks} | ${fmt(r.stepsPerSecOff, 2)} | ${fmt(r.stepsPerSecOn, 2)} | ${fmt(r.speedup, 2)}× | ${fmt(r.exposedOffMs)} / ${fmt(r.totalOffMs)} | ${fmt(r.exposedOnMs)} / ${fmt(r.totalOnMs)} | ${r.ranks > 1 ? `${fmt(r.allReduceSentPerStep! / r.gradientBytes!, 2)}×` : '—'} |`,
    ),
    '',
    'steps/s: one over the median step time of the slowest rank. exposed: time the step was blocked waiting on collectives (embedding exchanges, the next batch\'s id exchange, the dense all-reduce); total: time some collective was in flight during the step (StepTimes.communication / communicationTotal, medians, mean over ranks). With overlap the bottom MLP runs during the embedding forward, the all-reduce during the embedding backward and the next batch\'s ids travel during the dense compute; the results are bitwise the same either way.',
    '',
    '| plan | ranks | steps/s | MB sent / step / rank | in-step all-to-all MB/s | runtime all-to-all MB/s (replay) | raw MPI_Alltoallv MB/s | ratio |',
    '|---|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map((r) =>
      r.error
        ? `| ${r.plan} | ${r.ranks} | failed (${r.error}) | | | | | |`
        : `| ${r.plan} | ${r.ranks} | ${fmt(r.stepsPerSec, 2)} | ${fmt((r.bytesPerStep as number) / 1e6, 2)} | ${mb(r.a2aBytesPerSec)} | ${mb(r.replayBytesPerSec)} | ${mb(r.rawBytesPerSec)} | ${pct1(r.replayOverRaw)} |`,
    ),
    '',
    'dp tables send no all-to-all payload (their gradients travel by all-gather), so they have no ratio.',
    'in-step: payload bytes of the runtime\'s all-to-alls over the time spent in them during training steps (includes waiting for slower peers).',
    'replay: the same exchanges issued back to back through the runtime\'s group, timed end to end from JS (data phase, promise; the runtime knows every receive size from its metadata exchange, so no count phase);',
    'raw: the same per-peer sizes as a blocking MPI_Alltoallv, timed around the MPI call. Replay and raw alternate exchange by exchange (which goes first alternates between repetitions), over send and receive buffers made and written once beforehand; MB/s are medians over repetitions of one step\'s exchanges; ratio = median over repetitions of raw time / replay time (target ≥ 80%). With 1 rank every exchange is a copy to itself.',
    '',
    `Dense-gradient all-reduce of DLRM-DCNv2 (${arRows[0] ? fmt(arRows[0].gradientBytes! / 1e6) : '—'} MB of fp32 gradients per rank per step)`,
    '',
    '| ranks | default: sent / gradient | default MB/s | raw MPI_Allreduce MB/s | ratio | deterministic: sent / gradient | deterministic MB/s |',
    '|---:|---:|---:|---:|---:|---:|---:|',
    ...arRows.map((r) =>
      `| ${r.ranks} | ${fmt(r.fastSentPerStep! / r.gradientBytes!, 2)}× | ${mb(r.fastAlgBytesPerSec)} | ${mb(r.fastRawAlgBytesPerSec)} | ${pct1(r.fastOverRaw)} | ${fmt(r.deterministicSentPerStep! / r.gradientBytes!, 2)}× | ${mb(r.deterministicAlgBytesPerSec)} |`,
    ),
    '',
    'sent / gradient: payload bytes one rank sends per all-reduce (the group\'s stats(); received is the same) over the gradient\'s bytes — target ≤ 2.1× at 4 ranks.',
    'MB/s: gradient bytes over the time of one all-reduce, timed from JS (default: MPI_Allreduce through the group, with its signature check and deadline polling; raw: a blocking MPI_Allreduce timed around the MPI call), the two alternating; medians over the iterations; ratio = median of raw time / group time (target ≥ 80%).',
  ].join('\n');
  const outDir = join(root, 'bench', 'results');
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, 'dist.json'), JSON.stringify({ machine: { ...machine(), loadAtStart }, tables: TABLES, rows: ROWS, dim: DIM, batchPerRank: B, idsPerBag: POOL, steps: STEPS, results: rows, trainer: trainRows, allReduce: arRows }, null, 1) + '\n');
  writeFileSync(join(outDir, 'dist.md'), md + '\n');
  console.log(md);
}

// --worker <plan>, --allreduce and --trainer: the bench's own ranks, which it starts under mpirun
const args = benchArgs(`usage: embshard bench dist   (npm run bench:dist)
Sharded training across 1, 2 and 4 MPI ranks on this machine (mpirun): steps/s and exact bytes per plan type,
the Trainer with and without overlap, and the dense all-reduce, each against raw MPI. Writes
bench/results/dist.{json,md}. EMBSHARD_BENCH_RANKS (comma-separated) and EMBSHARD_BENCH_STEPS change the run.`, { flags: ['--allreduce', '--trainer'], options: ['--worker'] });
const plan = args.options.get('--worker');
if (plan !== undefined && !(PLANS as readonly string[]).includes(plan)) {
  console.error(`--worker must be one of ${PLANS.join(', ')} (got '${plan}')`);
  process.exit(2);
}
if (plan !== undefined) await worker(plan as PlanType);
else if (args.flags.has('--allreduce')) await allReduceWorker();
else if (args.flags.has('--trainer')) await trainerWorker();
else await main();

// embedding.ts — `npm run bench [-- --device cuda:0] [--quick]`: the embedding engine's speed.
// Config: 8 tables × 1,000,000 rows, dim 64 fp32, batch 8192, 20 ids per bag, sum pooling;
// ids uniform and Zipf α = 1.05 / 1.2. Reports forward and forward+backward+update per optimizer (rows/s,
// effective GB/s = row bytes gathered / time), and, in the same run, probes of this machine's random
// 256-byte row-gather, sequential-read and sorted row read-modify-write bandwidth, from which it derives
// each case's byte floor; ratios are the form of the project's performance goals (no absolute claims). Two loops per case: the
// release path (forward outputs handed back with release(out); the step keeps its output through
// backward and releases it after) and the default path (nothing released by hand: backward consumes
// its output), whose forward and step are reported beside the release path's. On the CPU a third table
// splits the backward into its phases (backwardPhases()) beside its read-modify-write floor.
import { EmbeddingCollection, JaggedBatch, backends } from '../lib/index.js';
import type { OptimizerConfig } from '../lib/index.js';
import { stateWidth } from '../lib/config.js';
import { loadAddon } from '../lib/native.js';
import { makeScatter, scatter, zipfParams, zipfRank } from '../lib/random/zipf.js';
import { benchArgs, benchDevice, machine, table, writeResults } from './report.js';

const USAGE = `usage: embshard bench embedding [--device cpu|cuda:N] [--quick]   (npm run bench [-- …])
The embedding engine's forward and forward + backward + update per optimizer on 8 tables × 1M rows, against
this machine's memory probes. Writes bench/results/embedding{,-cuda}.{json,md}. --quick: 200k rows, fewer steps.`;
const args = benchArgs(USAGE, { flags: ['--quick'], options: ['--device'] });
const device = benchDevice(args, USAGE);
const quick = args.flags.has('--quick');
const T = 8, ROWS = quick ? 200_000 : 1_000_000, DIM = 64, B = 8192, L = 20;
const ITERS = quick ? 3 : 8;
const ROW_BYTES = DIM * 4;

function batches(dist: 'uniform' | number, count: number, seed: number): JaggedBatch[] {
  const out: JaggedBatch[] = [];
  let s = seed >>> 0;
  const rnd = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (((t ^ (t >>> 14)) >>> 0) + 0.5) / 4294967296;
  };
  const zp = typeof dist === 'number' ? zipfParams(ROWS, dist) : undefined;
  for (let k = 0; k < count; k++) {
    const ids = new Int32Array(T * B * L);
    for (let t = 0; t < T; t++) {
      const sc = makeScatter(ROWS, seed, t);
      for (let i = t * B * L; i < (t + 1) * B * L; i++) ids[i] = zp ? scatter(sc, zipfRank(zp, rnd())) : Math.floor(rnd() * ROWS);
    }
    out.push(JaggedBatch.fromLengths({ features: Array.from({ length: T }, (_, t) => `f${t}`), batchSize: B, lengths: new Int32Array(T * B).fill(L), ids }));
  }
  return out;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function timeIt(n: number, fn: (i: number) => Promise<void>): Promise<number> {
  await fn(0);
  await fn(1);
  const ts: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await fn(i);
    ts.push(performance.now() - t0);
  }
  return median(ts);
}

const cuda = device.startsWith('cuda');
const info = backends().find((b) => b.name === (cuda ? 'cuda' : 'cpu'));
if (!info?.available) {
  console.error(`device ${device} is unavailable: ${info?.reason ?? 'unknown'}`);
  process.exit(2);
}
const addon = loadAddon();
const ids = T * B * L;
const gathered = ids * ROW_BYTES;

// 1. the machine's limits, probed before and after the kernels; each limit is the better of the two
//    (this VM's memory speed drifts over minutes, and the better reading is the stricter yardstick)
interface Probe { gatherGBps: number; seqGBps: number; updateGBps: number; updateRows: number; threads: number; gradGatherGBps: number }
let probe: Probe | undefined;
const probeRuns: Probe[] = [];
const runProbe = async (): Promise<void> => {
  const p = await addon.probeMemory(T * ROWS * ROW_BYTES, ROW_BYTES, ids, 7);
  // the backward reads one pooled-gradient row per id: the same number of random row gathers, from an
  // array of the batch's pooled gradients (B × T × dim) instead of the tables
  const gp = await addon.probeMemory(B * T * ROW_BYTES, ROW_BYTES, ids, 11);
  probeRuns.push({ gatherGBps: p.gatherBytesPerSec / 1e9, seqGBps: p.seqBytesPerSec / 1e9, updateGBps: p.updateBytesPerSec / 1e9, updateRows: p.updateRows, threads: p.threads, gradGatherGBps: gp.gatherBytesPerSec / 1e9 });
  probe = {
    gatherGBps: Math.max(...probeRuns.map((r) => r.gatherGBps)),
    seqGBps: Math.max(...probeRuns.map((r) => r.seqGBps)),
    updateGBps: Math.max(...probeRuns.map((r) => r.updateGBps)),
    updateRows: p.updateRows,
    threads: p.threads,
    gradGatherGBps: Math.max(...probeRuns.map((r) => r.gradGatherGBps)),
  };
};
let peakGBps: number | undefined;
if (!cuda) {
  await runProbe();
} else {
  const idx = Number(device.split(':')[1] ?? 0);
  peakGBps = (info as { devices?: { hbmPeakGBps: number }[] }).devices?.[idx]?.hbmPeakGBps;
}

const optimizers: OptimizerConfig[] = [
  { type: 'sgd', lr: 0.01 },
  { type: 'adagrad', lr: 0.01 },
  { type: 'rowwise_adagrad', lr: 0.01 },
  { type: 'adam', lr: 0.001 },
];
const dists: ('uniform' | number)[] = ['uniform', 1.05, 1.2];
const results: Record<string, unknown>[] = [];

for (const dist of dists) {
  const bs = batches(dist, 3, dist === 'uniform' ? 1 : Math.round(Number(dist) * 100));
  let fwdMs = 0;
  for (const opt of optimizers) {
    const ec = new EmbeddingCollection({
      tables: Array.from({ length: T }, (_, t) => ({ name: `t${t}`, rows: ROWS, dim: DIM, features: [`f${t}`] })),
      optimizer: opt,
      device,
      seed: 1,
    });
    const grad = new Float32Array(B * ec.pooledDim).fill(1e-3);
    let kernelFwd: number[] = [], kernelStep: number[] = [];
    if (opt.type === 'sgd') {
      fwdMs = await timeIt(ITERS, async (i) => {
        await ec.release(await ec.forward(bs[i % bs.length]!));
        const k = ec.kernelTimes();
        if (k) kernelFwd.push(k.forwardMs);
      });
    }
    // the release path (backward keeps the output, the loop releases it) and the default path (a loop
    // that never calls release(): backward consumes its output) step in turn, so both see the same
    // machine; each one's forward is timed inside its step
    let unique = 0;
    const phaseRuns: Record<string, number>[] = [];
    const releaseFwd: number[] = [], defaultFwd: number[] = [], releaseStep: number[] = [], defaultStep: number[] = [];
    for (let i = 0; i < ITERS + 2; i++) {
      const warm = i < 2;
      for (const path of ['release', 'default'] as const) {
        const t0 = performance.now();
        const out = await ec.forward(bs[i % bs.length]!);
        const t1 = performance.now();
        if (path === 'release') {
          const r = await ec.backward(out, { pooled: grad }, { keepOutput: true });
          await ec.release(out);
          unique = r.uniqueRows;
          const k = ec.kernelTimes();
          if (k && !warm) kernelStep.push(k.forwardMs + k.backwardMs);
          const ph = ec.backwardPhases();
          if (ph && !warm) phaseRuns.push(ph);
        } else {
          await ec.backward(out, { pooled: grad });
        }
        if (warm) continue;
        (path === 'release' ? releaseFwd : defaultFwd).push(t1 - t0);
        (path === 'release' ? releaseStep : defaultStep).push(performance.now() - t0);
      }
    }
    const stepMs = median(releaseStep), defaultStepMs = median(defaultStep);
    ec.dispose();
    const row: Record<string, unknown> = {
      ids: dist === 'uniform' ? 'uniform' : `zipf ${dist}`,
      optimizer: opt.type,
      forwardMs: fwdMs,
      stepMs,
      stepOverForward: stepMs / fwdMs,
      forwardRowsPerSec: ids / (fwdMs / 1e3),
      forwardGBps: gathered / (fwdMs / 1e3) / 1e9,
      stepRowsPerSec: ids / (stepMs / 1e3),
      uniqueRowsPerStep: unique,
      releaseForwardInStepMs: median(releaseFwd),
      defaultForwardMs: median(defaultFwd),
      defaultStepMs,
    };
    // ratios: the median over step pairs (default step i over release step i, run back to back)
    row.defaultForwardOverRelease = median(defaultFwd.map((d, j) => d / releaseFwd[j]!));
    row.defaultStepOverRelease = median(defaultStep.map((d, j) => d / releaseStep[j]!));
    if (kernelFwd.length) {
      const kf = median(kernelFwd);
      row.kernelForwardMs = kf;
      row.kernelForwardGBps = gathered / (kf / 1e3) / 1e9;
      if (peakGBps) row.kernelForwardOverPeak = (row.kernelForwardGBps as number) / peakGBps;
    }
    if (kernelStep.length) row.kernelStepMs = median(kernelStep);
    // the CPU backward's phases (release path), each the median over the timed steps
    if (phaseRuns.length) row.backwardPhasesMs = Object.fromEntries(Object.keys(phaseRuns[0]!).map((k) => [k, median(phaseRuns.map((p) => p[k] ?? 0))]));
    results.push(row);
    console.error(
      `${row.ids} ${opt.type}: forward ${fwdMs.toFixed(1)} ms, step ${stepMs.toFixed(1)} ms (${(stepMs / fwdMs).toFixed(2)}×); ` +
        `default path: forward ${(row.defaultForwardMs as number).toFixed(1)} ms, step ${defaultStepMs.toFixed(1)} ms`,
    );
  }
}

if (!cuda) await runProbe();

// Byte floors from the probes: the forward can go no faster than gathering its rows at the gather
// probe's rate, and an exact update no faster than reading and writing every distinct row (and its
// optimizer state) at the update probe's rate. Their ratio is the least step / forward this machine
// allows before any sort, gradient read or bookkeeping. Apart from that, an exact backward must read every
// id's gradient row (gathered at the gradient-array probe's rate): "grad floor" is that time in units of
// the read-modify-write floor, a bound on bwd / floor that no grouping of the contributions can beat.
for (const r of results) {
  if (!probe) break;
  const fwdFloorMs = gathered / (probe.gatherGBps * 1e9) * 1e3;
  const rmwBytes = (r.uniqueRowsPerStep as number) * 2 * (ROW_BYTES + 4 * stateWidth(r.optimizer as OptimizerConfig['type'], DIM));
  const updateFloorMs = rmwBytes / (probe.updateGBps * 1e9) * 1e3;
  r.forwardOverProbe = fwdFloorMs / (r.forwardMs as number);
  r.stepFloorOverForwardFloor = (fwdFloorMs + updateFloorMs) / fwdFloorMs;
  r.updateFloorMs = updateFloorMs;
  r.backwardOverUpdateFloor = ((r.stepMs as number) - (r.forwardMs as number)) / updateFloorMs;
  r.gradReadFloorMs = gathered / (probe.gradGatherGBps * 1e9) * 1e3;
  r.gradReadOverUpdateFloor = (r.gradReadFloorMs as number) / updateFloorMs;
}

// The project's goals: the forward at ≥ 0.8 of the gather probe; the backward within 1.5× (uniform ids)
// or 3× (Zipf ids) of its read-modify-write floor; the default path within 10% of the release path.
const targets = { forwardOverProbe: 0.8, backwardOverFloorUniform: 1.5, backwardOverFloorZipf: 3, defaultOverRelease: 1.1 };
const bwdTarget = (r: Record<string, unknown>): string =>
  `≤ ${r.ids === 'uniform' ? targets.backwardOverFloorUniform : targets.backwardOverFloorZipf}×`;
// Where the CPU backward's time goes: its phases (backwardPhases(), medians over the release path's
// steps) in ms and, for scale, the read-modify-write floor of the same case.
function phaseTable(): string[] {
  const rows = results.filter((r) => r.backwardPhasesMs);
  if (rows.length === 0) return [];
  const names = Object.keys(rows[0]!.backwardPhasesMs as Record<string, number>);
  return [
    '',
    `Backward phases (ms, medians over the release path's steps; EmbeddingCollection.backwardPhases()): the gradient rows copied and checked, ids turned into row keys, contributions partitioned by row range, rows with several contributions grouped and updated, rows with one updated; beside them the sum and the read-modify-write floor of the case${probe ? '' : ' (no probe: none)'}.`,
    '',
    table(
      ['ids', 'optimizer', ...names, 'sum', ...(probe ? ['rmw floor', 'sum / floor'] : [])],
      rows.map((r) => {
        const ph = r.backwardPhasesMs as Record<string, number>;
        const sum = names.reduce((a, k) => a + (ph[k] ?? 0), 0);
        return [r.ids as string, r.optimizer as string, ...names.map((k) => ph[k] ?? 0), sum, ...(probe ? [r.updateFloorMs as number, sum / (r.updateFloorMs as number)] : [])];
      }),
    ),
  ];
}
const md = [
  `# Embedding engine bench (${device}${quick ? ', quick' : ''})`,
  '',
  `Config: ${T} tables × ${ROWS.toLocaleString()} rows, dim ${DIM} fp32, batch ${B}, ${L} ids per bag, sum pooling; median of ${ITERS} runs after 2 warm-ups (the probe: median of 5 passes).`,
  probe
    ? `Probe (${probe.threads} threads, before and after the kernels, the better reading of each): random ${ROW_BYTES}-byte row gather ${probe.gatherGBps.toFixed(2)} GB/s, sequential read ${probe.seqGBps.toFixed(2)} GB/s, read-modify-write of ${probe.updateRows.toLocaleString()} distinct rows in ascending order ${probe.updateGBps.toFixed(2)} GB/s (read + write bytes), random ${ROW_BYTES}-byte row gather from a ${((B * T * ROW_BYTES) / 2 ** 20).toFixed(0)} MiB array of pooled gradients ${probe.gradGatherGBps.toFixed(2)} GB/s. Readings: ${probeRuns.map((r) => `${r.gatherGBps.toFixed(1)}/${r.seqGBps.toFixed(1)}/${r.updateGBps.toFixed(1)}/${r.gradGatherGBps.toFixed(1)}`).join(' then ')} GB/s.`
    : `Device HBM peak: ${peakGBps ?? '?'} GB/s.`,
  '',
  probe
    ? `Floor = the least step / forward the probes allow: (gather floor + read-modify-write floor of the unique rows and their optimizer state) / gather floor. "bwd / floor" = this run's backward (step − forward) over its read-modify-write floor. "grad floor" = the time to gather every id's gradient row (${ids.toLocaleString()} rows of ${ROW_BYTES} bytes) at the gradient-array probe's rate, over the read-modify-write floor: what an exact backward needs on top of that floor, so a bound on bwd / floor. Goals: fwd / probe ≥ ${targets.forwardOverProbe}, bwd / floor as in "target".`
    : '',
  '',
  table(
    ['ids', 'optimizer', 'forward ms', 'fwd GB/s', probe ? 'fwd / probe' : 'kernel fwd / peak', 'fwd+bwd+update ms', 'step / forward', ...(probe ? ['floor', 'bwd / floor', 'grad floor', 'target'] : []), 'unique rows'],
    results.map((r) => [
      r.ids as string,
      r.optimizer as string,
      r.forwardMs as number,
      r.forwardGBps as number,
      (probe ? r.forwardOverProbe : r.kernelForwardOverPeak ?? '-') as number,
      r.stepMs as number,
      r.stepOverForward as number,
      ...(probe ? [r.stepFloorOverForwardFloor as number, r.backwardOverUpdateFloor as number, r.gradReadOverUpdateFloor as number, bwdTarget(r)] : []),
      r.uniqueRowsPerStep as number,
    ]),
  ),
  '',
  `Default path (a loop that never calls release(): backward consumes its output) against the release path (backward keeps the output, the loop releases it). The two step in turn, each forward timed inside its step (so after a backward, unlike the forward-only loop above); times are medians, default / release the median over step pairs; goal ≤ ${targets.defaultOverRelease}×.`,
  '',
  table(
    ['ids', 'optimizer', 'forward ms (release)', 'forward ms (default)', 'default / release', 'step ms (release)', 'step ms (default)', 'default / release'],
    results.map((r) => [
      r.ids as string,
      r.optimizer as string,
      r.releaseForwardInStepMs as number,
      r.defaultForwardMs as number,
      r.defaultForwardOverRelease as number,
      r.stepMs as number,
      r.defaultStepMs as number,
      r.defaultStepOverRelease as number,
    ]),
  ),
  ...phaseTable(),
].join('\n');
writeResults(cuda ? 'embedding-cuda' : 'embedding', { machine: machine(), device, config: { T, ROWS, DIM, B, L, ITERS }, probe, probeRuns, peakGBps, targets, results }, md);

// train.ts — `embshard train`: trains a preset or custom DLRM/DCNv2 on synthetic data, Criteo TSV,
// torchrec's binary (npy) days or an Arrow IPC file, with a progress line on stderr (samples/s, loss,
// held-out AUC) and a final summary on stdout. Wired into the `embshard` binary by lib/cli/main.ts.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { tableFromIPC } from 'apache-arrow';
import { EmbshardError, isEmbshardError } from '../errors.js';
import { loadAddon } from '../native.js';
import {
  arrowSource, plantedAUC, prefetch, workerSource,
  type Batch, type BatchSource, type SourceSpec, type SyntheticPreset,
} from '../data/index.js';
import { PRESETS, isPresetName, parseLayers, type DenseModelSpec, type PresetName } from '../train/dense.js';
import { embeddingsFor } from '../train/embeddings.js';
import { rankSplit } from '../train/rank-split.js';
import { Trainer, type EvalResult, type StepTimes } from '../train/trainer.js';
import { createInProcessGroups, createMpiGroup, localDevice, type ProcessGroup } from '../sharded/group.js';
import { ShardPlan } from '../plan/shard-plan.js';
import { planShards } from '../plan/planner.js';
import { topologyPreset } from '../plan/topology.js';
import type { DenseOptimizerType } from '../train/binding.js';

export const TRAIN_USAGE = `usage: embshard train --model <dlrm-criteo-kaggle|dlrm-dcnv2|dlrm-benchmark|custom>
                      --data <synthetic[:preset]|criteo-tsv:<file[,file…]>|binary:<dir>|arrow:<file>>
                      (--steps N | --epochs N) [--batch 2048] [--device cpu|cuda:N|cuda:local] [--plan auto|<file>]
  several ranks:  mpirun -np 4 embshard train ... (tables sharded by the planner, or by --plan <file>;
                  every data source split by rank; the dense model is data parallel;
                  --device cuda:local gives each rank the GPU of its local rank on its node)
  model options:  --bottom 13-512-256-64-16 --top 512-256-1 [--interaction dot|cross|concat]
                  [--cross-layers 3 --cross-rank 512]   (custom layer lists; override a preset's)
  optimizers:     [--optimizer sgd|adagrad|adam] [--lr X] [--emb-lr X]   (default: the preset's reference)
                  [--warmup N] [--decay-start N --decay-steps N]
  data:           [--max-rows N] (cap every table)  [--table-rows N] (arrow: rows per table)
                  [--eval-batches 4] [--eval-every N] [--seed 0] [--prefetch 4]
  run:            [--threads N] [--save <dir>] [--quiet]
Trains with a progress line on stderr (samples/s, loss, AUC) and prints a summary. Synthetic data is
drawn from a planted model, whose own AUC on the evaluation samples is the best reachable and is reported.
AUC is measured on held-out samples for synthetic data, on the first --eval-batches batches otherwise.`;

interface Args {
  model?: string;
  data?: string;
  steps?: number;
  epochs?: number;
  batch: number;
  device: string;
  plan?: string;
  bottom?: number[];
  top?: number[];
  interaction?: 'dot' | 'cross' | 'concat';
  crossLayers?: number;
  crossRank?: number;
  optimizer?: DenseOptimizerType;
  lr?: number;
  embLr?: number;
  warmup: number;
  decayStart: number;
  decaySteps: number;
  maxRows?: number;
  tableRows?: number;
  evalBatches: number;
  evalEvery?: number;
  seed: number;
  prefetch: number;
  threads?: number;
  save?: string;
  quiet: boolean;
}

function parse(argv: string[]): Args | string {
  const a: Args = { batch: 2048, device: 'cpu', warmup: 0, decayStart: 0, decaySteps: 0, evalBatches: 4, seed: 0, prefetch: 4, quiet: false };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i]!;
    if (k === '--help' || k === '-h') return 'help';
    if (k === '--quiet') {
      a.quiet = true;
      continue;
    }
    const v = argv[i + 1];
    if (!k.startsWith('--') || v === undefined) return `unexpected argument '${k}'`;
    i++;
    const int = (min = 1): number => {
      if (!/^[0-9]+$/.test(v) || Number(v) < min || !Number.isSafeInteger(Number(v))) throw new Error(`${k} must be an integer >= ${min} (got '${v}')`);
      return Number(v);
    };
    const num = (): number => {
      const n = Number(v);
      if (v.trim() === '' || !Number.isFinite(n) || n < 0) throw new Error(`${k} must be a number >= 0 (got '${v}')`);
      return n;
    };
    try {
      switch (k) {
        case '--model': a.model = v; break;
        case '--data': a.data = v; break;
        case '--steps': a.steps = int(); break;
        case '--epochs': a.epochs = int(); break;
        case '--batch': a.batch = int(); break;
        case '--device': a.device = v; break;
        case '--plan': a.plan = v; break;
        case '--bottom': a.bottom = parseLayers(v, '--bottom'); break;
        case '--top': a.top = parseLayers(v, '--top'); break;
        case '--interaction':
          if (v !== 'dot' && v !== 'cross' && v !== 'concat') return `--interaction must be dot, cross or concat (got '${v}')`;
          a.interaction = v;
          break;
        case '--cross-layers': a.crossLayers = int(); break;
        case '--cross-rank': a.crossRank = int(); break;
        case '--optimizer':
          if (v !== 'sgd' && v !== 'adagrad' && v !== 'adam') return `--optimizer must be sgd, adagrad or adam (got '${v}')`;
          a.optimizer = v;
          break;
        case '--lr': a.lr = num(); break;
        case '--emb-lr': a.embLr = num(); break;
        case '--warmup': a.warmup = int(0); break;
        case '--decay-start': a.decayStart = int(0); break;
        case '--decay-steps': a.decaySteps = int(0); break;
        case '--max-rows': a.maxRows = int(); break;
        case '--table-rows': a.tableRows = int(); break;
        case '--eval-batches': a.evalBatches = int(0); break;
        case '--eval-every': a.evalEvery = int(); break;
        case '--seed': a.seed = int(0); break;
        case '--prefetch': a.prefetch = int(); break;
        case '--threads': a.threads = int(); break;
        case '--save': a.save = v; break;
        default: return `unknown option '${k}'`;
      }
    } catch (e) {
      return (e as Error).message;
    }
  }
  if (!a.model) return '--model is required';
  if (!a.data) return '--data is required';
  if ((a.steps === undefined) === (a.epochs === undefined)) return 'give exactly one of --steps and --epochs';
  return a;
}

/** The dense spec of --model plus any layer overrides. */
function modelSpec(a: Args, numSparse: number): DenseModelSpec {
  const base: DenseModelSpec | undefined = isPresetName(a.model) ? structuredClone(PRESETS[a.model].spec) : undefined;
  if (!base && a.model !== 'custom') throw new EmbshardError('INVALID_CONFIG', `--model '${a.model}' is not a preset (${Object.keys(PRESETS).join(', ')}) or 'custom'`);
  const bottom = a.bottom ? a.bottom.slice(1) : base?.bottom;
  const denseIn = a.bottom ? a.bottom[0]! : base?.denseIn;
  const top = a.top ?? base?.top;
  if (!bottom || !top || denseIn === undefined) throw new EmbshardError('INVALID_CONFIG', "--model custom needs --bottom (input-...-dim) and --top (...-1)");
  if (bottom.length === 0) throw new EmbshardError('INVALID_CONFIG', '--bottom needs the input width and at least one layer, e.g. 13-64-16');
  const interaction = a.interaction ?? base?.interaction ?? 'dot';
  const spec: DenseModelSpec = { denseIn, bottom, top, numSparse, embDim: bottom[bottom.length - 1]!, interaction };
  if (base && !a.bottom) spec.embDim = base.embDim;
  if (interaction === 'cross') {
    spec.crossLayers = a.crossLayers ?? base?.crossLayers ?? 3;
    spec.crossRank = a.crossRank ?? base?.crossRank ?? 512;
  }
  return spec;
}

function syntheticPresetFor(model: string | undefined): SyntheticPreset {
  if (model === 'dlrm-dcnv2') return 'mlperf-dcnv2';
  if (model === 'dlrm-benchmark') return 'dlrm-benchmark';
  return 'criteo-kaggle';
}

interface Data {
  train: BatchSource;
  /** Evaluation batches, and whether they are held out. */
  evalBatches: Batch[];
  heldOut: boolean;
  synthetic: boolean;
  tableRows: readonly number[];
  describe: string;
}

async function openData(a: Args, rank = 0, worldSize = 1): Promise<Data> {
  const spec = a.data!;
  const colon = spec.indexOf(':');
  const kind = colon < 0 ? spec : spec.slice(0, colon);
  const arg = colon < 0 ? '' : spec.slice(colon + 1);
  const B = a.batch;
  const take = async (src: BatchSource, n: number): Promise<Batch[]> => {
    const out: Batch[] = [];
    if (n === 0) return out;
    for await (const b of src) {
      out.push(b);
      if (out.length >= n) break;
    }
    return out;
  };
  if (kind === 'synthetic') {
    const preset = (arg || syntheticPresetFor(a.model)) as SyntheticPreset;
    const options = { batchSize: B, preset, seed: a.seed, rank, worldSize, ...(a.maxRows ? { maxRows: a.maxRows } : {}) };
    const trainSpec: SourceSpec = { kind: 'synthetic', options };
    const train = await workerSource(trainSpec, { depth: a.prefetch });
    // held out: samples far beyond anything a run trains on
    const { SyntheticSource } = await import('../data/synthetic.js');
    const ev = new SyntheticSource({ ...options, sampleOffset: 1e12, numBatches: Math.max(1, a.evalBatches) });
    return {
      train, evalBatches: a.evalBatches ? await take(ev, a.evalBatches) : [], heldOut: true, synthetic: true,
      tableRows: ev.tableRows, describe: `synthetic ${preset}${a.maxRows ? ` (tables capped at ${a.maxRows} rows)` : ''}`,
    };
  }
  const splitNote = worldSize > 1 ? ` (batch j to rank j mod ${worldSize})` : '';
  if (kind === 'criteo-tsv') {
    if (!arg) throw new EmbshardError('INVALID_ARGUMENT', '--data criteo-tsv:<file[,file…]> needs a path');
    const options = { path: arg.split(','), batchSize: B, ...(a.maxRows ? { maxRows: a.maxRows } : {}) };
    // several ranks: batch j of the file goes to rank j mod world (lib/train/rank-split.ts)
    const train = rankSplit(await workerSource({ kind: 'criteo-tsv', options }, { depth: a.prefetch }), rank, worldSize);
    const evalSrc = await workerSource({ kind: 'criteo-tsv', options }, { depth: 1 });
    return { train, evalBatches: await take(evalSrc, a.evalBatches), heldOut: false, synthetic: false, tableRows: train.tableRows!, describe: `Criteo TSV ${arg}${splitNote}` };
  }
  if (kind === 'binary') {
    if (!arg || !existsSync(arg)) throw new EmbshardError('INVALID_ARGUMENT', `--data binary:<dir>: '${arg}' does not exist`);
    const days = readdirSync(arg).map((f) => /^day_(\d+)_dense\.npy$/.exec(f)?.[1]).filter((d): d is string => d !== undefined).map(Number).sort((x, y) => x - y);
    if (days.length === 0) throw new EmbshardError('INVALID_ARGUMENT', `--data binary:${arg}: no day_<d>_dense.npy files (torchrec's npy layout)`);
    const rows = a.maxRows ?? a.tableRows;
    if (!rows) throw new EmbshardError('INVALID_ARGUMENT', '--data binary: needs --max-rows (ids are hashed into tables of that many rows)');
    const options = { dir: arg, days, batchSize: B, hashes: Array.from({ length: 26 }, () => rows), rank, worldSize };
    const train = await workerSource({ kind: 'criteo-npy', options }, { depth: a.prefetch });
    const evalSrc = await workerSource({ kind: 'criteo-npy', options }, { depth: 1 });
    return { train, evalBatches: await take(evalSrc, a.evalBatches), heldOut: false, synthetic: false, tableRows: options.hashes, describe: `torchrec binary days ${days.join(',')} in ${arg}` };
  }
  if (kind === 'arrow') {
    if (!arg || !existsSync(arg)) throw new EmbshardError('INVALID_ARGUMENT', `--data arrow:<file>: '${arg}' does not exist`);
    const rows = a.tableRows ?? a.maxRows;
    if (!rows) throw new EmbshardError('INVALID_ARGUMENT', '--data arrow: needs --table-rows N (the Arrow file does not say how many rows each table has)');
    const table = tableFromIPC(readFileSync(arg));
    const src = arrowSource(table, { maxBatchSize: B });
    const train = prefetch(rankSplit(src, rank, worldSize), { depth: a.prefetch });
    return { train, evalBatches: await take(src, a.evalBatches), heldOut: false, synthetic: false, tableRows: src.features.map(() => rows), describe: `Arrow ${arg}${splitNote}` };
  }
  throw new EmbshardError('INVALID_ARGUMENT', `--data '${spec}' is not synthetic[:preset], criteo-tsv:<path>, binary:<dir> or arrow:<file>`);
}

function fmtRate(x: number): string {
  return x >= 1e6 ? `${(x / 1e6).toFixed(2)}M` : x >= 1e3 ? `${(x / 1e3).toFixed(1)}k` : x.toFixed(0);
}

/** Runs `embshard train`; resolves to the process exit code. */
export async function runTrain(argv: string[]): Promise<number> {
  const a = parse(argv);
  if (a === 'help') {
    console.log(TRAIN_USAGE);
    return 0;
  }
  if (typeof a === 'string') {
    console.error(`embshard train: ${a}\n${TRAIN_USAGE}`);
    return 2;
  }
  const world = Number(process.env.OMPI_COMM_WORLD_SIZE ?? process.env.PMI_SIZE ?? 1);
  let data: Data | undefined;
  let group: ProcessGroup | undefined;
  try {
    if (a.plan !== undefined && a.plan !== 'auto' && !existsSync(a.plan))
      throw new EmbshardError('INVALID_ARGUMENT', `--plan '${a.plan}' is neither 'auto' nor an existing plan file`);
    // several ranks (mpirun), or a plan file: sharded tables over a process group
    if (world > 1) group = await createMpiGroup({ timeoutMs: 300_000 });
    else if (a.plan !== undefined && a.plan !== 'auto') group = createInProcessGroups(1)[0];
    const rank = group?.rank ?? 0;
    a.device = localDevice(a.device, rank, group?.ranksPerNode ?? 1);
    if (rank !== 0) a.quiet = true;
    if (a.threads) loadAddon().setThreads(a.threads);
    data = await openData(a, rank, group?.size ?? 1);
    const F = data.train.features.length;
    const spec = modelSpec(a, F);
    const preset = isPresetName(a.model) ? PRESETS[a.model as PresetName] : undefined;
    const optType = a.optimizer ?? preset?.optimizer.type ?? 'adagrad';
    const lr = a.lr ?? preset?.optimizer.lr ?? 0.01;
    const embLr = a.embLr ?? preset?.embeddingLr ?? lr;
    const schedule = { warmupSteps: a.warmup, decayStartStep: a.decayStart, decaySteps: a.decaySteps };
    let trainer: Trainer;
    let planNote = '';
    if (group) {
      const plan = await sharedPlan(a, group, data, spec.embDim);
      planNote = `, sharded over ${group.size} rank(s) by ${a.plan === undefined || a.plan === 'auto' ? 'the planner' : a.plan}`;
      trainer = new Trainer({
        model: spec, plan, group, optimizer: { type: optType, lr }, embeddingOptimizer: { type: optType, lr: embLr }, seed: a.seed, device: a.device, schedule,
      });
    } else {
      const emb = embeddingsFor(data.train.features, data.tableRows, { dim: spec.embDim, optimizer: { type: optType, lr: embLr }, seed: a.seed, device: a.device });
      trainer = new Trainer({ model: spec, embeddings: emb, optimizer: { type: optType, lr }, seed: a.seed, schedule, device: a.device });
    }
    const emb = trainer.embeddings;
    const best = data.synthetic && data.evalBatches.length ? plantedAUC(data.evalBatches).realized : undefined;
    const totalSteps = a.steps;
    const evalEvery = a.evalEvery ?? Math.max(1, Math.floor((totalSteps ?? 1000) / 10));
    const out = process.stderr;
    const tty = out.isTTY === true;
    if (!a.quiet)
      console.error(
        `embshard train: ${a.model} (bottom ${spec.denseIn}-${spec.bottom.join('-')}, ${spec.interaction}, top ${spec.top.join('-')}), ` +
          `${F} tables of dim ${spec.embDim} (${data.tableRows.reduce((s, r) => s + r, 0).toLocaleString()} rows), ` +
          `${optType} lr ${lr} / embeddings ${embLr}, batch ${a.batch}${group ? ' per rank' : ''}, ${data.describe}${planNote}, ${loadAddon().threads()} threads`,
      );

    const sum: StepTimes = { embeddingForward: 0, denseForward: 0, denseBackward: 0, communication: 0, communicationTotal: 0, embeddingBackward: 0, denseUpdate: 0, total: 0 };
    let dataMs = 0, samples = 0, steps = 0, lastEval: EvalResult | undefined;
    const recent: number[] = [];
    const t0 = performance.now();
    let lastPrint = 0;
    const progress = (final = false) => {
      if (a.quiet) return;
      const el = (performance.now() - t0) / 1000;
      const loss = recent.length ? recent.reduce((s, x) => s + x, 0) / recent.length : NaN;
      const frac = totalSteps ? steps / totalSteps : undefined;
      const bar = frac === undefined ? '' : `[${'#'.repeat(Math.round(frac * 20)).padEnd(20, '.')}] `;
      const line = `${bar}step ${steps}${totalSteps ? `/${totalSteps}` : ''}  ${fmtRate(samples / Math.max(el, 1e-9))} samples/s  loss ${loss.toFixed(4)}  AUC ${lastEval ? lastEval.auc.toFixed(4) : '-'}  ${el.toFixed(0)}s`;
      if (tty) out.write(`\r${line}${final ? '\n' : ''}`);
      else if (final || el - lastPrint >= 5) {
        out.write(`${line}\n`);
        lastPrint = el;
      }
    };
    const epochs = a.epochs ?? Infinity;
    outer: for (let epoch = 0; epoch < epochs; epoch++) {
      let td = performance.now();
      let any = false;
      for await (const b of data.train) {
        any = true;
        dataMs += performance.now() - td;
        const loss = await trainer.step(b);
        const tt = trainer.lastTimes!;
        for (const k of Object.keys(sum) as (keyof StepTimes)[]) sum[k] += tt[k];
        samples += b.size;
        steps++;
        recent.push(loss);
        if (recent.length > 50) recent.shift();
        if (data.evalBatches.length && steps % evalEvery === 0) lastEval = await trainer.evaluate(data.evalBatches);
        progress();
        if (totalSteps !== undefined && steps >= totalSteps) break outer;
        td = performance.now();
      }
      if (!any) throw new EmbshardError('INVALID_ARGUMENT', `--data ${a.data}: the source yielded no batches`);
    }
    if (data.evalBatches.length) lastEval = await trainer.evaluate(data.evalBatches);
    progress(true);
    const wall = (performance.now() - t0) / 1000;
    if (a.save) await trainer.save(a.save);
    const report = data.train.report?.();
    const pct = (x: number) => `${((100 * x) / Math.max(sum.total + dataMs, 1e-9)).toFixed(1)}%`;
    if (group) await group.barrier();
    if (group && group.rank !== 0) {
      emb.dispose?.();
      return 0;
    }
    console.log(
      [
        `trained ${steps} steps, ${samples.toLocaleString()} samples${group && group.size > 1 ? ' on rank 0' : ''} in ${wall.toFixed(1)} s: ${fmtRate(samples / wall)} samples/s${group && group.size > 1 ? ` per rank (${group.size} ranks)` : ''}`,
        `final loss (mean of the last ${recent.length} steps): ${(recent.reduce((s, x) => s + x, 0) / Math.max(recent.length, 1)).toFixed(4)}`,
        lastEval
          ? `${data.heldOut ? 'held-out' : `first ${data.evalBatches.length} batches`}: AUC ${lastEval.auc.toFixed(4)}, logloss ${lastEval.logloss.toFixed(4)} over ${lastEval.samples.toLocaleString()} samples` +
            (best !== undefined ? ` (planted model's AUC ${best.toFixed(4)}, gap ${(best - lastEval.auc).toFixed(4)})` : '')
          : 'no evaluation (--eval-batches 0)',
        `time: data wait ${pct(dataMs)}, embedding fwd ${pct(sum.embeddingForward)}, dense fwd ${pct(sum.denseForward)}, dense bwd ${pct(sum.denseBackward)}, ` +
          `embedding bwd+update ${pct(sum.embeddingBackward)}, dense update ${pct(sum.denseUpdate)}, communication ${pct(sum.communication)} exposed (all-reduce ${pct(sum.communicationTotal)} in all)`,
        ...(report && report.malformed ? [`data: ${report.malformed} malformed lines skipped of ${report.lines} (${JSON.stringify(report.byReason)})`] : []),
        ...(a.save ? [`saved to ${a.save}`] : []),
      ].join('\n'),
    );
    emb.dispose?.();
    return 0;
  } catch (e) {
    if (isEmbshardError(e)) {
      console.error(`embshard train: ${e.code}: ${e.message}`);
      return 1;
    }
    throw e;
  } finally {
    await data?.train.close?.();
    group?.close();
  }
}

/** The plan every rank trains with: --plan <file>, or planned on rank 0 for this CPU topology and broadcast. */
async function sharedPlan(a: Args, group: ProcessGroup, data: Data, dim: number): Promise<ShardPlan> {
  if (a.plan !== undefined && a.plan !== 'auto') return ShardPlan.fromJSON(readFileSync(a.plan, 'utf8'));
  let json = new Uint8Array(0);
  if (group.rank === 0) {
    const tables = data.train.features.map((f, i) => ({ name: f, rows: data.tableRows[i]!, dim, features: [f] }));
    const topology = topologyPreset('cpu', { worldSize: group.size, ranksPerNode: group.ranksPerNode });
    json = new TextEncoder().encode(JSON.stringify(planShards(tables, topology, { batchSize: a.batch, timeBudgetMs: 2000 }).toJSON()));
  }
  const len = await group.broadcast(Float64Array.of(json.length), 0);
  if (group.rank !== 0) json = new Uint8Array(len[0]!);
  await group.broadcast(json, 0);
  return ShardPlan.fromJSON(new TextDecoder().decode(json));
}

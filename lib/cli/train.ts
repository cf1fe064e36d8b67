// train.ts — `embshard train`: trains a preset or custom DLRM/DCNv2 on synthetic data, Criteo TSV,
// torchrec's binary (npy) days or an Arrow IPC file, with a progress line on stderr (samples/s, loss,
// held-out AUC) and a final summary on stdout. Its options are read by the shared parser of command.ts;
// its outputs (--save, --report) are checked against each other and its inputs before anything trains.
// Wired into the `embshard` binary by lib/cli/main.ts.
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { totalmem } from 'node:os';
import { checkpointWritable, ensureWritableParent } from '../checkpoint.js';
import { EmbshardError } from '../errors.js';
import { FLOAT32_MAX } from '../optimizer-values.js';
import { loadAddon } from '../native.js';
import { MAX_BATCH_SIZE, plantedAUC, type Batch, type BatchSource } from '../data/index.js';
import { heldOutSplit } from '../data/sample-range.js';
import { isEndlessSpec, openDataSpec, skipBatches, splitSpec } from './sources.js';
import { fmtRate } from './progress.js';
import { intArg, numArg, outputClash, parseArgs, runCommand, writeOutputs, type NamedPath } from './command.js';
import { RunRecorder } from '../report/run-log.js';
import { trainReportHtml } from '../report/train-report.js';
import { PRESETS, isPrecision, isPresetName, parseLayers, type DenseModelSpec, type PresetName } from '../train/dense.js';
import { embeddingsFor, tablesFor } from '../train/embeddings.js';
import { HeraldEmbeddingCollection } from '../herald/collection.js';
import { fullBatches } from '../data/full-batches.js';
import { MAX_PREFETCH_DEPTH } from '../data/prefetch.js';
import { rankSplit } from '../train/rank-split.js';
import { Trainer, type EvalResult, type StepMetrics, type StepTimes } from '../train/trainer.js';
import { EMBEDDINGS_DIR, readTrainerManifest } from '../train/checkpoint.js';
import { resolveSchedule, type LrSchedule } from '../train/schedule.js';
import { EmbeddingCollection } from '../collection.js';
import type { ModelInputs } from '../train/inputs.js';
import { localDevice, type ProcessGroup } from '../sharded/group.js';
import { ShardedEmbeddingCollection } from '../sharded/sharded.js';
import { COMM_CHOICES, openRunGroup, type CommChoice } from './comm.js';
import { ShardPlan } from '../plan/shard-plan.js';
import type { PlanTableSpec } from '../plan/types.js';
import { dynamicLine, dynamicTotals } from '../train/sharded-dynamic.js';
import { planShards } from '../plan/planner.js';
import { topologyPreset } from '../plan/topology.js';
import type { DenseOptimizerType, Precision } from '../train/binding.js';
import type { CachePolicy } from '../storage/config.js';

export const TRAIN_USAGE = `usage: embshard train --model <dlrm-criteo-kaggle|dlrm-dcnv2|dlrm-benchmark|custom>
                      --data <synthetic[:preset]|criteo-tsv:<file[,file…]>|binary:<dir>|arrow:<file>>
                      (--steps N | --epochs N) [--batch 2048] [--device cpu|cuda:N|cuda:local] [--plan auto|<file>]
  several ranks:  mpirun -np 4 embshard train ... (tables sharded by the planner, or by --plan <file>;
                  every data source split by rank; the dense model is data parallel;
                  --device cuda:local gives each rank the GPU of its local rank on its node;
                  [--comm auto|mpi|nccl]: auto = NCCL when the ranks train on GPUs and the addon has it)
  model options:  --bottom 13-512-256-64-16 --top 512-256-1 [--interaction dot|cross|concat]
                  [--cross-layers 3 --cross-rank 512]   (custom layer lists; override a preset's)
  optimizers:     [--optimizer sgd|adagrad|adam] [--lr X] [--emb-lr X]   (default: the preset's reference)
                  [--warmup N] [--decay-start N (default: --warmup's N) --decay-steps N]
  data:           [--max-rows N] (cap every table)  [--table-rows N] (arrow: rows per table)
                  [--seed 0] [--prefetch 4]
                  [--dynamic-capacity N] (every table keyed by the raw ids, N rows held; under mpirun each
                  table's N rows are sharded by id hash)
  evaluation:     [--eval-data <source>] (held-out data, any --data form, e.g. Criteo's day 23)
                  [--eval-split F] (the last fraction F of --data held out, never trained on)
                  [--eval-batches 4|all] (batches per evaluation; 0: none) [--eval-every N]
  run:            [--precision fp32|bf16] [--threads N] [--save <dir>] [--report <file.html>] [--quiet]
                  [--resume <dir>] (continue the run a --save checkpoint holds, with the same options: to
                  --steps N in all, its steps included, on the batches after the ones it trained)
  herald:         [--schedule herald] [--cache-rows 65536]  (Herald embedding scheduling: every rank reads
                  global batches of ranks × --batch samples and trains the ones its allocator assigns; each
                  rank owns a row range of every table and caches up to --cache-rows rows per table;
                  a file's final global batch with fewer samples is not trained, and the summary says so)
  storage:        [--storage memory|disk:<dir> --cache-bytes N [--cache-policy lru|lfu]] (tables larger than
                  their share of N live in files under <dir> behind RAM caches; sharded: N per rank, each
                  rank's shards in its own files)
Trains with a progress line on stderr (samples/s, loss, AUC) and prints a summary. Synthetic data is
endless (train it for --steps, not --epochs) and drawn from a planted model, whose own AUC on the evaluation samples is the best reachable and is reported.
AUC is measured on held-out samples only: synthetic data holds out its own; file sources need
--eval-data or --eval-split (without either, a file run reports no AUC). Evaluation runs every
--eval-every steps and at the end; the summary names the samples evaluated.`;

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
  decayStart?: number;
  decaySteps: number;
  maxRows?: number;
  tableRows?: number;
  dynamicCapacity?: number;
  evalBatches: number;
  evalEvery?: number;
  evalData?: string;
  evalSplit?: number;
  seed: number;
  prefetch: number;
  threads?: number;
  precision?: Precision;
  save?: string;
  resume?: string;
  report?: string;
  quiet: boolean;
  schedule?: 'herald';
  cacheRows?: number;
  storageDir?: string;
  cacheBytes?: number;
  cachePolicy?: CachePolicy;
  comm: CommChoice;
}

/** The options `embshard train` takes (its one flag, --quiet, aside). */
const TRAIN_OPTIONS = [
  '--model', '--data', '--steps', '--epochs', '--batch', '--device', '--comm', '--plan', '--bottom', '--top', '--interaction', '--cross-layers',
  '--cross-rank', '--optimizer', '--lr', '--emb-lr', '--warmup', '--decay-start', '--decay-steps', '--max-rows', '--table-rows',
  '--dynamic-capacity', '--eval-batches', '--eval-data', '--eval-split', '--eval-every', '--seed', '--prefetch', '--threads', '--precision',
  '--save', '--resume', '--report', '--schedule', '--cache-rows', '--storage', '--cache-bytes', '--cache-policy',
] as const;

/** Reads option `k`'s value `v` into `a`; a message for a bad value (or a throw from intArg / numArg). */
function option(a: Args, k: string, v: string): string | undefined {
  // an empty value (`--report=`) names nothing: it would be dropped or fail late
  if (v === '') return `${k} needs a value (got an empty one)`;
  const int = (min = 1): number => intArg(k, v, min);
  const num = (): number => numArg(k, v, 0);
  // learning rates are float32 in the optimizers: larger ones would become Infinity there
  const rate = (): number => numArg(k, v, 0, FLOAT32_MAX);
  switch (k) {
    case '--model': a.model = v; break;
    case '--data': a.data = v; break;
    case '--steps': a.steps = int(); break;
    case '--epochs': a.epochs = int(); break;
    case '--batch': a.batch = intArg(k, v, 1, MAX_BATCH_SIZE); break;
    case '--device': a.device = v; break;
    case '--comm':
      if (!(COMM_CHOICES as readonly string[]).includes(v)) return `--comm must be ${COMM_CHOICES.join(', ')} (got '${v}')`;
      a.comm = v as CommChoice;
      break;
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
    case '--lr': a.lr = rate(); break;
    case '--emb-lr': a.embLr = rate(); break;
    case '--warmup': a.warmup = int(0); break;
    case '--decay-start': a.decayStart = int(0); break;
    case '--decay-steps': a.decaySteps = int(0); break;
    case '--max-rows': a.maxRows = int(); break;
    case '--table-rows': a.tableRows = int(); break;
    case '--dynamic-capacity': a.dynamicCapacity = int(); break;
    case '--eval-batches': a.evalBatches = v === 'all' ? Infinity : int(0); break;
    case '--eval-data': a.evalData = v; break;
    case '--eval-split':
      a.evalSplit = num();
      if (!(a.evalSplit > 0 && a.evalSplit < 1)) return `--eval-split must be a fraction in (0, 1) (got '${v}')`;
      break;
    case '--eval-every': a.evalEvery = int(); break;
    case '--seed': a.seed = int(0); break;
    case '--prefetch': a.prefetch = intArg(k, v, 1, MAX_PREFETCH_DEPTH); break;
    case '--threads': a.threads = int(); break;
    case '--precision':
      if (!isPrecision(v)) return `--precision must be fp32 or bf16 (got '${v}')`;
      a.precision = v;
      break;
    case '--save': a.save = v; break;
    case '--resume': a.resume = v; break;
    case '--report': a.report = v; break;
    case '--schedule':
      if (v !== 'herald') return `--schedule must be herald (got '${v}')`;
      a.schedule = v;
      break;
    case '--cache-rows': a.cacheRows = int(0); break;
    case '--storage':
      if (v === 'memory') a.storageDir = undefined;
      else if (v.startsWith('disk:') && v.length > 5) a.storageDir = v.slice(5);
      else return `--storage must be memory or disk:<dir> (got '${v}')`;
      break;
    case '--cache-bytes': a.cacheBytes = int(); break;
    case '--cache-policy':
      if (v !== 'lru' && v !== 'lfu') return `--cache-policy must be lru or lfu (got '${v}')`;
      a.cachePolicy = v;
      break;
    default: return `unknown option '${k}'`;
  }
  return undefined;
}

function parse(argv: string[]): Args | string {
  const a: Args = { batch: 2048, device: 'cpu', warmup: 0, decaySteps: 0, evalBatches: 4, seed: 0, prefetch: 4, quiet: false, comm: 'auto' };
  const problem = parseArgs(argv, { '--quiet': () => (a.quiet = true) }, (k, v) => option(a, k, v), TRAIN_OPTIONS);
  if (problem !== undefined) return problem;
  if (!a.model) return '--model is required';
  if (!a.data) return '--data is required';
  if ((a.storageDir === undefined) !== (a.cacheBytes === undefined)) return '--storage disk:<dir> and --cache-bytes N go together';
  if ((a.steps === undefined) === (a.epochs === undefined)) return 'give exactly one of --steps and --epochs';
  if (a.resume !== undefined && a.steps === undefined) return '--resume needs --steps N: the run\'s steps in all, the checkpoint\'s included';
  if (a.resume !== undefined && a.schedule === 'herald') return '--resume is not supported with --schedule herald';
  if (a.epochs !== undefined && isEndlessSpec(a.data)) return '--epochs needs a finite source; synthetic data never ends: give --steps N';
  if (a.evalData !== undefined && a.evalSplit !== undefined) return 'give at most one of --eval-data and --eval-split';
  if (a.evalBatches === 0 && (a.evalEvery !== undefined || a.evalData !== undefined))
    return `--eval-batches 0 runs no evaluation; ${a.evalEvery !== undefined ? '--eval-every' : '--eval-data'} would be ignored`;
  // synthetic evaluation data (--eval-data, or --data's own held-out samples) never ends
  if (a.evalBatches === Infinity && a.evalSplit === undefined && isEndlessSpec(a.evalData ?? a.data))
    return `--eval-batches all needs a finite evaluation source; ${a.evalData !== undefined ? '--eval-data' : '--data'} ${a.evalData ?? a.data} is synthetic and never ends: give a number of batches`;
  if (a.cacheRows !== undefined && a.schedule !== 'herald') return '--cache-rows needs --schedule herald';
  if (a.cachePolicy !== undefined && a.storageDir === undefined) return '--cache-policy needs --storage disk:<dir> (it is the disk tables\' cache policy)';
  if (a.dynamicCapacity !== undefined && a.storageDir !== undefined)
    return '--storage disk:<dir> holds tables of rows, and --dynamic-capacity makes every table dynamic (kept in memory): give one of them';
  if (a.decayStart !== undefined && a.decaySteps === 0) return '--decay-start needs --decay-steps N (the length of the decay)';
  if (a.tableRows !== undefined && ![a.data, a.evalData].some((d) => d?.startsWith('arrow:')))
    return '--table-rows gives the rows of an arrow: source\'s tables; the other sources know theirs (--max-rows caps them)';
  if (a.schedule === 'herald' && a.plan !== undefined) return '--schedule herald places rows itself; it takes no --plan';
  return outputClash(outputsOf(a), inputsOf(a)) ?? a;
}

/** The files and folders a data spec reads (none for synthetic data). */
function specPaths(spec: string): string[] {
  const { kind, arg } = splitSpec(spec);
  if (!arg) return [];
  if (kind === 'criteo-tsv') return arg.split(',');
  return kind === 'binary' || kind === 'arrow' ? [arg] : [];
}

/** What the run writes: --save's checkpoint folder and --report's file. */
function outputsOf(a: Args): NamedPath[] {
  return [
    ...(a.save !== undefined ? [{ option: '--save', path: a.save, what: 'checkpoint folder' }] : []),
    ...(a.report !== undefined ? [{ option: '--report', path: a.report, what: 'report file' }] : []),
  ];
}

/** What the run reads or keeps while it trains, which no output may write over. */
function inputsOf(a: Args): NamedPath[] {
  return [
    ...specPaths(a.data!).map((path) => ({ option: '--data', path, what: 'input' })),
    ...(a.evalData !== undefined ? specPaths(a.evalData).map((path) => ({ option: '--eval-data', path, what: 'input' })) : []),
    ...(a.plan !== undefined && a.plan !== 'auto' ? [{ option: '--plan', path: a.plan, what: 'file' }] : []),
    ...(a.storageDir !== undefined ? [{ option: '--storage', path: a.storageDir, what: 'folder' }] : []),
  ];
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
  if (interaction !== 'cross' && (a.crossLayers !== undefined || a.crossRank !== undefined))
    throw new EmbshardError('INVALID_CONFIG', `--cross-layers / --cross-rank shape DCNv2 cross layers; this model's interaction is '${interaction}' (add --interaction cross)`);
  if (interaction === 'cross') {
    spec.crossLayers = a.crossLayers ?? base?.crossLayers ?? 3;
    spec.crossRank = a.crossRank ?? base?.crossRank ?? 512;
  }
  return spec;
}

interface Data {
  train: BatchSource;
  /** Held-out evaluation batches (a re-readable source, or synthetic batches kept in memory). */
  eval: BatchSource | Batch[] | undefined;
  /** Where the held-out samples come from: a source and the index of its first held-out sample. */
  evalFrom: { describe: string; start: number } | undefined;
  synthetic: boolean;
  tableRows: readonly number[];
  describe: string;
  close(): Promise<void>;
}

/**
 * The training data of --data and its held-out evaluation data (--eval-data, --eval-split or synthetic's
 * own). `skip`: this rank's training batches a resumed run trained already, left out at the start.
 */
async function openData(a: Args, rank = 0, worldSize = 1, skip = 0): Promise<Data> {
  const base = { batch: a.batch, maxRows: a.maxRows, tableRows: a.tableRows, model: a.model, seed: a.seed, prefetch: a.prefetch };
  const closers: BatchSource[] = [];
  const close = async () => {
    for (const s of closers) await s.close?.();
  };
  if (a.evalSplit !== undefined) {
    // the last fraction of the whole input is held out before it is dealt to ranks
    const whole = await openDataSpec(a.data!, { ...base, rank: 0, world: 1 });
    if (whole.synthetic) throw new EmbshardError('INVALID_ARGUMENT', '--eval-split needs a finite source; synthetic data is held out by itself');
    closers.push(whole.source);
    const split = await heldOutSplit(whole.source, a.evalSplit);
    return {
      train: skipBatches(rankSplit(split.train, rank, worldSize), skip), eval: split.eval, evalFrom: { describe: whole.describe, start: split.evalStart },
      synthetic: false, tableRows: whole.tableRows,
      describe: `${whole.describe}, samples [0, ${split.evalStart}) of ${split.total}${worldSize > 1 ? ` (batch j to rank j mod ${worldSize})` : ''}`, close,
    };
  }
  const d = await openDataSpec(a.data!, { ...base, rank, world: worldSize, skip });
  closers.push(d.source);
  // synthetic data starts after the skipped batches by itself; a file source's are read and dropped
  const train = d.synthetic ? d.source : skipBatches(d.source, skip);
  let ev: Data['eval'], evalFrom: Data['evalFrom'];
  if (a.evalData !== undefined) {
    const e = await openDataSpec(a.evalData, { ...base, tableRows: d.tableRows, prefetch: 1 });
    closers.push(e.source);
    if (e.source.features.join() !== d.source.features.join())
      throw new EmbshardError('UNKNOWN_FEATURE', `--eval-data has features [${e.source.features.join(', ')}]; --data has [${d.source.features.join(', ')}]`);
    ev = e.source;
    evalFrom = { describe: e.describe, start: 0 };
  } else if (d.synthetic && a.evalBatches) {
    // held out: samples far beyond anything a run trains on
    const { SyntheticSource } = await import('../data/synthetic.js');
    const sampleOffset = 1e12;
    const src = new SyntheticSource({ ...d.synthetic, rank: 0, worldSize: 1, sampleOffset, numBatches: a.evalBatches });
    ev = [];
    for await (const b of src) {
      // they are held in memory for every evaluation: refused after the first if all of them would not fit
      if (ev.length === 0) heldOutFits(b, a.evalBatches);
      ev.push(b);
    }
    evalFrom = { describe: d.describe, start: sampleOffset };
  }
  return { train, eval: ev, evalFrom, synthetic: d.synthetic !== undefined, tableRows: d.tableRows, describe: d.describe, close };
}

/** INVALID_CONFIG naming --eval-batches when `n` batches like `first` would take more than a quarter of this machine's memory. */
function heldOutFits(first: Batch, n: number): void {
  const s = first.sparse;
  const bytes = first.dense.byteLength + (first.labels?.byteLength ?? 0) + s.ids.byteLength + s.lengths.byteLength + (s.weights?.byteLength ?? 0) + (first.planted?.byteLength ?? 0);
  const limit = totalmem() / 4;
  if (n * bytes > limit)
    throw new EmbshardError('INVALID_CONFIG', `--eval-batches ${n}: the held-out batches are kept in memory, ${(n * bytes / 2 ** 30).toFixed(1)} GiB of them; at most ${Math.floor(limit / bytes)} batches of this size fit in a quarter of this machine's ${(totalmem() / 2 ** 30).toFixed(1)} GiB`);
}

/** IO_ERROR naming the option when rank 0 could not write --save's checkpoint or --report's file (their folders are made). */
async function checkOutputs(a: Args): Promise<void> {
  if (a.save !== undefined) {
    const e = await checkpointWritable(a.save);
    if (e) throw new EmbshardError('IO_ERROR', `--save: ${e.message}`);
  }
  if (a.report !== undefined) {
    try {
      await ensureWritableParent(a.report);
      if (existsSync(a.report) && statSync(a.report).isDirectory()) throw new Error('it is a folder');
    } catch (e) {
      throw new EmbshardError('IO_ERROR', `--report: '${a.report}' cannot be written (${(e as Error).message})`);
    }
  }
}

/** Runs `embshard train`; resolves to the process exit code. */
export function runTrain(argv: string[]): Promise<number> {
  return runCommand('train', TRAIN_USAGE, parse(argv), train);
}

async function train(a: Args): Promise<number> {
  const world = Number(process.env.OMPI_COMM_WORLD_SIZE ?? process.env.PMI_SIZE ?? 1);
  let data: Data | undefined;
  let group: ProcessGroup | undefined;
  let bootstrap: ProcessGroup | undefined;
  try {
    if (a.plan !== undefined && a.plan !== 'auto' && !existsSync(a.plan))
      throw new EmbshardError('INVALID_ARGUMENT', `--plan '${a.plan}' is neither 'auto' nor an existing plan file`);
    // several ranks (mpirun), or a plan file: sharded tables over a process group
    const herald = a.schedule === 'herald';
    const run = await openRunGroup({
      world, comm: a.comm, needsGroup: (a.plan !== undefined && a.plan !== 'auto') || herald,
      resolveDevice: (boot) => (a.device = localDevice(a.device, boot?.rank ?? 0, boot?.ranksPerNode ?? 1)),
    });
    group = run.group;
    bootstrap = run.bootstrap;
    const rank = group?.rank ?? 0;
    if (run.note && rank === 0 && !a.quiet) console.error(`embshard train: ${run.note}`);
    if (rank !== 0) a.quiet = true;
    if (rank === 0) await checkOutputs(a); // before any training: a run is not lost to a --save / --report it cannot write
    if (a.threads) loadAddon().setThreads(a.threads);
    // Herald: every rank reads the global batches; the allocator deals their samples
    // a resumed run: the steps its checkpoint trained, whose batches every rank leaves out
    const resumed = a.resume !== undefined ? (await readTrainerManifest(a.resume)).steps : 0;
    if (a.resume !== undefined && resumed >= a.steps!)
      throw new EmbshardError('INVALID_ARGUMENT', `--resume '${a.resume}' has trained ${resumed} steps already; --steps ${a.steps} counts the run's steps in all, the checkpoint's included`);
    data = herald ? await openData({ ...a, batch: a.batch * group!.size }, 0, 1) : await openData(a, rank, group?.size ?? 1, resumed);
    // Herald schedules whole global batches: a file source's final partial one is left out (and reported)
    const whole = herald ? fullBatches(data.train) : undefined;
    if (whole) data = { ...data, train: whole };
    const F = data.train.features.length;
    const spec = modelSpec(a, F);
    if (spec.denseIn !== data.train.numDense)
      throw new EmbshardError('INVALID_CONFIG', `--model ${a.model}${a.bottom ? ` --bottom ${a.bottom.join('-')}` : ''} takes ${spec.denseIn} dense features (the bottom MLP's input width); --data ${a.data} has ${data.train.numDense}`);
    const preset = isPresetName(a.model) ? PRESETS[a.model as PresetName] : undefined;
    const optType = a.optimizer ?? preset?.optimizer.type ?? 'adagrad';
    const lr = a.lr ?? preset?.optimizer.lr ?? 0.01;
    const embLr = a.embLr ?? preset?.embeddingLr ?? lr;
    const schedule = { warmupSteps: a.warmup, decayStartStep: a.decayStart, decaySteps: a.decaySteps };
    // what the model takes as input, saved with its checkpoints for predict and serve. The Trainer derives
    // it from tables of rows; dynamic tables (any id is a key; their tables, planned or not, follow the
    // data's feature order) get it from the data: its features, dense width and row space, values hashed
    // into rows by the readers' rule
    const inputs: ModelInputs | undefined =
      a.dynamicCapacity !== undefined ? { sparse: [...data.train.features], numDense: spec.denseIn, tableRows: [...data.tableRows], hash: 'modulo' } : undefined;
    let trainer: Trainer;
    let planNote = '';
    if (a.dynamicCapacity !== undefined && (herald || (a.plan !== undefined && a.plan !== 'auto')))
      throw new EmbshardError('INVALID_ARGUMENT', `--dynamic-capacity: ${herald ? '--schedule herald takes tables of rows' : 'a --plan file says itself which tables are dynamic'}`);
    if (herald && a.storageDir !== undefined)
      throw new EmbshardError('INVALID_ARGUMENT', '--storage disk: is not supported with --schedule herald');
    const storage = a.storageDir !== undefined ? { path: a.storageDir, cacheBytes: a.cacheBytes!, ...(a.cachePolicy ? { policy: a.cachePolicy } : {}) } : undefined;
    if (a.resume !== undefined) {
      trainer = await resumeTrainer(a, group, data, spec, storage, { optimizer: optType, schedule, steps: resumed });
      if (group) planNote = shardedNote(a, group);
      planNote += `, resumed from ${a.resume} after step ${resumed}`;
    } else if (herald) {
      const cacheRows = a.cacheRows ?? 65_536;
      const emb = new HeraldEmbeddingCollection(tablesFor(data.train.features, data.tableRows, { dim: spec.embDim, optimizer: { type: optType, lr: embLr }, seed: a.seed, device: a.device }), group!, {
        cacheRows, batchSize: a.batch,
      });
      planNote = `, Herald scheduling over ${group!.size} rank(s) (${cacheRows.toLocaleString()} cache rows per table)`;
      trainer = new Trainer({
        model: spec, embeddings: emb, group, optimizer: { type: optType, lr }, seed: a.seed, schedule, device: a.device, ...(a.precision ? { precision: a.precision } : {}),
      });
    } else if (group) {
      const plan = await sharedPlan(a, group, data, spec.embDim);
      planNote = shardedNote(a, group);
      // disk-backed shards (lib/storage/shards.ts): the sharded collection is built here with the rank's budget
      const sharded = storage
        ? { embeddings: new ShardedEmbeddingCollection(plan, group, { optimizer: { type: optType, lr: embLr }, seed: a.seed, ...(a.device !== 'cpu' ? { device: a.device } : {}), storage }) }
        : { plan, embeddingOptimizer: { type: optType, lr: embLr } };
      trainer = new Trainer({
        model: spec, ...sharded, group, ...(inputs ? { inputs } : {}), optimizer: { type: optType, lr }, seed: a.seed, device: a.device, schedule,
        ...(a.precision ? { precision: a.precision } : {}),
      });
    } else {
      const emb = embeddingsFor(data.train.features, data.tableRows, {
        dim: spec.embDim, optimizer: { type: optType, lr: embLr }, seed: a.seed, device: a.device, ...(storage ? { storage } : {}),
        ...(a.dynamicCapacity !== undefined ? { dynamicCapacity: a.dynamicCapacity } : {}),
      });
      trainer = new Trainer({
        model: spec, embeddings: emb, ...(inputs ? { inputs } : {}), optimizer: { type: optType, lr }, seed: a.seed, schedule, device: a.device, ...(a.precision ? { precision: a.precision } : {}),
      });
    }
    const emb = trainer.embeddings;
    // a GPU rank: whether its embedding exchanges stay in device memory (lib/sharded/device-exchange.ts), and why not
    if (emb instanceof ShardedEmbeddingCollection && emb.device !== 'cpu')
      planNote += emb.exchangeMemory === 'device' ? ', exchanges in device memory' : `, exchanges through host memory (${emb.exchangeMemoryReason})`;
    // embeddings and dense model on one GPU: the pooled embeddings and their gradients pass in device memory
    if (trainer.handoff === 'device') planNote += ', embeddings handed to the dense model in device memory';
    const evalSet = a.evalBatches > 0 ? data.eval : undefined;
    const best = Array.isArray(evalSet) && evalSet.length ? plantedAUC(evalSet).realized : undefined;
    const recorder = a.report && (group?.rank ?? 0) === 0 ? new RunRecorder(`embshard train: ${a.model}`) : undefined;
    let lastMetrics: StepMetrics | undefined;
    if (recorder) trainer.onMetrics = (m) => (lastMetrics = m);
    let evaluatedAt = -1;
    const evaluate = async () => {
      const r = await trainer.evaluate(evalSet!, { maxBatches: a.evalBatches });
      evaluatedAt = trainer.stepCount;
      recorder?.evaluation(trainer.stepCount, r);
      return r;
    };
    const totalSteps = a.steps;
    const evalEvery = a.evalEvery ?? Math.max(1, Math.floor((totalSteps ?? 1000) / 10));
    const out = process.stderr;
    const tty = out.isTTY === true;
    const header =
      `${a.model} (bottom ${spec.denseIn}-${spec.bottom.join('-')}, ${spec.interaction}, top ${spec.top.join('-')}), ` +
      `${F} tables of dim ${spec.embDim} (${data.tableRows.reduce((s, r) => s + r, 0).toLocaleString()} rows), ` +
      `${optType} lr ${lr} / embeddings ${embLr}, batch ${a.batch}${group ? ' per rank' : ''}, ${trainer.dense.precision} GEMMs, ${data.describe}${planNote}, ${loadAddon().threads()} threads`;
    if (!a.quiet) console.error(`embshard train: ${header}`);

    const sum: StepTimes = { embeddingForward: 0, denseForward: 0, denseBackward: 0, communication: 0, communicationTotal: 0, embeddingBackward: 0, denseUpdate: 0, total: 0 };
    // steps of this run; a resumed run's count on from the checkpoint's
    let dataMs = 0, samples = 0, steps = 0, lastEval: EvalResult | undefined;
    const first = trainer.stepCount;
    const recent: number[] = [];
    const t0 = performance.now();
    let lastPrint = 0;
    const progress = (final = false) => {
      if (a.quiet) return;
      const el = (performance.now() - t0) / 1000;
      const loss = recent.length ? recent.reduce((s, x) => s + x, 0) / recent.length : NaN;
      const frac = totalSteps ? (first + steps) / totalSteps : undefined;
      const bar = frac === undefined ? '' : `[${'#'.repeat(Math.round(frac * 20)).padEnd(20, '.')}] `;
      const line = `${bar}step ${first + steps}${totalSteps ? `/${totalSteps}` : ''}  ${fmtRate(samples / Math.max(el, 1e-9))} samples/s  loss ${loss.toFixed(4)}  AUC ${lastEval ? lastEval.auc.toFixed(4) : '-'}  ${el.toFixed(0)}s`;
      if (tty) out.write(`\r${line}${final ? '\n' : ''}`);
      else if (final || el - lastPrint >= 5) {
        out.write(`${line}\n`);
        lastPrint = el;
      }
    };
    const epochs = a.epochs ?? Infinity;
    // Trainer.fit looks one batch ahead (the next batch's id exchange overlaps the step) except after steps
    // that evaluate
    const evaluatesAfter = (s: number) => evalSet !== undefined && s % evalEvery === 0;
    for (let epoch = 0; epoch < epochs && (totalSteps === undefined || first + steps < totalSteps); epoch++) {
      const done = await trainer.fit(data.train, {
        ...(totalSteps !== undefined ? { steps: totalSteps - first - steps } : {}),
        pauseAfter: evaluatesAfter,
        onStep: async ({ loss, batch, dataWaitMs }) => {
          if (recorder && lastMetrics) recorder.step(lastMetrics, (performance.now() - t0) / 1000, dataWaitMs);
          const tt = trainer.lastTimes!;
          for (const k of Object.keys(sum) as (keyof StepTimes)[]) sum[k] += tt[k];
          samples += herald ? a.batch : batch.size;
          steps++;
          recent.push(loss);
          if (recent.length > 50) recent.shift();
          if (evaluatesAfter(trainer.stepCount)) lastEval = await evaluate();
          progress();
        },
      });
      dataMs += done.dataWaitMs;
      if (done.steps === 0) {
        const bad = data.train.report?.();
        throw new EmbshardError('INVALID_ARGUMENT', `--data ${a.data}: the source yielded no batches` +
          (whole?.dropped ? ` (its ${whole.dropped} samples are less than one global batch of ${whole.batchSize}, which --schedule herald needs)` : '') +
          (bad?.malformed ? ` (${bad.malformed} malformed line(s) of ${bad.lines} skipped: ${JSON.stringify(bad.byReason)})` : ''));
      }
    }
    if (evalSet && evaluatedAt !== trainer.stepCount) lastEval = await evaluate();
    progress(true);
    const wall = (performance.now() - t0) / 1000;
    if (a.save) await trainer.save(a.save);
    const report = data.train.report?.();
    const pct = (x: number) => `${((100 * x) / Math.max(sum.total + dataMs, 1e-9)).toFixed(1)}%`;
    const dynamic = a.dynamicCapacity !== undefined ? await dynamicTotals(emb) : undefined; // a collective when sharded
    if (group) await group.barrier();
    if (group && group.rank !== 0) {
      emb.dispose?.();
      return 0;
    }
    const summary = [
        `trained ${steps} steps, ${samples.toLocaleString()} samples${group && group.size > 1 ? ' on rank 0' : ''} in ${wall.toFixed(1)} s: ${fmtRate(samples / wall)} samples/s${group && group.size > 1 ? ` per rank (${group.size} ranks)` : ''}`,
        `final loss (mean of the last ${recent.length} steps): ${(recent.reduce((s, x) => s + x, 0) / Math.max(recent.length, 1)).toFixed(4)}`,
        lastEval && data.evalFrom
          ? `held-out: AUC ${lastEval.auc.toFixed(4)}, logloss ${lastEval.logloss.toFixed(4)} over ${lastEval.samples.toLocaleString()} samples ` +
            `[${data.evalFrom.start}, ${data.evalFrom.start + lastEval.samples}) of ${data.evalFrom.describe}` +
            (best !== undefined ? ` (planted model's AUC ${best.toFixed(4)}, gap ${(best - lastEval.auc).toFixed(4)})` : '')
          : a.evalBatches === 0 ? 'no evaluation (--eval-batches 0)' : 'no held-out evaluation (give --eval-data or --eval-split)',
        `time: data wait ${pct(dataMs)}, embedding fwd + bottom MLP ${pct(sum.embeddingForward)}, dense fwd ${pct(sum.denseForward)}, dense bwd ${pct(sum.denseBackward)}, ` +
          `embedding bwd+update ${pct(sum.embeddingBackward)}, dense update ${pct(sum.denseUpdate)}, communication ${pct(sum.communication)} exposed of ${pct(sum.communicationTotal)} in flight (embedding exchanges + all-reduce)`,
        ...(emb instanceof HeraldEmbeddingCollection && emb.lastCounts
          ? [`herald: ${emb.lastCounts.rows.toLocaleString()} row transmissions in the last step (${emb.lastCounts.moves} moves, ${emb.lastCounts.copies} copies, ${emb.lastCounts.grads} gradients), ` +
              `${((100 * emb.lastCounts.hits) / Math.max(emb.lastCounts.reads, 1)).toFixed(1)}% of rows read where they lived`]
          : []),
        ...(whole?.dropped ? [`herald: the last ${whole.dropped.toLocaleString()} samples of each epoch (less than a global batch of ${whole.batchSize.toLocaleString()}) were not trained`] : []),
        ...(dynamic ? [dynamicLine(dynamic)] : []),
        ...(report && report.malformed ? [`data: ${report.malformed} malformed lines skipped of ${report.lines} (${JSON.stringify(report.byReason)})`] : []),
        ...(a.save ? [`saved to ${a.save}`] : []),
      ];
    console.log(summary.join('\n'));
    if (recorder) {
      recorder.fact('model', header);
      for (const line of summary) {
        const i = line.indexOf(': ');
        recorder.fact(i > 0 && i < 30 ? line.slice(0, i) : 'run', i > 0 && i < 30 ? line.slice(i + 2) : line);
      }
      writeOutputs([[a.report!, await trainReportHtml(recorder.log)]]);
      console.log(`report written to ${a.report}`);
    }
    emb.dispose?.();
    return 0;
  } finally {
    await data?.close();
    group?.close();
    bootstrap?.close();
  }
}

/**
 * A plan file's tables must be the data's: one table per feature of the data, of the data's rows (a
 * plan made for the full cardinalities would otherwise allocate them for a capped run's ids), and no
 * other features. Dynamic tables take any ids.
 */
function checkPlanFitsData(plan: ShardPlan, a: Args, data: Data): void {
  const features = data.train.features;
  const cap = a.maxRows !== undefined ? ` (--max-rows ${a.maxRows})` : '';
  features.forEach((f, i) => {
    const t = plan.tables.find((x) => x.features.includes(f));
    if (!t) throw new EmbshardError('UNKNOWN_FEATURE', `--plan '${a.plan}' has no table for the data's feature '${f}'`);
    if (!t.dynamic && t.rows !== data.tableRows[i])
      throw new EmbshardError('INVALID_ARGUMENT', `--plan '${a.plan}': table '${t.name}' (feature '${f}') has ${t.rows.toLocaleString()} rows; the data's has ${data.tableRows[i]!.toLocaleString()}${cap}`);
  });
  for (const t of plan.tables)
    for (const f of t.features)
      if (!features.includes(f)) throw new EmbshardError('UNKNOWN_FEATURE', `--plan '${a.plan}': table '${t.name}' has feature '${f}', which the data lacks`);
}

/** What the header says of sharded tables: the ranks, the transport and where the plan came from. */
function shardedNote(a: Args, group: ProcessGroup): string {
  return `, sharded over ${group.size} rank(s) (${group.kind === 'nccl' ? 'NCCL' : group.kind === 'mpi' ? 'MPI' : 'one process'}) by ${a.plan === undefined || a.plan === 'auto' ? 'the planner' : a.plan}`;
}

/**
 * --resume: the trainer of the checkpoint (its tables sharded by this run's plan over `group`, or one
 * collection), which must be the run these options describe: the same model, dense optimizer and schedule,
 * and the `steps` the data position was set after. Otherwise INVALID_ARGUMENT naming what differs.
 */
async function resumeTrainer(
  a: Args, group: ProcessGroup | undefined, data: Data, spec: DenseModelSpec, storage: { path: string; cacheBytes: number; policy?: CachePolicy } | undefined,
  want: { optimizer: DenseOptimizerType; schedule: LrSchedule; steps: number },
): Promise<Trainer> {
  const dir = a.resume!;
  const options = { device: a.device, ...(a.precision ? { precision: a.precision } : {}) };
  let t: Trainer;
  if (group) {
    // --plan auto: the placement the run was trained under, when it has this world size (a planner run
    // again could place the tables otherwise, and sum their gradients in another order)
    const saved = a.plan === undefined || a.plan === 'auto' ? await ShardedEmbeddingCollection.savedPlan(join(dir, EMBEDDINGS_DIR)) : undefined;
    const plan = saved && saved.topology.worldSize === group.size && saved.topology.ranksPerNode === group.ranksPerNode ? saved : await sharedPlan(a, group, data, spec.embDim);
    const config = { ...(a.device !== 'cpu' ? { device: a.device } : {}), ...(storage ? { storage } : {}) };
    t = await Trainer.load(dir, { ...options, group, loadEmbeddings: (d) => ShardedEmbeddingCollection.load(d, plan, group, config) });
  } else {
    // disk-backed tables: their files made again under --storage's folder
    t = await Trainer.load(dir, { ...options, ...(storage ? { loadEmbeddings: (d: string) => EmbeddingCollection.load(d, { storagePath: storage.path }) } : {}) });
  }
  const key = (Object.keys(spec) as (keyof DenseModelSpec)[]).find((k) => JSON.stringify(spec[k]) !== JSON.stringify(t.dense.spec[k]));
  const differs =
    key !== undefined ? `its model's ${key} is ${JSON.stringify(t.dense.spec[key])}, this run's ${JSON.stringify(spec[key])}`
    : t.dense.optimizer.type !== want.optimizer ? `its optimizer is ${t.dense.optimizer.type}, this run's ${want.optimizer}`
    : JSON.stringify(t.schedule) !== JSON.stringify(resolveSchedule(want.schedule)) ? `its schedule is ${JSON.stringify(t.schedule)}, this run's ${JSON.stringify(resolveSchedule(want.schedule))}`
    : t.stepCount !== want.steps ? `it was replaced while it was read (${want.steps} steps, then ${t.stepCount})`
    : undefined;
  if (differs) {
    t.dispose();
    throw new EmbshardError('INVALID_ARGUMENT', `--resume '${dir}': ${differs}; resume a run with the options it was started with`);
  }
  return t;
}

/** The plan every rank trains with: --plan <file>, or planned on rank 0 for this CPU topology and broadcast. */
async function sharedPlan(a: Args, group: ProcessGroup, data: Data, dim: number): Promise<ShardPlan> {
  if (a.plan !== undefined && a.plan !== 'auto') {
    const plan = ShardPlan.fromJSON(readFileSync(a.plan, 'utf8'));
    checkPlanFitsData(plan, a, data);
    return plan;
  }
  let json = new Uint8Array(0);
  if (group.rank === 0) {
    const tables = data.train.features.map((f, i): PlanTableSpec =>
      a.dynamicCapacity !== undefined ? { name: f, rows: 'dynamic', capacity: a.dynamicCapacity, dim, features: [f] } : { name: f, rows: data.tableRows[i]!, dim, features: [f] });
    const topology = topologyPreset('cpu', { worldSize: group.size, ranksPerNode: group.ranksPerNode });
    json = new TextEncoder().encode(JSON.stringify(planShards(tables, topology, { batchSize: a.batch, timeBudgetMs: 2000 }).toJSON()));
  }
  const len = await group.broadcast(Float64Array.of(json.length), 0);
  if (group.rank !== 0) json = new Uint8Array(len[0]!);
  await group.broadcast(json, 0);
  return ShardPlan.fromJSON(new TextDecoder().decode(json));
}

// trainer.ts — Trainer: one training step of a DLRM/DCNv2 model = embedding forward → dense forward +
// backward (BCE loss) → dense-gradient all-reduce across ranks (when sharded) → embedding backward with
// its fused optimizer → dense optimizer update; evaluation (logloss, AUC); an LR schedule applied to both
// optimizers; save/load of everything so a resumed run continues bit-identically; a metrics callback;
// predict (click probabilities, no update) for scoring and serving.
import { join } from 'node:path';
import { EmbeddingCollection } from '../collection.js';
import { EmbshardError } from '../errors.js';
import { FLOAT32_MAX } from '../optimizer-values.js';
import { DeviceArray } from '../device-array.js';
import { CallQueue } from '../call-queue.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { auc, expectedAUC, loglossFromLogits } from '../data/metrics.js';
import type { Batch } from '../data/types.js';
import { DenseModel, PRESETS, checkPrecision, isPresetName, resolveDenseSpec, type DenseModelSpec, type DenseOptimizerConfig, type PresetName } from './dense.js';
import type { EmbeddingModule, EmbeddingOutput } from './embeddings.js';
import type { Precision } from './binding.js';
import { ShardedEmbeddingCollection } from '../sharded/sharded.js';
import type { ShardPlan } from '../plan/shard-plan.js';
import { ProcessGroup } from '../sharded/group.js';
import type { OptimizerConfig } from '../config.js';
import { lrFactor, resolveSchedule, type LrSchedule, type ResolvedSchedule } from './schedule.js';
import { EMBEDDINGS_DIR, readTrainerCheckpoint, readTrainerFolder, writeTrainerCheckpoint, type LoadedTrainerCheckpoint } from './checkpoint.js';
import { checkpointWritable, readConsistent } from '../checkpoint.js';
import { resolveInputs, type ModelInputs } from './inputs.js';
import { sigmoid } from '../data/planted.js';
import { JaggedBatch } from '../batch.js';
import { CommClock } from '../sharded/comm-clock.js';
import { agreeOnWrite } from '../sharded/step-status.js';
import { denseAddon } from './binding.js';

/** `batches` when it is an iterable or async iterable (of batches); INVALID_ARGUMENT naming `call` otherwise. */
function checkBatches(batches: unknown, call: string): Partial<AsyncIterable<Batch> & Iterable<Batch>> {
  const src = batches as Partial<AsyncIterable<Batch> & Iterable<Batch>> | null;
  if (typeof src !== 'object' || src === null || (typeof src[Symbol.asyncIterator] !== 'function' && typeof src[Symbol.iterator] !== 'function'))
    throw new EmbshardError('INVALID_ARGUMENT', `${call}: batches must be an iterable or async iterable of batches`);
  return src;
}

/** The index of the first value of `a` that is NaN or ±Inf, or -1 (native/core/value_scan.h). */
function firstNonFinite(a: Float32Array): number {
  return denseAddon('cpu').denseOps.firstOutside(a, -FLOAT32_MAX, FLOAT32_MAX);
}

function clockOf(group: unknown): CommClock | undefined {
  const c = (group as { clock?: unknown } | undefined)?.clock;
  return c instanceof CommClock ? c : undefined;
}

/** What predict needs of a batch: its features (labels are not needed). */
export interface PredictBatch {
  /** Float32Array [size × numDense]. */
  dense: Float32Array;
  sparse: JaggedBatch;
  size: number;
}

/** What the trainer needs of a process group: its size and an in-place sum all-reduce. */
export interface GradientGroup {
  readonly size: number;
  allReduce(data: Float32Array, op: 'sum'): Promise<unknown>;
}

/** Milliseconds spent in each part of one step. */
export interface StepTimes {
  /**
   * The embedding forward, without the time it was blocked on its exchanges (in `communication`); with
   * `overlap` the bottom MLP runs during it.
   */
  embeddingForward: number;
  denseForward: number;
  denseBackward: number;
  /**
   * Exposed communication: time the step was blocked waiting on collectives (the embedding exchanges and
   * the dense-gradient all-reduce), i.e. communication not hidden behind compute. The parts
   * embeddingForward … denseUpdate and this one add up to `total`.
   */
  communication: number;
  /**
   * Total communication: time some collective of this rank was in flight during the step (the embedding
   * exchanges, the next batch's id exchange and the dense-gradient all-reduce; overlapping ones count once).
   */
  communicationTotal: number;
  /** The embedding backward with its optimizer update, without the time it was blocked on its exchanges. */
  embeddingBackward: number;
  denseUpdate: number;
  total: number;
}

export interface StepMetrics {
  /** Steps completed, this one included. */
  step: number;
  loss: number;
  /** Learning-rate factor of the schedule at this step. */
  lrFactor: number;
  denseLr: number;
  embeddingLr: number;
  batchSize: number;
  samplesPerSec: number;
  times: StepTimes;
}

export interface EvalResult {
  /** Binary cross-entropy of the predictions against the labels (soft labels too). */
  logloss: number;
  /**
   * ROC AUC (ties count one half). With soft labels (any label strictly between 0 and 1) each label is a
   * click probability and the AUC is that of the expected pair counts (`expectedAUC` of embshard/data);
   * on 0 / 1 labels the two are the same.
   */
  auc: number;
  samples: number;
  /** Mean label: the fraction of positive labels. */
  ctr: number;
  /** With `{ predictions: true }`: the click probability of every evaluated sample, in order. */
  predictions?: Float32Array;
}

export interface TrainerOptions {
  /** A preset name, a custom layer spec, or a DenseModel built already. */
  model: PresetName | DenseModelSpec | DenseModel;
  /** The embedding tables: an EmbeddingCollection, or a sharded collection with the same surface. */
  embeddings?: EmbeddingModule;
  /** A sharding plan instead of `embeddings`: the tables are built as lib/sharded's sharded collection over `group`. */
  plan?: ShardPlan;
  /** With `plan`: the embedding optimizer (default: the dense optimizer's type at the preset's embedding rate). */
  embeddingOptimizer?: OptimizerConfig;
  /** Dense optimizer; default the preset's (custom specs: adagrad lr 0.01). */
  optimizer?: DenseOptimizerConfig;
  /**
   * Device of the dense model ('cpu' | 'cuda:N': the whole dense model on that GPU, parameters kept on
   * the device) and of the tables built from `plan`. Embeddings passed in keep their own device. Default cpu.
   */
  device?: string;
  /** Seed of the dense initialisation. Default 0. */
  seed?: number;
  /** GEMM precision of the dense model ('fp32' default, or 'bf16': bf16 inputs, fp32 accumulation and weights). */
  precision?: Precision;
  schedule?: LrSchedule;
  /**
   * Data-parallel dense model across ranks: gradients are averaged with group.allReduce (a ProcessGroup
   * with `plan`). Default: the group a sharded `embeddings` module runs over (its size when given).
   */
  group?: GradientGroup | ProcessGroup;
  /** Called after every step, once it is applied (services: push to a metrics system; keep it cheap; an exception rejects step() with the step taken). */
  onMetrics?: (m: StepMetrics) => void;
  /** What the model takes as input, saved with checkpoints (default: derived from the tables, modulo hashing). */
  inputs?: ModelInputs;
  /**
   * Overlap communication with compute (default true): the bottom MLP runs while the embeddings are looked
   * up and exchanged; the dense-gradient all-reduce starts before the embedding backward and is waited for
   * only before the dense update; and with step(batch, next) (fit() passes `next` by itself) the next
   * batch's routing and id exchange run during this step's dense compute. The result is bitwise the same
   * either way: the collectives are issued in the same order on every rank, nothing they touch is read in
   * between, and the bottom MLP computes the same numbers whenever it runs.
   */
  overlap?: boolean;
  /**
   * How the pooled embeddings and their gradients pass between the embeddings and the dense model: 'auto'
   * (default) in device memory when both are on the same GPU and the embeddings can keep their outputs
   * there, else through host arrays; 'host' always through host arrays (the same numbers, bit for bit: for
   * measuring the handoff).
   */
  handoff?: 'auto' | 'host';
}

/** What fit() reports after each step. */
export interface FitStep {
  /** Steps completed by the trainer, this one included. */
  step: number;
  loss: number;
  batch: Batch;
  /** Milliseconds this step waited for its batch (and the next one) from the source. */
  dataWaitMs: number;
}

export interface EvaluateOptions {
  /** Evaluate at most this many batches (a non-negative integer, or Infinity: the default, until the source ends). */
  maxBatches?: number;
  /** Also return every sample's click probability. */
  predictions?: boolean;
}

export interface FitOptions {
  /** Stop after this many steps (default: when the source ends). */
  steps?: number;
  /** Called after every step; fit waits for it. It may evaluate or save only after steps where `pauseAfter` holds. */
  onStep?: (s: FitStep) => void | Promise<void>;
  /**
   * Steps (by the trainer's step count after them) after which no next batch is in flight, so `onStep`
   * may run other calls on the trainer or its tables (evaluate, save). Must agree on every rank.
   */
  pauseAfter?: (step: number) => boolean;
}

/** What fit() did. */
export interface FitResult {
  steps: number;
  samples: number;
  /** Milliseconds spent waiting for batches from the source. */
  dataWaitMs: number;
  /**
   * With other ranks: true when another rank's source ended before this one's, so this rank stopped
   * with batches left (every rank stops at the shortest source). Absent otherwise.
   */
  endedElsewhere?: true;
}

export interface TrainerLoadOptions {
  group?: GradientGroup;
  onMetrics?: (m: StepMetrics) => void;
  loadEmbeddings?: (embeddingsDir: string) => Promise<EmbeddingModule>;
  /** Device of the restored dense model (a checkpoint loads on any device: 'cpu' | 'cuda:N'). Default cpu. */
  device?: string;
  /** GEMM precision of the restored dense model (weights are saved in fp32 either way). Default fp32. */
  precision?: Precision;
}

const FIT_FIELDS = fieldsOf<FitOptions>({ steps: true, onStep: true, pauseAfter: true });
const EVALUATE_FIELDS = fieldsOf<EvaluateOptions>({ maxBatches: true, predictions: true });
const LOAD_FIELDS = fieldsOf<TrainerLoadOptions>({ group: true, onMetrics: true, loadEmbeddings: true, device: true, precision: true });
const TRAINER_FIELDS = fieldsOf<TrainerOptions>({
  model: true, embeddings: true, plan: true, embeddingOptimizer: true, optimizer: true, device: true, seed: true, precision: true, schedule: true, group: true, onMetrics: true, inputs: true, overlap: true, handoff: true,
});

export class Trainer {
  readonly dense: DenseModel;
  readonly embeddings: EmbeddingModule;
  readonly schedule: ResolvedSchedule;
  /** Base learning rates the schedule scales. */
  readonly denseBaseLr: number;
  readonly embeddingBaseLr: number;
  readonly group: GradientGroup | undefined;
  onMetrics: ((m: StepMetrics) => void) | undefined;
  /** Times of the last step. */
  lastTimes: StepTimes | undefined;
  /** The model's inputs (feature names, dense width, table rows, hashing); undefined for sharded tables unless given. */
  readonly inputs: ModelInputs | undefined;
  /** Whether communication overlaps compute (TrainerOptions.overlap). */
  readonly overlap: boolean;
  /**
   * Where the pooled embeddings and their gradients pass between the embeddings and the dense model:
   * 'device' when both are on the same GPU and the embeddings keep their outputs there (no host copy), else
   * 'host'.
   */
  readonly handoff: 'device' | 'host';

  private steps = 0;
  private readonly calls = new CallQueue();
  /** Collective time of the step: the group's clock (it sees every collective of the rank), else the trainer's own. */
  private readonly clock: CommClock;
  /** The group, when it all-reduces the dense gradients in device memory (NCCL, the dense model on its GPU). */
  private readonly deviceGroup: ProcessGroup | undefined;
  private sparseGrad = new Float32Array(0);
  /** The next batch's exchange the running step started (prepare), until the step ends. */
  private preparing: Promise<void> | undefined;
  /** the pooled-embedding gradients in device memory (handoff 'device'), reallocated when the batch size changes */
  private deviceSparseGrad: DeviceArray | undefined;

  constructor(o: TrainerOptions) {
    if (o === null || typeof o !== 'object') throw new EmbshardError('INVALID_CONFIG', 'Trainer options must be an object');
    rejectUnknownFields(o, TRAINER_FIELDS);
    if (o.onMetrics !== undefined && typeof o.onMetrics !== 'function') throw new EmbshardError('INVALID_CONFIG', 'onMetrics must be a function');
    if (o.plan !== undefined && o.embeddings !== undefined) throw new EmbshardError('INVALID_CONFIG', 'give either embeddings or plan, not both');
    let emb: EmbeddingModule;
    if (o.plan !== undefined) {
      const g = o.group as ProcessGroup | undefined;
      if (!g || typeof (g as ProcessGroup).allToAllV !== 'function')
        throw new EmbshardError('INVALID_CONFIG', 'plan needs `group`: the ProcessGroup the tables are sharded over');
      const preset = isPresetName(o.model) ? PRESETS[o.model] : undefined;
      const denseOpt = o.optimizer ?? preset?.optimizer;
      const embOpt: OptimizerConfig = o.embeddingOptimizer ?? { type: denseOpt?.type ?? 'adagrad', lr: preset?.embeddingLr ?? denseOpt?.lr ?? 0.01 };
      emb = new ShardedEmbeddingCollection(o.plan, g, { optimizer: embOpt, seed: o.seed ?? 0, ...(o.device && o.device !== 'cpu' ? { device: o.device } : {}) });
    } else if (o.embeddings === undefined) throw new EmbshardError('INVALID_CONFIG', 'embeddings (an EmbeddingCollection or a sharded collection) or plan is required');
    else emb = o.embeddings;
    if (o.model instanceof DenseModel) {
      if (o.precision !== undefined && o.precision !== o.model.precision)
        throw new EmbshardError('INVALID_CONFIG', `precision '${String(o.precision)}' differs from the given model's ('${o.model.precision}')`);
      // a model built already has its own optimizer, initialisation and device; without a plan (whose tables
      // these would shape) options that would build one conflict rather than go unused
      if (o.plan === undefined) {
        for (const k of ['optimizer', 'seed'] as const)
          if (o[k] !== undefined) throw new EmbshardError('INVALID_CONFIG', `${k}: the given DenseModel has its own (give it to the DenseModel, or give model as a preset or spec)`);
        if (o.device !== undefined && o.device !== o.model.device)
          throw new EmbshardError('INVALID_CONFIG', `device '${String(o.device)}' differs from the given model's ('${o.model.device}')`);
      }
      this.dense = o.model;
    } else {
      const overrides: Partial<DenseModelSpec> = {};
      if (isPresetName(o.model)) overrides.numSparse = emb.pooledFeatures.length;
      const spec = resolveDenseSpec(o.model, overrides);
      this.dense = new DenseModel(spec, {
        optimizer: o.optimizer ?? (isPresetName(o.model) ? PRESETS[o.model].optimizer : undefined),
        seed: o.seed ?? 0,
        device: o.device ?? 'cpu',
        ...(o.precision !== undefined ? { precision: o.precision } : {}),
      });
    }
    const s = this.dense.spec;
    if (emb.pooledDim !== s.numSparse * s.embDim)
      throw new EmbshardError(
        'INVALID_CONFIG',
        `embeddings.pooledDim (${emb.pooledDim}) must equal model.numSparse × model.embDim (${s.numSparse} × ${s.embDim}); ` +
          'every pooled feature must have the model\'s embedding dim',
      );
    this.embeddings = emb;
    this.inputs = resolveInputs(o.inputs, emb, s);
    this.schedule = resolveSchedule(o.schedule);
    this.denseBaseLr = this.dense.optimizer.lr;
    this.embeddingBaseLr = emb.learningRate;
    if (o.group !== undefined && (typeof o.group.allReduce !== 'function' || !Number.isSafeInteger(o.group.size) || o.group.size < 1))
      throw new EmbshardError('INVALID_CONFIG', 'group must have a positive integer `size` and an allReduce(data, op) method');
    // embeddings sharded over several ranks: the dense model is data parallel over the same ranks (their
    // group, unless `group` is given), so that no rank trains a dense model of its own
    const embGroup = (emb as { group?: unknown }).group;
    const shardedOver = embGroup instanceof ProcessGroup && embGroup.size > 1 ? embGroup : undefined;
    if (o.group !== undefined && shardedOver && o.group.size !== shardedOver.size)
      throw new EmbshardError('INVALID_CONFIG', `group has ${o.group.size} ranks but the embeddings are sharded over ${shardedOver.size}`);
    const group = o.group ?? shardedOver;
    if (group && group.size > 1 && emb instanceof EmbeddingCollection)
      throw new EmbshardError(
        'INVALID_CONFIG',
        `group has ${group.size} ranks but the embeddings are one process's tables (an EmbeddingCollection): every rank would train a copy of its own; ` +
          'shard them over the group (a plan, a ShardedEmbeddingCollection or Herald; Trainer.load: loadEmbeddings)',
      );
    this.group = group;
    this.clock = clockOf(group) ?? clockOf(embGroup) ?? new CommClock();
    this.deviceGroup =
      group instanceof ProcessGroup && group.kind === 'nccl' && this.dense.device === `cuda:${group.cudaDevice}` ? group : undefined;
    this.onMetrics = o.onMetrics;
    if (o.overlap !== undefined && typeof o.overlap !== 'boolean') throw new EmbshardError('INVALID_CONFIG', 'overlap must be a boolean');
    this.overlap = o.overlap ?? true;
    if (o.handoff !== undefined && o.handoff !== 'auto' && o.handoff !== 'host')
      throw new EmbshardError('INVALID_CONFIG', `handoff must be 'auto' or 'host' (got ${JSON.stringify(o.handoff)})`);
    const onGpu = emb.outputsOnDevice === true && typeof emb.forwardOnDevice === 'function' && emb.device === this.dense.device;
    this.handoff = onGpu && o.handoff !== 'host' ? 'device' : 'host';
    this.steps = this.dense.step;
  }

  /** Steps completed. */
  get stepCount(): number {
    return this.steps;
  }

  /**
   * One training step on a batch; resolves to its mean BCE loss (this rank's samples). `next` (optional): the batch of the following step, whose table-independent work
   * (a sharded collection's routing and id exchange, `prepare`) then overlaps this step's dense compute;
   * the following call must be step(next). Every rank passes `next` or none alike. A NaN / ±Inf dense
   * feature or a label outside [0, 1] is INVALID_ARGUMENT; a loss or dense gradients that are not finite,
   * NON_FINITE_GRADIENT; either way nothing changes. With other ranks every rank rejects such a step (and
   * one whose batch has the wrong shapes on some rank), through the returned promise.
   */
  step(batch: Batch, next?: Batch): Promise<number> {
    // alone, a bad batch ends the step here, before anything runs; with other ranks the step is a
    // collective: a batch this rank cannot train still goes through the step's collectives and ends it on
    // every rank (runStep), and the next batch is checked in its own step
    let bad: EmbshardError | undefined;
    try {
      bad = this.inputError(batch);
      if (next !== undefined) this.checkNext(next);
    } catch (e) {
      // alone, the step ends here, so a batch an earlier step prepared is dropped as after a step that
      // failed (in call order: after the steps queued before this call): the next step may take any batch
      if (!this.collective) this.calls.inOrder(() => this.embeddings.discardPrepared?.());
      throw e;
    }
    return this.enqueue(() => this.runStep(batch, next, bad));
  }

  /**
   * Trains on `batches` (with other ranks each rank its own source; every rank stops at the end of the
   * shortest, `endedElsewhere` telling a rank that had batches left), looking one
   * batch ahead: with `overlap` (the default) each step is given the next batch, whose routing and id
   * exchange then run during this step's dense compute (a data source's prefetch keeps that batch ready).
   * Resolves when the source ends or after `steps` steps.
   */
  async fit(batches: Iterable<Batch> | AsyncIterable<Batch>, options: FitOptions = {}): Promise<FitResult> {
    rejectUnknownFields(options, FIT_FIELDS, 'options');
    const max = options.steps ?? Infinity;
    if (!(max === Infinity || (Number.isSafeInteger(max) && max >= 0)))
      throw new EmbshardError('INVALID_ARGUMENT', `fit: options.steps must be a non-negative integer (got ${String(options.steps)})`);
    for (const k of ['onStep', 'pauseAfter'] as const)
      if (options[k] !== undefined && typeof options[k] !== 'function') throw new EmbshardError('INVALID_ARGUMENT', `fit: options.${k} must be a function`);
    const src = checkBatches(batches, 'fit');
    const it: AsyncIterator<Batch> | Iterator<Batch> = src[Symbol.asyncIterator]?.() ?? src[Symbol.iterator]!();
    const res: FitResult = { steps: 0, samples: 0, dataWaitMs: 0 };
    let wait = 0, ended = false;
    // with other ranks a source (or an onStep) that fails counts as ended in the step's agreement (so the
    // others stop rather than wait on this rank), and its error is thrown once the ranks have agreed
    const group = this.collective ? this.group : undefined;
    let stopError: unknown;
    const pull = async (): Promise<IteratorResult<Batch>> => {
      const t = performance.now();
      let r: IteratorResult<Batch>;
      try {
        r = await it.next();
      } catch (e) {
        if (!group) throw e;
        stopError ??= e;
        r = { done: true, value: undefined };
      }
      wait += performance.now() - t;
      ended = r.done === true;
      return r;
    };
    let cur = max > 0 ? await pull() : undefined;
    // whether the last step prepared the batch it was given next (the step of that batch consumes it)
    let prepared = false;
    // with other ranks, every step opens with one uncounted all-reduce of two flags: whether every rank
    // has this step's batch (if not, all stop: the shortest source ends the fit on every rank) and the
    // next one (if not, none prepares it; a rank that has it trains it in its own step, if all have one)
    const everyRank = async (has: boolean, hasNext: boolean): Promise<[boolean, boolean]> => {
      if (!group) return [has, hasNext];
      const flags = Float32Array.of(has ? 1 : 0, hasNext ? 1 : 0);
      if (group instanceof ProcessGroup) await group.allReduce(flags, 'sum', { uncounted: true });
      else await group.allReduce(flags, 'sum');
      return [flags[0] === group.size, flags[1] === group.size];
    };
    try {
      while (cur) {
        const last = res.steps + 1 >= max;
        // look ahead unless this is the last step or onStep may use the trainer after it
        const ahead = !cur.done && !last && this.overlap && !options.pauseAfter?.(this.steps + 1) ? await pull() : undefined;
        // a next batch that step() would refuse is not handed to it: this step trains, and that batch's own
        // step rejects it, as without look-ahead
        const [all, allNext] = await everyRank(!cur.done, ahead !== undefined && !ahead.done && this.nextUsable(ahead.value));
        if (!all) {
          if (stopError !== undefined) throw stopError;
          if (!cur.done) res.endedElsewhere = true;
          // the rank that stopped failed after a step that prepared this batch (its onStep threw)
          if (prepared) this.embeddings.discardPrepared?.();
          break;
        }
        const b = (cur as IteratorYieldResult<Batch>).value;
        const next = allNext ? (ahead as IteratorYieldResult<Batch>).value : undefined;
        prepared = false;
        const loss = await this.step(b, next);
        prepared = next !== undefined;
        res.steps++;
        res.samples += b.size;
        res.dataWaitMs += wait;
        const dataWaitMs = wait;
        wait = 0;
        try {
          await options.onStep?.({ step: this.steps, loss, batch: b, dataWaitMs });
        } catch (e) {
          // with other ranks (and steps to come) this rank still joins the next step's agreement as a rank
          // without a batch, so the others stop there rather than wait on it; its error is thrown then
          if (!group || last) throw e;
          stopError ??= e;
          cur = { done: true, value: undefined };
          continue;
        }
        cur = last ? undefined : (ahead ?? (await pull()));
      }
    } catch (e) {
      // onStep (or the source) failed after a step that prepared the next batch, which no step will take
      if (prepared) this.embeddings.discardPrepared?.();
      throw e;
    } finally {
      if (!ended) await it.return?.(); // stopped early (steps, an error): let the source close
    }
    return res;
  }

  /**
   * Click probabilities of a batch's samples (forward passes only, no update; off the event loop).
   * Labels, when present, are ignored. Bad input rejects (LENGTH_MISMATCH, INVALID_SIZE, a NaN / ±Inf
   * dense feature: INVALID_ARGUMENT, …) before any work; with sharded embeddings on every rank.
   */
  predict(batch: PredictBatch): Promise<Float32Array> {
    let bad: EmbshardError | undefined;
    try {
      bad = this.inputError(batch, false);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.enqueue(async () => {
      const z = await this.logitsOf(batch.dense, batch.sparse, batch.size, bad);
      const p = new Float32Array(z.length);
      for (let i = 0; i < z.length; i++) p[i] = sigmoid(z[i]!);
      return p;
    });
  }

  /**
   * Forward passes over `batches` (no update): logloss and AUC of the model's predictions. With sharded
   * embeddings each forward is a collective: every rank evaluates as many batches (its own, or the same
   * ones), and each gets the metrics of the samples it evaluated. A batch of the wrong shape or with bad
   * values (as in step()) rejects the call, with sharded embeddings on every rank.
   */
  evaluate(batches: Iterable<Batch> | AsyncIterable<Batch>, options: EvaluateOptions = {}): Promise<EvalResult> {
    rejectUnknownFields(options, EVALUATE_FIELDS, 'options');
    const mb = options.maxBatches;
    if (mb !== undefined && !(mb === Infinity || (Number.isSafeInteger(mb) && mb >= 0)))
      throw new EmbshardError('INVALID_ARGUMENT', `evaluate: options.maxBatches must be a non-negative integer or Infinity (got ${String(mb)})`);
    if (options.predictions !== undefined && typeof options.predictions !== 'boolean')
      throw new EmbshardError('INVALID_ARGUMENT', 'evaluate: options.predictions must be a boolean');
    checkBatches(batches, 'evaluate');
    return this.enqueue(async () => {
      let logits = new Float32Array(1 << 16), labels = new Float32Array(1 << 16);
      let n = 0, k = 0, pos = 0, soft = false;
      const max = options.maxBatches ?? Infinity;
      const it = (batches as Partial<AsyncIterable<Batch>>)[Symbol.asyncIterator]?.() ?? (batches as Iterable<Batch>)[Symbol.iterator]();
      let ended = false;
      try {
        // no batch is read beyond the last one evaluated
        while (k < max) {
          const r = await it.next();
          if (r.done) {
            ended = true;
            break;
          }
          const b = r.value;
          k++;
          const bad = this.inputError(b);
          const z = await this.logitsOf(b.dense, b.sparse, b.size, bad);
          if (n + b.size > logits.length) {
            const cap = Math.max(2 * logits.length, n + b.size);
            const l2 = new Float32Array(cap), y2 = new Float32Array(cap);
            l2.set(logits.subarray(0, n));
            y2.set(labels.subarray(0, n));
            logits = l2;
            labels = y2;
          }
          logits.set(z, n);
          labels.set(b.labels, n);
          for (let i = 0; i < b.size; i++) {
            const y = b.labels[i]!;
            pos += y;
            if (y !== 0 && y !== 1) soft = true;
          }
          n += b.size;
        }
      } finally {
        if (!ended) await it.return?.(); // stopped early (maxBatches, an error): let the source close
      }
      if (n === 0) throw new EmbshardError('INVALID_ARGUMENT', 'evaluate: no batches');
      const zl = logits.subarray(0, n), yl = labels.subarray(0, n);
      const r: EvalResult = { logloss: loglossFromLogits(zl, yl), auc: soft ? expectedAUC(zl, yl) : auc(zl, yl), samples: n, ctr: pos / n };
      if (options.predictions) r.predictions = Float32Array.from(zl, sigmoid);
      return r;
    });
  }

  /**
   * Writes dense weights, dense optimizer state, embeddings (with their optimizer state), the step count
   * and the schedule to `dir`, replacing it atomically. Sharded: a collective — every rank calls it with
   * the same `dir`, rank 0 writes one checkpoint (tables gathered), which Trainer.load reads back on any
   * world size with `loadEmbeddings: (d) => ShardedEmbeddingCollection.load(d, plan, group)`.
   */
  save(dir: string): Promise<void> {
    return this.enqueue(async () => {
      const group = this.collective ? this.group : undefined;
      const writer = ((this.group as { rank?: number } | undefined)?.rank ?? 0) === 0;
      // with other ranks the save is a collective that rank 0 writes: first every rank learns whether rank
      // 0 can write there (so none waits on a save rank 0 never joins), at the end whether its files made it
      const elsewhere = () => new EmbshardError('IO_ERROR', `saving checkpoint '${dir}' failed on another rank (its error says why)`);
      if (group) await agreeOnWrite(group, writer ? await checkpointWritable(dir) : undefined, elsewhere);
      let failure: unknown;
      try {
        await writeTrainerCheckpoint(dir, {
          dense: this.dense,
          embeddings: this.embeddings,
          steps: this.steps,
          schedule: this.schedule,
          denseBaseLr: this.denseBaseLr,
          embeddingBaseLr: this.embeddingBaseLr,
          inputs: this.inputs,
          writer,
        });
      } catch (e) {
        failure = e;
      }
      if (group) await agreeOnWrite(group, failure, elsewhere);
      if (failure) throw failure;
    });
  }

  /**
   * Restores a trainer saved by save(). Embeddings come back as an EmbeddingCollection unless
   * `loadEmbeddings` builds another module (a sharded collection) from the saved folder. While other
   * processes save to `dir`, the whole trainer (trainer.json, dense.bin, embeddings/) comes from one save:
   * read again when a save replaced the folder meanwhile (readConsistent). Not with a `group` of other
   * ranks or `loadEmbeddings` (a load that may be a collective, which one rank must not repeat alone):
   * then the embeddings are read from the folder as the load finds it.
   */
  static async load(
    dir: string,
    options: TrainerLoadOptions = {},
  ): Promise<Trainer> {
    rejectUnknownFields(options, LOAD_FIELDS, 'options');
    if (options.precision !== undefined) checkPrecision(options.precision, 'options.precision'); // the caller's, not the checkpoint's
    for (const k of ['onMetrics', 'loadEmbeddings'] as const)
      if (options[k] !== undefined && typeof options[k] !== 'function') throw new EmbshardError('INVALID_CONFIG', `options.${k} must be a function`);
    if ((options.group?.size ?? 1) > 1 || options.loadEmbeddings !== undefined) {
      const ck = await readTrainerCheckpoint(dir);
      return Trainer.loadFrom(dir, ck, await (options.loadEmbeddings ?? ((d: string) => EmbeddingCollection.load(d)))(ck.embeddingsDir), options);
    }
    return readConsistent(dir, (folder) => Trainer.readFolder(dir, folder, options), (t) => t.dispose());
  }

  /**
   * One read of Trainer.load's: trainer.json and dense.bin, and the embeddings, side by side (the
   * embeddings once: the caller reads the whole folder again when a save replaced it). The manifest's
   * error first, as when they are read one after the other.
   */
  private static async readFolder(dir: string, folder: string, options: TrainerLoadOptions): Promise<Trainer> {
    const [ck, emb] = await Promise.allSettled([readTrainerFolder(folder), EmbeddingCollection.loadFolder(join(folder, EMBEDDINGS_DIR), {})]);
    if (ck.status === 'rejected') {
      if (emb.status === 'fulfilled') emb.value.dispose();
      throw ck.reason;
    }
    if (emb.status === 'rejected') throw emb.reason;
    return Trainer.loadFrom(dir, ck.value, emb.value, options);
  }

  /** A trainer of checkpoint `dir` from its manifest and dense file `ck` and its embeddings `emb` (disposed when it fails). */
  private static loadFrom(dir: string, ck: LoadedTrainerCheckpoint, emb: EmbeddingModule, options: TrainerLoadOptions): Trainer {
    const m = ck.manifest;
    let dense: DenseModel | undefined;
    try {
      try {
        // what the manifest holds, checked where it is used: a value these refuse is a corrupt checkpoint
        dense = new DenseModel(m.model, {
          optimizer: m.optimizer, seed: m.seed, initialize: false, device: options.device ?? 'cpu',
          ...(options.precision !== undefined ? { precision: options.precision } : {}),
        });
        resolveSchedule(m.schedule);
        emb.setLearningRate(m.embeddingBaseLr);
      } catch (e) {
        if (e instanceof EmbshardError && (e.code === 'BACKEND_UNAVAILABLE' || e.code === 'ALLOC_FAILED')) throw e;
        throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}': its model, optimizer, schedule or learning rates are invalid: ${(e as Error).message}`);
      }
      if (dense.params.length !== ck.params.length || dense.state.length !== ck.state.length)
        throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}': dense sizes do not match its model spec`);
      dense.setParams(ck.params);
      dense.setState(ck.state);
      dense.step = m.denseStep;
      resolveInputs(m.inputs, emb, dense.spec, 'CHECKPOINT_CORRUPT'); // checked against the tables it came with
      const t = new Trainer({
        model: dense,
        embeddings: emb,
        schedule: m.schedule,
        ...(m.inputs ? { inputs: m.inputs } : {}),
        ...(options.group ? { group: options.group } : {}),
        ...(options.onMetrics ? { onMetrics: options.onMetrics } : {}),
      });
      t.steps = m.steps;
      return t;
    } catch (e) {
      // nothing the caller never receives stays allocated
      dense?.dispose();
      emb.dispose?.();
      throw e;
    }
  }

  /**
   * Frees the dense model's and the embeddings' native memory (on a GPU, device memory) now; a native call
   * in flight finishes first. Any later call raises DISPOSED. A sharded module is disposed on this rank.
   */
  dispose(): void {
    this.dense.dispose();
    this.embeddings.dispose?.();
    this.deviceSparseGrad?.free();
    this.deviceSparseGrad = undefined;
  }

  // ---- internals ----

  /**
   * Logits of a batch (no update): the embeddings' outputs (dynamic tables admit nothing) handed to the
   * dense model as in a step — in device memory with handoff 'device' — then released.
   */
  private async logitsOf(dense: Float32Array, sparse: JaggedBatch, size: number, reject?: EmbshardError): Promise<Float32Array> {
    const emb = this.embeddings;
    // with `reject` every rank's forward rejects (inputError)
    const r = reject ? { reject } : {};
    const out = this.handoff === 'device' ? await emb.forwardOnDevice!(sparse, r) : await emb.forward(sparse, { admit: false, ...r });
    if (reject) {
      await emb.release?.(out); // a module that ignored `reject`
      throw reject;
    }
    try {
      return await this.dense.forward(dense, out.pooled, size); // refuses pooled embeddings that are not finite
    } finally {
      if (emb.release) await emb.release(out);
    }
  }

  private enqueue<T>(fn: () => Promise<T>): Promise<T> {
    return this.calls.run(fn);
  }

  /**
   * The error that rejects a well-shaped batch for its values: a dense feature that is NaN or ±Inf (in
   * training the ReLU of the bottom MLP would hide it from the loss while its weights' gradients turn
   * NaN), a label outside [0, 1] (labelled batches).
   */
  private valueError(b: Batch | PredictBatch, labelled = true): EmbshardError | undefined {
    const d = firstNonFinite(b.dense);
    if (d >= 0) {
      const n = this.dense.spec.denseIn;
      return new EmbshardError('INVALID_ARGUMENT', `batch.dense[${d}] (sample ${Math.floor(d / n)}, dense feature ${d % n}) is ${b.dense[d]}: dense features must be finite`);
    }
    if (!labelled) return undefined;
    const labels = (b as Batch).labels;
    const l = denseAddon('cpu').denseOps.firstOutside(labels, 0, 1);
    if (l >= 0) return new EmbshardError('INVALID_ARGUMENT', `batch.labels[${l}] is ${labels[l]}: labels must lie in [0, 1]`);
    return undefined;
  }

  /** A batch's shapes, then its values, as the error that rejects it (undefined: it may be used). */
  private batchError(b: Batch | PredictBatch, labelled = true): EmbshardError | undefined {
    try {
      this.checkBatch(b, labelled);
    } catch (e) {
      if (e instanceof EmbshardError) return e;
      throw e;
    }
    return this.valueError(b, labelled);
  }

  /**
   * The input check of a step, an evaluation or a prediction: alone, a bad batch throws here, before
   * anything runs; with other ranks, what is wrong with it is returned, for the call to end on every rank
   * (only a batch with no ids to exchange throws here, on this rank alone).
   */
  private inputError(b: Batch | PredictBatch, labelled = true): EmbshardError | undefined {
    if (this.collective) {
      this.checkSparse(b);
      return this.batchError(b, labelled);
    }
    const bad = this.batchError(b, labelled);
    if (bad) throw bad;
    return undefined;
  }

  /** The check step() makes of its `next` batch: its ids (with other ranks), else its shapes. */
  private checkNext(next: Batch): void {
    if (this.collective) this.checkSparse(next);
    else this.checkBatch(next);
  }

  /** Whether `next` passes checkNext, i.e. a step may be handed it to prepare. */
  private nextUsable(next: Batch): boolean {
    try {
      this.checkNext(next);
      return true;
    } catch (e) {
      if (e instanceof EmbshardError) return false;
      throw e;
    }
  }

  /** What a rank needs to take part in a step's exchanges: a batch object with a JaggedBatch. */
  private checkSparse(b: Batch | PredictBatch): void {
    if (b === null || typeof b !== 'object') throw new EmbshardError('INVALID_ARGUMENT', 'batch must be a { dense, sparse, labels, size } object');
    if (!(b.sparse instanceof JaggedBatch)) throw new EmbshardError('INVALID_ARGUMENT', 'batch.sparse must be a JaggedBatch');
  }

  private checkBatch(b: Batch | PredictBatch, labelled = true): void {
    if (b === null || typeof b !== 'object') throw new EmbshardError('INVALID_ARGUMENT', 'batch must be a { dense, sparse, labels, size } object');
    const B = b.size, s = this.dense.spec;
    if (!Number.isSafeInteger(B) || B <= 0) throw new EmbshardError('INVALID_SIZE', `batch.size must be a positive integer (got ${String(B)})`);
    if (!(b.dense instanceof Float32Array) || b.dense.length !== B * s.denseIn)
      throw new EmbshardError('LENGTH_MISMATCH', `batch.dense must be a Float32Array of size × ${s.denseIn} = ${B * s.denseIn} values`);
    if (labelled && (!((b as Batch).labels instanceof Float32Array) || (b as Batch).labels.length !== B))
      throw new EmbshardError('LENGTH_MISMATCH', `batch.labels must be a Float32Array of ${B} values`);
    if (!b.sparse || b.sparse.batchSize !== B)
      throw new EmbshardError('LENGTH_MISMATCH', `batch.sparse.batchSize (${b.sparse?.batchSize}) must equal batch.size (${B})`);
  }

  /**
   * Whether a step is a collective (other ranks share the dense all-reduce or the embeddings' exchanges): a
   * rank that must end a step then still joins its collectives, and ends it through the embedding
   * backward's `reject`, so every rank ends it with nothing changed instead of waiting on that rank.
   */
  private get collective(): boolean {
    const embGroup = (this.embeddings as { group?: { size?: unknown } }).group;
    return (this.group?.size ?? 1) > 1 || (typeof embGroup?.size === 'number' && embGroup.size > 1);
  }

  /** NON_FINITE_GRADIENT for this step's loss or dense gradients (on the CPU, where they are in host memory), or undefined. */
  private nonFinite(loss: number): EmbshardError | undefined {
    const what = !Number.isFinite(loss) ? `the loss is ${loss}` : this.dense.device === 'cpu' && firstNonFinite(this.dense.grads) >= 0 ? 'the dense gradients contain NaN or Inf' : undefined;
    return what ? new EmbshardError('NON_FINITE_GRADIENT', `step ${this.steps + 1}: ${what}; nothing was updated`) : undefined;
  }

  private async runStep(b: Batch, next: Batch | undefined, reject: EmbshardError | undefined): Promise<number> {
    try {
      return await this.trainStep(b, next, reject);
    } catch (e) {
      // the step failed (on every rank, when it was rejected): the batch prepared during it is dropped, so
      // the next step may take any batch, that one included
      if (this.preparing) {
        await this.preparing;
        this.embeddings.discardPrepared?.();
      }
      throw e;
    } finally {
      this.preparing = undefined;
    }
  }

  private async trainStep(b: Batch, next: Batch | undefined, reject: EmbshardError | undefined): Promise<number> {
    const t0 = performance.now();
    // Herald scheduling: the batch is global; this rank trains the samples its allocator gave it
    if (this.embeddings.localize) b = this.embeddings.localize(b);
    const factor = lrFactor(this.schedule, this.steps);
    const denseLr = this.denseBaseLr * factor, embLr = this.embeddingBaseLr * factor;
    this.embeddings.setLearningRate(embLr);
    // a rejected batch's own size may be what is wrong with it: its ids' batch size sizes the step
    const B = reject ? b.sparse.batchSize : b.size, world = this.group?.size ?? 1;
    const need = B * this.embeddings.pooledDim;
    const onGpu = this.handoff === 'device';
    let sparseGrad: Float32Array | DeviceArray;
    if (onGpu) {
      if (this.deviceSparseGrad?.length !== Math.max(1, need)) {
        this.deviceSparseGrad?.free();
        this.deviceSparseGrad = DeviceArray.alloc('f32', Math.max(1, need), { device: this.dense.device });
      }
      sparseGrad = this.deviceSparseGrad;
    } else {
      if (this.sparseGrad.length !== need) this.sparseGrad = new Float32Array(need);
      sparseGrad = this.sparseGrad;
    }

    const clock = this.clock;
    const c0 = clock.read();
    // with overlap the bottom MLP (it needs no embeddings) runs while the embeddings are looked up and exchanged
    // a module whose forward moves rows ends a step rejected already here, before anything moves
    const early = reject && this.embeddings.forwardMovesRows ? { reject } : undefined;
    const lookup = onGpu ? this.embeddings.forwardOnDevice!(b.sparse, early) : this.embeddings.forward(b.sparse, early);
    const fwd = await Promise.allSettled([lookup, this.overlap && !reject ? this.dense.forwardBottom(b.dense, B) : undefined]);
    for (const x of fwd) if (x.status === 'rejected') throw x.reason;
    const out = (fwd[0] as PromiseFulfilledResult<EmbeddingOutput>).value;
    // the next batch's id exchange runs during the dense compute; it is waited for before the dense
    // all-reduce is issued, so every rank issues its collectives in one order whatever the timing
    const emb = this.embeddings;
    const prepared = next && this.overlap && emb.prepare ? CommClock.hidden(() => emb.prepare!(next.sparse)) : undefined;
    this.preparing = prepared;
    const t1 = performance.now();
    const c1 = clock.read();
    // a rejected batch's dense pass is not run: the step only goes through its collectives
    const r = reject ? { loss: NaN, forwardMs: 0 } : await this.dense.forwardBackward(b.dense, out.pooled, b.labels, B, { sparseGrad, gradScale: 1 / world, bottomReady: this.overlap });
    const t2 = performance.now();
    reject ??= this.nonFinite(r.loss);
    if (reject && !this.collective) throw reject;
    // the dense-gradient all-reduce: started here, awaited here (overlap off) or after the embedding backward
    let reduced: Promise<unknown> | undefined;
    // a GPU dense model on an NCCL group's device: reduced in place in device memory; otherwise on the host
    // (CPU: the live buffer; GPU: a host copy, written back after the sum)
    const onDevice = world > 1 && this.deviceGroup ? this.dense.deviceGrads() : undefined;
    const g = this.group && world > 1 && !onDevice ? this.dense.grads : undefined;
    if (prepared) await clock.wait(prepared);
    if (g || onDevice) {
      const group = this.group!;
      const start = () => clock.track(onDevice ? this.deviceGroup!.allReduceDevice(onDevice, 'sum') : group.allReduce(g!, 'sum'));
      reduced = this.overlap ? CommClock.hidden(start) : start();
      // awaited below, after the embedding backward: marked handled now, so a failure meanwhile (a peer that
      // left the step) is not an unhandled rejection that ends the process first
      reduced.catch(() => undefined);
      if (!this.overlap) await reduced;
    }
    const t3 = performance.now();
    const c3 = clock.read();
    try {
      // with `reject` every rank's backward rejects (the dense gradients just reduced are then not applied)
      await this.embeddings.backward(out, { pooled: sparseGrad }, reject ? { reject } : undefined);
      if (reject) throw reject; // a module that ignored `reject`: the dense update is not applied either
      if (this.embeddings.release) await this.embeddings.release(out);
    } catch (e) {
      await reduced?.catch(() => undefined); // the all-reduce still owns the gradient buffer
      await this.embeddings.release?.(out).catch(() => undefined);
      throw e;
    }
    const t4 = performance.now();
    const c4 = clock.read();
    if (reduced) {
      await clock.wait(reduced);
      if (g) this.dense.setGrads(g);
    }
    await this.dense.update(denseLr);
    const t5 = performance.now();
    this.steps += 1;
    const c5 = clock.read();
    // the parts are disjoint: the embedding phases without the time they were blocked on their exchanges
    const times: StepTimes = {
      embeddingForward: t1 - t0 - (c1.exposedMs - c0.exposedMs),
      denseForward: r.forwardMs,
      denseBackward: t3 - t1 - r.forwardMs - (c3.exposedMs - c1.exposedMs),
      communication: c5.exposedMs - c0.exposedMs,
      communicationTotal: c5.totalMs - c0.totalMs,
      embeddingBackward: t4 - t3 - (c4.exposedMs - c3.exposedMs),
      denseUpdate: t5 - t4 - (c5.exposedMs - c4.exposedMs),
      total: t5 - t0,
    };
    this.lastTimes = times;
    this.onMetrics?.({
      step: this.steps, loss: r.loss, lrFactor: factor, denseLr, embeddingLr: embLr, batchSize: B,
      samplesPerSec: (B * 1000) / Math.max(times.total, 1e-9), times,
    });
    return r.loss;
  }
}

// trainer.ts — Trainer: one training step of a DLRM/DCNv2 model = embedding forward → dense forward +
// backward (BCE loss) → dense-gradient all-reduce across ranks (when sharded) → embedding backward with
// its fused optimizer → dense optimizer update; evaluation (logloss, AUC); an LR schedule applied to both
// optimizers; save/load of everything so a resumed run continues bit-identically; a metrics callback;
// predict (click probabilities, no update) for scoring and serving.
import { EmbeddingCollection } from '../collection.js';
import { EmbshardError } from '../errors.js';
import { CallQueue } from '../call-queue.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { auc, loglossFromLogits } from '../data/metrics.js';
import type { Batch } from '../data/types.js';
import { DenseModel, PRESETS, isPresetName, resolveDenseSpec, type DenseModelSpec, type DenseOptimizerConfig, type PresetName } from './dense.js';
import type { EmbeddingModule } from './embeddings.js';
import type { Precision } from './binding.js';
import { ShardedEmbeddingCollection } from '../sharded/sharded.js';
import type { ShardPlan } from '../plan/shard-plan.js';
import type { ProcessGroup } from '../sharded/group.js';
import type { OptimizerConfig } from '../config.js';
import { lrFactor, resolveSchedule, type LrSchedule, type ResolvedSchedule } from './schedule.js';
import { readTrainerCheckpoint, writeTrainerCheckpoint } from './checkpoint.js';
import { resolveInputs, type ModelInputs } from './inputs.js';
import { sigmoid } from '../data/planted.js';
import type { JaggedBatch } from '../batch.js';

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
  embeddingForward: number;
  denseForward: number;
  denseBackward: number;
  /** Exposed communication: time the step was blocked on the dense-gradient all-reduce. */
  communication: number;
  /** The dense-gradient all-reduce from start to completion (with `overlap`, partly hidden behind the embedding backward). */
  communicationTotal: number;
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
  logloss: number;
  auc: number;
  samples: number;
  /** Fraction of positive labels. */
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
  /** Data-parallel dense model across ranks: gradients are averaged with group.allReduce (a ProcessGroup with `plan`). */
  group?: GradientGroup | ProcessGroup;
  /** Called after every step (services: push to a metrics system; keep it cheap). */
  onMetrics?: (m: StepMetrics) => void;
  /** What the model takes as input, saved with checkpoints (default: derived from the tables, modulo hashing). */
  inputs?: ModelInputs;
  /**
   * Start the dense-gradient all-reduce before the embedding backward and wait for it only before the
   * dense update, so it runs while the embedding backward computes; and with step(batch, next), start the
   * next batch's routing and id exchange during this step's dense compute (default true). The result is
   * bitwise the same either way: the collectives are issued in the same order on every rank and nothing
   * they touch is read in between.
   */
  overlap?: boolean;
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

const LOAD_FIELDS = fieldsOf<TrainerLoadOptions>({ group: true, onMetrics: true, loadEmbeddings: true, device: true, precision: true });
const TRAINER_FIELDS = fieldsOf<TrainerOptions>({
  model: true, embeddings: true, plan: true, embeddingOptimizer: true, optimizer: true, device: true, seed: true, precision: true, schedule: true, group: true, onMetrics: true, inputs: true, overlap: true,
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
  /** Whether the dense-gradient all-reduce overlaps the embedding backward (TrainerOptions.overlap). */
  readonly overlap: boolean;

  private steps = 0;
  private readonly calls = new CallQueue();
  private sparseGrad = new Float32Array(0);

  constructor(o: TrainerOptions) {
    if (o === null || typeof o !== 'object') throw new EmbshardError('INVALID_CONFIG', 'Trainer options must be an object');
    rejectUnknownFields(o, TRAINER_FIELDS);
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
    this.group = o.group;
    this.onMetrics = o.onMetrics;
    if (o.overlap !== undefined && typeof o.overlap !== 'boolean') throw new EmbshardError('INVALID_CONFIG', 'overlap must be a boolean');
    this.overlap = o.overlap ?? true;
    this.steps = this.dense.step;
  }

  /** Steps completed. */
  get stepCount(): number {
    return this.steps;
  }

  /**
   * One training step on a batch; resolves to its mean BCE loss (this rank's samples). `next` (optional): the batch of the following step, whose table-independent work
   * (a sharded collection's routing and id exchange, `prepare`) then overlaps this step's dense compute;
   * the following call must be step(next). Every rank passes `next` or none alike.
   */
  step(batch: Batch, next?: Batch): Promise<number> {
    this.checkBatch(batch);
    if (next !== undefined) this.checkBatch(next);
    return this.enqueue(() => this.runStep(batch, next));
  }

  /**
   * Click probabilities of a batch's samples (forward passes only, no update; off the event loop).
   * Labels, when present, are ignored. Bad input rejects (LENGTH_MISMATCH, INVALID_SIZE, …) before any work.
   */
  predict(batch: PredictBatch): Promise<Float32Array> {
    try {
      this.checkBatch(batch, false);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.enqueue(async () => {
      const out = await this.embeddings.forward(batch.sparse, { admit: false });
      const z = await this.dense.forward(batch.dense, out.pooled, batch.size);
      if (this.embeddings.release) await this.embeddings.release(out);
      const p = new Float32Array(z.length);
      for (let i = 0; i < z.length; i++) p[i] = sigmoid(z[i]!);
      return p;
    });
  }

  /** Forward passes over `batches` (no update): logloss and AUC of the model's predictions. */
  evaluate(batches: Iterable<Batch> | AsyncIterable<Batch>, options: { maxBatches?: number; predictions?: boolean } = {}): Promise<EvalResult> {
    return this.enqueue(async () => {
      let logits = new Float32Array(1 << 16), labels = new Float32Array(1 << 16);
      let n = 0, k = 0, pos = 0;
      const max = options.maxBatches ?? Infinity;
      for await (const b of batches as AsyncIterable<Batch>) {
        if (k++ >= max) break;
        this.checkBatch(b);
        const out = await this.embeddings.forward(b.sparse, { admit: false });
        const z = await this.dense.forward(b.dense, out.pooled, b.size);
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
        for (let i = 0; i < b.size; i++) pos += b.labels[i]!;
        n += b.size;
      }
      if (n === 0) throw new EmbshardError('INVALID_ARGUMENT', 'evaluate: no batches');
      const zl = logits.subarray(0, n), yl = labels.subarray(0, n);
      const r: EvalResult = { logloss: loglossFromLogits(zl, yl), auc: auc(zl, yl), samples: n, ctr: pos / n };
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
    return this.enqueue(() =>
      writeTrainerCheckpoint(dir, {
        dense: this.dense,
        embeddings: this.embeddings,
        steps: this.steps,
        schedule: this.schedule,
        denseBaseLr: this.denseBaseLr,
        embeddingBaseLr: this.embeddingBaseLr,
        inputs: this.inputs,
        writer: ((this.group as { rank?: number } | undefined)?.rank ?? 0) === 0,
      }),
    );
  }

  /**
   * Restores a trainer saved by save(). Embeddings come back as an EmbeddingCollection unless
   * `loadEmbeddings` builds another module (a sharded collection) from the saved folder.
   */
  static async load(
    dir: string,
    options: TrainerLoadOptions = {},
  ): Promise<Trainer> {
    rejectUnknownFields(options, LOAD_FIELDS, 'options');
    const ck = await readTrainerCheckpoint(dir);
    const emb = await (options.loadEmbeddings ?? ((d: string) => EmbeddingCollection.load(d)))(ck.embeddingsDir);
    const dense = new DenseModel(ck.manifest.model, {
      optimizer: ck.manifest.optimizer, seed: ck.manifest.seed, initialize: false, device: options.device ?? 'cpu',
      ...(options.precision !== undefined ? { precision: options.precision } : {}),
    });
    if (dense.params.length !== ck.params.length || dense.state.length !== ck.state.length)
      throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}': dense sizes do not match its model spec`);
    dense.setParams(ck.params);
    dense.setState(ck.state);
    dense.step = ck.manifest.denseStep;
    emb.setLearningRate(ck.manifest.embeddingBaseLr);
    resolveInputs(ck.manifest.inputs, emb, dense.spec, 'CHECKPOINT_CORRUPT'); // checked against the tables it came with
    const t = new Trainer({
      model: dense,
      embeddings: emb,
      schedule: ck.manifest.schedule,
      ...(ck.manifest.inputs ? { inputs: ck.manifest.inputs } : {}),
      ...(options.group ? { group: options.group } : {}),
      ...(options.onMetrics ? { onMetrics: options.onMetrics } : {}),
    });
    t.steps = ck.manifest.steps;
    return t;
  }

  // ---- internals ----

  private enqueue<T>(fn: () => Promise<T>): Promise<T> {
    return this.calls.run(fn);
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

  private async runStep(b: Batch, next?: Batch): Promise<number> {
    const t0 = performance.now();
    const factor = lrFactor(this.schedule, this.steps);
    const denseLr = this.denseBaseLr * factor, embLr = this.embeddingBaseLr * factor;
    this.embeddings.setLearningRate(embLr);
    const B = b.size, world = this.group?.size ?? 1;
    const need = B * this.embeddings.pooledDim;
    if (this.sparseGrad.length !== need) this.sparseGrad = new Float32Array(need);

    const out = await this.embeddings.forward(b.sparse);
    // the next batch's id exchange runs during the dense compute; it is waited for before the dense
    // all-reduce is issued, so every rank issues its collectives in one order whatever the timing
    const prepared = next && this.overlap ? this.embeddings.prepare?.(next.sparse) : undefined;
    const t1 = performance.now();
    const r = await this.dense.forwardBackward(b.dense, out.pooled, b.labels, B, { sparseGrad: this.sparseGrad, gradScale: 1 / world });
    const t2 = performance.now();
    if (!Number.isFinite(r.loss)) throw new EmbshardError('NON_FINITE_GRADIENT', `step ${this.steps + 1}: the loss is ${r.loss}; nothing was updated`);
    // the dense-gradient all-reduce: started here, awaited here (overlap off) or after the embedding backward
    let reduced: Promise<void> | undefined;
    let arStart = 0, arEnd = 0;
    const g = this.group && world > 1 ? this.dense.grads : undefined; // CPU: the live buffer; GPU: a host copy, written back after the sum
    await prepared;
    if (g) {
      arStart = performance.now();
      reduced = this.group!.allReduce(g, 'sum').then(() => {
        arEnd = performance.now();
      });
      if (!this.overlap) await reduced;
    }
    const t3 = performance.now();
    try {
      await this.embeddings.backward(out, { pooled: this.sparseGrad });
      if (this.embeddings.release) await this.embeddings.release(out);
    } catch (e) {
      await reduced?.catch(() => undefined); // the all-reduce still owns the gradient buffer
      throw e;
    }
    const t4 = performance.now();
    if (reduced) {
      await reduced;
      this.dense.setGrads(g!);
    }
    const t4w = performance.now();
    await this.dense.update(denseLr);
    const t5 = performance.now();
    this.steps += 1;
    const times: StepTimes = {
      embeddingForward: t1 - t0,
      denseForward: r.forwardMs,
      denseBackward: t2 - t1 - r.forwardMs,
      communication: t3 - t2 + (t4w - t4),
      communicationTotal: reduced ? arEnd - arStart : 0,
      embeddingBackward: t4 - t3,
      denseUpdate: t5 - t4w,
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

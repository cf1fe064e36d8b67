// collection.ts — HeraldEmbeddingCollection: embedding tables trained with Herald's embedding scheduling
// over a ProcessGroup. Every rank owns a row range of each table (lib/herald/owners.ts) and keeps a cache
// of rows it does not own; the scheduler (lib/herald/scheduler.ts, run identically on every rank, one
// batch ahead when the trainer hands it the next batch) assigns the global batch's samples to ranks and
// plans what moves. A step: one all-to-all before the forward (rows moved with their optimizer state,
// value copies), the forward pooled from local rows (natively, lib/sharded/exchange-ops.ts), one
// all-to-all of gradient rows to owners after it, and one engine backward per rank that sums every row's
// contributions in rank order and applies the optimizer once: the same update as one collection trained
// on the global batch (equal up to the order of that sum; rows read by one rank only are bitwise equal).
// Only the latest training forward's output goes through backward: the next one moves rows and cache slots.
// Every forward opens with one uncounted agreement (lib/sharded/step-status.ts agreeOnKind): a training step
// one rank cannot take (its options, the caller's reject, a batch it could not schedule, or a forward of
// another batch) ends on every rank before any row moves, and the scheduler forgets every step it planned
// and did not carry out, so the next batch is scheduled as if the refused one never came.
import { JaggedBatch } from '../batch.js';
import { CallQueue } from '../call-queue.js';
import { checkBackwardOptions, checkForwardOptions, EmbeddingCollection, type BackwardOptions, type ForwardOptions } from '../collection.js';
import { resolveConfig, stateWidth, toNativeConfig, type CollectionConfig, type ResolvedConfig } from '../config.js';
import type { Batch } from '../data/types.js';
import { EmbshardError } from '../errors.js';
import { checkDir } from '../checkpoint.js';
import { checkLearningRate } from '../engine-owner.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { exchangeOps } from '../sharded/exchange-ops.js';
import type { ProcessGroup } from '../sharded/group.js';
import { agreeOnCall, agreeOnGradients, agreeOnKind, agreeOnWrite, NON_FINITE_STATUS, nonFiniteOutcome, rejectionStatus } from '../sharded/step-status.js';
import { RowOwners, type HeraldTable } from './owners.js';
import { heraldOps, type RankView } from './rank-view.js';
import { HeraldScheduler, type Allocation, type StepCounts, type StepPlan } from './scheduler.js';
import { takeBatch, takeSparse } from '../data/take.js';
import { loadHerald } from './load.js';

export interface HeraldOptions {
  /** cache slots per rank per table for rows the rank does not own (0: every remote row is copied each step) */
  cacheRows: number;
  /** samples per rank; the global batch has group.size × batchSize */
  batchSize: number;
  /** 'herald' (default) or 'random' sample placement */
  allocation?: Allocation;
  /** seed of the random placement */
  seed?: number;
}

const OPTION_FIELDS = fieldsOf<HeraldOptions>({ cacheRows: true, batchSize: true, allocation: true, seed: true });

export interface HeraldForwardOutput {
  /** [batchSize × pooledDim]: this rank's samples, in the order of `samples` */
  pooled: Float32Array;
  /** the global indices of this rank's samples */
  samples: Int32Array;
  batch: JaggedBatch;
}

interface Scheduled {
  global: JaggedBatch;
  plan: StepPlan;
  local: JaggedBatch;
}

/** A global batch the trainer's localize() could not schedule: its forward refuses the step on every rank. */
interface Unschedulable {
  global: unknown;
  local: unknown;
  refused: EmbshardError;
}

interface TableStep {
  inverse: Int32Array;
  /** per feature of the table: [start, end) in inverse */
  featOff: number[];
  loc: Int32Array;
}

interface StepCtx {
  /** the collection whose forward made it */
  owner: HeraldEmbeddingCollection;
  /** its training forward's number: a later training forward moves rows, so only the latest may go through backward */
  seq: number;
  s: Scheduled;
  tables: TableStep[];
}

const STEP = Symbol('embshard.herald.step');
type Out = HeraldForwardOutput & { [STEP]?: StepCtx };

export class HeraldEmbeddingCollection {
  readonly config: ResolvedConfig;
  readonly group: ProcessGroup;
  readonly scheduler: HeraldScheduler;
  readonly owners: RowOwners;
  readonly pooledDim: number;
  readonly pooledFeatures: readonly string[];
  /** A training forward moves rows and cache slots (lib/train/embeddings.ts) */
  readonly forwardMovesRows = true;
  /** this rank's engine: its row range of every table, then its cache slots */
  readonly local: EmbeddingCollection;
  /** transmissions of the latest step this rank executed (the whole group's, from the shared plan) */
  lastCounts: StepCounts | undefined;
  private readonly tables: HeraldTable[];
  private readonly featCol = new Map<string, number>();
  private readonly queue: (Scheduled | Unschedulable)[] = [];
  /** the batch prepare() is scheduling off the event loop */
  private preparing: { global: JaggedBatch; done: Promise<void> } | undefined;
  private readonly calls = new CallQueue();
  /** the key each cache slot holds (−1: free), as of the steps executed: table t's slots at slotBase[t] … slotBase[t + 1] − 1 */
  private readonly slotKey: Float64Array;
  private readonly slotBase: Int32Array;
  /** the table whose first feature a feature is */
  private readonly firstFeatureOf = new Map<string, number>();
  /** per table: the index of its first feature among all tables' features in order (the scheduler's feature order) */
  private readonly featBase: Int32Array;
  /** training forwards executed */
  private forwards = 0;
  /** the latest training step, until its backward applies or skips it (every rank has it alike) */
  private open: StepCtx | undefined;
  private disposed = false;

  constructor(config: CollectionConfig, group: ProcessGroup, options: HeraldOptions);
  /** @internal used by load(): the rank's row ranges left zero, for the checkpoint's rows */
  constructor(config: CollectionConfig, group: ProcessGroup, options: HeraldOptions, internal: { initialize: boolean });
  constructor(config: CollectionConfig, group: ProcessGroup, options: HeraldOptions, internal?: { initialize: boolean }) {
    if (options === null || typeof options !== 'object') throw new EmbshardError('INVALID_CONFIG', 'herald options must be an object');
    rejectUnknownFields(options, OPTION_FIELDS, 'options');
    this.config = resolveConfig(config);
    for (const t of this.config.tables)
      if (t.pooling === 'none') throw new EmbshardError('INVALID_CONFIG', `table '${t.name}': Herald scheduling trains pooled features (pooling 'sum' or 'mean'), not sequences`);
    this.group = group;
    const opt = this.config.optimizer.type;
    this.tables = this.config.tables.map((t) => ({ name: t.name, rows: t.rows, dim: t.dim, stateWidth: stateWidth(opt, t.dim), features: t.features }));
    this.scheduler = new HeraldScheduler(this.tables, {
      world: group.size, batchSize: options.batchSize, cacheRows: options.cacheRows,
      ...(options.allocation !== undefined ? { allocation: options.allocation } : {}), ...(options.seed !== undefined ? { seed: options.seed } : {}),
      rank: group.rank, undo: true,
    });
    const O = (this.owners = this.scheduler.owners);
    const r = group.rank;
    let col = 0;
    for (const t of this.config.tables) for (const f of t.features) (this.featCol.set(f, col), (col += t.dim));
    this.pooledDim = col;
    this.pooledFeatures = this.config.tables.flatMap((t) => t.features);
    this.featBase = new Int32Array(this.tables.length + 1);
    this.tables.forEach((t, i) => (this.featBase[i + 1] = this.featBase[i]! + t.features.length));
    this.slotBase = new Int32Array(this.tables.length + 1);
    this.tables.forEach((t, i) => ((this.slotBase[i + 1] = this.slotBase[i]! + O.slots[i]!), this.firstFeatureOf.set(t.features[0]!, i)));
    this.slotKey = new Float64Array(this.slotBase[this.tables.length]!).fill(-1);
    this.local = new EmbeddingCollection({
      tables: this.config.tables.map((t, i) => ({
        name: t.name, rows: Math.max(1, O.owned(i, r) + O.slots[i]!), dim: t.dim, dtype: t.dtype, pooling: t.pooling, features: [...t.features],
        init: { type: 'constant', value: 0 },
      })),
      optimizer: { ...this.config.optimizer },
      device: this.config.device,
      seed: this.config.seed,
    });
    if (internal?.initialize ?? true) this.initializeOwned();
  }

  /**
   * Continues from a checkpoint of save() or EmbeddingCollection.save (a collective, with the
   * constructor's arguments): every rank reads it (verified: sizes, CRC-32C), checks its tables against
   * `config` (names, rows, dim, dtype, pooling, features, optimizer type: INVALID_CONFIG otherwise) and keeps
   * the rows and optimizer state of its row ranges, with the step count; the caches start empty. The ranks
   * agree on the outcome (lib/sharded/step-status.ts agreeOnCall), so a load that fails on one rank fails
   * on every rank. See lib/herald/load.ts for what the next steps hold.
   */
  static load(dir: string, config: CollectionConfig, group: ProcessGroup, options: HeraldOptions): Promise<HeraldEmbeddingCollection> {
    return loadHerald(dir, config, group, options);
  }

  /** Fills this rank's row ranges with exactly what one collection starts with there. */
  private initializeOwned(): void {
    const K = exchangeOps(), O = this.owners, r = this.group.rank, chunk = 1 << 16;
    const inits = toNativeConfig(this.config, true).tables.map((t) => t.init);
    let ids = new BigInt64Array(0), vals = new Float32Array(0); // reused from chunk to chunk
    this.tables.forEach((t, i) => {
      const lo = O.lo(i, r), n = O.owned(i, r);
      const { kind, a, b } = inits[i]!;
      for (let s = 0; s < n; s += chunk) {
        const m = Math.min(chunk, n - s);
        if (ids.length !== m) ids = new BigInt64Array(m);
        if (vals.length < m * t.dim) vals = new Float32Array(chunk * t.dim);
        const v = vals.subarray(0, m * t.dim);
        K.initSlice(kind, a, b, this.config.seed, i, t.dim, lo + s, m, 0, t.dim, v);
        K.rowIds(s, ids);
        this.local.writeRows(t.name, ids, v);
      }
    });
  }

  /** The learning rate of the steps called from now on. */
  get learningRate(): number {
    return this.lr ?? this.local.learningRate;
  }
  /** Changes the learning rate for the steps called after this call; those still queued keep theirs (as EmbeddingCollection's). */
  setLearningRate(lr: number): void {
    this.live();
    checkLearningRate(lr);
    this.lr = lr;
    this.calls.inOrder(() => {
      this.local.setLearningRate(lr);
      this.config.optimizer.lr = lr;
    });
  }
  private lr: number | undefined;
  get step(): number {
    return this.local.step;
  }
  set step(t: number) {
    this.local.step = t;
  }

  /**
   * Schedules a global batch (every rank calls it with the same batch, in step order) and returns this
   * rank's samples as a batch for forward(). Batches scheduled ahead (prepare) are taken from the queue.
   */
  assign(global: JaggedBatch): JaggedBatch {
    this.live();
    const head = this.queue[0];
    if (head && head.global === global) return head.local as JaggedBatch;
    if (head) throw new EmbshardError('INVALID_ARGUMENT', 'herald: this is not the batch scheduled next (prepare(next) must be followed by training next)');
    if (this.preparing)
      throw new EmbshardError('INVALID_ARGUMENT', 'herald: the next batch is still being scheduled (await prepare(next) before training)');
    return this.enqueueSchedule(global).local;
  }

  /** What keeps a global batch from being scheduled before the scheduler sees it (its ids and lengths are the scheduler's to check). */
  private scheduleError(global: unknown): EmbshardError | undefined {
    if (!(global instanceof JaggedBatch)) return new EmbshardError('INVALID_ARGUMENT', 'herald: expected a JaggedBatch');
    if (global.weights && !exchangeOps().allFinite(global.weights))
      return new EmbshardError('INVALID_ARGUMENT', 'herald: the batch has a weight that is NaN or ±Inf: weights must be finite');
    return this.featureError(global);
  }

  /** As one collection refuses them: UNKNOWN_FEATURE for a batch feature no table has, MISSING_FEATURE for a table's feature the batch lacks; or undefined. */
  private featureError(batch: JaggedBatch): EmbshardError | undefined {
    const extra = batch.features.find((x) => !this.featCol.has(x));
    if (extra !== undefined) return new EmbshardError('UNKNOWN_FEATURE', `batch feature '${extra}' is not a feature of this collection`);
    const missing = this.pooledFeatures.find((x) => !batch.features.includes(x));
    return missing === undefined ? undefined : new EmbshardError('MISSING_FEATURE', `the batch has no feature '${missing}'`);
  }

  private enqueueSchedule(global: JaggedBatch): Scheduled {
    // every rank schedules the same global batch, so every rank refuses it alike
    const bad = this.scheduleError(global);
    if (bad) throw bad;
    const plan = this.scheduler.schedule(global);
    const s = { global, plan, local: takeSparse(global, plan.samples[this.group.rank]!) };
    this.queue.push(s);
    return s;
  }

  /**
   * The trainer's hook: this rank's share of a global training batch (dense data and labels follow their
   * samples). A batch this rank cannot schedule is returned as it is, and its forward then refuses the step
   * on every rank (the other ranks may have scheduled their copy of it).
   */
  localize(b: Batch): Batch {
    if (typeof b !== 'object' || b === null) throw new EmbshardError('INVALID_ARGUMENT', 'herald: localize(batch) needs a batch { dense, sparse, labels, size }');
    this.live();
    const head = this.queue[0];
    if (head && 'refused' in head && head.global === b.sparse) return b;
    if (!head && !this.preparing) {
      try {
        this.enqueueSchedule(b.sparse);
      } catch (e) {
        if (!(e instanceof EmbshardError)) throw e;
        this.queue.push({ global: b.sparse, local: b.sparse, refused: e });
        return b;
      }
    }
    const local = this.assign(b.sparse);
    return takeBatch(b, (this.queue[0] as Scheduled).plan.samples[this.group.rank]!, local);
  }

  /** Schedules the next global batch while the current step runs (the trainer calls it during the dense compute). */
  prepare(next: JaggedBatch): Promise<void> {
    if (this.preparing) return this.preparing.global === next ? this.preparing.done : Promise.resolve();
    // a batch that cannot be scheduled is left to assign(), which refuses it when it is trained
    if (this.disposed || this.scheduleError(next) || this.queue.some((q) => q.global === next)) return Promise.resolve();
    const done = this.scheduler.scheduleAsync(next).then(
      (plan) => {
        this.queue.push({ global: next, plan, local: takeSparse(next, plan.samples[this.group.rank]!) });
      },
      () => {
        /* surfaces when the batch is trained (assign schedules it again and throws) */
      },
    );
    this.preparing = { global: next, done: done.finally(() => (this.preparing = undefined)) };
    return this.preparing.done;
  }

  /**
   * This rank's forward of the batch assign() returned: the step's row exchange, then pooling. Any other
   * batch is looked up without training (every rank calls forward with its own batch). Either way a
   * collective that opens with one uncounted agreement: a batch one rank cannot look up (not a
   * JaggedBatch, a feature missing, an id out of range), bad options or `options.reject` on one rank, a
   * training batch one rank could not schedule, or one rank looking up while the others train, ends the
   * call on every rank with nothing changed; a refused training step is forgotten by every rank's
   * scheduler, with the batches scheduled after it (they are scheduled again when they are trained).
   */
  forward(batch: JaggedBatch, options: ForwardOptions = {}): Promise<HeraldForwardOutput> {
    if (this.disposed) return Promise.reject(this.disposedError());
    return this.calls.run(async () => {
      const s = this.queue[0];
      const training = s !== undefined && s.local === batch;
      // a batch or options this rank cannot use still join the agreement, so every rank rejects
      let bad = training && 'refused' in s ? s.refused : undefined;
      try {
        bad ??= checkForwardOptions(options).reject;
        if (!bad && !(batch instanceof JaggedBatch)) throw new EmbshardError('INVALID_ARGUMENT', 'herald: forward(batch) expected a JaggedBatch');
      } catch (e) {
        if (!(e instanceof EmbshardError)) throw e;
        bad = e;
      }
      if (!training) return { pooled: await this.lookup(batch, bad), samples: new Int32Array(0), batch };
      await this.agree(bad, 1, bad ? 0 : planSignature(s as Scheduled));
      const step = this.queue.shift() as Scheduled;
      this.scheduler.commit();
      const seq = ++this.forwards;
      const copies = await this.exchangeRows(step.plan);
      const ctx: StepCtx = { owner: this, seq, s: step, tables: [] };
      const out: Out = { pooled: this.pool(step, copies, ctx), samples: step.plan.samples[this.group.rank]!, batch };
      out[STEP] = ctx;
      this.open = ctx;
      this.lastCounts = step.plan.counts;
      return out;
    });
  }

  /**
   * A forward's agreement (kind 1: the scheduled training step, 0: a lookup). When it ends the call and
   * some rank was training, every rank forgets the steps it scheduled and did not carry out.
   */
  private async agree(bad: EmbshardError | undefined, kind: 0 | 1, signature = 0): Promise<void> {
    const differ = (why: 'kind' | 'signature') =>
      new EmbshardError('INVALID_ARGUMENT', why === 'signature'
        ? 'herald: the ranks scheduled different steps (every rank must assign() the same global batches in the same order); the step changed nothing on any rank'
        : kind === 1
          ? "herald: another rank's forward was not given the batch assign() returned (it looked up another batch while this rank trained the scheduled step); the step changed nothing on any rank"
          : 'herald: this batch is not the one assign() returned, while another rank trains the scheduled step; the step changed nothing on any rank');
    const r = await agreeOnKind(this.group, bad, kind, signature, 'batch', kind === 1 ? 'step' : 'call', differ);
    if (!r.error) return;
    if (r.some) await this.dropSchedule();
    throw r.error;
  }

  /** Forgets every step scheduled and not carried out (a refused step and those prepared after it). */
  private async dropSchedule(): Promise<void> {
    while (this.preparing) await this.preparing.done;
    this.queue.length = 0;
    this.scheduler.rollback();
  }

  /** Gradients of this rank's pooled outputs: partial sums per row, one exchange to owners, one engine update per rank. */
  backward(out: HeraldForwardOutput, grads: { pooled?: Float32Array }, options: Pick<BackwardOptions, 'reject'> = {}): Promise<{ skipped: boolean; uniqueRows: number }> {
    if (this.disposed) return Promise.reject(this.disposedError());
    return this.calls.run(async () => {
      const ctx = (out as Out | null | undefined)?.[STEP];
      const wrong = !ctx || ctx.owner !== this
        ? new EmbshardError('INVALID_ARGUMENT', "herald: backward(out, grads) needs the output of this collection's forward() (its latest training step)")
        : ctx.seq !== this.forwards // the next training forward moved rows and cache slots: an earlier step's plan no longer names them
          ? new EmbshardError('INVALID_ARGUMENT', 'herald: stale forward output: a later training forward has run since; only the latest step goes through backward()')
          : undefined;
      if (wrong) {
        // while a step waits for its backward on every rank, this rank joins the others' agreement, so every rank rejects
        if (this.open) await agreeOnGradients(this.group, rejectionStatus(wrong.code));
        throw wrong;
      }
      let reject: EmbshardError | undefined;
      try {
        reject = checkBackwardOptions(options).reject;
        rejectUnknownFields(options, ['reject'], 'herald: backward options', 'INVALID_CONFIG');
        if (!reject && (typeof grads !== 'object' || grads === null)) throw new EmbshardError('GRAD_SIZE_MISMATCH', 'herald: grads must be an object { pooled }');
      } catch (e) {
        if (!(e instanceof EmbshardError)) throw e;
        reject = e;
      }
      if (reject) {
        // this rank's caller ends the step, or its options or gradients are unusable: it still joins the
        // agreement, so every rank rejects
        await agreeOnGradients(this.group, rejectionStatus(reject.code));
        throw reject;
      }
      const g = grads.pooled;
      const B = out.batch.batchSize;
      // every rank agrees before any gradient moves (lib/sharded/step-status.ts): gradients of the wrong
      // size or with NaN / Inf on one rank end the step on every rank, nothing changed
      const sizeOk = g instanceof Float32Array && g.length === B * this.pooledDim;
      const finite = sizeOk && exchangeOps().allFinite(g);
      const go = await agreeOnGradients(this.group, !sizeOk ? rejectionStatus('GRAD_SIZE_MISMATCH') : finite ? 0 : NON_FINITE_STATUS);
      if (!sizeOk) throw new EmbshardError('GRAD_SIZE_MISMATCH', `herald: grads.pooled must be a Float32Array of ${B} × ${this.pooledDim} values`);
      if (!go) {
        const skipped = nonFiniteOutcome(finite, this.config.optimizer.nonFinite, 'herald: ');
        this.close(out as Out);
        return skipped;
      }
      this.close(out as Out);
      const partial = this.partials(ctx!, out.batch, g);
      return this.applyGradients(ctx!.s.plan, partial);
    });
  }

  /** The step of `out` has gone through its backward (applied or skipped): its output is spent. */
  private close(out: Out): void {
    delete out[STEP];
    this.open = undefined;
  }

  // ---- the step's stages ----

  /** Moves (value + state) and copies (value) of the plan; returns the copies this rank receives, per table. */
  private async exchangeRows(plan: StepPlan): Promise<Float32Array[]> {
    const v = viewOf(plan), H = heraldOps(), T = this.tables.length;
    // what this rank sends, read from its engine before anything is written
    const srcs: Float32Array[] = [];
    for (let t = 0; t < T; t++) {
      const { name, stateWidth: sw } = this.tables[t]!;
      const ids = v.sendIds.subarray(v.sendStart[t]!, v.sendStart[t + 1]!), sid = v.sendStateIds.subarray(v.sendStateStart[t]!, v.sendStateStart[t + 1]!);
      srcs.push(ids.length ? this.local.readRows(name, ids) : NONE, sid.length && sw ? this.local.readState(name, sid) : NONE);
    }
    const send = new Float32Array(total(v.sendCounts));
    H.copySegments([send], srcs, v.sendSegs);
    const { data } = await this.group.allToAllV(send, v.sendCounts, { recvCounts: v.recvCounts });
    // moves into this rank's engine, copies for its forward
    const dsts: Float32Array[] = [];
    for (let t = 0; t < T; t++) {
      const { dim, stateWidth: sw } = this.tables[t]!, m = v.moveStart[t + 1]! - v.moveStart[t]!, c = v.copyStart[t + 1]! - v.copyStart[t]!;
      dsts.push(new Float32Array(m * dim), new Float32Array(m * sw), new Float32Array(c * dim));
    }
    H.copySegments(dsts, [data], v.recvSegs);
    for (let t = 0; t < T; t++) {
      const { name, stateWidth: sw } = this.tables[t]!, ids = v.moveIds.subarray(v.moveStart[t]!, v.moveStart[t + 1]!);
      if (!ids.length) continue;
      this.local.writeRows(name, ids, dsts[3 * t]!);
      if (sw) this.local.writeState(name, ids, dsts[3 * t + 1]!);
    }
    // a row moved out of a cache slot frees it; a row moved in holds its slot
    H.applySlots(this.slotKey, v.freeSlots, v.freeKeys, v.holdSlots, v.holdKeys);
    return Array.from({ length: T }, (_, t) => dsts[3 * t + 2]!);
  }

  /** Table t's cache slots in `slotKey`: the key each holds (−1: free). */
  private slotsOf(t: number): Float64Array {
    return this.slotKey.subarray(this.slotBase[t]!, this.slotBase[t + 1]!);
  }

  /** The distinct rows of table ti in a batch (ascending) and every id's index among them, feature by feature. */
  private distinct(batch: JaggedBatch, ti: number): { uq: { values: BigInt64Array; inverse: Int32Array }; featOff: number[] } {
    const K = exchangeOps(), t = this.tables[ti]!;
    const cat: BigInt64Array[] = [];
    const featOff = [0];
    for (const f of t.features) {
      const fv = batch.feature(f);
      const seg = K.segment(fv.ids, fv.lengths, null, Float64Array.of(0, t.rows), `feature '${f}' (table '${t.name}', ${t.rows} rows)`);
      cat.push(seg.ids);
      featOff.push(featOff[featOff.length - 1]! + seg.ids.length);
    }
    const all = new BigInt64Array(featOff[featOff.length - 1]!);
    cat.forEach((c, k) => all.set(c, featOff[k]!));
    return { uq: K.unique(all, 1), featOff };
  }

  /** Pools table ti's features of a batch from its distinct rows ([U × dim], in `distinct` order) into `pooled`. */
  private poolTable(batch: JaggedBatch, ti: number, rows: Float32Array, inverse: Int32Array, featOff: number[], pooled: Float32Array): void {
    const K = exchangeOps(), t = this.tables[ti]!;
    const mean = this.config.tables[ti]!.pooling === 'mean';
    t.features.forEach((f, k) => {
      const fv = batch.feature(f), col = this.featCol.get(f)!;
      K.poolUnique(rows, t.dim, inverse.subarray(featOff[k]!, featOff[k + 1]!), fv.lengths, fv.weights ?? null, pooled, this.pooledDim, col, null);
      if (mean) K.divideBags(pooled, this.pooledDim, col, t.dim, fv.lengths);
    });
  }

  /** Pools this rank's bags from its distinct rows (engine rows and received copies), feature by feature. */
  private pool(s: Scheduled, copies: Float32Array[], ctx: StepCtx): Float32Array {
    const K = exchangeOps(), me = this.group.rank, batch = s.local, B = batch.batchSize, v = viewOf(s.plan);
    const pooled = new Float32Array(B * this.pooledDim);
    this.tables.forEach((t, ti) => {
      const reads = s.plan.reads[me]![ti]!;
      // every id's index among the rank's distinct rows of the table, from the scheduler
      const f0 = this.featBase[ti]!, nf = t.features.length, a0 = v.inverseStart[f0]!;
      const inverse = v.inverse.subarray(a0, v.inverseStart[f0 + nf]!);
      const featOff = Array.from({ length: nf + 1 }, (_, k) => v.inverseStart[f0 + k]! - a0);
      const dim = t.dim, rows = new Float32Array(reads.rows.length * dim);
      const a = v.engStart[ti]!, b = v.engStart[ti + 1]!, cp = v.copyPos.subarray(v.copyStart[ti]!, v.copyStart[ti + 1]!);
      if (b > a) K.unpack(this.local.readRows(t.name, v.engIds.subarray(a, b)), 0, 'fp32', b - a, dim, rows, dim, v.engPos.subarray(a, b), 0, 0, false);
      if (cp.length) K.unpack(copies[ti]!, 0, 'fp32', cp.length, dim, rows, dim, cp, 0, 0, false);
      this.poolTable(batch, ti, rows, inverse, featOff, pooled);
      ctx.tables.push({ inverse, featOff, loc: reads.loc });
    });
    return pooled;
  }

  /**
   * A forward without training (evaluation, predict): a collective every rank calls with its own batch.
   * Rows checked out into caches are gathered to every rank, the others are asked of their owners; the
   * schedule and the caches are left as they are.
   */
  private async lookup(batch: JaggedBatch, reject?: EmbshardError): Promise<Float32Array> {
    const K = exchangeOps(), H = heraldOps(), g = this.group, W = g.size, O = this.owners, me = g.rank;
    // every rank's batch checked (its features and ids, or its caller's reject) and agreed on first, so a
    // bad batch on one rank ends the lookup on every rank
    let parts: ReturnType<HeraldEmbeddingCollection['distinct']>[] = [];
    let bad = reject ?? this.featureError(batch);
    if (!bad) {
      try {
        parts = this.tables.map((_, ti) => this.distinct(batch, ti));
      } catch (e) {
        if (!(e instanceof EmbshardError)) throw e;
        bad = e;
      }
    }
    await this.agree(bad, 0);
    const pooled = new Float32Array(batch.batchSize * this.pooledDim);
    for (let ti = 0; ti < this.tables.length; ti++) {
      const t = this.tables[ti]!;
      const { uq, featOff } = parts[ti]!;
      // every cache's checked-out rows of the table
      const mine = H.heldSlots(this.slotsOf(ti), O.owned(ti, me), O.rowBase[ti]!);
      const hk = (await g.allGather(mine.rows)).data;
      const hv = (await g.allGather(this.local.readRows(t.name, mine.ids))).data;
      // those from the gathered copies, the rest from their owners
      const lo = Float64Array.from({ length: W + 1 }, (_, p) => O.lo(ti, p));
      const r = H.lookupRoutes(uq.values, hk, lo);
      const rows = new Float32Array(uq.values.length * t.dim);
      if (r.heldPos.length) K.unpack(gatherRows(hv, t.dim, r.heldSrc), 0, 'fp32', r.heldPos.length, t.dim, rows, t.dim, r.heldPos, 0, 0, false);
      const req = await g.allToAllV(r.ask, r.askCounts);
      const vals = this.local.readRows(t.name, req.data);
      const rep = await g.allToAllV(vals, req.counts.map((c) => c * t.dim));
      if (r.askPos.length) K.unpack(rep.data, 0, 'fp32', r.askPos.length, t.dim, rows, t.dim, r.askPos, 0, 0, false);
      this.poolTable(batch, ti, rows, uq.inverse, featOff, pooled);
    }
    return pooled;
  }

  /** Per table: Σ of this rank's gradient contributions per distinct row, in bag order. */
  private partials(ctx: StepCtx, batch: JaggedBatch, g: Float32Array): Float32Array[] {
    const K = exchangeOps();
    return this.tables.map((t, ti) => {
      const ts = ctx.tables[ti]!, dim = t.dim;
      const out = new Float32Array(ts.loc.length * dim);
      const mean = this.config.tables[ti]!.pooling === 'mean';
      t.features.forEach((f, k) => {
        const fv = batch.feature(f);
        K.gradUnique(g, this.pooledDim, this.featCol.get(f)!, dim, ts.inverse.subarray(ts.featOff[k]!, ts.featOff[k + 1]!), fv.lengths, fv.weights ?? null, mean ? fv.lengths : null, mean, null, out);
      });
      return out;
    });
  }

  /** Gradient rows to their owners, then this rank's one engine update: every row's contributions in rank order. */
  private async applyGradients(plan: StepPlan, partial: Float32Array[]): Promise<{ skipped: boolean; uniqueRows: number }> {
    const v = viewOf(plan), H = heraldOps(), T = this.tables.length;
    const send = new Float32Array(total(v.gradSendCounts));
    H.copySegments([send], partial, v.gradSendSegs);
    const { data } = await this.group.allToAllV(send, v.gradSendCounts, { recvCounts: v.gradRecvCounts });
    // the backward's batch: one bag of one row per contribution, on each table's first feature
    const Bs = v.updRows, features = this.pooledFeatures;
    const pooledGrad = new Float32Array(Bs * this.pooledDim);
    H.copySegments([pooledGrad], [...partial, data], v.updSegs);
    const lengths = new Int32Array(features.length * Bs);
    const ids = new BigInt64Array(v.updIds.length);
    let o = 0, unique = 0;
    features.forEach((f, fi) => {
      const ti = this.firstFeatureOf.get(f);
      if (ti === undefined) return;
      const a = v.updStart[ti]!, b = v.updStart[ti + 1]!;
      lengths.fill(1, fi * Bs, fi * Bs + (b - a));
      ids.set(v.updIds.subarray(a, b), o);
      o += b - a;
    });
    for (let t = 0; t < T; t++) unique += v.updDistinct[t]!;
    const batch = JaggedBatch.fromLengths({ features, batchSize: Bs, lengths, ids });
    const r = await this.local.backward({ pooled: new Float32Array(0), sequences: {}, batch }, { pooled: pooledGrad });
    return { skipped: r.skipped, uniqueRows: unique };
  }

  // ---- whole tables ----

  /**
   * Every rank's current rows and optimizer state of a table, assembled on every rank (a collective:
   * every rank calls it between steps): [rows × dim] and [rows × stateWidth].
   */
  gather(table: string): Promise<{ weights: Float32Array; state: Float32Array }> {
    if (this.disposed) return Promise.reject(this.disposedError());
    return this.calls.run(async () => {
      const ti = this.tables.findIndex((t) => t.name === table);
      if (ti < 0) throw new EmbshardError('UNKNOWN_TABLE', `no table named '${table}'`);
      const t = this.tables[ti]!, O = this.owners, me = this.group.rank, sw = t.stateWidth;
      const n = O.owned(ti, me);
      const ids = Int32Array.from({ length: n }, (_, j) => j);
      const mine = heraldOps().heldSlots(this.slotsOf(ti), n, O.rowBase[ti]!);
      const hid = mine.ids;
      const g = this.group;
      const ow = (await g.allGather(this.local.readRows(t.name, ids))).data;
      const os = sw ? (await g.allGather(this.local.readState(t.name, ids))).data : new Float32Array(0);
      const hk = (await g.allGather(mine.rows)).data;
      const hw = (await g.allGather(this.local.readRows(t.name, hid))).data;
      const hs = sw ? (await g.allGather(this.local.readState(t.name, hid))).data : new Float32Array(0);
      const weights = new Float32Array(t.rows * t.dim);
      const state = new Float32Array(t.rows * sw);
      weights.set(ow);
      state.set(os);
      const idx = Int32Array.from(hk);
      if (idx.length) {
        exchangeOps().unpack(hw, 0, 'fp32', idx.length, t.dim, weights, t.dim, idx, 0, 0, false);
        if (sw) exchangeOps().unpack(hs, 0, 'fp32', idx.length, sw, state, sw, idx, 0, 0, false);
      }
      return { weights, state };
    });
  }

  /** Writes one collection's checkpoint of the whole tables (a collective; rank 0 writes `dir`). */
  async save(dir: string, extra?: Record<string, unknown>): Promise<void> {
    this.live();
    // every rank's folder checked and agreed on before the gather, so a bad one on one rank ends every rank's save
    let bad: EmbshardError | undefined;
    try {
      checkDir(dir);
    } catch (e) {
      if (!(e instanceof EmbshardError)) throw e;
      bad = e;
    }
    await agreeOnCall(this.group, bad, 'checkpoint folder', 'save');
    const full: { weights: Float32Array; state: Float32Array }[] = [];
    for (const t of this.tables) full.push(await this.gather(t.name));
    let failure: unknown;
    if (this.group.rank === 0) {
      const ec = new EmbeddingCollection(this.config);
      try {
        this.tables.forEach((t, i) => {
          const ids = Int32Array.from({ length: t.rows }, (_, j) => j);
          ec.writeRows(t.name, ids, full[i]!.weights);
          if (t.stateWidth) ec.writeState(t.name, ids, full[i]!.state);
        });
        ec.step = this.step;
        await ec.save(dir, extra);
      } catch (e) {
        failure = e;
      } finally {
        ec.dispose();
      }
    }
    // every rank learns whether rank 0's write made it
    await agreeOnWrite(this.group, failure, () => new EmbshardError('IO_ERROR', `herald: saving the checkpoint '${dir}' failed on rank 0`));
  }

  /**
   * Frees this rank's tables once the calls already made have settled (a step in flight ends on every
   * rank); any later call raises DISPOSED at once, without joining a collective.
   */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    void this.calls.run(() => this.local.dispose());
  }

  private live(): void {
    if (this.disposed) throw this.disposedError();
  }

  private disposedError(): EmbshardError {
    return new EmbshardError('DISPOSED', 'this HeraldEmbeddingCollection has been disposed');
  }
}

const NONE = new Float32Array(0);

/**
 * A number below 2^24 that every rank computes alike for the same scheduled step: its number, its plan's
 * counts and its global batch's number of ids. Ranks that scheduled different global batches almost surely differ in
 * it, and the forward's agreement refuses their step before any row moves.
 */
function planSignature(s: Scheduled): number {
  const c = s.plan.counts;
  let h = s.plan.step % 16777213;
  for (const x of [c.moves, c.evictions, c.copies, c.grads, c.bytes, c.reads, c.hits, c.score, s.global.ids.length]) h = (h * 31 + x) % 16777213;
  return h;
}

function total(counts: Float64Array): number {
  return counts.reduce((a, b) => a + b, 0);
}

function viewOf(plan: StepPlan): RankView {
  if (!plan.view) throw new EmbshardError('INTERNAL', 'herald: the step plan carries no view of this rank');
  return plan.view;
}

/** Rows `idx` of a [n × dim] array, in that order. */
function gatherRows(a: Float32Array, dim: number, idx: Int32Array): Float32Array {
  const out = new Float32Array(idx.length * dim);
  exchangeOps().pack(a, dim, idx, 0, idx.length, 0, dim, 'fp32', out, 0);
  return out;
}

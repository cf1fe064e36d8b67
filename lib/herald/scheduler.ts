// scheduler.ts — Herald's embedding scheduler, exact and synchronous. Per global batch it (1) assigns the
// samples to ranks, every rank exactly its batch size: greedily, each sample to the rank with room whose
// cache holds most of its ids (score = the sample's ids valid in that rank's cache: rows checked out into
// it), ties to the first rank counted from a start that rotates with the step; or at random, for
// comparison; and (2) writes the step's communication plan from each rank's simulated LRU cache
// (capacity `cacheRows` per table), which every rank computes identically:
//   - a row read by one rank only is trained where it is read: moved (value and optimizer state) into that
//     rank's cache when it lives elsewhere, and kept there while that rank alone reads it (zero traffic);
//   - a row read by several ranks (or by its owner) goes home to its owner (a flush, when a cache held it);
//     every other reader gets a copy of its value and sends its gradient back: the owner applies the one
//     update (the parameter server);
//   - a cache that is full evicts its least recently used row that nobody reads this step; a checked-out
//     row that leaves a cache (eviction, or a reader elsewhere) carries its value and state home: the
//     dirty evictions and flushes. Nothing else moves.
// Moves and copies travel in one exchange before the forward, gradients in one after it; every record of
// the plan names its rows by engine id on both sides (lib/herald/owners.ts). The per-id work (keys, scores,
// caches, the plan) runs natively (native/herald/scheduler.cc): synchronously in schedule(), on a worker
// thread in scheduleAsync(). With a `rank`, every plan also carries that rank's view of the step
// (rank-view.ts), computed natively beside it. With `undo`, the scheduler keeps what each step changed until
// commit() (the step was carried out) or rollback() (the steps not committed are forgotten: a step the ranks
// refused changes nothing, and the next batch is scheduled as if it never came).
import type { JaggedBatch } from '../batch.js';
import { EmbshardError } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { loadAddon } from '../native.js';
import { Rng } from '../random/rng.js';
import { RowOwners, type HeraldTable } from './owners.js';
import type { RankView } from './rank-view.js';

export type Allocation = 'herald' | 'random';

export interface SchedulerOptions {
  /** ranks */
  world: number;
  /** samples per rank; a global batch has world × batchSize */
  batchSize: number;
  /** cache slots per rank per table for rows it does not own (0: no cache, every remote row is copied) */
  cacheRows: number;
  /** 'herald' (default): the location-aware greedy allocator; 'random': a seeded random placement */
  allocation?: Allocation;
  /** seed of the random placement */
  seed?: number;
  /** the rank whose view of every step (rank-view.ts) the plans carry (none: counting only) */
  rank?: number;
  /** keep each step's changes until commit() or rollback() (default false) */
  undo?: boolean;
}

const OPTION_FIELDS = fieldsOf<SchedulerOptions>({ world: true, batchSize: true, cacheRows: true, allocation: true, seed: true, rank: true, undo: true });

/** What one step moves between ranks, in rows (transmissions) and bytes. */
export interface StepCounts {
  /** value + optimizer state transfers between ranks (checkouts, migrations, flushes, dirty evictions) */
  moves: number;
  /** of `moves`: dirty evictions */
  evictions: number;
  /** value copies to readers */
  copies: number;
  /** gradient rows to owners */
  grads: number;
  /** transmissions: moves + copies + grads */
  rows: number;
  bytes: number;
  /** (rank, distinct row) reads */
  reads: number;
  /** of `reads`: rows whose current copy was already on the reading rank */
  hits: number;
  /** the allocator's objective: Σ over samples of the sample's ids valid in the cache of the rank it was given (occurrences) */
  score: number;
}

/** One rank's distinct rows of one table this step (ascending) and where its forward finds each. */
export interface RankReads {
  rows: Float64Array;
  /** ≥ 0: engine id on this rank; < 0: −(1 + index) into the copies this rank receives for the table */
  loc: Int32Array;
}

/** The step's transfers, in their one order, each a typed array with one entry per record. */
export interface PlanRecords {
  /** transfers before the forward, in their one order: move (1: value + state) or copy (0: value) */
  xMove: Uint8Array;
  xKey: Float64Array;
  xTable: Int32Array;
  xFrom: Int32Array;
  xTo: Int32Array;
  xFromId: Int32Array;
  /** moves: engine id at the receiver; copies: −1 */
  xToId: Int32Array;
  /** gradients after the forward: sender, owner, table, the owner's engine id, the sender's read position */
  gTable: Int32Array;
  gFrom: Int32Array;
  gTo: Int32Array;
  gToId: Int32Array;
  gPos: Int32Array;
}

export interface StepPlan extends PlanRecords {
  step: number;
  /** per rank: the global sample indices it trains, ascending (exactly batchSize each) */
  samples: Int32Array[];
  /** reads[rank][table] */
  reads: RankReads[][];
  counts: StepCounts;
  /** the scheduler's rank's view of the step (with the `rank` option) */
  view?: RankView;
}

/** The step a native schedule returns (native/addon/herald_ops.cc): flat typed arrays. */
interface NativeStep extends PlanRecords {
  /** W × batchSize */
  samples: Int32Array;
  readRows: Float64Array;
  readLoc: Int32Array;
  readStart: Int32Array;
  /** moves, evictions, copies, grads, rows, bytes, reads, hits, score */
  counts: Float64Array;
  view?: RankView;
}
interface NativeFeature {
  table: number;
  lengths: Int32Array;
  ids: ArrayLike<number | bigint>;
}
interface NativeScheduler {
  scheduleSync(step: number, feats: NativeFeature[], assign: Int32Array | null): NativeStep;
  schedule(step: number, feats: NativeFeature[], assign: Int32Array | null): Promise<NativeStep>;
  commit(): void;
  rollback(): void;
}
type NativeSchedulerCtor = new (
  world: number,
  batchSize: number,
  tables: { name: string; rows: number; dim: number; stateWidth: number; slots: number }[],
  view?: { rank: number; pooledDim: number; cols: Int32Array },
  undo?: boolean,
) => NativeScheduler;

export class HeraldScheduler {
  readonly owners: RowOwners;
  readonly W: number;
  readonly batchSize: number;
  readonly allocation: Allocation;
  readonly seed: number;
  /** steps scheduled so far */
  steps = 0;
  readonly undo: boolean;
  /** with `undo`: steps whose native record is kept (the last `pending` of `steps`), of them the oldest `committed` carried out */
  private pending = 0;
  private committed = 0;
  private readonly core: NativeScheduler;

  constructor(
    readonly tables: readonly HeraldTable[],
    o: SchedulerOptions,
  ) {
    rejectUnknownFields(o, OPTION_FIELDS, 'options');
    this.W = o.world;
    this.owners = new RowOwners(tables, o.world, o.cacheRows);
    if (!Number.isSafeInteger(o.batchSize) || o.batchSize < 1)
      throw new EmbshardError('INVALID_SIZE', `batchSize must be a positive integer (got ${String(o.batchSize)})`);
    this.batchSize = o.batchSize;
    const alloc = o.allocation ?? 'herald';
    if (alloc !== 'herald' && alloc !== 'random') throw new EmbshardError('INVALID_CONFIG', `allocation must be 'herald' or 'random' (got '${String(alloc)}')`);
    this.allocation = alloc;
    const seed = o.seed ?? 0;
    if (!Number.isSafeInteger(seed) || seed < 0) throw new EmbshardError('INVALID_CONFIG', `seed must be a non-negative integer (got ${String(seed)})`);
    this.seed = seed;
    if (o.undo !== undefined && typeof o.undo !== 'boolean') throw new EmbshardError('INVALID_CONFIG', `undo must be a boolean (got ${String(o.undo)})`);
    this.undo = o.undo ?? false;
    let view: { rank: number; pooledDim: number; cols: Int32Array } | undefined;
    if (o.rank !== undefined) {
      if (!Number.isSafeInteger(o.rank) || o.rank < 0 || o.rank >= o.world)
        throw new EmbshardError('INVALID_ARGUMENT', `rank must be an integer in [0, ${o.world}) (got ${String(o.rank)})`);
      // the pooled output: every table's features in order, dim columns each
      const cols = new Int32Array(tables.length);
      let col = 0;
      tables.forEach((t, i) => ((cols[i] = col), (col += t.dim * t.features.length)));
      view = { rank: o.rank, pooledDim: col, cols };
    }
    const Ctor = (loadAddon() as unknown as { herald: { Scheduler: NativeSchedulerCtor } }).herald.Scheduler;
    this.core = new Ctor(
      this.W,
      this.batchSize,
      tables.map((t, i) => ({ name: t.name, rows: t.rows, dim: t.dim, stateWidth: t.stateWidth, slots: this.owners.slots[i]! })),
      view,
      this.undo,
    );
  }

  /**
   * With `undo`: the oldest step not committed was carried out. Its record is dropped before the next
   * schedule or rollback (never while scheduleAsync runs), so this may be called at any time.
   */
  commit(): void {
    this.needUndo('commit');
    if (this.committed < this.pending) this.committed++;
  }

  /** With `undo`: every step not committed is undone, newest first, and scheduled again by the next calls (not while scheduleAsync runs). */
  rollback(): void {
    this.needUndo('rollback');
    this.dropCommitted();
    this.core.rollback();
    this.steps -= this.pending;
    this.pending = 0;
  }

  /** The native records of the steps committed, dropped. */
  private dropCommitted(): void {
    for (; this.committed > 0; this.committed--, this.pending--) this.core.commit();
  }

  private needUndo(what: string): void {
    if (!this.undo) throw new EmbshardError('INVALID_ARGUMENT', `herald: ${what}() needs a scheduler built with undo: true`);
  }

  /**
   * Schedules one global batch (world × batchSize samples, every table's features present): the
   * allocation and the plan. Bad input throws before any state changes.
   */
  schedule(batch: JaggedBatch): StepPlan {
    const { feats, assign } = this.inputs(batch);
    this.dropCommitted();
    const out = this.core.scheduleSync(this.steps, feats, assign);
    if (this.undo) this.pending++;
    return this.plan(this.steps++, out);
  }

  /** schedule() off the event loop (one at a time; the next call waits for this one to settle). */
  async scheduleAsync(batch: JaggedBatch): Promise<StepPlan> {
    const { feats, assign } = this.inputs(batch);
    this.dropCommitted();
    const out = await this.core.schedule(this.steps, feats, assign);
    if (this.undo) this.pending++;
    return this.plan(this.steps++, out);
  }

  private inputs(batch: JaggedBatch): { feats: NativeFeature[]; assign: Int32Array | null } {
    const W = this.W, B = this.batchSize, G = batch.batchSize;
    if (G !== W * B) throw new EmbshardError('INVALID_SIZE', `herald: a global batch has world × batchSize = ${W} × ${B} = ${W * B} samples (got ${G}${G < W * B ? "; a source's final partial batch can be left out with fullBatches() of embshard/data" : ''})`);
    // every table's features in turn (the order of the view's inverse)
    const feats: NativeFeature[] = [];
    this.tables.forEach((t, ti) =>
      t.features.forEach((f) => {
        const fv = batch.feature(f);
        feats.push({ table: ti, lengths: fv.lengths, ids: fv.ids });
      }),
    );
    return { feats, assign: this.allocation === 'random' ? this.randomPlacement(this.steps) : null };
  }

  /** The seeded random placement of one step: a shuffle of the global batch, batchSize samples per rank in order. */
  private randomPlacement(step: number): Int32Array {
    const G = this.W * this.batchSize, B = this.batchSize;
    const perm = Int32Array.from({ length: G }, (_, i) => i);
    const rng = new Rng(this.seed, step);
    for (let j = G - 1; j > 0; j--) {
      const k = rng.int(0, j);
      const x = perm[j]!;
      perm[j] = perm[k]!;
      perm[k] = x;
    }
    const assign = new Int32Array(G);
    for (let j = 0; j < G; j++) assign[perm[j]!] = Math.floor(j / B);
    return assign;
  }

  private plan(step: number, n: NativeStep): StepPlan {
    const W = this.W, B = this.batchSize, T = this.owners.T;
    const { samples, readRows, readLoc, readStart, counts: c, view, ...records } = n;
    const reads: RankReads[][] = [];
    for (let w = 0; w < W; w++) {
      const per: RankReads[] = [];
      for (let t = 0; t < T; t++) {
        const a = readStart[w * T + t]!, b = readStart[w * T + t + 1]!;
        per.push({ rows: readRows.subarray(a, b), loc: readLoc.subarray(a, b) });
      }
      reads.push(per);
    }
    const counts: StepCounts = {
      moves: c[0]!, evictions: c[1]!, copies: c[2]!, grads: c[3]!, rows: c[4]!, bytes: c[5]!, reads: c[6]!, hits: c[7]!, score: c[8]!,
    };
    return { step, samples: Array.from({ length: W }, (_, w) => samples.subarray(w * B, (w + 1) * B)), ...records, reads, counts, ...(view ? { view } : {}) };
  }
}

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
// the plan names its rows by engine id on both sides (lib/herald/owners.ts).
import type { JaggedBatch } from '../batch.js';
import { EmbshardError } from '../errors.js';
import { Rng } from '../random/rng.js';
import { RowOwners, type HeraldTable } from './owners.js';

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
}

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

export interface StepPlan {
  step: number;
  /** per rank: the global sample indices it trains, ascending (exactly batchSize each) */
  samples: Int32Array[];
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
  /** reads[rank][table] */
  reads: RankReads[][];
  counts: StepCounts;
}

function zeroCounts(): StepCounts {
  return { moves: 0, evictions: 0, copies: 0, grads: 0, rows: 0, bytes: 0, reads: 0, hits: 0, score: 0 };
}

class Records {
  move: number[] = [];
  key: number[] = [];
  table: number[] = [];
  from: number[] = [];
  to: number[] = [];
  fromId: number[] = [];
  toId: number[] = [];
  push(move: boolean, key: number, t: number, from: number, to: number, fromId: number, toId: number): void {
    this.move.push(move ? 1 : 0);
    this.key.push(key);
    this.table.push(t);
    this.from.push(from);
    this.to.push(to);
    this.fromId.push(fromId);
    this.toId.push(toId);
  }
}

export class HeraldScheduler {
  readonly owners: RowOwners;
  readonly W: number;
  readonly batchSize: number;
  readonly allocation: Allocation;
  readonly seed: number;
  /** steps scheduled so far */
  steps = 0;
  /** rows checked out into a cache: key → the rank holding them (absent: at the owner) */
  private readonly home = new Map<number, number>();
  /** per (rank, table): key → slot, least recently used first */
  private readonly lru: Map<number, number>[];
  private readonly free: number[][];
  private readonly featureTable = new Map<string, number>();

  constructor(
    readonly tables: readonly HeraldTable[],
    o: SchedulerOptions,
  ) {
    this.W = o.world;
    this.owners = new RowOwners(tables, o.world, o.cacheRows);
    if (!Number.isSafeInteger(o.batchSize) || o.batchSize < 1)
      throw new EmbshardError('INVALID_SIZE', `batchSize must be a positive integer (got ${String(o.batchSize)})`);
    this.batchSize = o.batchSize;
    const alloc = o.allocation ?? 'herald';
    if (alloc !== 'herald' && alloc !== 'random') throw new EmbshardError('INVALID_CONFIG', `allocation must be 'herald' or 'random' (got '${String(alloc)}')`);
    this.allocation = alloc;
    this.seed = o.seed ?? 0;
    const T = tables.length;
    this.lru = Array.from({ length: this.W * T }, () => new Map<number, number>());
    this.free = Array.from({ length: this.W * T }, (_, i) => {
      const n = this.owners.slots[i % T]!;
      return Array.from({ length: n }, (_, k) => n - 1 - k);
    });
    tables.forEach((t, i) => t.features.forEach((f) => this.featureTable.set(f, i)));
  }

  /** Rows rank w holds checked out in its cache of table t, least recently used first (a copy). */
  cached(w: number, t: number): Map<number, number> {
    return new Map(this.lru[w * this.owners.T + t]!);
  }

  /** The rank a row's current value and state live on. */
  homeOf(key: number): number {
    const h = this.home.get(key);
    if (h !== undefined) return h;
    const t = this.owners.tableOf(key);
    return this.owners.ownerOf(t, key - this.owners.rowBase[t]!);
  }

  /**
   * Schedules one global batch (world × batchSize samples, every table's features present): the
   * allocation and the plan. Bad input throws before any state changes.
   */
  schedule(batch: JaggedBatch): StepPlan {
    const W = this.W, B = this.batchSize, G = batch.batchSize, O = this.owners, T = O.T;
    if (G !== W * B) throw new EmbshardError('INVALID_SIZE', `herald: a global batch has world × batchSize = ${W} × ${B} = ${W * B} samples (got ${G})`);
    // ---- every sample's keys and their owners (checked before any state changes)
    const sampleLen = new Int32Array(G);
    const feats: { t: number; lengths: Int32Array; ids: ArrayLike<number | bigint> }[] = [];
    for (const [f, t] of this.featureTable) {
      const fv = batch.feature(f);
      feats.push({ t, lengths: fv.lengths, ids: fv.ids });
      for (let b = 0; b < G; b++) sampleLen[b] += fv.lengths[b]!;
    }
    const start = new Int32Array(G + 1);
    for (let b = 0; b < G; b++) start[b + 1] = start[b]! + sampleLen[b]!;
    const keys = new Float64Array(start[G]!);
    const own = new Int32Array(start[G]!);
    const at = start.slice(0, G);
    for (const { t, lengths, ids } of feats) {
      const rows = O.tables[t]!.rows, base = O.rowBase[t]!;
      let i = 0;
      for (let b = 0; b < G; b++)
        for (let k = 0; k < lengths[b]!; k++, i++) {
          const id = Number(ids[i]!);
          if (!(id >= 0 && id < rows))
            throw new EmbshardError('ID_OUT_OF_RANGE', `herald: table '${O.tables[t]!.name}' (${rows} rows): id ${id} is outside [0, ${rows})`);
          const e = at[b]!++;
          keys[e] = base + id;
          own[e] = O.ownerOf(t, id);
        }
    }
    const step = this.steps++;
    const counts = zeroCounts();
    // ---- allocation
    const assign = new Int32Array(G);
    const fill = new Int32Array(W);
    if (this.allocation === 'random') {
      const perm = Int32Array.from({ length: G }, (_, i) => i);
      const rng = new Rng(this.seed, step);
      for (let j = G - 1; j > 0; j--) {
        const k = rng.int(0, j);
        const x = perm[j]!;
        perm[j] = perm[k]!;
        perm[k] = x;
      }
      for (let j = 0; j < G; j++) assign[perm[j]!] = Math.floor(j / B);
      for (let i = 0; i < G; i++) for (let e = start[i]!; e < start[i + 1]!; e++) if (this.home.get(keys[e]!) === assign[i]) counts.score++;
    } else {
      const sc = new Int32Array(W);
      const touched: number[] = [];
      const first = step % W;
      for (let i = 0; i < G; i++) {
        for (let e = start[i]!; e < start[i + 1]!; e++) {
          const h = this.home.get(keys[e]!);
          if (h !== undefined && sc[h]++ === 0) touched.push(h);
        }
        let best = -1, bs = -1;
        for (let j = 0; j < W; j++) {
          const r = (first + j) % W;
          if (fill[r]! < B && sc[r]! > bs) {
            best = r;
            bs = sc[r]!;
          }
        }
        assign[i] = best;
        fill[best]++;
        counts.score += bs;
        for (const h of touched) sc[h] = 0;
        touched.length = 0;
      }
    }
    const samples = Array.from({ length: W }, () => new Int32Array(B));
    fill.fill(0);
    for (let i = 0; i < G; i++) {
      const w = assign[i]!;
      samples[w]![fill[w]!++] = i;
    }
    // ---- readers of every row: value = 2·(last reader) + (1 if several)
    const users = new Map<number, number>();
    const mine: number[][] = Array.from({ length: W }, () => []);
    for (let w = 0; w < W; w++)
      for (const i of samples[w]!)
        for (let e = start[i]!; e < start[i + 1]!; e++) {
          const x = keys[e]!;
          const v = users.get(x);
          if (v === undefined) {
            users.set(x, 2 * w);
            mine[w]!.push(x);
          } else if (v >> 1 !== w) {
            users.set(x, 2 * w + 1);
            mine[w]!.push(x);
          }
        }
    const all = Float64Array.from(users.keys()).sort();
    const X = new Records();
    const lruOf = (w: number, t: number) => this.lru[w * T + t]!;
    const slotId = (w: number, t: number, slot: number) => O.owned(t, w) + slot;
    const move = (key: number, t: number, from: number, to: number, fromId: number, toId: number) => {
      X.push(true, key, t, from, to, fromId, toId);
      if (from !== to) {
        counts.moves++;
        counts.bytes += (O.tables[t]!.dim + O.tables[t]!.stateWidth) * 4;
      }
    };
    /** a checked-out row goes home to its owner */
    const flush = (x: number, t: number, h: number, o: number) => {
      const slot = lruOf(h, t).get(x)!;
      move(x, t, h, o, slotId(h, t, slot), x - O.rowBase[t]! - O.lo(t, o));
      lruOf(h, t).delete(x);
      this.free[h * T + t]!.push(slot);
      this.home.delete(x);
    };
    // where every row lived before this step (copies are read from there, before anything is written)
    const preHome = new Map<number, number>();
    const preSlot = new Map<number, number>();
    for (const x of all) {
      const h = this.home.get(x);
      if (h === undefined) continue;
      const t = O.tableOf(x);
      preHome.set(x, h);
      preSlot.set(x, lruOf(h, t).get(x)!);
    }
    // ---- 1: rows held in a cache: kept (their only reader holds them), or sent home (several readers, or the owner reads)
    for (const [x, h] of preHome) {
      const t = O.tableOf(x), o = O.ownerOf(t, x - O.rowBase[t]!);
      const v = users.get(x)!, u = v >> 1, single = (v & 1) === 0;
      if (single && u === h) {
        const c = lruOf(h, t), s = c.get(x)!;
        c.delete(x);
        c.set(x, s); // most recently used
      } else if (!single || u === o) flush(x, t, h, o);
    }
    // ---- 2: rows with one reader that is not their owner: moved into the reader's cache when it has room
    const alloc = (w: number, t: number): number => {
      const f = this.free[w * T + t]!;
      if (f.length) return f.pop()!;
      const c = lruOf(w, t);
      const front = c.keys().next();
      if (front.done || users.has(front.value)) return -1;
      const y = front.value, s = c.get(y)!, oy = O.ownerOf(t, y - O.rowBase[t]!);
      move(y, t, w, oy, slotId(w, t, s), y - O.rowBase[t]! - O.lo(t, oy));
      counts.evictions++;
      c.delete(y);
      this.home.delete(y);
      return s;
    };
    for (const x of all) {
      const v = users.get(x)!;
      if (v & 1) continue;
      const u = v >> 1, t = O.tableOf(x), row = x - O.rowBase[t]!, o = O.ownerOf(t, row);
      const h = this.home.get(x) ?? o;
      if (u === o || h === u) continue;
      const s = alloc(u, t);
      if (s >= 0) {
        if (h === o) move(x, t, o, u, row - O.lo(t, o), slotId(u, t, s));
        else {
          const hs = lruOf(h, t).get(x)!;
          move(x, t, h, u, slotId(h, t, hs), slotId(u, t, s));
          lruOf(h, t).delete(x);
          this.free[h * T + t]!.push(hs);
        }
        lruOf(u, t).set(x, s);
        this.home.set(x, u);
      } else if (h !== o) flush(x, t, h, o); // no room: the owner applies its update
    }
    // ---- 3: every rank's reads: local (owned at home, or in its cache) or a copy from where the row lived
    const gT: number[] = [], gF: number[] = [], gTo: number[] = [], gId: number[] = [], gP: number[] = [];
    const reads: RankReads[][] = [];
    for (let w = 0; w < W; w++) {
      const list = Float64Array.from(mine[w]!).sort();
      const per: RankReads[] = [];
      let a = 0;
      for (let t = 0; t < T; t++) {
        let b = a;
        while (b < list.length && list[b]! < O.rowBase[t + 1]!) b++;
        const rows = list.subarray(a, b).map((x) => x - O.rowBase[t]!);
        const loc = new Int32Array(b - a);
        let copies = 0;
        for (let j = 0; j < rows.length; j++) {
          const x = list[a + j]!, row = rows[j]!, o = O.ownerOf(t, row);
          const pre = preHome.get(x) ?? o;
          counts.reads++;
          if (pre === w) counts.hits++;
          const held = this.home.get(x);
          if (held === w) loc[j] = slotId(w, t, lruOf(w, t).get(x)!);
          else if (held === undefined && o === w) loc[j] = row - O.lo(t, w);
          else {
            loc[j] = -(1 + copies++);
            X.push(false, x, t, pre, w, pre === o ? row - O.lo(t, o) : slotId(pre, t, preSlot.get(x)!), -1);
            if (pre !== w) counts.copies++;
            gT.push(t);
            gF.push(w);
            gTo.push(o);
            gId.push(row - O.lo(t, o));
            gP.push(j);
            counts.grads++;
            counts.bytes += O.tables[t]!.dim * 4 * (pre !== w ? 2 : 1);
          }
        }
        per.push({ rows, loc });
        a = b;
      }
      reads.push(per);
    }
    counts.rows = counts.moves + counts.copies + counts.grads;
    return {
      step,
      samples,
      xMove: Uint8Array.from(X.move),
      xKey: Float64Array.from(X.key),
      xTable: Int32Array.from(X.table),
      xFrom: Int32Array.from(X.from),
      xTo: Int32Array.from(X.to),
      xFromId: Int32Array.from(X.fromId),
      xToId: Int32Array.from(X.toId),
      gTable: Int32Array.from(gT),
      gFrom: Int32Array.from(gF),
      gTo: Int32Array.from(gTo),
      gToId: Int32Array.from(gId),
      gPos: Int32Array.from(gP),
      reads,
      counts,
    };
  }
}

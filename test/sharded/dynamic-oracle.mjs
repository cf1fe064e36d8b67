// dynamic-oracle.mjs — an independent model of one dynamic table sharded by id hash, written from
// docs/storage.md ("Dynamic tables", "Sharded by id hash") with JS Maps and float64 math: shared by the
// in-process tests (vitest) and the mpirun scripts (plain JS, the library passed in as `lib`).
//  - the hash: hash_row(id) = floor(SplitMix64(id XOR 0x53484152445f4944) · capacity / 2^64); the row
//    group [a, b) that holds hash_row(id) owns the id and keeps a map of b − a rows;
//  - what a shard sees in a step, in order: rb / table-wise — per feature, per source rank, its ids in bag
//    order; ub — per source rank, its distinct ids of the table (all features) ascending (signed);
//  - the rules of one translation (minCount 1): every occurrence is a tick; a hit's count grows by one and
//    its last use becomes the tick; the missed ids, in order of first occurrence, take a free row or evict,
//    among the rows this step does not use, the one with the oldest last use (LRU) or the lowest count,
//    then the oldest last use (LFU) (none left: not admitted this step); an admitted row gets count = its
//    occurrences in the step, a fresh tick, the init values (here a constant) and zero optimizer state — with spill, an
//    evicted row is kept aside and an admitted id found there takes its row and state back;
//  - forward (sum pooling): each bag sums its ids' rows; an id without a row reads its default (zero, or
//    with 'hashed' its init row: the constant); backward: every row the step used gets one update with the
//    sum of its occurrences' bag gradients (sgd, adagrad, rowwise_adagrad, adam with the collection's step).
import { relErr, rng } from './scenario.mjs';

const M64 = (1n << 64n) - 1n;
const SALT = 0x53484152445f4944n;

function mix64(z) {
  z = (z + 0x9e3779b97f4a7c15n) & M64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M64;
  return z ^ (z >> 31n);
}

/** The documented virtual row of a raw id in a table of `capacity` rows. */
export function hashRow(id, capacity) {
  return Number((mix64(BigInt.asUintN(64, id) ^ SALT) * BigInt(capacity)) >> 64n);
}

/** Floats of optimizer state per row. */
export function stateWidthOf(type, dim) {
  return type === 'adagrad' ? dim : type === 'rowwise_adagrad' ? 1 : type === 'adam' ? 2 * dim : 0;
}

/** The optimizer configs the tests run (explicit hyper-parameters, so the model needs no defaults). */
export const OPTIMIZERS = [
  { type: 'sgd', lr: 0.1 },
  { type: 'adagrad', lr: 0.1, eps: 1e-8 },
  { type: 'rowwise_adagrad', lr: 0.1, eps: 1e-8 },
  { type: 'adam', lr: 0.05, eps: 1e-8, beta1: 0.9, beta2: 0.999 },
];

export const DIM = 4;
export const FEATURES = ['a', 'b'];
export const INIT = 0.05;

/**
 * The plan: one dynamic table 'dyn' (capacity rows, dim 4, sum pooling, features a and b) for W ranks,
 * `placement` 'rb' (even row groups, one per rank), 'ub' (two uneven groups on ranks 0 and W − 1) or
 * 'tw' (one group on rank W − 1).
 */
export function dynPlan(lib, W, placement, capacity, optimizer, def = 'zero', eviction = 'lru') {
  const cut = Math.max(1, Math.floor(capacity / 3));
  const shards =
    placement === 'rb'
      ? Array.from({ length: W }, (_, k) => ({ rows: [Math.floor((k * capacity) / W), Math.floor(((k + 1) * capacity) / W)], cols: [0, DIM], rank: k }))
      : placement === 'ub'
        ? [{ rows: [0, cut], cols: [0, DIM], rank: 0 }, { rows: [cut, capacity], cols: [0, DIM], rank: W - 1 }]
        : [{ rows: [0, capacity], cols: [0, DIM], rank: W - 1 }];
  const table = { name: 'dyn', rows: 'dynamic', capacity, dim: DIM, pooling: 'sum', features: FEATURES, optimizer, eviction, ...(def === 'hashed' ? { admission: { default: 'hashed' } } : {}) };
  const topology = { name: 'test', worldSize: W, ranksPerNode: W, deviceMemoryBytes: 1e12, memoryLimitBytes: 1e12, hbmBandwidth: 1e12, intraNodeBandwidth: 1e11, interNodeBandwidth: 1e10 };
  return lib.ShardPlan.create({ topology, batchSize: 4, tables: [{ table, cluster: placement === 'ub' ? 'ub' : 'rb', shards }] });
}

/** The sharded collection's config for the model: constant init, so every admitted row starts at INIT. */
export function dynConfig(optimizer, extra = {}) {
  return { optimizer, seed: 7, init: { dyn: { type: 'constant', value: INIT } }, ...extra };
}

/** A rank's batch of the features a and b: `bags[f][b]` the raw ids (bigint) of bag b of feature f. */
export function batchOf(lib, bags) {
  const B = bags[0].length;
  return lib.JaggedBatch.fromLengths({
    features: FEATURES,
    batchSize: B,
    lengths: Int32Array.from(bags.flatMap((fb) => fb.map((ids) => ids.length))),
    ids: BigInt64Array.from(bags.flat(2)),
  });
}

/** Seeded gradient of a rank's pooled output [B × 2·DIM]: small multiples of 1/8 (exact in fp32). */
export function gradOf(rank, step, B) {
  return Float32Array.from({ length: B * 2 * DIM }, (_, i) => (((rank * 31 + step * 5 + i * 7) % 13) - 6) / 8);
}

const cmp = (x, y) => (x < y ? -1 : x > y ? 1 : 0);

export class NaiveShardedDynamic {
  /**
   * `groups`: the row groups [a, b) of the table (plan order); `optimizer`: one of OPTIMIZERS;
   * `cluster`: 'rb' (also table-wise) or 'ub'; `def`: 'zero' or 'hashed'; `spill`: evicted rows kept; `eviction`: 'lru' or 'lfu'.
   */
  constructor({ capacity, groups, cluster, optimizer, def = 'zero', spill = false, eviction = 'lru' }) {
    this.lfu = eviction === 'lfu';
    this.spill = spill;
    this.capacity = capacity;
    this.cluster = cluster;
    this.opt = optimizer;
    this.def = def;
    this.sw = stateWidthOf(optimizer.type, DIM);
    this.step = 0;
    this.shards = groups.map(([a, b]) => ({ a, b, held: new Map(), spilled: new Map(), tick: 0, stats: { hits: 0, misses: 0, admissions: 0, evictions: 0 } }));
  }

  shardOf(id) {
    const v = hashRow(id, this.capacity);
    return this.shards.find((s) => v >= s.a && v < s.b);
  }

  /** The occurrences each shard sees in one step, in order (`ranks[r]` = rank r's bags[f][b]). */
  arrivals(ranks) {
    const seen = new Map(this.shards.map((s) => [s, []]));
    if (this.cluster === 'ub') {
      for (const bags of ranks) for (const id of [...new Set(bags.flat(2))].sort(cmp)) seen.get(this.shardOf(id)).push(id);
    } else for (let f = 0; f < FEATURES.length; f++) for (const bags of ranks) for (const id of bags[f].flat()) seen.get(this.shardOf(id)).push(id);
    return seen;
  }

  translate(s, ids) {
    const used = new Set(), missed = [], seen = new Map();
    for (const id of ids) {
      s.tick++;
      const h = s.held.get(id);
      if (h) {
        s.stats.hits++;
        h.count++;
        h.last = s.tick;
        used.add(id);
      } else {
        s.stats.misses++;
        if (!missed.includes(id)) missed.push(id);
        seen.set(id, (seen.get(id) ?? 0) + 1);
      }
    }
    const colder = (h, v) => (this.lfu ? h.count < v.count || (h.count === v.count && h.last < v.last) : h.last < v.last);
    for (const id of missed) {
      if (s.held.size >= s.b - s.a) {
        let victim;
        for (const [k, h] of s.held) if (!used.has(k) && (victim === undefined || colder(h, s.held.get(victim)))) victim = k;
        if (victim === undefined) continue; // every row is used by this step
        if (this.spill) s.spilled.set(victim, s.held.get(victim));
        s.held.delete(victim);
        s.stats.evictions++;
      }
      const back = s.spilled.get(id);
      s.spilled.delete(id);
      s.held.set(id, { w: back?.w ?? new Array(DIM).fill(INIT), s: back?.s ?? new Array(this.sw).fill(0), count: seen.get(id), last: ++s.tick });
      s.stats.admissions++;
      used.add(id);
    }
  }

  /** The value an id reads now: its row, or its default. */
  value(id) {
    const h = this.shardOf(id).held.get(id);
    return h ? h.w : new Array(DIM).fill(this.def === 'hashed' ? INIT : 0);
  }

  /**
   * One training step over every rank's bags; `grads[r]` rank r's pooled gradient [B × 2·DIM]. Returns
   * each rank's pooled forward output [B × 2·DIM] (features a then b).
   */
  train(ranks, grads) {
    this.step++;
    for (const [s, ids] of this.arrivals(ranks)) this.translate(s, ids);
    const outs = this.lookup(ranks);
    const sums = new Map();
    ranks.forEach((bags, r) =>
      bags.forEach((fb, f) =>
        fb.forEach((ids, b) =>
          ids.forEach((id) => {
            if (!this.shardOf(id).held.has(id)) return; // no row: the gradient is dropped
            const g = sums.get(id) ?? new Array(DIM).fill(0);
            for (let c = 0; c < DIM; c++) g[c] += grads[r][b * 2 * DIM + f * DIM + c];
            sums.set(id, g);
          }),
        ),
      ),
    );
    for (const [id, g] of sums) this.update(this.shardOf(id).held.get(id), g);
    return outs;
  }

  /** Each rank's pooled output [B × 2·DIM] of the rows as they are, admitting nothing (evaluation). */
  lookup(ranks) {
    return ranks.map((bags) => {
      const B = bags[0].length, out = new Float64Array(B * 2 * DIM);
      bags.forEach((fb, f) => fb.forEach((ids, b) => ids.forEach((id) => this.value(id).forEach((v, c) => (out[b * 2 * DIM + f * DIM + c] += v)))));
      return out;
    });
  }

  update(h, g) {
    const o = this.opt;
    if (o.type === 'sgd') for (let c = 0; c < DIM; c++) h.w[c] -= o.lr * g[c];
    else if (o.type === 'adagrad')
      for (let c = 0; c < DIM; c++) {
        h.s[c] += g[c] * g[c];
        h.w[c] -= (o.lr * g[c]) / (Math.sqrt(h.s[c]) + o.eps);
      }
    else if (o.type === 'rowwise_adagrad') {
      h.s[0] += g.reduce((n, x) => n + x * x, 0) / DIM;
      for (let c = 0; c < DIM; c++) h.w[c] -= (o.lr * g[c]) / (Math.sqrt(h.s[0]) + o.eps);
    } else {
      const bc1 = 1 - o.beta1 ** this.step, bc2 = 1 - o.beta2 ** this.step;
      for (let c = 0; c < DIM; c++) {
        h.s[c] = o.beta1 * h.s[c] + (1 - o.beta1) * g[c];
        h.s[DIM + c] = o.beta2 * h.s[DIM + c] + (1 - o.beta2) * g[c] * g[c];
        h.w[c] -= (o.lr * (h.s[c] / bc1)) / (Math.sqrt(h.s[DIM + c] / bc2) + o.eps);
      }
    }
  }

  /** Rows and state of raw ids as readRows / readState give them (state: zero for ids without a row). */
  rows(ids) {
    return ids.flatMap((id) => this.value(id));
  }
  state(ids) {
    return ids.flatMap((id) => this.shardOf(id).held.get(id)?.s ?? new Array(this.sw).fill(0));
  }

  /** Each shard's counters and held ids, by its row range's start. */
  shardStats() {
    return this.shards.map((s) => ({ range: [s.a, s.b], ...s.stats, rows: s.held.size, ...(this.spill ? { spilled: s.spilled.size } : {}), held: [...s.held.keys()].sort(cmp) }));
  }
}

export { relErr };

/** The edge ids: 0, ±1, 2^63 − 1, −2^63, and a few more drawn from the whole 64-bit range. */
export function edgeIds(n = 12) {
  const r = rng(41);
  const more = Array.from({ length: n }, () => BigInt.asIntN(64, (BigInt(Math.floor(r() * 2 ** 32)) << 32n) | BigInt(Math.floor(r() * 2 ** 32))));
  return [0n, 1n, -1n, (1n << 63n) - 1n, -(1n << 63n), ...more];
}

/**
 * The bags of every rank at a step of the edge scenario: ids from `pool`; every third step one rank (in
 * turn) sends only empty bags, at step 5 every rank does, every fourth every rank has batch size 1, and batch sizes otherwise differ
 * by rank.
 */
export function edgeBags(pool, W, step) {
  return Array.from({ length: W }, (_, r) => {
    const rand = rng(97 * step + r + 1);
    const B = step % 4 === 3 ? 1 : 2 + ((r + step) % 3);
    const empty = (step % 3 === 1 && r === step % W) || step === 5;
    return FEATURES.map(() => Array.from({ length: B }, () => (empty ? [] : Array.from({ length: Math.floor(rand() * 4) }, () => pool[Math.floor(pool.length * rand() ** 2)]))));
  });
}

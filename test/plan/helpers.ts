// helpers.ts — shared by the planner tests: a seeded random small model / plan / batch maker and an
// independent brute-force traffic counter written straight from docs/wire-protocol.md (per id, per shard,
// with Maps and Sets; it shares no code with lib/plan/traffic.ts).
import { JaggedBatch } from '../../lib/batch.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import type { Cluster, RankCounters, TableSpec, Topology } from '../../lib/plan/types.js';
import { Rng } from '../../lib/random/rng.js';

export function smallTopology(worldSize: number, ranksPerNode: number, memoryLimitBytes = 1e12): Topology {
  return {
    name: 'test',
    worldSize,
    ranksPerNode,
    deviceMemoryBytes: memoryLimitBytes,
    memoryLimitBytes,
    hbmBandwidth: 1e12,
    intraNodeBandwidth: 1e11,
    interNodeBandwidth: 1e10,
  };
}

export function randomTables(rng: Rng, count: number, opts: { maxRows?: number; zipf?: boolean } = {}): TableSpec[] {
  const tables: TableSpec[] = [];
  for (let i = 0; i < count; i++) {
    const nf = rng.int(1, 2);
    const features = Array.from({ length: nf }, (_, k) => `t${i}f${k}`);
    tables.push({
      name: `t${i}`,
      rows: rng.int(3, opts.maxRows ?? 200),
      dim: 4 * rng.int(1, 8),
      dtype: (['fp32', 'fp16'] as const)[rng.int(0, 1)],
      pooling: (['sum', 'mean', 'none'] as const)[rng.int(0, 2)],
      features,
      optimizer: (['sgd', 'adagrad', 'rowwise_adagrad', 'adam'] as const)[rng.int(0, 3)],
      poolingFactors: features.map(() => rng.int(1, 4)),
      access: opts.zipf === false ? {} : { zipf: [0, 0.8, 1, 1.2][rng.int(0, 3)]! },
    });
  }
  return tables;
}

/** Splits [lo, hi) into k contiguous non-empty pieces at random. */
function cuts(rng: Rng, lo: number, hi: number, k: number, align = 1): number[] {
  const pts = new Set<number>([lo, hi]);
  const units = (hi - lo) / align;
  k = Math.min(k, units);
  while (pts.size < k + 1) pts.add(lo + align * rng.int(1, units - 1));
  return [...pts].sort((a, b) => a - b);
}

/** A random valid plan for the tables: random clusters, tiers, row groups, column splits, ranks. */
export function randomPlan(rng: Rng, tables: TableSpec[], topo: Topology, batchSize = 4, hierarchical = false): ShardPlan {
  return ShardPlan.create({
    topology: topo,
    batchSize,
    hierarchical,
    wire: { forward: (['fp32', 'fp16'] as const)[rng.int(0, 1)], backward: (['fp32', 'bf16'] as const)[rng.int(0, 1)] },
    tables: tables.map((t) => {
      const cluster = (['dp', 'rb', 'ub'] as Cluster[])[rng.int(0, 2)]!;
      if (cluster === 'dp') return { table: t, cluster, shards: [] };
      let replicated = 0, node = 0;
      if (rng.int(0, 2) === 0) {
        replicated = rng.int(0, Math.floor(t.rows / 3));
        node = rng.int(0, Math.floor(t.rows / 3));
      }
      const te = replicated + node;
      const shards: { rows: [number, number]; cols: [number, number]; rank: number }[] = [];
      if (te < t.rows) {
        const rc = cuts(rng, te, t.rows, rng.int(1, 4));
        for (let g = 0; g + 1 < rc.length; g++) {
          const cc = cuts(rng, 0, t.dim, rng.int(1, 3), 4);
          for (let c = 0; c + 1 < cc.length; c++) shards.push({ rows: [rc[g]!, rc[g + 1]!], cols: [cc[c]!, cc[c + 1]!], rank: rng.int(0, topo.worldSize - 1) });
        }
      }
      return { table: t, cluster, tiers: { replicated, node }, shards };
    }),
  });
}

/** Random local batches: bags of 0..5 ids, skewed towards low ids, optional weights, int32 or int64 ids. */
export function randomBatches(rng: Rng, plan: ShardPlan, opts: { weighted?: boolean; int64?: boolean } = {}): JaggedBatch[] {
  const W = plan.topology.worldSize;
  const B = rng.int(1, 5);
  return Array.from({ length: W }, () => {
    const features: string[] = [];
    const bags: number[][][] = [];
    const wts: number[][][] = [];
    for (const t of plan.tables)
      for (const f of t.features) {
        features.push(f);
        const fb: number[][] = [], fw: number[][] = [];
        for (let b = 0; b < B; b++) {
          const n = rng.int(0, 5);
          const bag: number[] = [], w: number[] = [];
          for (let k = 0; k < n; k++) {
            bag.push(rng.int(0, 1) ? rng.int(0, Math.min(t.rows - 1, 6)) : rng.int(0, t.rows - 1));
            w.push(rng.float());
          }
          fb.push(bag);
          fw.push(w);
        }
        bags.push(fb);
        wts.push(fw);
      }
    const jb = JaggedBatch.fromBags(features, bags, opts.weighted ? wts : undefined);
    if (opts.int64) return jb;
    return JaggedBatch.fromLengths({ features, batchSize: B, lengths: jb.lengths, ids: Int32Array.from(jb.ids as BigInt64Array, (x) => Number(x)), weights: jb.weights });
  });
}

const SIZE = { fp32: 4, fp16: 2, bf16: 2 } as const;

/** Brute-force wire-protocol counters, per id and per shard. */
export function bruteForceTraffic(plan: ShardPlan, batches: JaggedBatch[]): RankCounters[] {
  const W = plan.topology.worldSize, rpn = plan.topology.ranksPerNode;
  const zero = () => ({ sentIntra: 0, sentInter: 0, recvIntra: 0, recvInter: 0, local: 0 });
  const out: RankCounters[] = Array.from({ length: W }, () => ({ forward: zero(), backward: zero() }));
  const send = (dir: 'forward' | 'backward', from: number, to: number, bytes: number) => {
    if (from === to) {
      out[from]![dir].local += bytes;
      return;
    }
    const intra = Math.floor(from / rpn) === Math.floor(to / rpn);
    out[from]![dir][intra ? 'sentIntra' : 'sentInter'] += bytes;
    out[to]![dir][intra ? 'recvIntra' : 'recvInter'] += bytes;
  };
  const fw = SIZE[plan.wire.forward], bw = SIZE[plan.wire.backward];
  for (const t of plan.tables) {
    const cluster = plan.clusterOf(t.name);
    const { replicated: R, node: N } = plan.tiersOf(t.name);
    const groups = new Map<string, { a: number; b: number; shards: { c: number; c0: number; rank: number }[] }>();
    for (const s of plan.shardsOf(t.name)) {
      const k = `${s.rows[0]}-${s.rows[1]}`;
      if (!groups.has(k)) groups.set(k, { a: s.rows[0], b: s.rows[1], shards: [] });
      groups.get(k)!.shards.push({ c: s.cols[1] - s.cols[0], c0: s.cols[0], rank: s.rank });
    }
    const nodeOf = (x: number) => Math.floor(x / rpn);
    const hier = plan.hierarchical && W / rpn > 1;
    // hierarchical: the columns each node's shards of the table cover (one reduced rb vector's width)
    const colsOnNode = new Map<number, Set<number>>();
    for (const g of groups.values())
      for (const s of g.shards) {
        if (!colsOnNode.has(nodeOf(s.rank))) colsOnNode.set(nodeOf(s.rank), new Set());
        for (let c = s.c0; c < s.c0 + s.c; c++) colsOnNode.get(nodeOf(s.rank))!.add(c);
      }
    const grad = 8 + t.dim * bw;
    const nodeTouched = new Map<number, Set<number>>(); // node -> node-tier ids
    // replicated rows (dp table, replicated tier) per node, for the hierarchical sync
    const replicaTouched = new Map<number, Set<number>>();
    const syncReplicas = (r: number, rows: Set<number>) => {
      if (!hier) {
        for (let q = 0; q < W; q++) if (q !== r) send('backward', r, q, rows.size * grad);
        return;
      }
      // each row to the rank of r's node with the row's local index (row mod rpn)
      if (!replicaTouched.has(nodeOf(r))) replicaTouched.set(nodeOf(r), new Set());
      for (const x of rows) {
        send('backward', r, nodeOf(r) * rpn + (x % rpn), grad);
        replicaTouched.get(nodeOf(r))!.add(x);
      }
    };
    for (let r = 0; r < W; r++) {
      const batch = batches[r]!;
      const B = batch.batchSize;
      const perFeature = t.features.map((f) => Array.from(batch.feature(f).ids as ArrayLike<number | bigint>, (x) => Number(x)));
      const all = perFeature.flat();
      if (cluster === 'dp') {
        syncReplicas(r, new Set(all));
        continue;
      }
      syncReplicas(r, new Set(all.filter((x) => x < R)));
      const nodeIds = new Set(all.filter((x) => x >= R && x < R + N));
      const node = Math.floor(r / rpn);
      if (!nodeTouched.has(node)) nodeTouched.set(node, new Set());
      for (const id of nodeIds) {
        nodeTouched.get(node)!.add(id);
        const owner = node * rpn + ((id - R) % rpn);
        send('forward', r, owner, 8);
        send('forward', owner, r, t.dim * fw);
        send('backward', r, owner, t.dim * bw);
      }
      for (const g of groups.values()) {
        const holders = [...new Set(g.shards.map((s) => s.rank))];
        if (cluster === 'rb') {
          for (const ids of perFeature) {
            const n = ids.filter((x) => x >= g.a && x < g.b).length;
            const inBytes = B * 4 + n * 8 + (batch.weights ? n * 4 : 0);
            const crossed = new Set<number>(); // nodes the request reaches through their rank with r's local index
            for (const d of holders) {
              if (hier && t.pooling !== 'none' && nodeOf(d) !== nodeOf(r)) {
                crossed.add(nodeOf(d));
                send('forward', nodeOf(d) * rpn + (r % rpn), d, inBytes);
              } else send('forward', r, d, inBytes);
            }
            for (const m of crossed) send('forward', r, m * rpn + (r % rpn), inBytes);
            for (const s of g.shards) {
              if (hier && t.pooling !== 'none' && nodeOf(s.rank) !== nodeOf(r)) {
                const via = nodeOf(s.rank) * rpn + (r % rpn);
                send('forward', s.rank, via, B * s.c * fw);
                send('backward', via, s.rank, B * s.c * bw);
                continue;
              }
              const rowsBack = t.pooling === 'none' ? n : B;
              send('forward', s.rank, r, rowsBack * s.c * fw);
              send('backward', r, s.rank, rowsBack * s.c * bw);
            }
          }
        } else {
          const u = new Set(all.filter((x) => x >= g.a && x < g.b)).size;
          const viaCols = new Map<number, number>(); // rail peer on r's node -> columns it relays
          for (const d of holders) if (!(hier && nodeOf(d) !== nodeOf(r))) send('forward', r, d, u * 8);
          for (const s of g.shards) {
            if (hier && nodeOf(s.rank) !== nodeOf(r)) {
              const via = nodeOf(r) * rpn + (s.rank % rpn);
              viaCols.set(via, (viaCols.get(via) ?? 0) + s.c);
              continue;
            }
            send('forward', s.rank, r, u * s.c * fw);
            send('backward', r, s.rank, u * s.c * bw);
          }
          for (const [via, c] of viaCols) {
            send('forward', r, via, u * 8);
            send('forward', via, r, u * c * fw);
            send('backward', r, via, u * c * bw);
          }
        }
      }
      if (hier && cluster === 'rb' && t.pooling !== 'none')
        for (let f = 0; f < t.features.length; f++)
          for (const [m, cols] of colsOnNode) {
            if (m === nodeOf(r)) continue;
            const via = m * rpn + (r % rpn);
            send('forward', via, r, B * cols.size * fw);
            send('backward', r, via, B * cols.size * bw);
          }
    }
    // hierarchical ub: each node's distinct ids per row group cross once to every holder on another node
    if (hier && cluster === 'ub')
      for (let m = 0; m < W / rpn; m++)
        for (const g of groups.values()) {
          const ids = new Set<number>();
          for (let r = m * rpn; r < (m + 1) * rpn; r++)
            for (const f of t.features) for (const x of batches[r]!.feature(f).ids as ArrayLike<number | bigint>) if (Number(x) >= g.a && Number(x) < g.b) ids.add(Number(x));
          const U = ids.size;
          for (const d of new Set(g.shards.map((s) => s.rank))) if (nodeOf(d) !== m) send('forward', m * rpn + (d % rpn), d, U * 8);
          for (const s of g.shards) {
            if (nodeOf(s.rank) === m) continue;
            const via = m * rpn + (s.rank % rpn);
            send('forward', s.rank, via, U * s.c * fw);
            send('backward', via, s.rank, U * s.c * bw);
          }
        }
    // hierarchical replicated rows: each node's rows (summed) from their holder to the holder with the same
    // local index on every other node; then every row touched anywhere from its holder to every rank of each node
    // across nodes, each synced key k (a replicated row, or a node-tier row's index in the tier) is summed
    // by local index k mod rpn of its home node ⌊(k mod W) / rpn⌋: every node that touched it sends its node
    // sum there, and the home sends the global sum to every other node
    const railAllReduce = (touched: Map<number, Set<number>>, keyOf: (x: number) => number) => {
      const everywhere = new Set<number>();
      const home = (k: number) => Math.floor((k % W) / rpn);
      for (const [node, ids] of touched)
        for (const x of ids) {
          const k = keyOf(x);
          everywhere.add(k);
          if (home(k) !== node) send('backward', node * rpn + (k % rpn), home(k) * rpn + (k % rpn), grad);
        }
      for (const k of everywhere)
        for (let m = 0; m < W / rpn; m++) if (m !== home(k)) send('backward', home(k) * rpn + (k % rpn), m * rpn + (k % rpn), grad);
      return everywhere;
    };
    if (hier) {
      const everywhere = railAllReduce(replicaTouched, (x) => x);
      for (const x of everywhere)
        for (let m = 0; m < W / rpn; m++) for (let k = 0; k < rpn; k++) send('backward', m * rpn + (x % rpn), m * rpn + k, grad);
    }
    // node-tier replicas: the holders of the same tier rows on every node all-reduce their nodes' sums
    railAllReduce(nodeTouched, (id) => id - R);
  }
  return out;
}

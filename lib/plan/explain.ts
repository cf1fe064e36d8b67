// explain.ts — TorchRec-style planner statistics for a plan, from the cost model: a summary (predicted
// embedding-stage time by stage, memory, clusters), a per-rank table (memory, lookup bytes, comm out / in
// intra / inter node, predicted time, shards) and a per-table table; planStats gives the same numbers
// unformatted (for charts).
import { EmbshardError } from '../errors.js';
import { addExpectedTableLoad, estimatePlan } from './cost-model.js';
import { addLayoutMemory } from './layout.js';
import { HBM_BWD, HBM_FWD, Load, metric, RECV_INTER, RECV_INTRA, SENT_INTER, SENT_INTRA } from './load.js';
import { STAGES } from './simulator.js';
import type { ShardPlan } from './shard-plan.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';

export interface ExplainOptions {
  title?: string;
  /** per-rank rows to print (default all) */
  maxRanks?: number;
}

const MB = 1e6, GB = 1e9;

function table(head: string[], rows: string[][]): string {
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (r: string[]) => r.map((c, i) => (i === 0 ? c.padEnd(w[i]!) : c.padStart(w[i]!))).join(' | ');
  return [line(head), w.map((x) => '-'.repeat(x)).join('-+-'), ...rows.map(line)].join('\n');
}

function sum(load: Load, k: number, r: number): number {
  let s = 0;
  for (let p = 0; p < 4; p++) s += load.get(metric(p, k), r);
  return s;
}

/** One rank's predicted figures (bytes, seconds) under the cost model. */
export interface RankStats {
  rank: number;
  node: number;
  memoryBytes: number;
  /** Embedding rows read and written (forward + backward). */
  lookupBytes: number;
  sentIntraBytes: number;
  sentInterBytes: number;
  recvIntraBytes: number;
  recvInterBytes: number;
  /** The rank's own predicted time over all stages. */
  predictedSeconds: number;
  shards: number;
}

/** One table's placement and predicted figures. */
export interface TableStats {
  name: string;
  cluster: 'dp' | 'rb' | 'ub';
  rows: number;
  dim: number;
  idsPerSample: number;
  /** 'all ranks' (dp) or '<row groups> × <column splits>'. */
  split: string;
  ranks: number;
  hotTiers: string;
  memoryBytes: number;
  sentBytes: number;
  lookupBytes: number;
}

export interface PlanStats {
  ranks: RankStats[];
  tables: TableStats[];
  /** Predicted embedding-stage time per iteration and its stages, in seconds. */
  time: number;
  stages: Record<(typeof STAGES)[number], number>;
}

/** The numbers explainPlan prints (and lib/report draws), from the cost model. */
export function planStats(plan: ShardPlan): PlanStats {
  const topo = plan.topology, W = topo.worldSize;
  const est = estimatePlan(plan);
  const load = est.load;
  const shardCount = new Int32Array(W);
  plan.layouts.forEach((l) => l.groups.forEach((g) => g.shards.forEach((s) => shardCount[s.rank]++)));
  const ranks: RankStats[] = Array.from({ length: W }, (_, r) => ({
    rank: r,
    node: Math.floor(r / topo.ranksPerNode),
    memoryBytes: est.memory[r]!,
    lookupBytes: load.get(HBM_FWD, r) + load.get(HBM_BWD, r),
    sentIntraBytes: sum(load, SENT_INTRA, r),
    sentInterBytes: sum(load, SENT_INTER, r),
    recvIntraBytes: sum(load, RECV_INTRA, r),
    recvInterBytes: sum(load, RECV_INTER, r),
    predictedSeconds: est.perRank[r]!,
    shards: shardCount[r]!,
  }));
  const ctx = { topo, batchSize: plan.batchSize, wire: plan.wire, hierarchical: plan.hierarchical };
  // one table's load and memory at a time, in buffers of every rank reused from table to table
  const tl = new Load(topo);
  const mem = new Float64Array(W);
  const tables = plan.tables.map((t, i): TableStats => {
    const l = plan.layouts[i]!;
    tl.clear();
    addExpectedTableLoad(t, l, ctx, tl);
    let sent = 0, hbm = 0;
    for (let r = 0; r < W; r++) {
      sent += sum(tl, SENT_INTRA, r) + sum(tl, SENT_INTER, r);
      hbm += tl.get(HBM_FWD, r) + tl.get(HBM_BWD, r);
    }
    mem.fill(0);
    addLayoutMemory(t, l, topo, mem);
    const colSplits = Math.max(0, ...l.groups.map((g) => g.shards.length));
    return {
      name: t.name,
      cluster: l.cluster,
      rows: t.rows,
      dim: t.dim,
      idsPerSample: t.poolingFactors.reduce((a, b) => a + b, 0),
      split: l.cluster === 'dp' ? 'all ranks' : `${l.groups.length} × ${colSplits}`,
      ranks: l.cluster === 'dp' ? W : new Set(l.groups.flatMap((g) => g.shards.map((s) => s.rank))).size,
      hotTiers: l.tiers.replicated + l.tiers.node > 0 ? `${l.tiers.replicated} rep + ${l.tiers.node} node` : '-',
      memoryBytes: mem.reduce((a, b) => a + b, 0),
      sentBytes: sent,
      lookupBytes: hbm,
    };
  });
  return { ranks, tables, time: est.time, stages: est.stages };
}

const EXPLAIN_FIELDS = fieldsOf<ExplainOptions>({ title: true, maxRanks: true });

export function explainPlan(plan: ShardPlan, opts: ExplainOptions = {}): string {
  rejectUnknownFields(opts, EXPLAIN_FIELDS);
  if (opts.maxRanks !== undefined && !(Number.isSafeInteger(opts.maxRanks) && opts.maxRanks >= 0))
    throw new EmbshardError('INVALID_ARGUMENT', `maxRanks must be a non-negative integer (got ${String(opts.maxRanks)})`);
  if (opts.title !== undefined && typeof opts.title !== 'string') throw new EmbshardError('INVALID_ARGUMENT', 'title must be a string');
  const topo = plan.topology, W = topo.worldSize;
  const st = planStats(plan);
  const out: string[] = [];
  const title = opts.title ?? plan.meta.model ?? 'plan';
  out.push(`--- embshard plan: ${title} — ${plan.tables.length} tables on ${W} ranks (${topo.ranksPerNode} per node, ${topo.name}), batch ${plan.batchSize} per rank ---`);
  out.push(
    `Predicted embedding stage: ${(st.time * 1e3).toFixed(3)} ms/iteration (` + STAGES.map((s) => `${s} ${(st.stages[s] * 1e3).toFixed(3)}`).join(' | ') + ')',
  );
  let mx = 0, mean = 0;
  for (const r of st.ranks) (mx = Math.max(mx, r.memoryBytes)), (mean += r.memoryBytes / W);
  out.push(`Memory per rank: max ${(mx / GB).toFixed(2)} GB, mean ${(mean / GB).toFixed(2)} GB, limit ${(topo.memoryLimitBytes / GB).toFixed(2)} GB`);
  const counts = { dp: 0, rb: 0, ub: 0 };
  let tiered = 0;
  plan.layouts.forEach((l) => {
    counts[l.cluster]++;
    if (l.tiers.replicated + l.tiers.node > 0) tiered++;
  });
  out.push(`Clusters: dp ${counts.dp}, rb ${counts.rb}, ub ${counts.ub}; hot-row tiers on ${tiered} table(s); wire ${plan.wire.forward}/${plan.wire.backward}; ${plan.hierarchical ? 'hierarchical' : 'flat'} rb / ub protocol`);
  out.push('');
  const shown = Math.min(W, opts.maxRanks ?? W);
  const rows = st.ranks.slice(0, shown).map((r) => [
    String(r.rank),
    String(r.node),
    (r.memoryBytes / GB).toFixed(2),
    (r.lookupBytes / MB).toFixed(1),
    `${(r.sentIntraBytes / MB).toFixed(1)} / ${(r.sentInterBytes / MB).toFixed(1)}`,
    `${(r.recvIntraBytes / MB).toFixed(1)} / ${(r.recvInterBytes / MB).toFixed(1)}`,
    (r.predictedSeconds * 1e3).toFixed(3),
    String(r.shards),
  ]);
  out.push(table(['Rank', 'Node', 'Memory (GB)', 'Lookup (MB)', 'Out intra/inter (MB)', 'In intra/inter (MB)', 'Pred (ms)', 'Shards'], rows));
  if (shown < W) out.push(`... ${W - shown} more ranks`);
  out.push('');
  const trows = st.tables.map((t) => [
    t.name,
    t.cluster,
    String(t.rows),
    String(t.dim),
    t.idsPerSample.toFixed(1),
    t.split,
    String(t.ranks),
    t.hotTiers,
    (t.memoryBytes / GB).toFixed(2),
    (t.sentBytes / MB).toFixed(1),
    (t.lookupBytes / MB).toFixed(1),
  ]);
  out.push(table(['Table', 'Cluster', 'Rows', 'Dim', 'Ids/sample', 'Row groups × cols', 'Ranks', 'Hot tiers', 'Memory Σ ranks (GB)', 'Comm sent (MB)', 'Lookup (MB)'], trows));
  out.push('');
  out.push('Pred: the rank\'s own time over all stages (cost model); the iteration time is Σ over stages of the slowest rank (docs/planner.md).');
  return out.join('\n');
}

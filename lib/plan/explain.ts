// explain.ts — TorchRec-style planner statistics for a plan, from the cost model: a summary (predicted
// embedding-stage time by stage, memory, clusters), a per-rank table (memory, lookup bytes, comm out / in
// intra / inter node, predicted time, shards) and a per-table table.
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

const EXPLAIN_FIELDS = fieldsOf<ExplainOptions>({ title: true, maxRanks: true });

export function explainPlan(plan: ShardPlan, opts: ExplainOptions = {}): string {
  rejectUnknownFields(opts, EXPLAIN_FIELDS);
  const topo = plan.topology, W = topo.worldSize;
  const est = estimatePlan(plan);
  const load = est.load;
  const out: string[] = [];
  const title = opts.title ?? plan.meta.model ?? 'plan';
  out.push(`--- embshard plan: ${title} — ${plan.tables.length} tables on ${W} ranks (${topo.ranksPerNode} per node, ${topo.name}), batch ${plan.batchSize} per rank ---`);
  out.push(
    `Predicted embedding stage: ${(est.time * 1e3).toFixed(3)} ms/iteration (` + STAGES.map((s) => `${s} ${(est.stages[s] * 1e3).toFixed(3)}`).join(' | ') + ')',
  );
  let mx = 0, mean = 0;
  for (const m of est.memory) (mx = Math.max(mx, m)), (mean += m / W);
  out.push(`Memory per rank: max ${(mx / GB).toFixed(2)} GB, mean ${(mean / GB).toFixed(2)} GB, limit ${(topo.memoryLimitBytes / GB).toFixed(2)} GB`);
  const counts = { dp: 0, rb: 0, ub: 0 };
  let tiered = 0;
  plan.layouts.forEach((l) => {
    counts[l.cluster]++;
    if (l.tiers.replicated + l.tiers.node > 0) tiered++;
  });
  out.push(`Clusters: dp ${counts.dp}, rb ${counts.rb}, ub ${counts.ub}; hot-row tiers on ${tiered} table(s); wire ${plan.wire.forward}/${plan.wire.backward}`);
  out.push('');
  const shardCount = new Int32Array(W);
  plan.layouts.forEach((l) => l.groups.forEach((g) => g.shards.forEach((s) => shardCount[s.rank]++)));
  const rows: string[][] = [];
  const shown = Math.min(W, opts.maxRanks ?? W);
  for (let r = 0; r < shown; r++)
    rows.push([
      String(r),
      String(Math.floor(r / topo.ranksPerNode)),
      (est.memory[r]! / GB).toFixed(2),
      ((load.get(HBM_FWD, r) + load.get(HBM_BWD, r)) / MB).toFixed(1),
      `${(sum(load, SENT_INTRA, r) / MB).toFixed(1)} / ${(sum(load, SENT_INTER, r) / MB).toFixed(1)}`,
      `${(sum(load, RECV_INTRA, r) / MB).toFixed(1)} / ${(sum(load, RECV_INTER, r) / MB).toFixed(1)}`,
      (est.perRank[r]! * 1e3).toFixed(3),
      String(shardCount[r]),
    ]);
  out.push(table(['Rank', 'Node', 'Memory (GB)', 'Lookup (MB)', 'Out intra/inter (MB)', 'In intra/inter (MB)', 'Pred (ms)', 'Shards'], rows));
  if (shown < W) out.push(`... ${W - shown} more ranks`);
  out.push('');
  const ctx = { topo, batchSize: plan.batchSize, wire: plan.wire };
  const trows = plan.tables.map((t, i) => {
    const l = plan.layouts[i]!;
    const tl = new Load(topo);
    addExpectedTableLoad(t, l, ctx, tl);
    let sent = 0, hbm = 0;
    for (let r = 0; r < W; r++) {
      sent += sum(tl, SENT_INTRA, r) + sum(tl, SENT_INTER, r);
      hbm += tl.get(HBM_FWD, r) + tl.get(HBM_BWD, r);
    }
    const mem = new Float64Array(W);
    addLayoutMemory(t, l, topo, mem);
    const memSum = mem.reduce((a, b) => a + b, 0);
    const ranks = new Set(l.groups.flatMap((g) => g.shards.map((s) => s.rank)));
    const colSplits = Math.max(0, ...l.groups.map((g) => g.shards.length));
    return [
      t.name,
      l.cluster,
      String(t.rows),
      String(t.dim),
      t.poolingFactors.reduce((a, b) => a + b, 0).toFixed(1),
      l.cluster === 'dp' ? 'all ranks' : `${l.groups.length} × ${colSplits}`,
      l.cluster === 'dp' ? String(W) : String(ranks.size),
      l.tiers.replicated + l.tiers.node > 0 ? `${l.tiers.replicated} rep + ${l.tiers.node} node` : '-',
      (memSum / GB).toFixed(2),
      (sent / MB).toFixed(1),
      (hbm / MB).toFixed(1),
    ];
  });
  out.push(table(['Table', 'Cluster', 'Rows', 'Dim', 'Ids/sample', 'Row groups × cols', 'Ranks', 'Hot tiers', 'Memory Σ ranks (GB)', 'Comm sent (MB)', 'Lookup (MB)'], trows));
  out.push('');
  out.push('Pred: the rank\'s own time over all stages (cost model); the iteration time is Σ over stages of the slowest rank (docs/planner.md).');
  return out.join('\n');
}

// plan-chart.ts — the picture of a ShardPlan (`embshard plan --svg`): memory per rank against the limit,
// bytes per rank (embedding lookups, sent and received within and across nodes), and every table's
// memory by cluster (dp / rb / ub), from the same cost-model numbers explainPlan prints.
import { planStats } from '../plan/explain.js';
import type { ShardPlan } from '../plan/shard-plan.js';
import { renderSvg } from './vega.js';

const MB = 1e6, GB = 1e9;

/** One SVG with the three charts stacked. */
export async function planSvg(plan: ShardPlan, title?: string): Promise<string> {
  const st = planStats(plan);
  const limit = plan.topology.memoryLimitBytes / GB;
  const memory = st.ranks.map((r) => ({ rank: r.rank, node: `node ${r.node}`, gb: r.memoryBytes / GB }));
  const bytes = st.ranks.flatMap((r) => [
    { rank: r.rank, kind: 'lookup', mb: r.lookupBytes / MB },
    { rank: r.rank, kind: 'sent intra-node', mb: r.sentIntraBytes / MB },
    { rank: r.rank, kind: 'sent inter-node', mb: r.sentInterBytes / MB },
    { rank: r.rank, kind: 'received intra-node', mb: r.recvIntraBytes / MB },
    { rank: r.rank, kind: 'received inter-node', mb: r.recvInterBytes / MB },
  ]);
  const tables = st.tables.map((t) => ({ table: t.name, cluster: t.cluster, gb: t.memoryBytes / GB, rows: t.rows }));
  const width = Math.max(320, Math.min(1200, 28 * st.ranks.length));
  const maxMemory = Math.max(...memory.map((m) => m.gb));
  // the limit line is drawn when it is near enough to the bars not to flatten them
  const limitRule = maxMemory >= limit / 4 ? [{ data: { values: [{ limit }] }, mark: { type: 'rule' as const, color: 'firebrick', strokeDash: [4, 3] }, encoding: { y: { field: 'limit', type: 'quantitative' as const } } }] : [];
  return renderSvg({
    title: title ?? `${plan.meta.model ?? 'plan'}: ${plan.tables.length} tables on ${plan.topology.worldSize} ranks`,
    resolve: { scale: { color: 'independent' }, legend: { color: 'independent' } },
    vconcat: [
      {
        title: `Memory per rank (limit ${limit.toFixed(1)} GB)`, width, height: 180,
        layer: [
          { data: { values: memory }, mark: 'bar', encoding: { x: { field: 'rank', type: 'ordinal' }, y: { field: 'gb', type: 'quantitative', title: 'GB' }, color: { field: 'node', type: 'nominal', title: null } } },
          ...limitRule,
        ],
      },
      {
        title: 'Bytes per rank per iteration', width, height: 180, data: { values: bytes }, mark: 'bar',
        encoding: {
          x: { field: 'rank', type: 'ordinal' },
          xOffset: { field: 'kind', type: 'nominal' },
          y: { field: 'mb', type: 'quantitative', title: 'MB' },
          color: { field: 'kind', type: 'nominal', title: null },
        },
      },
      {
        title: 'Tables by cluster (memory over all ranks)', width: Math.max(320, Math.min(1200, 18 * tables.length)), height: 180, data: { values: tables }, mark: 'bar',
        encoding: {
          x: { field: 'table', type: 'nominal', sort: { field: 'cluster' }, title: null },
          y: { field: 'gb', type: 'quantitative', title: 'GB' },
          color: { field: 'cluster', type: 'nominal', scale: { domain: ['dp', 'rb', 'ub'] } },
          tooltip: [{ field: 'table' }, { field: 'rows', type: 'quantitative' }, { field: 'cluster' }],
        },
      },
    ],
  });
}

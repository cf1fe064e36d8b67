// plan.ts — `embshard plan`: plans a workload preset on a topology preset, prints the planner statistics,
// writes the plan JSON and its picture (SVG). Wired into the `embshard` binary by lib/cli/main.ts.
import { writeFileSync } from 'node:fs';
import { isEmbshardError } from '../errors.js';
import { planShardsReport } from '../plan/planner.js';
import { planSvg } from '../report/plan-chart.js';
import { PRESET_NAMES, topologyPreset } from '../plan/topology.js';
import { workload, WORKLOAD_NAMES } from '../workloads/presets.js';

export const PLAN_USAGE = `usage: embshard plan --model <${WORKLOAD_NAMES.join('|')}> --gpus <N>
                     [--preset <${PRESET_NAMES.join('|')}>] [--ranks-per-node <n>] [--batch <per-rank batch>]
                     [--out plan.json] [--svg plan.svg] [--time-budget-ms <ms>]
Plans the model's embedding tables on N ranks (defaults: --preset dgx-h100, --batch 4096), prints per-rank
and per-table statistics and the baselines, writes the plan (format embshard.plan v1) to --out and draws
it (memory and bytes per rank, tables by cluster) to --svg.`;

interface Args {
  model?: string;
  gpus?: number;
  preset: string;
  ranksPerNode?: number;
  batch: number;
  out?: string;
  svg?: string;
  timeBudgetMs?: number;
}

function parse(argv: string[]): Args | string {
  const a: Args = { preset: 'dgx-h100', batch: 4096 };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i]!;
    if (k === '--help' || k === '-h') return 'help';
    const v = argv[i + 1];
    if (!k.startsWith('--') || v === undefined) return `unexpected argument '${k}'`;
    i++;
    const int = (name: string): number | string => (/^[1-9][0-9]*$/.test(v) ? Number(v) : `${name} must be a positive integer (got '${v}')`);
    switch (k) {
      case '--model':
        a.model = v;
        break;
      case '--preset':
        a.preset = v;
        break;
      case '--out':
        a.out = v;
        break;
      case '--svg':
        a.svg = v;
        break;
      case '--gpus':
      case '--ranks-per-node':
      case '--batch':
      case '--time-budget-ms': {
        const n = int(k);
        if (typeof n === 'string') return n;
        if (k === '--gpus') a.gpus = n;
        else if (k === '--ranks-per-node') a.ranksPerNode = n;
        else if (k === '--batch') a.batch = n;
        else a.timeBudgetMs = n;
        break;
      }
      default:
        return `unknown option '${k}'`;
    }
  }
  if (!a.model) return '--model is required';
  if (!a.gpus) return '--gpus is required';
  return a;
}

/** Runs `embshard plan`; returns the process exit code (0 ok, 1 planning error, 2 usage error). */
export async function runPlan(argv: string[]): Promise<number> {
  const a = parse(argv);
  if (a === 'help') {
    console.log(PLAN_USAGE);
    return 0;
  }
  if (typeof a === 'string') {
    console.error(`embshard plan: ${a}\n${PLAN_USAGE}`);
    return 2;
  }
  try {
    const w = workload(a.model!);
    const topo = topologyPreset(a.preset, { worldSize: a.gpus!, ...(a.ranksPerNode ? { ranksPerNode: a.ranksPerNode } : {}) });
    const r = planShardsReport(w.tables, topo, { batchSize: a.batch, ...(a.timeBudgetMs ? { timeBudgetMs: a.timeBudgetMs } : {}), meta: { model: w.name } });
    console.log(r.plan.explain({ title: `${w.name} (${w.description})` }));
    console.log('');
    console.log(`Planner: ${r.iterations} greedy moves from the '${r.start}' start in ${r.elapsedMs} ms. Baselines under the same cost model:`);
    for (const b of r.baselines)
      console.log(`  ${b.name.padEnd(15)} ${b.time === null ? `does not fit (${b.reason})` : `${(b.time * 1e3).toFixed(3)} ms  (embshard ${(b.time / r.time).toFixed(2)}× faster)`}`);
    if (a.out) {
      writeFileSync(a.out, JSON.stringify(r.plan.toJSON(), null, 1) + '\n');
      console.log(`wrote ${a.out}`);
    }
    if (a.svg) {
      writeFileSync(a.svg, await planSvg(r.plan, `${w.name}: ${w.tables.length} tables on ${a.gpus} ranks (${topo.name})`));
      console.log(`wrote ${a.svg}`);
    }
    return 0;
  } catch (e) {
    if (isEmbshardError(e)) {
      console.error(`embshard plan: ${e.code}: ${e.message}`);
      return 1;
    }
    throw e;
  }
}

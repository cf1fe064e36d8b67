// plan.ts — `embshard plan`: plans a workload preset on a topology preset — from the preset's declared
// access law, or from id frequencies measured on a data source (--profile: hot-id remaps, lib/plan/profile.ts)
// — prints the planner statistics, writes the plan JSON and its picture (SVG). Wired into the `embshard`
// binary by lib/cli/main.ts.
import { writeFileSync } from 'node:fs';
import type { JaggedBatch } from '../batch.js';
import { EmbshardError } from '../errors.js';
import { planShardsReport } from '../plan/planner.js';
import { profileAccess, withProfiledAccess } from '../plan/profile.js';
import type { TableSpec } from '../plan/types.js';
import { DATA_SPEC_FORMS, openDataSpec } from './sources.js';
import { planSvg } from '../report/plan-chart.js';
import { PRESET_NAMES, topologyPreset } from '../plan/topology.js';
import { workload, WORKLOAD_NAMES } from '../workloads/presets.js';
import { runCommand } from './command.js';
import { MAX_BATCH_SIZE } from '../data/types.js';

export const PLAN_USAGE = `usage: embshard plan --model <${WORKLOAD_NAMES.join('|')}> --gpus <N>
                     [--preset <${PRESET_NAMES.join('|')}>] [--ranks-per-node <n>] [--batch <per-rank batch>]
                     [--out plan.json] [--svg plan.svg] [--time-budget-ms <ms>]
                     [--profile <source> [--profile-batches 8] [--top-k 262144] [--min-hits 2] [--max-rows N]]
Plans the model's embedding tables on N ranks (defaults: --preset dgx-h100, --batch 4096), prints per-rank
and per-table statistics and the baselines, writes the plan (format embshard.plan v2) to --out and draws
it (memory and bytes per rank, tables by cluster) to --svg. With --profile, the tables' access comes from
--profile-batches batches of --batch samples read from the source (${DATA_SPEC_FORMS}; --max-rows caps
the tables as for training): each table's most frequent ids (hit --min-hits times or more, at most --top-k) become
its hot rows (a hot-id remap saved in the plan), so hot-row tiers hold them whatever their ids.`;

interface Args {
  model?: string;
  gpus?: number;
  preset: string;
  ranksPerNode?: number;
  batch: number;
  out?: string;
  svg?: string;
  timeBudgetMs?: number;
  profile?: string;
  profileBatches?: number;
  topK?: number;
  minHits?: number;
  maxRows?: number;
}

/** What --profile reads and keeps unless told otherwise. */
const PROFILE_DEFAULTS = { profileBatches: 8, topK: 262_144, minHits: 2 } as const;

function parse(argv: string[]): Args | string {
  const a: Args = { preset: 'dgx-h100', batch: 4096 };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i]!;
    if (k === '--help' || k === '-h') return 'help';
    const v = argv[i + 1];
    if (!k.startsWith('--') || v === undefined) return `unexpected argument '${k}'`;
    i++;
    const int = (name: string): number | string => (/^[1-9][0-9]*$/.test(v) && Number.isSafeInteger(Number(v)) ? Number(v) : `${name} must be a positive integer (got '${v}')`);
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
      case '--profile':
        a.profile = v;
        break;
      case '--gpus':
      case '--ranks-per-node':
      case '--batch':
      case '--time-budget-ms':
      case '--profile-batches':
      case '--top-k':
      case '--min-hits':
      case '--max-rows': {
        const n = int(k);
        if (typeof n === 'string') return n;
        if (k === '--gpus') a.gpus = n;
        else if (k === '--ranks-per-node') a.ranksPerNode = n;
        else if (k === '--batch') a.batch = n;
        else if (k === '--profile-batches') a.profileBatches = n;
        else if (k === '--top-k') a.topK = n;
        else if (k === '--min-hits') a.minHits = n;
        else if (k === '--max-rows') a.maxRows = n;
        else a.timeBudgetMs = n;
        break;
      }
      default:
        return `unknown option '${k}'`;
    }
  }
  if (!a.model) return '--model is required';
  if (!a.gpus) return '--gpus is required';
  if (!a.profile) {
    const given = ([['--max-rows', a.maxRows], ['--profile-batches', a.profileBatches], ['--top-k', a.topK], ['--min-hits', a.minHits]] as const).find(([, v]) => v !== undefined);
    if (given) return `${given[0]} needs --profile`;
  }
  if (a.batch > MAX_BATCH_SIZE) return `--batch must be at most ${MAX_BATCH_SIZE} samples per rank (got ${a.batch})`;
  return a;
}

/**
 * The model's tables with access measured on `spec`: the source's table sizes (so --max-rows caps them as a
 * training run's would), each table's top-K ids as its hot-id remap. Prints one line per table.
 */
async function profiledTables(tables: readonly TableSpec[], a: Args, model: string): Promise<TableSpec[]> {
  const rows = tables.flatMap((t) => (t.features ?? [t.name]).map(() => a.maxRows === undefined ? t.rows : Math.min(t.rows, a.maxRows)));
  const opened = await openDataSpec(a.profile!, { batch: a.batch, model, seed: 0, prefetch: 1, maxRows: a.maxRows, tableRows: rows });
  const batches: JaggedBatch[] = [];
  try {
    for await (const b of opened.source) {
      batches.push(b.sparse);
      if (batches.length >= (a.profileBatches ?? PROFILE_DEFAULTS.profileBatches)) break;
    }
  } finally {
    await opened.source.close?.();
  }
  if (batches.length === 0) throw new EmbshardError('INVALID_ARGUMENT', `--profile ${a.profile}: the source gave no batches`);
  const rowsOf = new Map(opened.source.features.map((f, i) => [f, opened.tableRows[i]!]));
  const sized = tables.map((t) => {
    const f = (t.features ?? [t.name]).find((x) => !rowsOf.has(x));
    if (f !== undefined) throw new EmbshardError('MISSING_FEATURE', `--profile ${a.profile}: the source has no feature '${f}' (table '${t.name}')`);
    return { ...t, rows: Math.max(...(t.features ?? [t.name]).map((x) => rowsOf.get(x)!)) };
  });
  const profiles = await profileAccess(batches, sized, { topK: a.topK ?? PROFILE_DEFAULTS.topK, minHits: a.minHits ?? PROFILE_DEFAULTS.minHits });
  const ids = profiles.reduce((s, p) => s + p.lookups, 0);
  console.log(`Profiled ${batches.length} batches of ${opened.describe}: ${ids.toLocaleString()} ids. Per table: rows, hot ids kept, their share of the lookups, fitted Zipf α, tail order.`);
  profiles.forEach((p, i) => console.log(`  ${p.table.padEnd(12)} ${String(sized[i]!.rows).padStart(10)} ${String(p.hotIds.length).padStart(6)} ${(100 * p.hotMass).toFixed(1).padStart(6)}%  α ${p.zipf.toFixed(2)}  ${p.tail}`));
  console.log('');
  return withProfiledAccess(sized, profiles);
}

/** Runs `embshard plan`; returns the process exit code (0 ok, 1 planning error, 2 usage error). */
export function runPlan(argv: string[]): Promise<number> {
  return runCommand('plan', PLAN_USAGE, parse(argv), plan);
}

async function plan(a: Args): Promise<number> {
  const w = workload(a.model!);
  const topo = topologyPreset(a.preset, { worldSize: a.gpus!, ...(a.ranksPerNode ? { ranksPerNode: a.ranksPerNode } : {}) });
  const tables = a.profile ? await profiledTables(w.tables, a, w.name) : w.tables;
  const meta = { model: w.name, ...(a.profile ? { profile: a.profile } : {}) };
  const r = planShardsReport(tables, topo, { batchSize: a.batch, ...(a.timeBudgetMs ? { timeBudgetMs: a.timeBudgetMs } : {}), meta });
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
}

// plan.ts — `embshard plan`: plans a workload preset on a topology preset — from the preset's declared
// access law, or from id frequencies measured on a data source (--profile: hot-id remaps, lib/plan/profile.ts)
// — prints the planner statistics, writes the plan JSON and its picture (SVG). Wired into the `embshard`
// binary by lib/cli/main.ts.
import { resolve } from 'node:path';
import type { JaggedBatch } from '../batch.js';
import { EmbshardError } from '../errors.js';
import { planShardsReport } from '../plan/planner.js';
import { profileAccess, withProfiledAccess } from '../plan/profile.js';
import type { TableSpec } from '../plan/types.js';
import { DATA_SPEC_FORMS, openDataSpec } from './sources.js';
import { planSvg } from '../report/plan-chart.js';
import { PRESET_NAMES, topologyPreset } from '../plan/topology.js';
import { workload, WORKLOAD_NAMES } from '../workloads/presets.js';
import { checkOutputPath, intArg, parseArgs, runCommand, writeOutputs } from './command.js';
import { MAX_BATCH_SIZE } from '../data/types.js';

export const PLAN_USAGE = `usage: embshard plan --model <${WORKLOAD_NAMES.join('|')}> --gpus <N>
                     [--preset <${PRESET_NAMES.join('|')}>] [--ranks-per-node <n>] [--batch <per-rank batch>]
                     [--out plan.json] [--svg plan.svg] [--time-budget-ms <ms>]
                     [--profile <source> [--profile-batches 8] [--top-k 262144] [--min-hits 2] [--max-rows N]]
Plans the model's embedding tables on N ranks (defaults: --preset dgx-h100, --batch 4096), prints per-rank
and per-table statistics and the baselines, writes the plan (format embshard.plan v2) to --out and draws
it (memory and bytes per rank, tables by cluster) to --svg: both once the plan is made, together, replacing
files of those names (their folders must exist). --time-budget-ms (default 8000) bounds the search; the
baselines and checks before it run in full whatever the budget. Options also read --key=value. With --profile, the tables'
access comes from --profile-batches batches of --batch samples read from the source
(${DATA_SPEC_FORMS}; --max-rows caps the tables as for training): each table's most frequent ids
(hit --min-hits times or more, at most --top-k) become its hot rows (a hot-id remap saved in the plan),
so hot-row tiers hold them whatever their ids.`;

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

/** The options `embshard plan` takes, each with a value. */
const OPTIONS = ['--model', '--preset', '--out', '--svg', '--profile', '--gpus', '--ranks-per-node', '--batch', '--time-budget-ms', '--profile-batches', '--top-k', '--min-hits', '--max-rows'];

function parse(argv: string[]): Args | string {
  const a: Args = { preset: 'dgx-h100', batch: 4096 };
  const problem = parseArgs(argv, {}, (k, v) => {
    const int = (max?: number): number => intArg(k, v, 1, max);
    const path = (): string => {
      if (v === '') throw new Error(`${k} must not be empty`);
      return v;
    };
    switch (k) {
      case '--model': a.model = v; break;
      case '--preset': a.preset = v; break;
      case '--out': a.out = path(); break;
      case '--svg': a.svg = path(); break;
      case '--profile': a.profile = path(); break;
      case '--gpus': a.gpus = int(); break;
      case '--ranks-per-node': a.ranksPerNode = int(); break;
      case '--batch': a.batch = int(MAX_BATCH_SIZE); break;
      case '--time-budget-ms': a.timeBudgetMs = int(); break;
      case '--profile-batches': a.profileBatches = int(); break;
      case '--top-k': a.topK = int(); break;
      case '--min-hits': a.minHits = int(); break;
      case '--max-rows': a.maxRows = int(); break;
    }
    return undefined;
  }, OPTIONS);
  if (problem !== undefined) return problem;
  if (!a.model) return '--model is required';
  if (!a.gpus) return '--gpus is required';
  if (a.out !== undefined && a.svg !== undefined && resolve(a.out) === resolve(a.svg)) return `--out and --svg name the same file ('${a.out}')`;
  if (!a.profile) {
    const given = ([['--max-rows', a.maxRows], ['--profile-batches', a.profileBatches], ['--top-k', a.topK], ['--min-hits', a.minHits]] as const).find(([, v]) => v !== undefined);
    if (given) return `${given[0]} needs --profile`;
  }
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
  // before the planning: a plan is not lost to an output it cannot write
  if (a.out !== undefined) checkOutputPath('--out', a.out);
  if (a.svg !== undefined) checkOutputPath('--svg', a.svg);
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
  // both files rendered first, then written together: a failure leaves neither half-written
  const outputs: [string, string][] = [];
  if (a.out !== undefined) outputs.push([a.out, JSON.stringify(r.plan.toJSON(), null, 1) + '\n']);
  if (a.svg !== undefined) outputs.push([a.svg, await planSvg(r.plan, `${w.name}: ${w.tables.length} tables on ${a.gpus} ranks (${topo.name})`)]);
  writeOutputs(outputs);
  for (const [path] of outputs) console.log(`wrote ${path}`);
  return 0;
}

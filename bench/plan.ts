// bench/plan.ts — `npm run bench:plan`: for each workload at 8, 64 and 128 GPUs of dgx-h100, embshard's plan
// and every baseline: predicted embedding-stage time (cost model at the per-rank batch, and the simulator
// on exact traffic of generated sample batches), bytes moved (exact), max / mean memory; then the project's
// performance goals (targets); and, for the multi-node cases, the hierarchical rb / ub protocol against the flat
// one for the same plan (exact inter-node bytes of one generated step, predicted step time both ways).
// Writes bench/results/plan.json and bench/results/plan.md, and prints the markdown.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { estimatePlan } from '../lib/plan/cost-model.js';
import { COMM_PHASES, metric, SENT_INTER, SENT_INTRA } from '../lib/plan/load.js';
import { baselinePlan, planShardsReport } from '../lib/plan/planner.js';
import { BASELINES } from '../lib/plan/baselines.js';
import { simulate } from '../lib/plan/simulator.js';
import { topologyPreset } from '../lib/plan/topology.js';
import { measureTraffic } from '../lib/plan/traffic.js';
import type { ShardPlan } from '../lib/plan/shard-plan.js';
import { generateBatches } from '../lib/workloads/generator.js';
import { workload, WORKLOAD_NAMES } from '../lib/workloads/presets.js';
import { benchArgs, envFileName, envInt, envInts, envNames } from './report.js';

benchArgs(`usage: embshard bench plan   (npm run bench:plan)
embshard's plans against every baseline for each workload at 8, 64 and 128 GPUs of dgx-h100: predicted and
simulated embedding-stage time, exact bytes, memory; the hierarchical protocol against the flat one.
Writes bench/results/<EMBSHARD_BENCH_NAME or plan>.{json,md}. EMBSHARD_BENCH_MODELS (comma-separated
workloads), EMBSHARD_BENCH_GPUS (comma-separated GPU counts) and EMBSHARD_BENCH_PROTOCOL_IDS restrict the run.`);

const here = dirname(fileURLToPath(import.meta.url));
const root = here.endsWith(join('dist', 'bench')) ? join(here, '..', '..') : join(here, '..');
const outDir = join(root, 'bench', 'results');
/** base name of the result files (a run restricted to some models or GPU counts can write beside the full one) */
const OUT_NAME = envFileName('EMBSHARD_BENCH_NAME', 'plan');

const MODELS = envNames('EMBSHARD_BENCH_MODELS', ['dlrm-dcnv2', 't180', 't200', 't510', 'seq-skewed', 'criteo-kaggle'], WORKLOAD_NAMES);
const GPUS = envInts('EMBSHARD_BENCH_GPUS', [8, 64, 128]);
/** per-rank batch of the cost model */
const BATCH = 2048;
/** ids per sample batch (all ranks together) for the exact traffic */
const SAMPLE_IDS = 2_000_000;
const SEED = 2024;
/** search limits of every planner run: a fixed step count and no wall-clock cut, so the plans (and every number
 * but the planning seconds) are the same on a loaded or an idle machine */
const SEARCH = { maxIterations: 5000, timeBudgetMs: Number.POSITIVE_INFINITY } as const;
/** the workload of the all-to-all target, whose exact traffic is also counted at the planned batch */
const SEQ = 'seq-skewed';

interface Bytes {
  a2aIntra: number;
  a2aInter: number;
  allGatherIntra: number;
  allGatherInter: number;
  a2a: number;
  total: number;
}

function bytesOf(load: import('../lib/plan/load.js').Load, gpus: number): Bytes {
  const b = { a2aIntra: 0, a2aInter: 0, allGatherIntra: 0, allGatherInter: 0, total: 0, a2a: 0 };
  for (let p = 0; p < COMM_PHASES.length; p++)
    for (let r = 0; r < gpus; r++) {
      const i = load.get(metric(p, SENT_INTRA), r), x = load.get(metric(p, SENT_INTER), r);
      if (COMM_PHASES[p] === 'sync') (b.allGatherIntra += i), (b.allGatherInter += x);
      else (b.a2aIntra += i), (b.a2aInter += x);
    }
  b.a2a = b.a2aIntra + b.a2aInter;
  b.total = b.a2a + b.allGatherIntra + b.allGatherInter;
  return b;
}

interface Row {
  model: string;
  gpus: number;
  plan: string;
  fits: boolean;
  reason?: string;
  predictedMs?: number;
  stagesMs?: Record<string, number>;
  sampleBatch?: number;
  simulatedMs?: number;
  /** exact bytes of one step at the sample batch */
  bytes?: Bytes;
  /** expected bytes of one step at the cost model's batch */
  expectedBytes?: Bytes;
  memMaxGB?: number;
  memMeanGB?: number;
  memLimitGB?: number;
  planMs?: number;
  /** greedy steps of the search (over both starts) */
  planIterations?: number;
}

function judge(model: string, gpus: number, name: string, plan: ShardPlan, sampleB: number, planMs?: number): Row {
  const est = estimatePlan(plan);
  const w = workload(model);
  const batches = generateBatches(w, gpus, { batchSize: sampleB, seed: SEED });
  const tr = measureTraffic(plan, batches);
  const sim = simulate(tr.load, plan.topology);
  const b = bytesOf(tr.load, gpus);
  let mx = 0, mean = 0;
  for (const m of est.memory) (mx = Math.max(mx, m)), (mean += m / gpus);
  return {
    model,
    gpus,
    plan: name,
    fits: true,
    predictedMs: est.time * 1e3,
    stagesMs: Object.fromEntries(Object.entries(est.stages).map(([k, v]) => [k, v * 1e3])),
    sampleBatch: sampleB,
    simulatedMs: sim.time * 1e3,
    bytes: b,
    expectedBytes: bytesOf(est.load, gpus),
    memMaxGB: mx / 1e9,
    memMeanGB: mean / 1e9,
    memLimitGB: plan.topology.memoryLimitBytes / 1e9,
    ...(planMs !== undefined ? { planMs } : {}),
  };
}

/** The same plan under both protocols: exact bytes of one generated step and the cost model's prediction. */
interface ProtocolRow {
  model: string;
  gpus: number;
  /** embshard's plan, or a baseline's */
  plan: string;
  sampleBatch: number;
  flat: { interA2aMB: number; interMB: number; intraMB: number; expectedInterGB: number; predictedMs: number };
  hier: { interA2aMB: number; interMB: number; intraMB: number; expectedInterGB: number; predictedMs: number };
  /** 1 − hierarchical / flat inter-node bytes (all-to-alls and all-gathers) */
  interReduction: number;
  expectedInterReduction: number;
  /** predicted step of the plan the planner makes when forced to the flat protocol (embshard rows) */
  flatPlannedMs?: number;
}
const PROTOCOL_MODELS = ['dlrm-dcnv2', 't180', 't200', 't510'];
/** ids per generated step (all ranks together) of the protocol comparison: node-level deduplication grows with the batch */
const PROTOCOL_IDS = envInt('EMBSHARD_BENCH_PROTOCOL_IDS', 24_000_000);

function compareProtocols(model: string, gpus: number, name: string, plan: ShardPlan): ProtocolRow {
  const w = workload(model);
  const idsPerSample = w.tables.reduce((s, t) => s + (t.poolingFactors ?? [1]).reduce((a, b) => a + b, 0), 0);
  const sampleB = Math.max(1, Math.min(BATCH, Math.floor(PROTOCOL_IDS / (gpus * idsPerSample))));
  const batches = generateBatches(w, gpus, { batchSize: sampleB, seed: SEED });
  const side = (p: ShardPlan) => {
    const b = bytesOf(measureTraffic(p, batches).load, gpus);
    const est = estimatePlan(p);
    const e = bytesOf(est.load, gpus);
    return { interA2aMB: b.a2aInter / 1e6, interMB: (b.a2aInter + b.allGatherInter) / 1e6, intraMB: (b.a2aIntra + b.allGatherIntra) / 1e6, expectedInterGB: (e.a2aInter + e.allGatherInter) / 1e9, predictedMs: est.time * 1e3 };
  };
  const hier = side(plan.withProtocol(true)), flat = side(plan.withProtocol(false));
  const flatPlanned = name === 'embshard' ? planShardsReport(w.tables, plan.topology, { batchSize: BATCH, ...SEARCH, hierarchical: false, meta: { model } }) : undefined;
  return {
    model,
    gpus,
    plan: name,
    sampleBatch: sampleB,
    flat,
    hier,
    interReduction: 1 - hier.interMB / flat.interMB,
    expectedInterReduction: 1 - hier.expectedInterGB / flat.expectedInterGB,
    ...(flatPlanned ? { flatPlannedMs: flatPlanned.time * 1e3 } : {}),
  };
}

const rows: Row[] = [];
const protocolRows: ProtocolRow[] = [];
/** embshard's plan for the planned batch of the sequence workload, per GPU count */
const seqPlans = new Map<number, ShardPlan>();
const t0 = Date.now();
for (const model of MODELS) {
  const w = workload(model);
  const idsPerSample = w.tables.reduce((s, t) => s + (t.poolingFactors ?? [1]).reduce((a, b) => a + b, 0), 0);
  for (const gpus of GPUS) {
    const topo = topologyPreset('dgx-h100', { worldSize: gpus });
    const sampleB = Math.max(1, Math.min(256, Math.floor(SAMPLE_IDS / (gpus * idsPerSample))));
    let report;
    try {
      report = planShardsReport(w.tables, topo, { batchSize: BATCH, ...SEARCH, meta: { model } });
    } catch (e) {
      rows.push({ model, gpus, plan: 'embshard', fits: false, reason: (e as Error).message });
      process.stderr.write(`${model} × ${gpus}: ${(e as Error).message}\n`);
      continue;
    }
    rows.push({ ...judge(model, gpus, 'embshard', report.plan, sampleB, report.elapsedMs), planIterations: report.iterations });
    if (model === SEQ) seqPlans.set(gpus, report.plan);
    if (PROTOCOL_MODELS.includes(model) && report.plan.hierarchical) {
      protocolRows.push(compareProtocols(model, gpus, 'embshard', report.plan));
      // HugeCTR's hierarchical placement: each table on one node, row-sharded over its GPUs
      if (report.baselines.find((x) => x.name === 'table-row-wise')?.time !== null)
        protocolRows.push(compareProtocols(model, gpus, 'table-row-wise', baselinePlan('table-row-wise', w.tables, topo, { batchSize: BATCH })));
    }
    // the exact traffic is measured at a small sample batch; also judge a plan made for that batch
    const small = planShardsReport(w.tables, topo, { batchSize: sampleB, ...SEARCH, meta: { model } });
    rows.push(judge(model, gpus, 'embshard@sample', small.plan, sampleB, small.elapsedMs));
    for (const b of BASELINES) {
      const br = report.baselines.find((x) => x.name === b)!;
      if (br.time === null) {
        rows.push({ model, gpus, plan: b, fits: false, reason: br.reason! });
        continue;
      }
      rows.push(judge(model, gpus, b, baselinePlan(b, w.tables, topo, { batchSize: BATCH }), sampleB));
    }
    process.stderr.write(`${model} × ${gpus}: planned in ${report.elapsedMs} ms, judged (${((Date.now() - t0) / 1e3).toFixed(0)} s so far)\n`);
  }
}

// The all-to-all target of the sequence workload, counted exactly at the batch the plan was made for
// (BATCH per rank, ≈ 185 M ids at 128 ranks): embshard's plan against row-wise on the same generated step.
interface FullBatch {
  gpus: number;
  ids: number;
  embshard: Bytes;
  rowWise: Bytes;
  memOk: boolean;
  ms: number;
}
const seqFull: FullBatch[] = [];
if (MODELS.includes(SEQ))
  for (const gpus of GPUS) {
    const plan = seqPlans.get(gpus);
    if (!plan) continue;
    const t1 = Date.now();
    const w = workload(SEQ);
    const batches = generateBatches(w, gpus, { batchSize: BATCH, seed: SEED });
    const embshard = bytesOf(measureTraffic(plan, batches).load, gpus);
    const rowWise = bytesOf(measureTraffic(baselinePlan('row-wise', w.tables, plan.topology, { batchSize: BATCH }), batches).load, gpus);
    const ids = batches.reduce((s, b) => s + b.ids.length, 0);
    const memOk = Math.max(...plan.memoryPerRank()) <= plan.topology.memoryLimitBytes;
    seqFull.push({ gpus, ids, embshard, rowWise, memOk, ms: Date.now() - t1 });
    process.stderr.write(`${SEQ} × ${gpus}: exact traffic at ${BATCH}/rank (${ids} ids) in ${Date.now() - t1} ms\n`);
  }

// targets
const find = (m: string, g: number, p: string) => rows.find((r) => r.model === m && r.gpus === g && r.plan === p);
// predicted times compare the plan made for the cost model's batch; simulated times (exact traffic at the
// sample batch) compare the plan made for the sample batch
const mine = (key: 'predictedMs' | 'simulatedMs') => (key === 'predictedMs' ? 'embshard' : 'embshard@sample');
const ratio = (key: 'predictedMs' | 'simulatedMs', base: string) => {
  const out: { model: string; gpus: number; speedup: number }[] = [];
  for (const m of ['dlrm-dcnv2', 't180', 't200', 't510'])
    for (const g of [64, 128]) {
      const e = find(m, g, mine(key)), b = find(m, g, base);
      if (e?.fits && b?.fits) out.push({ model: m, gpus: g, speedup: b[key]! / e[key]! });
    }
  return { cases: out, mean: out.length ? out.reduce((s, x) => s + x.speedup, 0) / out.length : NaN };
};
const bestBaseline = (m: string, g: number, key: 'predictedMs' | 'simulatedMs') =>
  Math.min(...rows.filter((r) => r.model === m && r.gpus === g && !r.plan.startsWith('embshard') && r.fits).map((r) => r[key]!));
const vsBest = (key: 'predictedMs' | 'simulatedMs') => {
  const out: number[] = [];
  for (const m of ['dlrm-dcnv2', 't180', 't200', 't510']) for (const g of [64, 128]) {
    const e = find(m, g, mine(key));
    if (e?.fits) out.push(bestBaseline(m, g, key) / e[key]!);
  }
  return out.length ? out.reduce((a, b) => a + b, 0) / out.length : NaN;
};
const seq = GPUS.map((g) => {
  const e = find('seq-skewed', g, 'embshard'), r = find('seq-skewed', g, 'row-wise'), es = find('seq-skewed', g, 'embshard@sample');
  const red = (k: 'bytes' | 'expectedBytes', f: (b: Bytes) => number) => (e?.fits && r?.fits ? 1 - f(e[k]!) / f(r[k]!) : NaN);
  return {
    gpus: g,
    a2aReduction: red('bytes', (b) => b.a2a),
    a2aInterReduction: red('bytes', (b) => b.a2aInter),
    totalReduction: red('bytes', (b) => b.total),
    interReduction: red('bytes', (b) => b.a2aInter + b.allGatherInter),
    expectedA2aReduction: red('expectedBytes', (b) => b.a2a),
    expectedTotalReduction: red('expectedBytes', (b) => b.total),
    expectedInterReduction: red('expectedBytes', (b) => b.a2aInter + b.allGatherInter),
    sampleTunedA2aReduction: es?.fits && r?.fits ? 1 - es.bytes!.a2a / r.bytes!.a2a : NaN,
    sampleTunedTotalReduction: es?.fits && r?.fits ? 1 - es.bytes!.total / r.bytes!.total : NaN,
    sampleTunedMemOk: !!es?.fits && es.memMaxGB! <= es.memLimitGB!,
    memOk: !!e?.fits && e.memMaxGB! <= e.memLimitGB!,
  };
});
const less = (a: number, b: number) => (b > 0 ? 1 - a / b : NaN);
const seqPlanned = seqFull.map((x) => ({
  gpus: x.gpus,
  batchPerRank: BATCH,
  ids: x.ids,
  a2aReduction: less(x.embshard.a2a, x.rowWise.a2a),
  a2aInterReduction: less(x.embshard.a2aInter, x.rowWise.a2aInter),
  totalReduction: less(x.embshard.total, x.rowWise.total),
  interReduction: less(x.embshard.a2aInter + x.embshard.allGatherInter, x.rowWise.a2aInter + x.rowWise.allGatherInter),
  embshardA2aGB: x.embshard.a2a / 1e9,
  embshardAllGatherGB: (x.embshard.allGatherIntra + x.embshard.allGatherInter) / 1e9,
  rowWiseA2aGB: x.rowWise.a2a / 1e9,
  memOk: x.memOk,
  measureMs: x.ms,
}));
const t510 = find('t510', 128, 'embshard');
const targets = {
  twrwSpeedupPredicted: ratio('predictedMs', 'table-row-wise'),
  twrwSpeedupSimulated: ratio('simulatedMs', 'table-row-wise'),
  bestBaselineSpeedupPredicted: vsBest('predictedMs'),
  bestBaselineSpeedupSimulated: vsBest('simulatedMs'),
  seqSkewedVsRowWiseAtPlannedBatch: seqPlanned,
  seqSkewedVsRowWise: seq,
  planning500TablesAt128Ms: t510?.planMs ?? null,
  hierarchicalInterReduction: protocolRows.map((x) => ({ model: x.model, gpus: x.gpus, plan: x.plan, exact: x.interReduction, expected: x.expectedInterReduction })),
};

const f = (x: number | undefined, d = 2) => (x === undefined || !Number.isFinite(x) ? '-' : x.toFixed(d));
const md: string[] = [];
md.push(`# Planner bench (dgx-h100, per-rank batch ${BATCH} for the cost model; exact traffic on generated sample batches)`);
md.push('');
md.push(`Every plan is searched with maxIterations ${SEARCH.maxIterations} and no wall-clock budget, so all numbers except the planning seconds are deterministic.`);
md.push('');
md.push(`Rows \`embshard\` = the plan made for ${BATCH}/rank; \`embshard@sample\` = the plan made for the sample batch (what the simulated column should be compared on). Predicted = cost model (expected bytes) at batch ${BATCH}/rank. Simulated = simulator on the exact traffic of one generated step at the sample batch (B/rank column; ≈${SAMPLE_IDS / 1e6}M ids over all ranks, seed ${SEED}). Bytes = exact bytes sent between ranks in that step (a2a = forward + backward all-to-alls; ag = gradient all-gathers of dp tables and hot tiers).`);
md.push('');
md.push('| model | GPUs | plan | predicted ms | expected GB (a2a + ag) | B/rank | simulated ms | a2a MB | ag MB | mem max / mean GB (limit) | plan s |');
md.push('|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|');
for (const r of rows) {
  if (!r.fits) {
    md.push(`| ${r.model} | ${r.gpus} | ${r.plan} | does not fit | | | | | | | |`);
    continue;
  }
  md.push(
    `| ${r.model} | ${r.gpus} | ${r.plan} | ${f(r.predictedMs, 3)} | ${f(r.expectedBytes!.a2a / 1e9)} + ${f((r.expectedBytes!.allGatherIntra + r.expectedBytes!.allGatherInter) / 1e9)} | ${r.sampleBatch} | ${f(r.simulatedMs, 4)} | ${f(r.bytes!.a2a / 1e6, 1)} | ${f((r.bytes!.allGatherIntra + r.bytes!.allGatherInter) / 1e6, 1)} | ${f(r.memMaxGB)} / ${f(r.memMeanGB)} (${f(r.memLimitGB, 0)}) | ${r.planMs !== undefined ? f(r.planMs / 1e3, 2) : ''} |`,
  );
}
md.push('');
md.push('## Targets');
md.push('');
md.push(`- embshard vs table-row-wise, mean over DLRM-DCNv2/T180/T200/T510 at 64 and 128 GPUs (target ≥ 1.5×): predicted ${f(targets.twrwSpeedupPredicted.mean)}× (${targets.twrwSpeedupPredicted.cases.map((c) => `${c.model}@${c.gpus} ${f(c.speedup)}×`).join(', ')}); simulated on exact traffic ${f(targets.twrwSpeedupSimulated.mean)}×.`);
md.push(`- embshard vs the best baseline of each case, same cases: predicted ${f(targets.bestBaselineSpeedupPredicted)}×, simulated ${f(targets.bestBaselineSpeedupSimulated)}×.`);
md.push(`- seq-skewed vs row-wise (target ≥ 85% less all-to-all traffic, no rank over memory), exact count of one generated step at the planned batch (${BATCH}/rank, seed ${SEED}):`);
md.push('');
md.push('  | GPUs | ids in the step | embshard a2a GB | row-wise a2a GB | a2a less | inter-node a2a less | embshard all-gather GB | less incl. all-gathers | inter-node less incl. all-gathers | memory |');
md.push('  |---:|---:|---:|---:|---:|---:|---:|---:|---:|---|');
for (const s of seqPlanned)
  md.push(
    `  | ${s.gpus} | ${s.ids} | ${f(s.embshardA2aGB, 3)} | ${f(s.rowWiseA2aGB, 3)} | **${f(100 * s.a2aReduction, 1)}%** | ${f(100 * s.a2aInterReduction, 1)}% | ${f(s.embshardAllGatherGB, 3)} | ${f(100 * s.totalReduction, 1)}% | ${f(100 * s.interReduction, 1)}% | ${s.memOk ? 'within limits' : 'OVER'} |`,
  );
md.push('');
md.push(`- seq-skewed vs row-wise at the small sample batches of the table above (the reduction grows with the batch, as \`ub\` deduplication does; row-wise bytes are linear in it):`);
for (const s of seq)
  md.push(
    `  - ${s.gpus} GPUs: exact at the sample batch: ${f(100 * s.a2aReduction, 1)}% less a2a bytes, ${f(100 * s.a2aInterReduction, 1)}% less inter-node a2a, ${f(100 * s.totalReduction, 1)}% less counting all-gathers, ${f(100 * s.interReduction, 1)}% less inter-node incl. all-gathers; expected at ${BATCH}/rank: ${f(100 * s.expectedA2aReduction, 1)}% less a2a, ${f(100 * s.expectedTotalReduction, 1)}% less incl. all-gathers, ${f(100 * s.expectedInterReduction, 1)}% less inter-node; memory ${s.memOk ? 'within limits' : 'OVER'}; plan made for the sample batch, exact: ${f(100 * s.sampleTunedA2aReduction, 1)}% less a2a, ${f(100 * s.sampleTunedTotalReduction, 1)}% less incl. all-gathers, memory ${s.sampleTunedMemOk ? 'within limits' : 'OVER'}`,
  );
md.push(`- planning T510 (510 tables) for 128 ranks (target < 10 s): ${targets.planning500TablesAt128Ms === null ? '-' : f(targets.planning500TablesAt128Ms / 1e3, 2) + ' s'} to convergence (${t510?.planIterations ?? '-'} greedy steps; no time budget in this bench, so the wall time depends on the machine's load).`);
md.push('');
md.push('## Hierarchical vs flat protocol (same plan)');
md.push('');
md.push(`embshard's plan (made for ${BATCH}/rank; the hierarchical protocol is the default on several nodes) and the table-row-wise baseline (each table on one node, row-sharded over its GPUs) under both protocols. Exact = one generated step of ≈${PROTOCOL_IDS / 1e6}M ids over all ranks (B/rank column; seed ${SEED}; inter-node = bytes that cross nodes: all-to-alls plus the all-gathers, which the protocol does not change); expected = the cost model at ${BATCH}/rank; predicted = the cost model's step time (under the hierarchical protocol a phase's node-level and cross-node steps add). Flat-planned = the planner's own plan when told \`hierarchical: false\`.`);
md.push('');
md.push('| model | GPUs | plan | B/rank | inter-node MB flat | inter-node MB hier | less | intra-node MB flat / hier | expected inter GB flat / hier (less) | predicted ms flat / hier | flat-planned ms |');
md.push('|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|');
for (const x of protocolRows)
  md.push(
    `| ${x.model} | ${x.gpus} | ${x.plan} | ${x.sampleBatch} | ${f(x.flat.interMB, 1)} | ${f(x.hier.interMB, 1)} | **${f(100 * x.interReduction, 1)}%** | ${f(x.flat.intraMB, 1)} / ${f(x.hier.intraMB, 1)} | ${f(x.flat.expectedInterGB, 3)} / ${f(x.hier.expectedInterGB, 3)} (${f(100 * x.expectedInterReduction, 1)}%) | ${f(x.flat.predictedMs, 3)} / ${f(x.hier.predictedMs, 3)} | ${f(x.flatPlannedMs, 3)} |`,
  );
md.push('');
md.push(`- bench wall time ${((Date.now() - t0) / 1e3).toFixed(0)} s.`);
const text = md.join('\n') + '\n';
mkdirSync(outDir, { recursive: true });
writeFileSync(join(outDir, `${OUT_NAME}.json`), JSON.stringify({ date: new Date().toISOString(), batchPerRank: BATCH, sampleIds: SAMPLE_IDS, seed: SEED, search: { maxIterations: SEARCH.maxIterations, timeBudgetMs: null }, rows, protocols: protocolRows, targets }, null, 1) + '\n');
writeFileSync(join(outDir, `${OUT_NAME}.md`), text);
console.log(text);

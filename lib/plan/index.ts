// index.ts — the planner's public API (package export 'embshard/plan'): plan format, planner, baselines,
// cost model, exact traffic, simulator, access profiling and hot-id remaps, topology presets; usable without
// the native addon except profileAccess (which counts ids natively).
export * from './types.js';
export { ShardPlan, PLAN_FORMAT, PLAN_VERSION, PLAN_VERSIONS, type PlanVersion, type PlanJSON, type TablePlanJSON, type ShardJSON, type PlanInit } from './shard-plan.js';
export { planShards, planShardsReport, runBaselines, baselinePlan, checkFeasible, type PlanOptions, type PlanReport, type BaselineReport } from './planner.js';
export { BASELINES, type BaselineName } from './baselines.js';
export { estimatePlan, expectedLoad, type PlanEstimate, type CostContext } from './cost-model.js';
export { measureTraffic, type TrafficReport } from './traffic.js';
export { simulate, STAGES, type SimResult, type Stage } from './simulator.js';
export { Load, COMM_PHASES } from './load.js';
export { AccessModel, accessModel } from './access.js';
export { profileAccess, withProfiledAccess, type TableProfile, type ProfileOptions } from './profile.js';
export { IdRemap, remapOf } from './remap.js';
export { topologyPreset, normalizeTopology, measureCpu, PRESET_NAMES, type PresetName, type TopologyOptions } from './topology.js';
export { normalizeTable, normalizeTables, tableBytes, rowBytes } from './tables.js';
export type { TableLayout, GroupLayout, ShardCols } from './layout.js';
export { explainPlan, type ExplainOptions } from './explain.js';
export * as constants from './constants.js';
export { workload, WORKLOAD_NAMES, generateBatch, generateBatches, ZipfSampler, type Workload, type BagSpec, type GenerateOptions } from '../workloads/index.js';

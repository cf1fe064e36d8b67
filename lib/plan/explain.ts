// explain.ts — TorchRec-style planner statistics for a plan (filled in below).
import type { ShardPlan } from './shard-plan.js';
export interface ExplainOptions {
  title?: string;
}
export function explainPlan(plan: ShardPlan, opts: ExplainOptions = {}): string {
  return `${opts.title ?? 'plan'}: ${plan.tables.length} tables`;
}

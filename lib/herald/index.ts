// index.ts — Herald embedding scheduling: the scheduler (allocation + communication plan), the collection
// that trains with it over a process group, and the row ownership both share.
export { HeraldEmbeddingCollection, type HeraldOptions, type HeraldForwardOutput } from './collection.js';
export { HeraldScheduler, type Allocation, type SchedulerOptions, type StepCounts, type StepPlan, type RankReads } from './scheduler.js';
export { RowOwners, type HeraldTable } from './owners.js';

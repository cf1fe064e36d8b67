// step-args.ts — what both phases of one sharded step work from, on the host path (host-exchange.ts) and
// on the device path (device-exchange.ts): the layout, the group, the step's routing and its exchange
// schedules, in one phase's wire dtype; and the forward's host outputs and mean columns.
import type { Wire } from './exchange-ops.js';
import type { ProcessGroup, TrafficCounters } from './group.js';
import type { LocalLayout } from './local-layout.js';
import type { RelayUnion } from './relay.js';
import type { SegView, UniqT } from './routing.js';
import type { Schedule } from './schedule.js';

export interface StepArgs {
  L: LocalLayout;
  /** the wire dtype of the phase's messages */
  wire: Wire;
  group: ProcessGroup;
  B: number;
  segs: Map<string, SegView>;
  ub: readonly UniqT[][];
  /** node tiers: the distinct ids of each table's tier, grouped by the node-mate holding them */
  node: ReadonlyMap<number, UniqT>;
  /** the owner batch's bags and where each source's bags start in it */
  Btot: number;
  Boff: readonly number[];
  own: Schedule;
  req: Schedule;
  /** hierarchical protocol: what this rank passes on as a relay, what relays pass on to it, the row groups it relays */
  rsend: Schedule;
  rrecv: Schedule;
  unions: readonly RelayUnion[];
  /** every source's batch size (the bags of a requester this rank relays for) */
  bags: readonly number[];
  counters: TrafficCounters;
}

/** This rank's outputs in host memory: pooled [B × pooledDim], and per sequence feature of the plan (in order) its values. */
export interface HostOutputs {
  pooled: Float32Array;
  seqOut: ReadonlyMap<string, Float32Array>;
}

/** Columns col … col + dim − 1 of the pooled output hold a mean feature whose bags have these lengths. */
export interface MeanColumns {
  col: number;
  dim: number;
  lengths: Int32Array;
}

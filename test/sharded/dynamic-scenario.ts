// dynamic-scenario.ts — the plans, configs and raw-id batches the sharded dynamic-table tests share, and
// the documented hash of a raw id to its virtual row, written here from its formula (an oracle
// independent of native/core/id_hash.h): floor(SplitMix64(id XOR salt) · capacity / 2^64).
import { JaggedBatch } from '../../lib/batch.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { topologyPreset } from '../../lib/plan/topology.js';
import type { PlanTableSpec } from '../../lib/plan/types.js';
import type { ShardedConfig } from '../../lib/sharded/sharded.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';

const M64 = (1n << 64n) - 1n;
const SALT = 0x53484152445f4944n; // "SHARD_ID"

export function mix64(z: bigint): bigint {
  z = (z + 0x9e3779b97f4a7c15n) & M64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M64;
  return z ^ (z >> 31n);
}
/** The documented virtual row of a raw id: floor(SplitMix64(id XOR salt) · capacity / 2^64). */
export function hashRow(id: bigint, capacity: number): number {
  return Number((mix64(BigInt.asUintN(64, id) ^ SALT) * BigInt(capacity)) >> 64n);
}

export interface Spec {
  /** 'rb' row-split evenly over every rank, 'ub' row-split unevenly over ranks 0 and W−1, 'tw' table-wise */
  dyn: 'rb' | 'ub' | 'tw';
  pooling: 'sum' | 'mean';
  capacity: number;
  seqCapacity: number;
  minCount?: number;
  /** what ids without a row read (admission.default); 'zero' when absent */
  default?: 'hashed';
  /** the admission settings apply to 'dyn' only ('seqd', always ub, admits at first sight) */
  dynOnly?: boolean;
}

function admissionOf(s: Spec) {
  const a = { ...(s.minCount ? { minCount: s.minCount } : {}), ...(s.default ? { default: s.default } : {}) };
  return Object.keys(a).length > 0 ? { admission: a } : {};
}

export function makePlan(W: number, s: Spec): ShardPlan {
  const dynTable = { name: 'dyn', rows: 'dynamic', capacity: s.capacity, dim: 8, pooling: s.pooling, features: ['a', 'b'], optimizer: 'adagrad', ...admissionOf(s) } as PlanTableSpec;
  const seqTable = { name: 'seqd', rows: 'dynamic', capacity: s.seqCapacity, dim: 4, pooling: 'none', features: ['s'], ...(s.dynOnly ? {} : admissionOf(s)) } as PlanTableSpec;
  const even = (cap: number) => Array.from({ length: W }, (_, k) => ({ rows: [Math.floor((k * cap) / W), Math.floor(((k + 1) * cap) / W)] as [number, number], cols: [0, 8] as [number, number], rank: k }));
  const dynShards = s.dyn === 'tw' ? [{ rows: [0, s.capacity] as [number, number], cols: [0, 8] as [number, number], rank: W - 1 }] : even(s.capacity);
  const cut = Math.floor(s.seqCapacity / 3);
  return ShardPlan.create({
    topology: topologyPreset('cpu', { worldSize: W, ranksPerNode: W }),
    batchSize: 6,
    tables: [
      { table: dynTable, cluster: s.dyn === 'ub' ? 'ub' : 'rb', shards: dynShards },
      { table: seqTable, cluster: 'ub', shards: [{ rows: [0, cut], cols: [0, 4], rank: 0 }, { rows: [cut, s.seqCapacity], cols: [0, 4], rank: W - 1 }] },
      { table: { name: 'plain', rows: 40, dim: 4, features: ['c'] }, cluster: 'rb', shards: [{ rows: [0, 40], cols: [0, 4], rank: 0 }] },
    ],
  });
}

/** The single collection's config (written here, independently of the sharded runtime's translation). */
export function oracleConfig(s: Spec, cfg: ShardedConfig) {
  const adm = admissionOf(s);
  return {
    tables: [
      { name: 'dyn', rows: 'dynamic' as const, capacity: s.capacity, dim: 8, pooling: s.pooling, features: ['a', 'b'], ...adm },
      { name: 'seqd', rows: 'dynamic' as const, capacity: s.seqCapacity, dim: 4, pooling: 'none' as const, features: ['s'], ...(s.dynOnly ? {} : adm) },
      { name: 'plain', rows: 40, dim: 4, features: ['c'] },
    ],
    optimizer: cfg.optimizer!,
    seed: cfg.seed!,
  };
}

/** A pool of raw 64-bit ids (negative ones included) drawn with a skew, so ids repeat within and across ranks. */
export function idPool(n: number, seed: number): bigint[] {
  const r = S.rng(seed);
  return Array.from({ length: n }, () => BigInt.asIntN(64, (BigInt(Math.floor(r() * 2 ** 32)) << 32n) | BigInt(Math.floor(r() * 2 ** 32))));
}

export function localBatch(pool: bigint[], rank: number, step: number, B = 5): JaggedBatch {
  const r = S.rng(1000 * step + rank + 7);
  const lengths: number[] = [], ids: bigint[] = [];
  for (const f of ['a', 'b', 's', 'c'])
    for (let b = 0; b < B; b++) {
      const n = Math.floor(r() * 4);
      lengths.push(n);
      for (let k = 0; k < n; k++) ids.push(f === 'c' ? BigInt(Math.floor(r() * 40)) : pool[Math.floor(pool.length * r() ** 2)]!);
    }
  return JaggedBatch.fromLengths({ features: ['a', 'b', 's', 'c'], batchSize: B, lengths: Int32Array.from(lengths), ids: BigInt64Array.from(ids) });
}


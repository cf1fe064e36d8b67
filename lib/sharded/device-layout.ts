// device-layout.ts — where the sharded runtime's device path keeps each step's rows in its device arrays:
// the engine's back-to-back sequences, the sequence outputs, the unique rows of ub row groups and node
// tiers, a relay's per-requester blocks and its node-level distinct rows (each: first element, and size).
import type { LocalLayout } from './local-layout.js';
import type { RelayUnion } from './relay.js';
import type { UniqT } from './routing.js';

/** Where each sequence feature's values (outputs or gradients, `arrays` in order, or their counts) sit in one array, and its size. */
export function featureLayout(arrays: ReadonlyMap<string, { readonly length: number } | number>): { at: Map<string, number>; total: number } {
  const at = new Map<string, number>();
  let total = 0;
  for (const [f, x] of arrays) at.set(f, total), (total += typeof x === 'number' ? x : x.length);
  return { at, total };
}

/** Where each local feature's sequence values start in a batch's back-to-back sequences (features in order), and their total. */
export function sequenceOffsets(L: LocalLayout, idsOf: (i: number) => number): { at: number[]; total: number } {
  const at: number[] = [];
  let total = 0;
  L.localFeatures.forEach((lf, i) => {
    at.push(total);
    if (lf.pooling === 'none') total += idsOf(i) * lf.dim;
  });
  return { at, total };
}

/** Where every ub row group's unique rows sit in one array (t, g → first element), and its size. */
export function ubLayout(L: LocalLayout, ub: readonly UniqT[][]): { at: number[][]; total: number } {
  let total = 0;
  const at = ub.map((groups, t) =>
    groups.map((u) => {
      const a = total;
      total += u.uq.values.length * L.tables[t]!.table.dim;
      return a;
    }),
  );
  return { at, total };
}

/** Where every node tier's distinct rows sit in one array (table → first element), and its size. */
export function nodeLayout(L: LocalLayout, node: ReadonlyMap<number, UniqT>): { at: Map<number, number>; total: number } {
  let total = 0;
  const at = new Map<number, number>();
  for (const [t, u] of node) at.set(t, total), (total += u.uq.values.length * L.tables[t]!.table.dim);
  return { at, total };
}

/** Where each relayed requester's [B_q × pooledDim] block sits in one array (this rank as a relay), and its size. */
export class PerRequester {
  readonly at = new Map<number, number>();
  total = 0;
  constructor(private readonly bags: readonly number[], private readonly P: number) {}
  of(q: number): number {
    let a = this.at.get(q);
    if (a === undefined) this.at.set(q, (a = this.total)), (this.total += this.bags[q]! * this.P);
    return a;
  }
}

/** Where each relayed row group's node-level distinct rows sit in one array, and its size. */
export function unionLayout(L: LocalLayout, unions: readonly RelayUnion[]): { at: number[]; total: number } {
  let total = 0;
  const at = unions.map((u) => {
    const a = total;
    total += u.uq.values.length * L.tables[u.rs.t]!.table.dim;
    return a;
  });
  return { at, total };
}

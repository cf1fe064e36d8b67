// device-relay.ts — the hierarchical protocol's relay steps on the device path (device-exchange.ts): as a
// relay, this rank reduces the partial sums of the requesters on other nodes and takes in its node's
// distinct ub rows, then passes them on (the node-reduced vectors across nodes, each requester's rows by
// its index list); in the backward the same slots run reversed, the ub rows' gradients summed per
// node-level distinct row in requester order. The host path's relay.ts and schedule.ts define the slots.
import type { DeviceArray } from '../device-array.js';
import type { DeviceBackwardArgs, DeviceForwardArgs } from './device-exchange.js';
import { PerRequester } from './device-layout.js';
import { Blocks, Indexes, message, type DeviceScratch } from './device-scratch.js';
import { inverseOf, unionIndex, type RelayUnion } from './relay.js';
import type { Schedule } from './schedule.js';

/** The index lists of a relay's ub slots (each requester's distinct ids among its node's), uploaded once; the start of each. */
async function relayIndexes(scratch: DeviceScratch, rsend: Schedule, unions: readonly RelayUnion[]): Promise<{ meta: DeviceArray; at: Map<string, number> }> {
  const idx = new Indexes(), at = new Map<string, number>();
  rsend.slots.forEach((slots, q) =>
    slots.forEach((sl) => {
      if (sl.seg.kind !== 'ub') return;
      const key = `${q}\u0000${sl.seg.t}\u0000${sl.seg.g}`;
      if (!at.has(key)) at.set(key, idx.add(inverseOf(unions[unionIndex(unions, sl.seg.t, sl.seg.g)]!, q)));
    }),
  );
  return { meta: await idx.upload(scratch, 'relayIdx'), at };
}

/**
 * The hierarchical protocol's relay step of the forward, in device memory: the relayed requesters' partial
 * sums reduced, the node's distinct ub rows taken in; then passed on (the node-reduced rb vectors across
 * nodes, each requester's ub rows by its index list) and what relays pass on here added into the pooled
 * output (rb) or taken as this rank's ub rows.
 */
export async function relayForward(
  a: DeviceForwardArgs, recv: DeviceArray, red: PerRequester, relaySums: Blocks, relayRows: Blocks, unAt: number[], unionRows: DeviceArray,
  pooled: DeviceArray, ubAt: number[][], ubRows: DeviceArray,
): Promise<void> {
  const { L } = a;
  const P = L.pooledDim;
  for (let q = 0; q < L.W; q++) for (const sl of a.rsend.slots[q]!) if (sl.seg.kind === 'rb') red.of(q);
  const reduced = a.scratch.get('reduced', red.total);
  reduced.zero(0, red.total);
  relaySums.run(a.scratch, recv, reduced);
  relayRows.run(a.scratch, recv, unionRows);
  const send = message(a.scratch, 'relaySend', a.rsend.total, a.wire);
  const pack = new Blocks('fp32', a.wire);
  const idx = await relayIndexes(a.scratch, a.rsend, a.unions);
  for (let q = 0; q < L.W; q++)
    for (const sl of a.rsend.slots[q]!) {
      const s = sl.seg, rt = L.tables[s.t]!, cols = sl.c1 - sl.c0;
      if (s.kind === 'rb') pack.add(red.of(q) + rt.pooledCol[rt.features.indexOf(s.f)]! + sl.c0, P, sl.at, cols, sl.rows, cols, false);
      else if (s.kind === 'ub')
        a.scratch.addon.indexDeviceRows({
          src: unionRows.native, srcKind: 'fp32', dstKind: a.wire, srcOffset: unAt[unionIndex(a.unions, s.t, s.g)]! + sl.c0, srcStride: rt.table.dim, dst: send.native, dstOffset: sl.at, dstStride: cols,
          meta: idx.meta.native, idxAt: idx.at.get(`${q}\u0000${s.t}\u0000${s.g}`)!, rows: sl.rows, cols, mode: 'gather',
        });
    }
  pack.run(a.scratch, reduced, send);
  const passed = message(a.scratch, 'relayRecv', a.rrecv.total, a.wire);
  await a.group.allToAllDevice(send, a.rsend.sizes, passed, { recvCounts: a.rrecv.sizes, counters: a.counters });
  const sums = new Blocks(a.wire), rows = new Blocks(a.wire);
  for (let r = 0; r < L.W; r++)
    for (const sl of a.rrecv.slots[r]!) {
      const s = sl.seg, rt = L.tables[s.t]!, cols = sl.c1 - sl.c0;
      if (s.kind === 'rb') sums.add(sl.at, cols, rt.pooledCol[rt.features.indexOf(s.f)]! + sl.c0, P, sl.rows, cols, true);
      else if (s.kind === 'ub') rows.add(sl.at, cols, ubAt[s.t]![s.g]! + sl.c0, rt.table.dim, sl.rows, cols, false);
    }
  sums.run(a.scratch, passed, pooled);
  rows.run(a.scratch, passed, ubRows);
}

/**
 * The hierarchical protocol's relay step of the backward, in device memory (the forward's relay slots
 * reversed): this rank's rb bag gradients once per other node and its ub rows' gradients to its relays;
 * as a relay, every relayed requester's bag gradients kept, and the ub rows' gradients summed per
 * node-level distinct row in requester order (scatter-adds by the requesters' index lists).
 */
export async function relayBackward(
  a: DeviceBackwardArgs, g: DeviceArray, ug: DeviceArray, ubAt: number[][], rel: PerRequester, un: { at: number[]; total: number },
): Promise<{ bags: DeviceArray; union: DeviceArray }> {
  const { L } = a;
  const P = L.pooledDim;
  const toRelays = message(a.scratch, 'toRelays', a.rrecv.total, a.wire);
  const fromG = new Blocks('fp32', a.wire), fromUb = new Blocks('fp32', a.wire);
  for (let r = 0; r < L.W; r++)
    for (const sl of a.rrecv.slots[r]!) {
      const s = sl.seg, rt = L.tables[s.t]!, cols = sl.c1 - sl.c0;
      if (s.kind === 'rb') fromG.add(rt.pooledCol[rt.features.indexOf(s.f)]! + sl.c0, P, sl.at, cols, sl.rows, cols, false);
      else if (s.kind === 'ub') fromUb.add(ubAt[s.t]![s.g]! + sl.c0, rt.table.dim, sl.at, cols, sl.rows, cols, false);
    }
  fromG.run(a.scratch, g, toRelays);
  fromUb.run(a.scratch, ug, toRelays);
  const atRelay = message(a.scratch, 'atRelay', a.rsend.total, a.wire);
  await a.group.allToAllDevice(toRelays, a.rrecv.sizes, atRelay, { recvCounts: a.rsend.sizes, counters: a.counters });
  for (let q = 0; q < L.W; q++) for (const sl of a.rsend.slots[q]!) if (sl.seg.kind === 'rb') rel.of(q);
  const bags = a.scratch.get('relayedGrad', rel.total), union = a.scratch.get('unionGrad', un.total);
  bags.zero(0, rel.total);
  union.zero(0, un.total);
  const idx = await relayIndexes(a.scratch, a.rsend, a.unions);
  const keep = new Blocks(a.wire);
  for (let q = 0; q < L.W; q++)
    for (const sl of a.rsend.slots[q]!) {
      const s = sl.seg, rt = L.tables[s.t]!, cols = sl.c1 - sl.c0;
      if (s.kind === 'rb') keep.add(sl.at, cols, rel.of(q) + rt.pooledCol[rt.features.indexOf(s.f)]! + sl.c0, P, sl.rows, cols, false);
      else if (s.kind === 'ub')
        // the per-row sums run in requester order, as on the host
        a.scratch.addon.indexDeviceRows({
          src: atRelay.native, srcKind: a.wire, dstKind: 'fp32', srcOffset: sl.at, srcStride: cols, dst: union.native, dstOffset: un.at[unionIndex(a.unions, s.t, s.g)]! + sl.c0, dstStride: rt.table.dim,
          meta: idx.meta.native, idxAt: idx.at.get(`${q}\u0000${s.t}\u0000${s.g}`)!, rows: sl.rows, cols, mode: 'scatterAdd',
        });
    }
  keep.run(a.scratch, atRelay, bags);
  return { bags, union };
}

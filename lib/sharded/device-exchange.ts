// device-exchange.ts — the sharded runtime's device path. Where this rank's engine is on a GPU and its
// group is an NCCL group on that GPU, the engine writes its outputs (rb partial sums and rows, ub and
// node-tier rows) into device memory, the owner packs them into the output message there, NCCL moves the
// message between device buffers, and the requester adds the partial sums, and pools or places the rows,
// into its outputs there; under the hierarchical protocol the relays reduce, pass on and sum in device
// memory too. The backward sends the gradients back the same way and hands the engine its gradients in
// device memory. Host memory is touched at the caller's boundary (the outputs read back after forward(),
// not after forwardOnDevice(); host gradients written once) and for what the host computes anyway: the
// index lists of the routing (positions, inverse indices, bag offsets) and the ids; the per-row gradient
// sums (device-scratch.ts RowSums) and the replica and node-tier syncs (device-replica-sync.ts) run in
// device memory too. Packing, unpacking, pooling and placing follow the host path's
// slots (schedule.ts) and order with the kernels of native/cuda/exchange_kernels.h, so every value is
// bitwise the host path's (disk-backed shards included: their caches live in the engine's device memory).
// Plans with dynamic tables run the host path, which issues the same collectives in the same order, so a
// rank of either kind trains beside the other; `deviceExchangeBlocker` says why a rank runs on the host.
import { DeviceArray } from '../device-array.js';
import type { NativeBatch, NativeEngine } from '../binding.js';
import type { ShardPlan } from '../plan/shard-plan.js';
import type { ProcessGroup } from './group.js';
import type { LocalLayout } from './local-layout.js';
import { part, type UniqT } from './routing.js';
import { unionIndex } from './relay.js';
import type { HostOutputs, MeanColumns, StepArgs } from './step-args.js';
import { concat } from './arrays.js';
import { featureLayout, nodeLayout, PerRequester, sequenceOffsets, ubLayout, unionLayout } from './device-layout.js';
import { relayBackward, relayForward } from './device-relay.js';
import { Blocks, Indexes, message, type DeviceScratch } from './device-scratch.js';

export { DeviceScratch, type DeviceOpsAddon } from './device-scratch.js';

/**
 * Why this rank's exchanges cannot stay in device memory (undefined: they can): the engine's device, the
 * group's transport and device, and what the plan holds.
 */
export function deviceExchangeBlocker(
  plan: ShardPlan,
  L: LocalLayout,
  group: ProcessGroup,
  device: string,
  engine: NativeEngine,
): string | undefined {
  if (!device.startsWith('cuda:')) return `the engine is on ${device}`;
  if (group.kind !== 'nccl') return `the group is ${group.kind === 'mpi' ? 'an MPI' : 'an in-process'} group (device buffers need NCCL)`;
  if (`cuda:${group.cudaDevice}` !== device) return `the group's communicator is on cuda:${group.cudaDevice}, the engine on ${device}`;
  if (typeof (engine as Partial<NativeEngine>).forwardDevice !== 'function') return 'the engine has no device outputs';
  for (const t of plan.tables) if (t.dynamic) return `table '${t.name}' is dynamic`;
  return undefined;
}

/** What both phases of a device step work from: the step (step-args.ts) and the device path's buffers. */
export interface DeviceStepArgs extends StepArgs {
  scratch: DeviceScratch;
}

export interface DeviceForwardArgs extends DeviceStepArgs {
  engine: NativeEngine;
  /** the owner batch, each local feature's ids in it and each source's first id in them */
  owner: NativeBatch;
  featIds: readonly number[];
  idOff: readonly (readonly number[])[];
  /** the pooled output's mean columns: each divided by its bags' lengths once everything is summed */
  means: readonly MeanColumns[];
  /** where this rank's outputs go: host arrays they are read into, or device arrays they stay in */
  out: HostOutputs | DeviceOutputArrays;
}

/** This rank's outputs left in device memory: pooled [B × pooledDim], the sequence features' values back to back in plan order (`sizes` of them each). */
export interface DeviceOutputArrays {
  pooled: DeviceArray;
  sequences: DeviceArray;
  sizes: ReadonlyMap<string, number>;
}

/** The forward from the engine call on: outputs packed, exchanged, added up and pooled in device memory, then read into host arrays (or left in device arrays). */
export async function forwardOnDevice(a: DeviceForwardArgs): Promise<void> {
  const { L, B } = a;
  const LPD = L.localPooledDim, P = L.pooledDim;
  const seqAt = sequenceOffsets(L, (i) => a.featIds[i]!);
  const out = a.scratch.get('out', a.Btot * LPD), seq = a.scratch.get('seq', seqAt.total);
  await a.engine.forwardDevice(a.owner, out.native, seq.native);
  // owner side: every source's rb partial sums (rows of its bags) and ub rows into the output message
  const send = message(a.scratch, 'send', a.own.total, a.wire);
  const fromOut = new Blocks('fp32', a.wire), fromSeq = new Blocks('fp32', a.wire);
  for (let p = 0; p < L.W; p++)
    for (const sl of a.own.slots[p]!) {
      const f = L.localFeatures[sl.feature]!, cols = sl.c1 - sl.c0;
      if (f.pooling !== 'none') fromOut.add(a.Boff[sl.src]! * LPD + f.col, LPD, sl.at, cols, sl.rows, cols, false);
      else fromSeq.add(seqAt.at[sl.feature]! + a.idOff[sl.feature]![sl.src]! * cols, cols, sl.at, cols, sl.rows, cols, false);
    }
  fromOut.run(a.scratch, out, send);
  fromSeq.run(a.scratch, seq, send);
  const recv = message(a.scratch, 'recv', a.req.total, a.wire);
  await a.group.allToAllDevice(send, a.own.sizes, recv, { recvCounts: a.req.sizes, counters: a.counters });
  // requester side, in the host path's order: this rank's own lookups (dp tables, replicated tiers), the
  // partial sums of every owner, then the unique rows of every ub row group pooled into their bags
  const into = a.out.pooled instanceof DeviceArray ? (a.out as DeviceOutputArrays) : undefined, host = into ? undefined : (a.out as HostOutputs);
  const pooled = into?.pooled ?? a.scratch.get('pooled', B * P);
  pooled.zero(0, B * P);
  const local = new Blocks();
  for (const lf of L.localFeatures) {
    if (lf.kind !== 'loc' || lf.pooling === 'none') continue;
    const rt = L.tables[lf.t]!;
    local.add(lf.col, LPD, rt.pooledCol[rt.features.indexOf(lf.f!)]!, P, B, rt.table.dim, true);
  }
  local.run(a.scratch, out, pooled);
  // sequence outputs: every id's row at its position (this rank's own lookups, rb rows, pooled ub / node rows)
  const so = into ? featureLayout(into.sizes) : featureLayout(host!.seqOut);
  const seqDev = into?.sequences ?? a.scratch.get('seqOut', so.total);
  const idx = new Indexes();
  const seqCopies: { from: 'seq' | 'recv'; srcOffset: number; srcStride: number; idxAt: number; rows: number; cols: number; dstOffset: number; dim: number }[] = [];
  L.localFeatures.forEach((lf, li) => {
    if (lf.kind !== 'loc' || lf.pooling !== 'none') return;
    const p0 = part(a.segs.get(lf.f!)!, 0, B);
    seqCopies.push({ from: 'seq', srcOffset: seqAt.at[li]!, srcStride: lf.dim, idxAt: idx.add(p0.pos), rows: p0.n, cols: lf.dim, dstOffset: so.at.get(lf.f!)!, dim: lf.dim });
  });
  const ubAt = ubLayout(L, a.ub), unAt = unionLayout(L, a.unions), nodeAt = nodeLayout(L, a.node);
  const ubRows = a.scratch.get('ubRows', ubAt.total), unionRows = a.scratch.get('unionRows', unAt.total), nodeRows = a.scratch.get('nodeRows', nodeAt.total);
  const tierRows = new Blocks(a.wire);
  // as a relay (hierarchical): the partial sums of the requesters on other nodes, reduced per requester
  const red = new PerRequester(a.bags, P);
  const sums = new Blocks(a.wire), rows = new Blocks(a.wire), relaySums = new Blocks(a.wire), relayRows = new Blocks(a.wire);
  for (let d = 0; d < L.W; d++)
    for (const sl of a.req.slots[d]!) {
      const s = sl.seg, rt = L.tables[s.t]!, cols = sl.c1 - sl.c0;
      if (sl.src !== L.rank) {
        if (s.kind === 'rb') relaySums.add(sl.at, cols, red.of(sl.src) + rt.pooledCol[rt.features.indexOf(s.f)]! + sl.c0, P, sl.rows, cols, true);
      } else if (s.kind === 'rb' && rt.pooling === 'none') {
        const p = part(a.segs.get(s.f)!, 2 + s.g, B);
        seqCopies.push({ from: 'recv', srcOffset: sl.at, srcStride: cols, idxAt: idx.add(p.pos), rows: sl.rows, cols, dstOffset: so.at.get(s.f)! + sl.c0, dim: rt.table.dim });
      } else if (s.kind === 'rb') sums.add(sl.at, cols, rt.pooledCol[rt.features.indexOf(s.f)]! + sl.c0, P, sl.rows, cols, true);
      else if (s.kind === 'node') tierRows.add(sl.at, cols, nodeAt.at.get(s.t)! + a.node.get(s.t)!.starts[d % L.rpn]! * rt.table.dim, rt.table.dim, sl.rows, cols, false);
      else if (s.kind === 'ub' && L.relaysTo(d)) relayRows.add(sl.at, cols, unAt.at[unionIndex(a.unions, s.t, s.g)]! + sl.c0, rt.table.dim, sl.rows, cols, false);
      else if (s.kind === 'ub') rows.add(sl.at, cols, ubAt.at[s.t]![s.g]! + sl.c0, rt.table.dim, sl.rows, cols, false);
    }
  sums.run(a.scratch, recv, pooled);
  rows.run(a.scratch, recv, ubRows);
  tierRows.run(a.scratch, recv, nodeRows);
  const positions = await idx.upload(a.scratch, 'seqPositions');
  for (const c of seqCopies)
    a.scratch.addon.indexDeviceRows({
      src: (c.from === 'seq' ? seq : recv).native, srcKind: c.from === 'seq' ? 'fp32' : a.wire, srcOffset: c.srcOffset, srcStride: c.srcStride,
      dst: seqDev.native, dstKind: 'fp32', dstOffset: c.dstOffset, dstStride: c.dim, meta: positions.native, idxAt: c.idxAt, rows: c.rows, cols: c.cols, mode: 'scatter',
    });
  if (L.hier) await relayForward(a, recv, red, relaySums, relayRows, unAt.at, unionRows, pooled, ubAt.at, ubRows);
  // node tiers first, then the ub row groups, as the host path pools them
  const sets: PoolSet[] = [];
  for (const [t, u] of a.node) sets.push({ t, u, part: 1, rows: nodeRows, rowsAt: nodeAt.at.get(t)! });
  a.ub.forEach((groups, t) => groups.forEach((u, gi) => sets.push({ t, u, part: 2 + gi, rows: ubRows, rowsAt: ubAt.at[t]![gi]! })));
  await poolRows(a, sets, pooled, seqDev, so.at);
  // mean features: divided by their bags' lengths once every part is summed (as the host path)
  await divideMeans(a.scratch, pooled, P, B, a.means);
  if (!host) return;
  if (B * P > 0) await pooled.readInto(host.pooled.subarray(0, B * P), 0);
  await Promise.all([...host.seqOut].map(([f, x]) => (x.length > 0 ? seqDev.readInto(x, so.at.get(f)!) : undefined)));
}

/** The mean columns of m [B × stride], each divided by its bags' lengths on the device (shard::divide_bags's math). */
export async function divideMeans(scratch: DeviceScratch, m: DeviceArray, stride: number, B: number, means: readonly MeanColumns[]): Promise<void> {
  if (means.length === 0 || B === 0) return;
  const lens = new Indexes();
  const at = means.map((x) => lens.add(x.lengths));
  const meta = await lens.upload(scratch, 'meanLengths');
  means.forEach((x, k) => scratch.addon.divideDeviceBags({ m: m.native, stride, col: x.col, dim: x.dim, meta: meta.native, lengthsAt: at[k]!, bags: B }));
}

/** One set of distinct rows to pool: table t's ids of routing range `part`, their rows at rowsAt of `rows`. */
interface PoolSet {
  t: number;
  u: UniqT;
  part: number;
  rows: DeviceArray;
  rowsAt: number;
}

/**
 * Pools sets of distinct rows into the pooled output, sets and features in order (the host path's); a
 * sequence table's rows go to their ids' positions in the sequence outputs instead (gathered by inverse
 * index into a row per id, then scattered by position).
 */
async function poolRows(a: DeviceForwardArgs, sets: readonly PoolSet[], pooled: DeviceArray, seqDev: DeviceArray, seqAt: ReadonlyMap<string, number>): Promise<void> {
  const { L, B } = a;
  const P = L.pooledDim;
  const seqIdx = new Indexes();
  const seqCalls: { set: PoolSet; dim: number; inverseAt: number; posAt: number; ids: number; dstOffset: number }[] = [];
  for (const set of sets) {
    const rt = L.tables[set.t]!;
    if (rt.pooling !== 'none') continue;
    rt.features.forEach((f, k) => {
      const p = part(a.segs.get(f)!, set.part, B);
      const inv = set.u.uq.inverse.subarray(set.u.featOff[k]!, set.u.featOff[k + 1]!);
      seqCalls.push({ set, dim: rt.table.dim, inverseAt: seqIdx.add(inv), posAt: seqIdx.add(p.pos), ids: inv.length, dstOffset: seqAt.get(f)! });
    });
  }
  if (seqCalls.length > 0) {
    const ix = await seqIdx.upload(a.scratch, 'seqPoolIdx');
    const perId = a.scratch.get('seqPerId', Math.max(...seqCalls.map((c) => c.ids * c.dim)));
    for (const c of seqCalls) {
      const common = { meta: ix.native, rows: c.ids, cols: c.dim, srcKind: 'fp32' as const, dstKind: 'fp32' as const };
      a.scratch.addon.indexDeviceRows({ ...common, src: c.set.rows.native, srcOffset: c.set.rowsAt, srcStride: c.dim, dst: perId.native, dstOffset: 0, dstStride: c.dim, idxAt: c.inverseAt, mode: 'gather' });
      a.scratch.addon.indexDeviceRows({ ...common, src: perId.native, srcOffset: 0, srcStride: c.dim, dst: seqDev.native, dstOffset: c.dstOffset, dstStride: c.dim, idxAt: c.posAt, mode: 'scatter' });
    }
  }
  // the bag lists the host routed, for the device: inverse indices and bag offsets (int32), weights (f32)
  const meta = new Indexes(), weights: Float32Array[] = [];
  let nWeights = 0;
  const calls: { set: PoolSet; dim: number; inverseAt: number; ids: number; offsetsAt: number; weightsAt: number; weighted: boolean; col: number }[] = [];
  for (const set of sets) {
    const rt = L.tables[set.t]!;
    if (rt.pooling === 'none') continue;
    rt.features.forEach((f, k) => {
      const p = part(a.segs.get(f)!, set.part, B);
      const inv = set.u.uq.inverse.subarray(set.u.featOff[k]!, set.u.featOff[k + 1]!);
      const inverseAt = meta.add(inv), offsetsAt = meta.addOffsets(p.lengths), weightsAt = nWeights;
      if (p.weights) weights.push(p.weights), (nWeights += p.weights.length);
      calls.push({ set, dim: rt.table.dim, inverseAt, ids: inv.length, offsetsAt, weightsAt, weighted: p.weights !== null, col: rt.pooledCol[k]! });
    });
  }
  if (calls.length === 0) return;
  const m = await meta.upload(a.scratch, 'poolMeta');
  const w = a.scratch.get('poolWeights', nWeights);
  if (nWeights > 0) await w.write(concat(weights, Float32Array), 0);
  for (const c of calls)
    a.scratch.addon.poolDeviceRows({
      rows: c.set.rows.native, rowsAt: c.set.rowsAt, dim: c.dim, meta: m.native, inverseAt: c.inverseAt, ids: c.ids, offsetsAt: c.offsetsAt, bags: B,
      weights: c.weighted ? w.native : null, weightsAt: c.weightsAt, dst: pooled.native, stride: P, col: c.col,
    });
}

export interface DeviceBackwardArgs extends DeviceStepArgs {
  /** this rank's pooled gradient [B × pooledDim] (rb mean columns already divided by bag length) */
  grad: DeviceArray;
  /** the gradient sums of every ub row group's unique rows, laid out by ubLayout */
  ubGrad: DeviceArray;
  /** the gradient sums of every node tier's distinct rows, laid out by nodeLayout */
  nodeGrad: DeviceArray;
  /** this rank's sequence gradients back to back, each sequence feature of the plan from seqAt */
  seqGrad: DeviceArray;
  seqAt: ReadonlyMap<string, number>;
}

/** What the gradient exchange leaves in device memory: the owner batch's pooled gradient and the received message. */
export interface DeviceGradients {
  pooled: DeviceArray;
  recv: DeviceArray;
}

/**
 * The backward's gradient exchange in device memory: the pooled gradient and the ub rows' gradient sums
 * packed into the gradient message, exchanged, and the owner batch's pooled gradient laid out (its
 * sequence gradients follow in `ownerSequenceGradients`, once the update batch is known).
 */
export async function gradientsOnDevice(a: DeviceBackwardArgs): Promise<DeviceGradients> {
  const { L } = a;
  const LPD = L.localPooledDim, P = L.pooledDim;
  const g = a.grad, ug = a.ubGrad, ng = a.nodeGrad;
  const ubAt = ubLayout(L, a.ub);
  const nodeAt = nodeLayout(L, a.node);
  // hierarchical: the gradients go to the relays first, which keep each relayed requester's bag gradients
  // and sum the ub rows' gradients per node-level distinct row
  const unAt = unionLayout(L, a.unions);
  const rel = new PerRequester(a.bags, P);
  const relayed = L.hier ? await relayBackward(a, g, ug, ubAt.at, rel, unAt) : undefined;
  const send = message(a.scratch, 'gradSend', a.req.total, a.wire);
  const fromG = new Blocks('fp32', a.wire), fromUb = new Blocks('fp32', a.wire), fromRelayed = new Blocks('fp32', a.wire);
  const fromUnion = new Blocks('fp32', a.wire), fromNode = new Blocks('fp32', a.wire);
  for (let d = 0; d < L.W; d++)
    for (const sl of a.req.slots[d]!) {
      const s = sl.seg, rt = L.tables[s.t]!, cols = sl.c1 - sl.c0;
      if (sl.src !== L.rank) {
        if (s.kind === 'rb') fromRelayed.add(rel.of(sl.src) + rt.pooledCol[rt.features.indexOf(s.f)]! + sl.c0, P, sl.at, cols, sl.rows, cols, false);
      } else if (s.kind === 'rb') {
        // (sequence tables' rows: sequenceGradientsOut)
        if (rt.pooling !== 'none') fromG.add(rt.pooledCol[rt.features.indexOf(s.f)]! + sl.c0, P, sl.at, cols, sl.rows, cols, false);
      } else if (s.kind === 'node') fromNode.add(nodeAt.at.get(s.t)! + a.node.get(s.t)!.starts[d % L.rpn]! * rt.table.dim, rt.table.dim, sl.at, cols, sl.rows, cols, false);
      else if (s.kind === 'ub' && L.relaysTo(d)) fromUnion.add(unAt.at[unionIndex(a.unions, s.t, s.g)]! + sl.c0, rt.table.dim, sl.at, cols, sl.rows, cols, false);
      else if (s.kind === 'ub') fromUb.add(ubAt.at[s.t]![s.g]! + sl.c0, rt.table.dim, sl.at, cols, sl.rows, cols, false);
    }
  fromG.run(a.scratch, g, send);
  fromUb.run(a.scratch, ug, send);
  fromNode.run(a.scratch, ng, send);
  await sequenceGradientsOut(a, send);
  if (relayed) {
    fromRelayed.run(a.scratch, relayed.bags, send);
    fromUnion.run(a.scratch, relayed.union, send);
  }
  const recv = message(a.scratch, 'gradRecv', a.own.total, a.wire);
  await a.group.allToAllDevice(send, a.req.sizes, recv, { recvCounts: a.own.sizes, counters: a.counters });
  // the owner batch's pooled gradient: every source's bag gradients in its rows; the rest (this rank's
  // own dp lookups, whose gradients travel by the replica sync) zero
  const pg = a.scratch.get('ownerGrad', a.Btot * LPD);
  pg.zero(0, a.Btot * LPD);
  const unpack = new Blocks(a.wire);
  for (let p = 0; p < L.W; p++)
    for (const sl of a.own.slots[p]!) {
      const lf = L.localFeatures[sl.feature]!;
      if (lf.pooling !== 'none') unpack.add(sl.at, lf.dim, a.Boff[sl.src]! * LPD + lf.col, LPD, sl.rows, lf.dim, false);
    }
  unpack.run(a.scratch, recv, pg);
  return { pooled: pg, recv };
}

/** rb sequence tables: every id's gradient row, gathered from its position, into its slot of the gradient message. */
async function sequenceGradientsOut(a: DeviceBackwardArgs, send: DeviceArray): Promise<void> {
  const { L, B } = a;
  const idx = new Indexes();
  const calls: { idxAt: number; rows: number; cols: number; srcOffset: number; dim: number; at: number }[] = [];
  for (let d = 0; d < L.W; d++)
    for (const sl of a.req.slots[d]!) {
      const s = sl.seg, rt = L.tables[s.t]!;
      if (sl.src !== L.rank || s.kind !== 'rb' || rt.pooling !== 'none') continue;
      calls.push({ idxAt: idx.add(part(a.segs.get(s.f)!, 2 + s.g, B).pos), rows: sl.rows, cols: sl.c1 - sl.c0, srcOffset: a.seqAt.get(s.f)! + sl.c0, dim: rt.table.dim, at: sl.at });
    }
  if (calls.length === 0) return;
  const grads = a.seqGrad;
  const ix = await idx.upload(a.scratch, 'seqGradIdx');
  for (const c of calls)
    a.scratch.addon.indexDeviceRows({
      src: grads.native, srcKind: 'fp32', srcOffset: c.srcOffset, srcStride: c.dim, dst: send.native, dstKind: a.wire, dstOffset: c.at, dstStride: c.cols,
      meta: ix.native, idxAt: c.idxAt, rows: c.rows, cols: c.cols, mode: 'gather',
    });
}

/**
 * The update batch's sequence gradients in device memory (features back to back, in order; `updIds`: each
 * local feature's ids in the update batch): ub and rb sequence features'
 * from the received message (each source's rows at its first id), the others' (the synced sums of dp
 * tables, replicated and node tiers) copied from the device arrays in `dev`; zero elsewhere.
 */
export function ownerSequenceGradients(
  a: Pick<DeviceBackwardArgs, 'L' | 'scratch' | 'own' | 'wire'>,
  updIds: readonly number[],
  idOff: readonly (readonly number[])[],
  recv: DeviceArray,
  dev: readonly ({ array: DeviceArray; at: number } | undefined)[],
): DeviceArray {
  const { L } = a;
  const seqAt = sequenceOffsets(L, (i) => updIds[i]!);
  const sg = a.scratch.get('ownerSeqGrad', seqAt.total);
  sg.zero(0, seqAt.total);
  const unpack = new Blocks(a.wire);
  for (let p = 0; p < L.W; p++)
    for (const sl of a.own.slots[p]!) {
      const lf = L.localFeatures[sl.feature]!;
      if (sl.seg.kind !== 'node' && lf.pooling === 'none') unpack.add(sl.at, lf.dim, seqAt.at[sl.feature]! + idOff[sl.feature]![sl.src]! * lf.dim, lf.dim, sl.rows, lf.dim, false);
    }
  unpack.run(a.scratch, recv, sg);
  L.localFeatures.forEach((lf, i) => {
    const d = dev[i];
    if (!d) return;
    const rows = new Blocks();
    rows.add(d.at, lf.dim, seqAt.at[i]!, lf.dim, updIds[i]!, lf.dim, false);
    rows.run(a.scratch, d.array, sg);
  });
  return sg;
}

// device-exchange.ts — the sharded runtime's device path. Where this rank's engine is on a GPU and its
// group is an NCCL group on that GPU, the engine writes its outputs (rb partial sums, ub rows) into device
// memory, the owner packs them into the output message there, NCCL moves the message between device
// buffers, and the requester adds the rb partial sums and pools the ub rows into its pooled output there;
// the backward sends the gradients back the same way and hands the engine its gradients in device memory.
// Host memory is touched at the caller's boundary — the pooled output read back after the forward, the
// pooled gradient (and the ub rows' gradient sums, computed from it on the host) written before the
// backward — and for what the host computes anyway: the bag lists of the ub pooling, the dp tables'
// gradient sync. Packing, unpacking and pooling follow the host path's slots (schedule.ts) and order with
// the kernels of native/cuda/exchange_kernels.h, so every sum is bitwise the host path's. Plans with what
// this path does not move (sequence outputs, node tiers, dynamic or disk-backed tables, the hierarchical
// protocol's relays, 16-bit wire values) run on the host path; `deviceExchangeBlocker` says why.
import { DeviceArray, type DeviceElemType } from '../device-array.js';
import type { NativeBatch, NativeEngine } from '../binding.js';
import type { ShardPlan } from '../plan/shard-plan.js';
import type { ProcessGroup, TrafficCounters } from './group.js';
import type { LocalLayout } from './local-layout.js';
import { part, type SegView, type UniqT } from './routing.js';
import type { Schedule } from './schedule.js';
import type { Wire } from './exchange-ops.js';

/** The engine's device calls (CUDA engines): outputs / gradients in device buffers, sequences back to back in feature order. */
export interface DeviceEngine extends NativeEngine {
  forwardDevice(batch: NativeBatch, pooled: object, seq: object): Promise<unknown>;
  backwardDevice(batch: NativeBatch, pooledGrad: object, seqGrad: object): Promise<{ skipped: boolean; uniqueRows: number }>;
}

export interface DeviceOpsAddon {
  copyDeviceBlocks(src: object, dst: object, blocks: Float64Array): void;
  poolDeviceRows(args: {
    rows: object; rowsAt: number; dim: number; meta: object; inverseAt: number; ids: number; offsetsAt: number; bags: number;
    weights: object | null; weightsAt: number; dst: object; stride: number; col: number;
  }): void;
}

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
  opts: { storage: boolean; wire: { forward: Wire; backward: Wire } },
): string | undefined {
  if (!device.startsWith('cuda:')) return `the engine is on ${device}`;
  if (group.kind !== 'nccl') return `the group is ${group.kind === 'mpi' ? 'an MPI' : 'an in-process'} group (device buffers need NCCL)`;
  if (`cuda:${group.cudaDevice}` !== device) return `the group's communicator is on cuda:${group.cudaDevice}, the engine on ${device}`;
  if (typeof (engine as Partial<DeviceEngine>).forwardDevice !== 'function') return 'the engine has no device outputs';
  if (opts.storage) return 'disk-backed shards are staged through host memory';
  if (opts.wire.forward !== 'fp32' || opts.wire.backward !== 'fp32') return 'wire values are fp16 / bf16 (the device path moves fp32)';
  if (L.hier) return 'the hierarchical protocol relays through host memory';
  for (const t of plan.tables) {
    if (t.dynamic) return `table '${t.name}' is dynamic`;
    if (t.pooling === 'none') return `table '${t.name}' has sequence outputs`;
  }
  for (const rt of L.tables) if (rt.N > 0) return `table '${rt.table.name}' has a node tier`;
  return undefined;
}

/** Device arrays kept from step to step, grown as a step needs more (never shrunk), and the addon's kernels. */
export class DeviceScratch {
  private readonly arrays = new Map<string, DeviceArray>();
  /** `addon`: the addon of the engine's device (its copyDeviceBlocks / poolDeviceRows) */
  constructor(private readonly device: string, readonly addon: DeviceOpsAddon) {}

  /** The array named `name` with at least `n` elements of `type` (its contents are whatever the last user left). */
  get(name: string, n: number, type: DeviceElemType = 'f32'): DeviceArray {
    let a = this.arrays.get(name);
    if (!a || a.length < n || a.type !== type) {
      a?.free();
      a = DeviceArray.alloc(type, Math.max(n, 1) + (n >> 2), { device: this.device });
      this.arrays.set(name, a);
    }
    return a;
  }

  free(): void {
    for (const a of this.arrays.values()) a.free();
    this.arrays.clear();
  }
}

/** Block lists of copyDeviceBlocks: 7 numbers per block. */
class Blocks {
  private v: number[] = [];
  add(srcOffset: number, srcStride: number, dstOffset: number, dstStride: number, rows: number, cols: number, add: boolean): void {
    if (rows > 0 && cols > 0) this.v.push(srcOffset, srcStride, dstOffset, dstStride, rows, cols, add ? 1 : 0);
  }
  run(scratch: DeviceScratch, src: DeviceArray, dst: DeviceArray): void {
    if (this.v.length > 0) scratch.addon.copyDeviceBlocks(src.native, dst.native, Float64Array.from(this.v));
  }
}

/** Where each local feature's sequence values start in a batch's back-to-back sequences (features in order), and their total. */
function sequenceOffsets(L: LocalLayout, idsOf: (i: number) => number): { at: number[]; total: number } {
  const at: number[] = [];
  let total = 0;
  L.localFeatures.forEach((lf, i) => {
    at.push(total);
    if (lf.pooling === 'none') total += idsOf(i) * lf.dim;
  });
  return { at, total };
}

/** Ids of local feature i in a native batch (the sum of its bags' lengths). */
function featureIds(batch: NativeBatch, i: number): number {
  let n = 0;
  for (let b = i * batch.batchSize; b < (i + 1) * batch.batchSize; b++) n += batch.lengths[b]!;
  return n;
}

/** Where every ub row group's unique rows sit in one array (t, g → first element), and its size. */
function ubLayout(L: LocalLayout, ub: readonly UniqT[][]): { at: number[][]; total: number } {
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

export interface DeviceForwardArgs {
  L: LocalLayout;
  group: ProcessGroup;
  engine: DeviceEngine;
  scratch: DeviceScratch;
  B: number;
  segs: Map<string, SegView>;
  ub: readonly UniqT[][];
  /** the owner batch, where each source's bags start in it, each local feature's ids and each source's first id in them */
  owner: NativeBatch;
  Btot: number;
  Boff: readonly number[];
  featIds: readonly number[];
  idOff: readonly (readonly number[])[];
  own: Schedule;
  req: Schedule;
  counters: TrafficCounters;
  /** this rank's pooled output [B × pooledDim] (host), written here */
  pooled: Float32Array;
}

/** The forward from the engine call on: outputs packed, exchanged, added up and pooled in device memory, then read into `pooled`. */
export async function forwardOnDevice(a: DeviceForwardArgs): Promise<void> {
  const { L, B } = a;
  const LPD = L.localPooledDim, P = L.pooledDim;
  const seqAt = sequenceOffsets(L, (i) => a.featIds[i]!);
  const out = a.scratch.get('out', a.Btot * LPD), seq = a.scratch.get('seq', seqAt.total);
  await a.engine.forwardDevice(a.owner, out.native, seq.native);
  // owner side: every source's rb partial sums (rows of its bags) and ub rows into the output message
  const send = a.scratch.get('send', a.own.total);
  const fromOut = new Blocks(), fromSeq = new Blocks();
  for (let p = 0; p < L.W; p++)
    for (const sl of a.own.slots[p]!) {
      const f = L.localFeatures[sl.feature]!, cols = sl.c1 - sl.c0;
      if (f.pooling !== 'none') fromOut.add(a.Boff[sl.src]! * LPD + f.col, LPD, sl.at, cols, sl.rows, cols, false);
      else fromSeq.add(seqAt.at[sl.feature]! + a.idOff[sl.feature]![sl.src]! * cols, cols, sl.at, cols, sl.rows, cols, false);
    }
  fromOut.run(a.scratch, out, send);
  fromSeq.run(a.scratch, seq, send);
  const recv = a.scratch.get('recv', a.req.total);
  await a.group.allToAllDevice(send, a.own.sizes, recv, { recvCounts: a.req.sizes, counters: a.counters });
  // requester side, in the host path's order: this rank's own lookups (dp tables, replicated tiers), the
  // partial sums of every owner, then the unique rows of every ub row group pooled into their bags
  const pooled = a.scratch.get('pooled', B * P);
  pooled.zero(0, B * P);
  const local = new Blocks();
  for (const lf of L.localFeatures) {
    if (lf.kind !== 'loc') continue;
    const rt = L.tables[lf.t]!;
    local.add(lf.col, LPD, rt.pooledCol[rt.features.indexOf(lf.f!)]!, P, B, rt.table.dim, true);
  }
  local.run(a.scratch, out, pooled);
  const ubAt = ubLayout(L, a.ub);
  const ubRows = a.scratch.get('ubRows', ubAt.total);
  const sums = new Blocks(), rows = new Blocks();
  for (let d = 0; d < L.W; d++)
    for (const sl of a.req.slots[d]!) {
      const s = sl.seg, rt = L.tables[s.t]!, cols = sl.c1 - sl.c0;
      if (s.kind === 'rb') sums.add(sl.at, cols, rt.pooledCol[rt.features.indexOf(s.f)]! + sl.c0, P, sl.rows, cols, true);
      else if (s.kind === 'ub') rows.add(sl.at, cols, ubAt.at[s.t]![s.g]! + sl.c0, rt.table.dim, sl.rows, cols, false);
    }
  sums.run(a.scratch, recv, pooled);
  rows.run(a.scratch, recv, ubRows);
  await poolUbRows(a, ubAt.at, ubRows, pooled);
  if (B * P > 0) await pooled.readInto(a.pooled.subarray(0, B * P), 0);
}

/** Pools every ub row group's unique rows into the pooled output: tables, groups and features in the host path's order. */
async function poolUbRows(a: DeviceForwardArgs, ubAt: number[][], ubRows: DeviceArray, pooled: DeviceArray): Promise<void> {
  const { L, B } = a;
  const P = L.pooledDim;
  // the bag lists the host routed, for the device: inverse indices and bag offsets (int32), weights (f32)
  const meta: number[] = [], weights: number[] = [];
  const calls: { rowsAt: number; dim: number; inverseAt: number; ids: number; offsetsAt: number; weightsAt: number; weighted: boolean; col: number }[] = [];
  a.ub.forEach((groups, t) =>
    groups.forEach((u, gi) => {
      const rt = L.tables[t]!;
      rt.features.forEach((f, k) => {
        const p = part(a.segs.get(f)!, 2 + gi, B);
        const inv = u.uq.inverse.subarray(u.featOff[k]!, u.featOff[k + 1]!);
        const inverseAt = meta.length, weightsAt = weights.length;
        for (let i = 0; i < inv.length; i++) meta.push(inv[i]!);
        const offsetsAt = meta.length;
        let o = 0;
        meta.push(0);
        for (let b = 0; b < B; b++) meta.push((o += p.lengths[b]!));
        if (p.weights) for (let i = 0; i < p.weights.length; i++) weights.push(p.weights[i]!);
        calls.push({ rowsAt: ubAt[t]![gi]!, dim: rt.table.dim, inverseAt, ids: inv.length, offsetsAt, weightsAt, weighted: p.weights !== null, col: rt.pooledCol[k]! });
      });
    }),
  );
  if (calls.length === 0) return;
  const m = a.scratch.get('ubMeta', meta.length, 'i32');
  await m.write(Int32Array.from(meta), 0);
  const w = a.scratch.get('ubWeights', weights.length);
  if (weights.length > 0) await w.write(Float32Array.from(weights), 0);
  for (const c of calls)
    a.scratch.addon.poolDeviceRows({
      rows: ubRows.native, rowsAt: c.rowsAt, dim: c.dim, meta: m.native, inverseAt: c.inverseAt, ids: c.ids, offsetsAt: c.offsetsAt, bags: B,
      weights: c.weighted ? w.native : null, weightsAt: c.weightsAt, dst: pooled.native, stride: P, col: c.col,
    });
}

export interface DeviceBackwardArgs {
  L: LocalLayout;
  group: ProcessGroup;
  scratch: DeviceScratch;
  B: number;
  Btot: number;
  Boff: readonly number[];
  ub: readonly UniqT[][];
  own: Schedule;
  req: Schedule;
  counters: TrafficCounters;
  /** this rank's pooled gradient [B × pooledDim] (host; rb mean columns already divided by bag length) */
  grad: Float32Array;
  /** the gradient sums of every ub row group's unique rows (host, from `grad`): ubGrad[t][g] */
  ubGrad: readonly Float32Array[][];
}

/** What the gradient exchange leaves in device memory: the owner batch's pooled gradient and the received message. */
export interface DeviceGradients {
  pooled: DeviceArray;
  recv: DeviceArray;
}

/**
 * The backward's gradient exchange in device memory: the pooled gradient and the ub rows' gradient sums
 * written to the device, packed into the gradient message, exchanged, and the owner batch's pooled
 * gradient laid out (its sequence gradients follow in `ownerSequenceGradients`, once the update batch is known).
 */
export async function gradientsOnDevice(a: DeviceBackwardArgs): Promise<DeviceGradients> {
  const { L, B } = a;
  const LPD = L.localPooledDim, P = L.pooledDim;
  const g = a.scratch.get('grad', B * P);
  if (B * P > 0) await g.write(a.grad.subarray(0, B * P), 0);
  const ubAt = ubLayout(L, a.ub);
  const ug = a.scratch.get('ubGrad', ubAt.total);
  await Promise.all(a.ubGrad.flatMap((groups, t) => groups.map((x, gi) => (x.length > 0 ? ug.write(x, ubAt.at[t]![gi]!) : undefined))));
  const send = a.scratch.get('gradSend', a.req.total);
  const fromG = new Blocks(), fromUb = new Blocks();
  for (let d = 0; d < L.W; d++)
    for (const sl of a.req.slots[d]!) {
      const s = sl.seg, rt = L.tables[s.t]!, cols = sl.c1 - sl.c0;
      if (s.kind === 'rb') fromG.add(rt.pooledCol[rt.features.indexOf(s.f)]! + sl.c0, P, sl.at, cols, sl.rows, cols, false);
      else if (s.kind === 'ub') fromUb.add(ubAt.at[s.t]![s.g]! + sl.c0, rt.table.dim, sl.at, cols, sl.rows, cols, false);
    }
  fromG.run(a.scratch, g, send);
  fromUb.run(a.scratch, ug, send);
  const recv = a.scratch.get('gradRecv', a.own.total);
  await a.group.allToAllDevice(send, a.req.sizes, recv, { recvCounts: a.own.sizes, counters: a.counters });
  // the owner batch's pooled gradient: every source's bag gradients in its rows; the rest (this rank's
  // own dp lookups, whose gradients travel by the replica sync) zero
  const pg = a.scratch.get('ownerGrad', a.Btot * LPD);
  pg.zero(0, a.Btot * LPD);
  const unpack = new Blocks();
  for (let p = 0; p < L.W; p++)
    for (const sl of a.own.slots[p]!) {
      const lf = L.localFeatures[sl.feature]!;
      if (lf.pooling !== 'none') unpack.add(sl.at, lf.dim, a.Boff[sl.src]! * LPD + lf.col, LPD, sl.rows, lf.dim, false);
    }
  unpack.run(a.scratch, recv, pg);
  return { pooled: pg, recv };
}

/**
 * The update batch's sequence gradients in device memory (features back to back, in order): ub features'
 * from the received message (each source's rows at its first id), the others' (the dp tables' and
 * replicated tiers' synced sums) written from the host arrays in `host`; zero elsewhere.
 */
export async function ownerSequenceGradients(
  a: Pick<DeviceBackwardArgs, 'L' | 'scratch' | 'own'>,
  upd: NativeBatch,
  idOff: readonly (readonly number[])[],
  recv: DeviceArray,
  host: readonly (Float32Array | null)[],
): Promise<DeviceArray> {
  const { L } = a;
  const seqAt = sequenceOffsets(L, (i) => featureIds(upd, i));
  const sg = a.scratch.get('ownerSeqGrad', seqAt.total);
  sg.zero(0, seqAt.total);
  const unpack = new Blocks();
  for (let p = 0; p < L.W; p++)
    for (const sl of a.own.slots[p]!) {
      const lf = L.localFeatures[sl.feature]!;
      if (lf.pooling === 'none') unpack.add(sl.at, lf.dim, seqAt.at[sl.feature]! + idOff[sl.feature]![sl.src]! * lf.dim, lf.dim, sl.rows, lf.dim, false);
    }
  unpack.run(a.scratch, recv, sg);
  await Promise.all(
    L.localFeatures.map((lf, i) => {
      const h = host[i];
      return lf.kind !== 'ub' && lf.pooling === 'none' && h && h.length > 0 ? sg.write(h, seqAt.at[i]!) : undefined;
    }),
  );
  return sg;
}

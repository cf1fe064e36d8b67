// device-backward.ts — the device path's backward up to the owner's update (host-exchange.ts's
// gradientsOnHost in device memory, collectives in the same order): the caller's gradients in device memory
// (written once when they came as host arrays), the rb mean columns divided by their bags' lengths, the
// per-row gradient sums of ub row groups, node tiers and replicated rows (RowSums: each row's contributions
// in id order, as the host's gradUnique adds them), the gradient exchange (device-exchange.ts), and the
// syncs of dp tables, replicated and node tiers (device-replica-sync.ts).
import type { JaggedBatch } from '../batch.js';
import type { Gradients } from '../collection.js';
import { DeviceArray } from '../device-array.js';
import { divideMeans, gradientsOnDevice, type DeviceGradients, type DeviceStepArgs } from './device-exchange.js';
import { featureLayout, nodeLayout, ubLayout } from './device-layout.js';
import { syncNodeTiersOnDevice, syncReplicatedHierOnDevice, syncReplicatedOnDevice, type DevRows } from './device-replica-sync.js';
import { Blocks, RowSums } from './device-scratch.js';
import type { Received } from './input-exchange.js';
import type { TableRt } from './local-layout.js';
import { part, type UniqT } from './routing.js';
import type { MeanColumns } from './step-args.js';

/** Device gradients of a backward, checked (lib/device-outputs.ts): the pooled and the sequence gradients back to back. */
export interface DeviceGradArrays {
  pooled: DeviceArray;
  sequences: DeviceArray;
}

export interface DeviceBackwardStepArgs extends DeviceStepArgs {
  batch: JaggedBatch;
  /** this rank's gradients: in device memory already, or host arrays written there once */
  grads: Gradients | DeviceGradArrays;
  /** each sequence feature's values in the gradient (plan order) */
  sequenceSizes: ReadonlyMap<string, number>;
  /** the pooled output's rb mean columns: their gradients go out divided by the bags' lengths */
  rbMeans: readonly MeanColumns[];
  /** what every source asked this rank for (its node-tier ids) */
  recv: readonly Received[];
  /** dp tables and replicated tiers: this rank's distinct rows of each */
  replicated: readonly { table: TableRt; rows: UniqT }[];
}

/** Synced rows in device memory: their ids (host) and fp32 gradient rows of the table's width from `at` of `array`. */
export interface SyncedDeviceRows {
  ids: BigInt64Array;
  array: DeviceArray;
  at: number;
}

/** What the owner's update reads on the device path. */
export interface DeviceStepGradients {
  /** the owner batch's pooled gradient and the received gradient message */
  exchanged: DeviceGradients;
  /** the synced rows of every dp table and replicated tier, and of every node tier, by plan table */
  replicated: Map<number, SyncedDeviceRows>;
  node: Map<number, SyncedDeviceRows>;
}

/** The backward up to the owner's update, in device memory. */
export async function backwardOnDevice(a: DeviceBackwardStepArgs): Promise<DeviceStepGradients> {
  const { L } = a;
  const dev = await gradientInputs(a);
  const sums = await gradientSums(a, dev);
  // 1–2. the gradients to the relays and the owners (device-exchange.ts)
  const exchanged = await gradientsOnDevice({ ...a, grad: dev.Gs, ubGrad: sums.ub, nodeGrad: sums.node, seqGrad: dev.seq, seqAt: dev.seqAt });
  // 3. dp tables and replicated tiers: all-gathered (flat) or summed within the node, then across nodes
  const local = a.replicated.map((x, k) => ({ table: x.table, ids: x.rows.uq.values, at: sums.repAt[k]! }));
  const rep = await (L.hier ? syncReplicatedHierOnDevice : syncReplicatedOnDevice)(L, a.group, a.wire, local, sums.rep, a.counters, a.scratch);
  // 4. node tiers: the rows where they arrived in the gradient message, synced across nodes
  const nodeRows = new Map<number, DevRows[]>();
  for (let p = 0; p < L.W; p++)
    for (const sl of a.own.slots[p]!) {
      if (sl.seg.kind !== 'node') continue;
      let nr = nodeRows.get(sl.seg.t);
      if (!nr) nodeRows.set(sl.seg.t, (nr = []));
      nr.push({ ids: a.recv[sl.src]!.entries[sl.entry]!.ids, arr: exchanged.recv, at: sl.at, kind: a.wire });
    }
  const node = await syncNodeTiersOnDevice(L, a.group, a.wire, nodeRows, a.counters, a.scratch);
  const inArray = (synced: typeof rep) => new Map([...synced.rows].map(([t, r]) => [t, { ids: r.ids, array: synced.grads, at: r.at }]));
  return { exchanged, replicated: inArray(rep), node: inArray(node) };
}

/**
 * The gradients in device memory: the pooled gradient (G; the caller's DeviceArray, or the host array
 * written once), the same with the rb mean columns divided by their bag lengths (Gs, what goes out to rb
 * owners), and the sequence gradients back to back (seq, each feature from seqAt).
 */
async function gradientInputs(a: DeviceBackwardStepArgs): Promise<{ G: DeviceArray; Gs: DeviceArray; seq: DeviceArray; seqAt: Map<string, number> }> {
  const S = a.scratch, BP = a.B * a.L.pooledDim;
  const so = featureLayout(a.sequenceSizes);
  let G: DeviceArray, seq: DeviceArray;
  if (a.grads.pooled instanceof DeviceArray) ({ pooled: G, sequences: seq } = a.grads as DeviceGradArrays);
  else {
    const h = a.grads as Gradients;
    G = S.get('grad', BP);
    if (BP > 0) await G.write(h.pooled!.subarray(0, BP), 0);
    seq = S.get('seqGrad', so.total);
    await Promise.all([...a.sequenceSizes.keys()].map((f) => (h.sequences![f]!.length > 0 ? seq.write(h.sequences![f]!, so.at.get(f)!) : undefined)));
  }
  let Gs = G;
  if (a.rbMeans.length > 0 && BP > 0) {
    Gs = S.get('gradDivided', BP);
    const copy = new Blocks();
    copy.add(0, BP, 0, BP, 1, BP, false);
    copy.run(S, G, Gs);
    await divideMeans(S, Gs, a.L.pooledDim, a.B, a.rbMeans);
  }
  return { G, Gs, seq, seqAt: so.at };
}

/**
 * The per-row gradient sums, each row's contributions in id order as the host's gradUnique adds them
 * (RowSums): every ub row group's (laid out by ubLayout), every node tier's (nodeLayout), and the
 * replicated rows' (for the replica syncs).
 */
async function gradientSums(a: DeviceBackwardStepArgs, dev: { G: DeviceArray; seq: DeviceArray; seqAt: Map<string, number> }): Promise<{ ub: DeviceArray; node: DeviceArray; rep: DeviceArray; repAt: number[] }> {
  const S = a.scratch, L = a.L, B = a.B, P = L.pooledDim;
  const sums = new RowSums();
  const job = (u: UniqT, rt: TableRt, s: number, dst: DeviceArray, dstAt: number) => {
    const pooled = rt.pooling !== 'none';
    sums.add(pooled ? dev.G : dev.seq, pooled ? P : rt.table.dim, u.uq.inverse, u.uq.values.length, rt.table.dim, dst, dstAt, rt.features.map((f, k) => {
      const p = part(a.segs.get(f)!, s, B);
      return pooled
        ? { lengths: p.lengths, weights: p.weights, fullLen: a.batch.feature(f).lengths, mean: rt.pooling === 'mean', seqPos: null, col: rt.pooledCol[k]! }
        : { lengths: p.lengths, weights: null, fullLen: null, mean: false, seqPos: p.pos, col: dev.seqAt.get(f)! };
    }));
  };
  const ubAt = ubLayout(L, a.ub), nodeAt = nodeLayout(L, a.node);
  const ub = S.get('ubGrad', ubAt.total), node = S.get('nodeGrad', nodeAt.total);
  a.ub.forEach((groups, t) => groups.forEach((u, gi) => job(u, L.tables[t]!, 2 + gi, ub, ubAt.at[t]![gi]!)));
  for (const [t, u] of a.node) job(u, L.tables[t]!, 1, node, nodeAt.at.get(t)!);
  const repAt: number[] = [];
  let repTotal = 0;
  for (const x of a.replicated) {
    repAt.push(repTotal);
    repTotal += x.rows.uq.values.length * x.table.table.dim;
  }
  const rep = S.get('repGrad', repTotal);
  a.replicated.forEach((x, k) => job(x.rows, x.table, 0, rep, repAt[k]!));
  await sums.run(S);
  return { ub, node, rep, repAt };
}

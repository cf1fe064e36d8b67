// device-replica-sync.ts — the syncs of dp tables, replicated hot tiers and node tiers on the device path,
// with replica-sync.ts's collectives and bytes: each exchange's counts go through the host (uncounted
// metadata), then one device message per peer carries its row ids (their bytes as wire elements) and
// their gradient rows in the wire dtype. The ids are read back, since the host assembles the update batch
// and the next step's row lists; the gradients never leave device memory: summed per row there
// (RowSums, in the host's order), rounded to the wire dtype and back wherever the host path rounds them,
// and laid out for the engine's update to read where they are. Flat protocol: one all-gather
// (syncReplicatedOnDevice); hierarchical: the node-mate, rail all-reduce and node steps
// (syncReplicatedHierOnDevice); node tiers: the rail all-reduce (syncNodeTiersOnDevice).
import type { DeviceArray } from '../device-array.js';
import { concat, wireBytes } from './arrays.js';
import { exchangeOps, type Wire } from './exchange-ops.js';
import type { ProcessGroup, TrafficCounters } from './group.js';
import type { LocalLayout, TableRt } from './local-layout.js';
import { Blocks, RowSums, message, type DeviceScratch } from './device-scratch.js';

/** One table's rows after the sync: their ids (host, ranks in order) and fp32 gradients from `at` of the result's array. */
export interface DeviceRowGrads {
  ids: BigInt64Array;
  at: number;
}

/** `n` 8-byte ids as wire elements: a view of their bytes (fp32 wire: 2 f32 each; 16-bit wire: 4 u16 each). */
function idElements(ids: BigInt64Array, wire: Wire): Float32Array | Uint16Array {
  return wire === 'fp32' ? new Float32Array(ids.buffer, ids.byteOffset, ids.length * 2) : new Uint16Array(ids.buffer, ids.byteOffset, ids.length * 4);
}

/**
 * dp tables and replicated tiers, flat protocol: `local` holds this rank's distinct rows of each such table
 * (host ids) and their gradient sums (fp32 rows of the table's width in `sums` from `at`). Counts first
 * (uncounted metadata, host), then one all-gather of ids + wire gradients per rank. Returns, per plan table
 * index, every rank's rows and the device array holding their gradients (as they travelled: rounded to the
 * wire dtype).
 */
export async function syncReplicatedOnDevice(
  L: LocalLayout,
  g: ProcessGroup,
  wire: Wire,
  local: readonly { table: TableRt; ids: BigInt64Array; at: number }[],
  sums: DeviceArray,
  counters: TrafficCounters,
  scratch: DeviceScratch,
): Promise<{ grads: DeviceArray; rows: Map<number, DeviceRowGrads> }> {
  const W = L.W, T = local.length;
  const dims = local.map((x) => x.table.table.dim);
  const c = await g.allGather(Float64Array.from(local.map((x) => x.ids.length)), { uncounted: true, recvCounts: new Array(W).fill(T) });
  const counts = (p: number) => dims.map((_, k) => c.data[p * T + k]!);
  // every rank's message in wire elements: its ids (8 bytes each), then its gradient rows, tables in order
  const size = Array.from({ length: W }, (_, p) => partSize(counts(p), dims, wire));
  const send = message(scratch, 'repSyncSend', size[L.rank]!, wire);
  const blocks = new Map<DeviceArray, Blocks>();
  await writePart(send, 0, local.map((x) => ({ ids: x.ids, arr: sums, at: x.at, kind: 'fp32' })), dims, wire, blocks);
  runBlocks(blocks, scratch, send);
  const recv = message(scratch, 'repSyncRecv', size.reduce((a, b) => a + b, 0), wire);
  await g.allGatherDevice(send, size[L.rank]!, recv, { recvCounts: size, counters });
  // per table: every rank's rows in rank order, the gradients back to fp32 on the device
  const parts: DevRows[][] = [];
  for (let p = 0, base = 0; p < W; base += size[p]!, p++) parts.push(await readPart(recv, base, counts(p), dims, wire));
  const at: number[] = [];
  let total = 0;
  dims.forEach((dim, k) => (at.push(total), (total += parts.reduce((a, x) => a + x[k]!.ids.length, 0) * dim)));
  const grads = scratch.get('repSyncGrads', total);
  const rows = new Map<number, DeviceRowGrads>();
  local.forEach((x, k) => rows.set(x.table.index, { ids: gatherRows(parts.map((r) => r[k]!), dims[k]!, grads, at[k]!, scratch), at: at[k]! }));
  return { grads, rows };
}

/** Rows on the device: their ids (host) and their fp32 values, `ids.length` rows of the table's width from `at` of `arr`. */
interface DevRows {
  ids: BigInt64Array;
  arr: DeviceArray;
  at: number;
  /** how the values are stored: 'fp32', or the wire dtype of a received message */
  kind: Wire;
}

/**
 * replica-sync.ts's exchangeRows in device memory: counts first (uncounted metadata, host), then one
 * message per peer — every table's ids, then every table's rows in the wire dtype — with allToAllDevice.
 * `send(d)` gives the rows for rank d, one per table (null: none). Returns per source rank its rows per
 * table (ids read back; values left in the received message).
 */
async function exchangeRowsOnDevice(
  g: ProcessGroup, wire: Wire, dims: readonly number[], peer: (d: number) => boolean, send: (d: number) => readonly (DevRows | null)[],
  counters: TrafficCounters, scratch: DeviceScratch, name: string,
): Promise<DevRows[][]> {
  const W = g.size, T = dims.length;
  const lists = Array.from({ length: W }, (_, d) => (peer(d) ? send(d) : []));
  // counts per peer and table (uncounted metadata)
  const mC = lists.map((_, d) => (peer(d) ? T : 0));
  const meta = concat(lists.filter((_, d) => peer(d)).map((l) => Float64Array.from(dims, (_, k) => l[k]?.ids.length ?? 0)), Float64Array);
  const mIn = await g.allToAllV(meta, mC, { uncounted: true, recvCounts: mC });
  const inCounts: number[][] = [];
  for (let p = 0, mo = 0; p < W; mo += mIn.counts[p]!, p++) inCounts.push(dims.map((_, k) => (mIn.counts[p]! > 0 ? mIn.data[mo + k]! : 0)));
  g.release(mIn.data);
  // the send message: per peer, its ids then its rows, in wire elements
  const sendSize = lists.map((l) => partSize(dims.map((_, k) => l[k]?.ids.length ?? 0), dims, wire));
  const sendMsg = message(scratch, `${name}Send`, sendSize.reduce((a, b) => a + b, 0), wire);
  const blocks = new Map<DeviceArray, Blocks>();
  for (let d = 0, base = 0; d < W; base += sendSize[d]!, d++) await writePart(sendMsg, base, lists[d]!, dims, wire, blocks);
  runBlocks(blocks, scratch, sendMsg);
  // what arrives: per source, its ids then its rows
  const recvSize = inCounts.map((n) => partSize(n, dims, wire));
  const recvMsg = message(scratch, `${name}Recv`, recvSize.reduce((a, b) => a + b, 0), wire);
  await g.allToAllDevice(sendMsg, sendSize, recvMsg, { recvCounts: recvSize, counters });
  const out: DevRows[][] = [];
  for (let p = 0, base = 0; p < W; base += recvSize[p]!, p++) out.push(await readPart(recvMsg, base, inCounts[p]!, dims, wire));
  return out;
}

/** Wire elements of one peer's part of a message: `n[k]` ids (8 bytes each) and rows of dims[k] per table. */
function partSize(n: readonly number[], dims: readonly number[], wire: Wire): number {
  const idw = 8 / wireBytes(wire);
  return n.reduce((a, x, k) => a + x * (idw + dims[k]!), 0);
}

/**
 * One peer's part of a message from `base`: every table's ids (written now), then every table's rows in
 * the wire dtype (their copies added to `blocks`, one list per source array, for runBlocks).
 */
async function writePart(msg: DeviceArray, base: number, rows: readonly (DevRows | null)[], dims: readonly number[], wire: Wire, blocks: Map<DeviceArray, Blocks>): Promise<void> {
  const ids = concat(rows.flatMap((x) => (x ? [x.ids] : [])), BigInt64Array);
  if (ids.length > 0) await msg.write(idElements(ids, wire), base);
  let at = base + (ids.length * 8) / wireBytes(wire);
  rows.forEach((x, k) => {
    if (!x || x.ids.length === 0) return;
    let b = blocks.get(x.arr);
    if (!b) blocks.set(x.arr, (b = new Blocks(x.kind, wire)));
    b.add(x.at, dims[k]!, at, dims[k]!, x.ids.length, dims[k]!, false);
    at += x.ids.length * dims[k]!;
  });
}

function runBlocks(blocks: ReadonlyMap<DeviceArray, Blocks>, scratch: DeviceScratch, dst: DeviceArray): void {
  for (const [src, b] of blocks) b.run(scratch, src, dst);
}

/** One source's part of a received message from `base` (`n[k]` rows per table): its ids read back, its rows left in `msg`. */
async function readPart(msg: DeviceArray, base: number, n: readonly number[], dims: readonly number[], wire: Wire): Promise<DevRows[]> {
  const ids = new BigInt64Array(n.reduce((a, b) => a + b, 0));
  if (ids.length > 0) await msg.readInto(idElements(ids, wire), base);
  const rows: DevRows[] = [];
  let io = 0, at = base + (ids.length * 8) / wireBytes(wire);
  dims.forEach((dim, k) => {
    rows.push({ ids: ids.subarray(io, io + n[k]!), arr: msg, at, kind: wire });
    io += n[k]!;
    at += n[k]! * dim;
  });
  return rows;
}

/**
 * Lists of rows of one table (width `dim`) summed per distinct id, lists in order (sumByRow of
 * replica-sync.ts: distinct ids ordered by (id mod m, id), each one's rows in list order, from 0.0f), into
 * fp32 rows of `into` from `at`; with `round`, the sums rounded to the wire dtype and back (what travels,
 * and the holder's own copy, hold wire values). Returns the distinct ids and the first of each residue.
 */
async function sumRowsOnDevice(
  lists: readonly DevRows[], dim: number, m: number, wire: Wire, round: boolean, into: DeviceArray, at: number, scratch: DeviceScratch, name: string,
): Promise<{ ids: BigInt64Array; start: number[] }> {
  const ids = concat(lists.map((l) => l.ids), BigInt64Array);
  const uq = exchangeOps().unique(ids, m);
  const start = [0];
  for (let j = 0; j < m; j++) start.push(start[j]! + uq.counts[j]!);
  // every list's rows as fp32, back to back, then one sum per distinct id
  const flat = scratch.get(`${name}In`, ids.length * dim);
  gatherRows(lists, dim, flat, 0, scratch);
  const sums = new RowSums();
  // one id per bag: id i reads row i of `flat`, scale 1 (sumByRow's gradUnique)
  sums.add(flat, dim, uq.inverse, uq.values.length, dim, into, at, [{ lengths: new Int32Array(ids.length).fill(1), weights: null, fullLen: null, mean: false, seqPos: null, col: 0 }]);
  await sums.run(scratch);
  if (round && wire !== 'fp32' && uq.values.length > 0) {
    const n = uq.values.length * dim;
    const w = message(scratch, `${name}Round`, n, wire);
    const to = new Blocks('fp32', wire), back = new Blocks(wire, 'fp32');
    to.add(at, n, 0, n, 1, n, false);
    back.add(0, n, at, n, 1, n, false);
    to.run(scratch, into, w);
    back.run(scratch, w, into);
  }
  return { ids: uq.values, start };
}

/** Rows of the lists, in list order, as one fp32 block per table of `out` (from `at`); returns their ids. */
function gatherRows(lists: readonly DevRows[], dim: number, out: DeviceArray, at: number, scratch: DeviceScratch): BigInt64Array {
  const byArr = new Map<DeviceArray, Blocks>();
  let o = 0;
  for (const l of lists) {
    let b = byArr.get(l.arr);
    if (!b) byArr.set(l.arr, (b = new Blocks(l.kind, 'fp32')));
    b.add(l.at, dim, at + o * dim, dim, l.ids.length, dim, false);
    o += l.ids.length;
  }
  runBlocks(byArr, scratch, out);
  return concat(lists.map((l) => l.ids), BigInt64Array);
}

/** Per table, `lists(k)` summed per row (sumRowsOnDevice, rounded) into one array of `name`; each result's rows ordered by (id mod m, id), `start` the first of each residue. */
async function sumTables(dims: readonly number[], lists: (k: number) => DevRows[], m: number, wire: Wire, scratch: DeviceScratch, name: string): Promise<(DevRows & { start: number[] })[]> {
  const n = dims.map((_, k) => lists(k).reduce((a, l) => a + l.ids.length, 0));
  const at: number[] = [];
  let total = 0;
  n.forEach((x, k) => (at.push(total), (total += x * dims[k]!)));
  const arr = scratch.get(name, total);
  const out: (DevRows & { start: number[] })[] = [];
  for (let k = 0; k < dims.length; k++) {
    const r = await sumRowsOnDevice(lists(k), dims[k]!, m, wire, true, arr, at[k]!, scratch, `${name}Sum`);
    out.push({ ids: r.ids, arr, at: at[k]!, kind: 'fp32', start: r.start });
  }
  return out;
}

/**
 * replica-sync.ts's railAllReduce in device memory: `nodeSum` per table this rank's node sums grouped by
 * home node (`home[m]` = the first row homed on node m; null: none); each node's sums to the rail peer on
 * their home node, summed there per row, nodes in order (rounded), and every home's global sums to the
 * rail peers on the other nodes. Returns per table the global sums of every row any node touched (fp32,
 * homes in order), with the same collectives and bytes as the host.
 */
async function railAllReduceOnDevice(
  L: LocalLayout, g: ProcessGroup, wire: Wire, dims: readonly number[], nodeSum: readonly ((DevRows & { home: number[] }) | null)[],
  counters: TrafficCounters, scratch: DeviceScratch, name: string,
): Promise<DevRows[]> {
  const rpn = L.rpn, nodes = L.W / rpn, node = L.nodeOf(L.rank), slot = L.rank % rpn;
  const rail = (d: number) => d % rpn === slot && L.nodeOf(d) !== node;
  const share = (k: number, m: number): DevRows | null => {
    const s = nodeSum[k];
    if (!s) return null;
    const a = s.home[m]!, b = s.home[m + 1]!;
    return { ids: s.ids.subarray(a, b), arr: s.arr, at: s.at + a * dims[k]!, kind: s.kind };
  };
  const toHome = await exchangeRowsOnDevice(g, wire, dims, rail, (d) => dims.map((_, k) => share(k, L.nodeOf(d))), counters, scratch, `${name}ToHome`);
  const homeSum = await sumTables(dims, (k) => {
    const lists: DevRows[] = [];
    for (let m = 0; m < nodes; m++) {
      const x = m === node ? share(k, m) : toHome[m * rpn + slot]![k]!;
      if (x && x.ids.length > 0) lists.push(x);
    }
    return lists;
  }, 1, wire, scratch, `${name}Home`);
  const fromHome = await exchangeRowsOnDevice(g, wire, dims, rail, () => homeSum, counters, scratch, `${name}FromHome`);
  const lists = dims.map((_, k) => Array.from({ length: nodes }, (_, m) => (m === node ? homeSum[k]! : fromHome[m * rpn + slot]![k]!)));
  let total = 0;
  const at = lists.map((l, k) => {
    const a = total;
    total += l.reduce((n, x) => n + x.ids.length, 0) * dims[k]!;
    return a;
  });
  const arr = scratch.get(`${name}Global`, total);
  return lists.map((l, k) => ({ ids: gatherRows(l, dims[k]!, arr, at[k]!, scratch), arr, at: at[k]!, kind: 'fp32' }));
}

/**
 * dp tables and replicated tiers, hierarchical protocol, in device memory: replica-sync.ts's
 * syncReplicatedHier step by step (to the row's holder in the node, node sums, rail-aligned across nodes,
 * global sums, back to every rank of the node), every value rounded to the wire dtype whenever it
 * travels and for the holder's own copy, with the same collectives and bytes. Returns, per plan table
 * index, every distinct row once with its global sum (fp32 in the returned array).
 */
export async function syncReplicatedHierOnDevice(
  L: LocalLayout, g: ProcessGroup, wire: Wire, local: readonly { table: TableRt; ids: BigInt64Array; at: number }[], sums: DeviceArray,
  counters: TrafficCounters, scratch: DeviceScratch,
): Promise<{ grads: DeviceArray; rows: Map<number, DeviceRowGrads> }> {
  const rpn = L.rpn, node = L.nodeOf(L.rank), nodes = L.W / rpn;
  const rows = new Map<number, DeviceRowGrads>();
  const dims = local.map((x) => x.table.table.dim);
  const inNode = (d: number) => L.nodeOf(d) === node;
  const layout = (n: readonly number[]) => {
    const at: number[] = [];
    let t = 0;
    n.forEach((x, k) => (at.push(t), (t += x * dims[k]!)));
    return { at, total: t };
  };
  // 1. this rank's rows ordered by the local index of their holder, rounded as they travel
  const mineAt = layout(local.map((x) => x.ids.length));
  const mineArr = scratch.get('hierMine', mineAt.total);
  const mine: { ids: BigInt64Array; start: number[] }[] = [];
  for (const [k, x] of local.entries())
    mine.push(await sumRowsOnDevice([{ ids: x.ids, arr: sums, at: x.at, kind: 'fp32' }], dims[k]!, rpn, wire, false, mineArr, mineAt.at[k]!, scratch, 'hierMineSum'));
  const atHolder = await exchangeRowsOnDevice(g, wire, dims, inNode, (d) => mine.map((m, k) => {
    const a = m.start[d % rpn]!, b = m.start[(d % rpn) + 1]!;
    return { ids: m.ids.subarray(a, b), arr: mineArr, at: mineAt.at[k]! + a * dims[k]!, kind: 'fp32' };
  }), counters, scratch, 'hierHolder');
  // 2. the node sums of this rank's rows (rounded: they travel, and this rank keeps its own), by home
  //    node: row x's is ⌊(x mod W) / rpn⌋
  const nodeSum = (await sumTables(dims, (k) => Array.from({ length: rpn }, (_, q) => atHolder[node * rpn + q]![k]!), L.W, wire, scratch, 'hierNode'))
    .map((x) => ({ ...x, home: Array.from({ length: nodes + 1 }, (_, m) => x.start[m * rpn]!) }));
  // 3.–4. the global sums, reduced at each row's home node and shared rail-aligned
  const globalSum = await railAllReduceOnDevice(L, g, wire, dims, nodeSum, counters, scratch, 'hierRail');
  // 5. to every rank of the node
  const all = await exchangeRowsOnDevice(g, wire, dims, inNode, () => globalSum, counters, scratch, 'hierAll');
  const n = dims.map((_, k) => Array.from({ length: rpn }, (_, q) => all[node * rpn + q]![k]!.ids.length).reduce((a, b) => a + b, 0));
  const lay = layout(n), grads = scratch.get('hierResult', lay.total);
  local.forEach((x, k) => {
    const ids = gatherRows(Array.from({ length: rpn }, (_, q) => all[node * rpn + q]![k]!), dims[k]!, grads, lay.at[k]!, scratch);
    rows.set(x.table.index, { ids, at: lay.at[k]! });
  });
  return { grads, rows };
}

/**
 * Node tiers in device memory: replica-sync.ts's syncNodeTiers with `parts` (per table, the rows this
 * rank's node asked this rank for and their gradients, in received messages) summed per row on the
 * device (rounded to the wire dtype), all-reduced with the holders of the same rows on the other nodes
 * (railAllReduceOnDevice), and the global sums laid out for the rows this rank holds.
 */
export async function syncNodeTiersOnDevice(
  L: LocalLayout, g: ProcessGroup, wire: Wire, parts: ReadonlyMap<number, DevRows[]>, counters: TrafficCounters, scratch: DeviceScratch,
): Promise<{ grads: DeviceArray; rows: Map<number, DeviceRowGrads> }> {
  const W = L.W, rpn = L.rpn, r = L.rank;
  const rows = new Map<number, DeviceRowGrads>();
  const nodeTables = L.tables.filter((rt) => rt.N > 0);
  const dims = nodeTables.map((rt) => rt.table.dim);
  let total = 0;
  const sumAt = nodeTables.map((rt, k) => {
    const a = total;
    total += (parts.get(rt.index) ?? []).reduce((n, l) => n + l.ids.length, 0) * dims[k]!;
    return a;
  });
  const sumArr = scratch.get('nodeTierSums', total);
  // ids are the holder's own tier slots: slot h is summed on node h mod nodes (replica-sync.ts)
  const nodes = W / rpn;
  const sums: ((DevRows & { home: number[] }) | null)[] = [];
  for (const [k, rt] of nodeTables.entries()) {
    const np = parts.get(rt.index);
    if (!np) {
      sums.push(null);
      continue;
    }
    const s = await sumRowsOnDevice(np, dims[k]!, nodes, wire, true, sumArr, sumAt[k]!, scratch, 'nodeTierSum');
    sums.push({ ids: s.ids, arr: sumArr, at: sumAt[k]!, kind: 'fp32', home: s.start });
  }
  const global: readonly (DevRows | null)[] = nodes > 1 ? await railAllReduceOnDevice(L, g, wire, dims, sums, counters, scratch, 'nodeTierRail') : sums;
  const lists = nodeTables.map((rt, k) => {
    const x = global[k];
    return L.nodeRowsHeld(rt, r) === 0 || !x || x.ids.length === 0 ? [] : [x];
  });
  let outTotal = 0;
  const outAt = lists.map((l, k) => {
    const a = outTotal;
    outTotal += l.reduce((n, x) => n + x.ids.length, 0) * dims[k]!;
    return a;
  });
  const grads = scratch.get('nodeTierResult', outTotal);
  nodeTables.forEach((rt, k) => {
    if (L.nodeRowsHeld(rt, r) === 0) return;
    rows.set(rt.index, { ids: gatherRows(lists[k]!, dims[k]!, grads, outAt[k]!, scratch), at: outAt[k]! });
  });
  return { grads, rows };
}

export type { DevRows };

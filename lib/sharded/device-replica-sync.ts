// device-replica-sync.ts — the flat protocol's sync of dp tables and replicated hot tiers on the device path
// (replica-sync.ts's syncReplicated, same collectives, same bytes): every rank's row ids and their gradient
// sums all-gathered in one message whose gradient part never leaves device memory. The ids travel in the
// same message (their bytes as wire elements) and are read back, since the host assembles the update batch;
// the gradients are rounded to the wire dtype and back on the device with the host's conversions, and land
// in one device array, every rank's rows of a table in rank order — what syncReplicated returns in host
// memory, for the engine's update to read where it is.
import type { DeviceArray } from '../device-array.js';
import { concat, wireBytes } from './arrays.js';
import type { Wire } from './exchange-ops.js';
import type { ProcessGroup, TrafficCounters } from './group.js';
import type { LocalLayout, TableRt } from './local-layout.js';
import { Blocks, message, type DeviceScratch } from './device-scratch.js';

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
  const rows = new Map<number, DeviceRowGrads>();
  const cnt = local.map((x) => x.ids.length);
  const c = await g.allGather(Float64Array.from(cnt), { uncounted: true, recvCounts: new Array(W).fill(T) });
  const n = (p: number, k: number) => c.data[p * T + k]!;
  // every rank's message in wire elements: its ids (8 bytes each), then its gradient rows, tables in order
  const idw = 8 / wireBytes(wire);
  const size: number[] = [], base: number[] = [];
  let total = 0;
  for (let p = 0; p < W; p++) {
    let e = 0;
    local.forEach((x, k) => (e += n(p, k) * (idw + x.table.table.dim)));
    base.push(total), size.push(e), (total += e);
  }
  const idsOf = (p: number) => local.reduce((a, _, k) => a + n(p, k), 0);
  const send = message(scratch, 'repSyncSend', size[L.rank]!, wire);
  const myIds = concat(local.map((x) => x.ids), BigInt64Array);
  if (myIds.length > 0) await send.write(idElements(myIds, wire), 0);
  const pack = new Blocks('fp32', wire);
  let at = myIds.length * idw;
  for (const x of local) {
    const dim = x.table.table.dim;
    pack.add(x.at, dim, at, dim, x.ids.length, dim, false);
    at += x.ids.length * dim;
  }
  pack.run(scratch, sums, send);
  const recv = message(scratch, 'repSyncRecv', total, wire);
  await g.allGatherDevice(send, size[L.rank]!, recv, { recvCounts: size, counters });
  // per table: every rank's rows in rank order, the gradients back to fp32 on the device
  const tableAt: number[] = [];
  let outTotal = 0;
  local.forEach((x, k) => {
    let m = 0;
    for (let p = 0; p < W; p++) m += n(p, k);
    tableAt.push(outTotal);
    outTotal += m * x.table.table.dim;
    rows.set(x.table.index, { ids: new BigInt64Array(m), at: tableAt[k]! });
  });
  const grads = scratch.get('repSyncGrads', outTotal);
  const unpack = new Blocks(wire, 'fp32');
  const filled = local.map(() => 0);
  for (let p = 0; p < W; p++) {
    const ids = new BigInt64Array(idsOf(p));
    if (ids.length > 0) await recv.readInto(idElements(ids, wire), base[p]!);
    let io = 0, go = base[p]! + ids.length * idw;
    local.forEach((x, k) => {
      const m = n(p, k), dim = x.table.table.dim, r = rows.get(x.table.index)!;
      r.ids.set(ids.subarray(io, io + m), filled[k]!);
      unpack.add(go, dim, tableAt[k]! + filled[k]! * dim, dim, m, dim, false);
      filled[k]! += m;
      io += m;
      go += m * dim;
    });
  }
  unpack.run(scratch, recv, grads);
  return { grads, rows };
}

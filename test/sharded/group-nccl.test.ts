// The NCCL group: where a CUDA device exists (a GPU, or the CUDA emulation under `npm run test:cuda-emu`),
// a one-rank group (bootstrapped through the in-process group) runs every collective exactly; where
// several ranks can each have a device (one GPU per rank, or the emulator, whose one device every rank
// may share), three ranks as threads of this process run every collective against a naive oracle, and a
// rank that never arrives fails its peer with COMM_TIMEOUT within the deadline, never a hang. Without a
// device or without an NCCL build, createNcclGroup refuses with BACKEND_UNAVAILABLE and the bootstrap
// group stays usable.
import { describe, it, expect } from 'vitest';
import { cudaBackend } from '../../lib/backends.js';
import { createInProcessGroups, createNcclGroup } from '../../lib/sharded/group.js';
import type { ProcessGroup } from '../../lib/sharded/group.js';
import { DenseModel } from '../../lib/train/dense.js';
import { DeviceArray } from '../../lib/device-array.js';

const cuda = cudaBackend();
const gpu = cuda.available;
const emulated = process.env.EMBSHARD_CUDA_EMU === '1';
const N = 3;
const multi = gpu && (emulated || (cuda.devices?.length ?? 0) >= N);

async function ncclGroups(n: number): Promise<{ boot: ProcessGroup[]; g: ProcessGroup[] }> {
  const boot = createInProcessGroups(n);
  const g = await Promise.all(boot.map((b) => createNcclGroup({ bootstrap: b, device: emulated ? 0 : b.rank, timeoutMs: 60_000 })));
  return { boot, g };
}

function closeAll(...groups: ProcessGroup[][]): void {
  for (const list of groups) for (const g of list) g.close();
}

// What rank `src` sends to rank `dst` in the all-to-all: (src + 2 dst) mod 4 elements, each naming both.
function payload(src: number, dst: number): number[] {
  return Array.from({ length: (src + 2 * dst) % 4 }, (_, i) => src * 100 + dst * 10 + i + 0.5);
}

describe('NCCL process group', () => {
  if (!gpu)
    it('without a GPU (or an NCCL build) createNcclGroup rejects with BACKEND_UNAVAILABLE', async () => {
      const [boot] = createInProcessGroups(1);
      await expect(createNcclGroup({ bootstrap: boot!, timeoutMs: 10_000 })).rejects.toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
      await boot!.barrier();
      boot!.close();
    });

  it('allReduceDevice refuses what is not a device buffer with INVALID_ARGUMENT', async () => {
    const [g] = createInProcessGroups(1);
    await expect(g!.allReduceDevice({ handle: {}, device: 0, count: 1, owner: {} }, 'sum')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    g!.close();
  });

  it.runIf(gpu)('a one-rank group on GPU 0: every collective exact', async () => {
    const [boot] = createInProcessGroups(1);
    const g = await createNcclGroup({ bootstrap: boot!, device: 0, timeoutMs: 60_000 });
    expect(g.kind).toBe('nccl');
    const a = await g.allToAllV(Float64Array.from([1.5, 2.5, 3.5]), [3]);
    expect(Array.from(a.data)).toEqual([1.5, 2.5, 3.5]);
    const ag = await g.allGather(Int32Array.from([7, 8]));
    expect(Array.from(ag.data)).toEqual([7, 8]);
    const x = Float32Array.from([1, -2]);
    await g.allReduce(x, 'sum');
    expect(Array.from(x)).toEqual([1, -2]);
    const b = Uint16Array.from([9, 10]);
    await g.broadcast(b, 0);
    expect(Array.from(b)).toEqual([9, 10]);
    await g.barrier();
    g.close();
    boot!.close();
  });

  describe.runIf(multi)(`${N} ranks, one device each${emulated ? ' (the emulator: all on its one device)' : ''}`, () => {
    it('all-to-all-v, all-gather-v, all-reduce, broadcast and barrier against a naive oracle', async () => {
      const { boot, g } = await ncclGroups(N);
      expect(g.map((x) => [x.kind, x.rank, x.size])).toEqual(Array.from({ length: N }, (_, r) => ['nccl', r, N]));

      // all-to-all-v (counts differ per pair, some are zero), twice so that staging buffers are reused
      for (let round = 0; round < 2; round++) {
        const res = await Promise.all(
          g.map((x) => {
            const parts = Array.from({ length: N }, (_, p) => payload(x.rank, p));
            return x.allToAllV(Float64Array.from(parts.flat()), parts.map((p) => p.length));
          }),
        );
        res.forEach((r, dst) => {
          const from = Array.from({ length: N }, (_, src) => payload(src, dst));
          expect(r.counts).toEqual(from.map((p) => p.length));
          expect(Array.from(r.data)).toEqual(from.flat());
        });
      }

      // all-gather-v: rank r contributes r + 1 elements
      const ag = await Promise.all(g.map((x) => x.allGather(Int32Array.from({ length: x.rank + 1 }, (_, i) => x.rank * 1000 + i))));
      const want = Array.from({ length: N }, (_, r) => Array.from({ length: r + 1 }, (_, i) => r * 1000 + i));
      for (const r of ag) {
        expect(r.counts).toEqual(want.map((w) => w.length));
        expect(Array.from(r.data)).toEqual(want.flat());
      }

      // all-reduce: the fp32 sum is the left-to-right sum in rank order, rounded after every addition
      // (1 + 1e8 - 1e8 is 0 in that order, 1 in another)
      const vals = (r: number) => [0.1 * (r + 1), r === 0 ? 1 : r === 1 ? 1e8 : -1e8, 3 + r / 7, -(2 ** -20) * (r + 3)];
      const sums = await Promise.all(g.map((x) => x.allReduce(Float32Array.from(vals(x.rank)), 'sum')));
      const naive = vals(0).map((_, i) => {
        let acc = Math.fround(vals(0)[i]!);
        for (let r = 1; r < N; r++) acc = Math.fround(acc + Math.fround(vals(r)[i]!));
        return acc;
      });
      for (const s of sums) expect(Array.from(s)).toEqual(naive);
      const maxes = await Promise.all(g.map((x) => x.allReduce(Int32Array.from([x.rank, -x.rank, 5]), 'max')));
      for (const m of maxes) expect(Array.from(m)).toEqual([N - 1, 0, 5]);
      const mins = await Promise.all(g.map((x) => x.allReduce(Float64Array.from([x.rank + 0.25, -x.rank]), 'min')));
      for (const m of mins) expect(Array.from(m)).toEqual([0.25, -(N - 1)]);

      // broadcast from rank 1: every rank ends with the root's data
      const bc = await Promise.all(g.map((x) => x.broadcast(Uint16Array.from(x.rank === 1 ? [9, 10, 11] : [0, 0, 0]), 1)));
      for (const b of bc) expect(Array.from(b)).toEqual([9, 10, 11]);

      await Promise.all(g.map((x) => x.barrier()));
      closeAll(g, boot);
    });

    it('allReduceDevice takes DeviceArrays: f32 and i64 summed in place against the naive sum, counted by their element size; u16 refused', async () => {
      const { boot, g } = await ncclGroups(N);
      const on = (x: ProcessGroup) => ({ device: `cuda:${x.cudaDevice}` });
      const f = g.map((_, r) => Float32Array.from({ length: 37 }, (_, i) => Math.fround(Math.cos(r * 5 + i))));
      const q = g.map((_, r) => BigInt64Array.from({ length: 11 }, (_, i) => BigInt((r + 1) * 1_000_000_007 * (i - 5))));
      const fd = await Promise.all(g.map((x, r) => DeviceArray.from(f[r]!, on(x))));
      const qd = await Promise.all(g.map((x, r) => DeviceArray.from(q[r]!, on(x))));
      const before = g.map((x) => x.stats().allReduce.sent);
      await Promise.all(g.map((x, r) => x.allReduceDevice(fd[r]!, 'sum')));
      await Promise.all(g.map((x, r) => x.allReduceDevice(qd[r]!, 'sum')));
      for (let r = 0; r < N; r++) {
        const got = (await fd[r]!.read()) as Float32Array;
        got.forEach((v, i) => expect(Math.abs(v - f.reduce((a, h) => a + h[i]!, 0))).toBeLessThanOrEqual(1e-5));
        expect(Array.from((await qd[r]!.read()) as BigInt64Array)).toEqual(Array.from(q[0]!, (_, i) => q.reduce((a, h) => a + h[i]!, 0n)));
      }
      // the bytes of host all-reduces of the same sizes: reduce-scatter + all-gather, chunk p to rank p
      const sent = (n: number, bytes: number, r: number) => {
        const chunk = (p: number) => Math.floor((n * (p + 1)) / N) - Math.floor((n * p) / N);
        let w = 0;
        for (let p = 0; p < N; p++) if (p !== r) w += bytes * (chunk(p) + chunk(r));
        return w;
      };
      g.forEach((x, r) => expect(x.stats().allReduce.sent - before[r]!).toBe(sent(37, 4, r) + sent(11, 8, r)));
      const half = DeviceArray.alloc('u16', 4, on(g[0]!));
      await expect(g[0]!.allReduceDevice(half, 'sum')).rejects.toMatchObject({ code: 'UNSUPPORTED_DTYPE' });
      for (const a of [...fd, ...qd, half]) a.free();
      closeAll(g, boot);
    });

    it('allReduceDevice sums GPU dense models\' gradients in device memory: the naive sum of their host copies, counted as allReduce', async () => {
      const { boot, g } = await ncclGroups(N);
      const spec = { denseIn: 3, bottom: [6, 4], top: [5, 1], numSparse: 2, embDim: 4, interaction: 'dot' as const };
      const models = g.map((x) => new DenseModel(spec, { optimizer: { type: 'sgd', lr: 0.1 }, seed: 1, device: `cuda:${x.cudaDevice}` }));
      // different inputs per rank, so every rank's gradients differ
      await Promise.all(models.map((m, r) => {
        const B = 4, q = (i: number) => Math.sin(17 * r + i);
        const dense = Float32Array.from({ length: B * 3 }, (_, i) => q(i)), sparse = Float32Array.from({ length: B * 8 }, (_, i) => q(100 + i) / 2);
        return m.forwardBackward(dense, sparse, Float32Array.from([1, 0, r % 2, 1]), B);
      }));
      const host = models.map((m) => Float32Array.from(m.grads));
      const before = g.map((x) => x.stats().allReduce.sent);
      await Promise.all(g.map((x, r) => x.allReduceDevice(models[r]!.deviceGrads()!, 'sum')));
      for (const m of models) {
        const got = m.grads;
        host[0]!.forEach((_, i) => {
          const want = host.reduce((a, h) => a + h[i]!, 0);
          expect(Math.abs(got[i]! - want)).toBeLessThanOrEqual(1e-6 + 1e-6 * Math.abs(want));
        });
      }
      // the bytes of a host all-reduce of the same size: reduce-scatter + all-gather, chunk p to rank p
      const n = host[0]!.length, chunk = (p: number) => Math.floor((n * (p + 1)) / N) - Math.floor((n * p) / N);
      g.forEach((x, r) => {
        let want = 0;
        for (let p = 0; p < N; p++) if (p !== r) want += 4 * (chunk(p) + chunk(r));
        expect(x.stats().allReduce.sent - before[r]!).toBe(want);
      });
      // an in-process group cannot read device memory
      const [solo] = createInProcessGroups(1);
      await expect(solo!.allReduceDevice(models[0]!.deviceGrads()!, 'sum')).rejects.toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
      solo!.close();
      closeAll(g, boot);
    });

    it('allToAllDevice and allGatherDevice move device arrays with no host copy: the naive oracle, counted as the host collectives are', async () => {
      const { boot, g } = await ncclGroups(N);
      const on = (x: ProcessGroup) => ({ device: `cuda:${x.cudaDevice}` });
      // send buffers hold more than is sent (a tail of -1s that must not travel); receive buffers more
      // than arrives (a tail of -7s that must stay)
      const sends = await Promise.all(g.map((x) => {
        const parts = Array.from({ length: N }, (_, p) => payload(x.rank, p));
        return DeviceArray.from(Float64Array.from([...parts.flat(), -1, -1]), on(x));
      }));
      const cap = 3 * N + 4;
      const recvs = await Promise.all(g.map((x) => DeviceArray.from(new Float64Array(cap).fill(-7), on(x))));
      for (const known of [false, true]) {
        const before = g.map((x) => ({ ...x.stats().allToAllV }));
        const res = await Promise.all(g.map((x, r) => {
          const sendCounts = Array.from({ length: N }, (_, p) => payload(r, p).length);
          const recvCounts = Array.from({ length: N }, (_, p) => payload(p, r).length);
          return x.allToAllDevice(sends[r]!, sendCounts, recvs[r]!, known ? { recvCounts } : undefined);
        }));
        for (let dst = 0; dst < N; dst++) {
          const from = Array.from({ length: N }, (_, src) => payload(src, dst));
          expect(res[dst]!.counts).toEqual(from.map((p) => p.length));
          const got = Array.from(await recvs[dst]!.read());
          const n = from.flat().length;
          expect(got.slice(0, n)).toEqual(from.flat());
          expect(got.slice(n)).toEqual(new Array(cap - n).fill(-7));
          // the bytes of allToAllV with the same sizes: every peer's payload, self excluded
          const st = g[dst]!.stats().allToAllV;
          let sent = 0, recv = 0;
          for (let p = 0; p < N; p++) if (p !== dst) (sent += 8 * payload(dst, p).length), (recv += 8 * payload(p, dst).length);
          expect(st.sent - before[dst]!.sent).toBe(sent);
          expect(st.recv - before[dst]!.recv).toBe(recv);
          expect(st.calls - before[dst]!.calls).toBe(1);
        }
      }
      // all-gather-v: rank r contributes the first r + 1 elements of its array
      const gs = await Promise.all(g.map((x) => DeviceArray.from(Int32Array.from({ length: N + 1 }, (_, i) => x.rank * 1000 + i), on(x))));
      const gr = await Promise.all(g.map((x) => DeviceArray.alloc('i32', (N * (N + 1)) / 2 + 3, on(x))));
      const want = Array.from({ length: N }, (_, r) => Array.from({ length: r + 1 }, (_, i) => r * 1000 + i));
      for (const known of [false, true]) {
        const res = await Promise.all(g.map((x, r) => x.allGatherDevice(gs[r]!, r + 1, gr[r]!, known ? { recvCounts: want.map((w) => w.length) } : undefined)));
        for (let r = 0; r < N; r++) {
          expect(res[r]!.counts).toEqual(want.map((w) => w.length));
          expect(Array.from(await gr[r]!.read())).toEqual([...want.flat(), 0, 0, 0]);
        }
      }
      for (const a of [...sends, ...recvs, ...gs, ...gr]) a.free();
      closeAll(g, boot);
    });

    it('device collectives refuse bad buffers and counts before anything moves; a receive buffer too small for what arrives breaks the group', async () => {
      const { boot, g } = await ncclGroups(2);
      const on = { device: `cuda:${g[0]!.cudaDevice}` };
      const f64 = DeviceArray.alloc('f64', 4, on), f32 = DeviceArray.alloc('f32', 4, on), small = DeviceArray.alloc('f64', 1, on);
      await expect(g[0]!.allToAllDevice(f64, [1, 1], f32)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      await expect(g[0]!.allToAllDevice(f64, [1], f64)).rejects.toMatchObject({ code: 'LENGTH_MISMATCH' });
      await expect(g[0]!.allToAllDevice(f64, [3, 2], f64)).rejects.toMatchObject({ code: 'LENGTH_MISMATCH' });
      await expect(g[0]!.allToAllDevice(f64, [1, 1], small, { recvCounts: [1, 1] })).rejects.toMatchObject({ code: 'LENGTH_MISMATCH' });
      await expect(g[0]!.allGatherDevice(f64, 5, f64)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      await expect(g[0]!.allToAllDevice(new Float64Array(2) as never, [1, 1], f64)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      const gone = DeviceArray.alloc('f64', 2, on);
      gone.free();
      await expect(g[0]!.allToAllDevice(gone, [1, 1], f64)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      // nothing moved: the group still works
      await Promise.all(g.map((x) => x.barrier()));
      const [solo] = createInProcessGroups(1);
      await expect(solo!.allToAllDevice(f64, [1], f64)).rejects.toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
      solo!.close();
      // rank 1 sends 2 elements to rank 0, whose buffer holds 1: LENGTH_MISMATCH there, its peer fails too
      const out = await Promise.allSettled([
        g[0]!.allToAllDevice(f64, [1, 1], small, { timeoutMs: 2_000 }),
        g[1]!.allToAllDevice(f64, [2, 1], f64, { timeoutMs: 2_000 }),
      ]);
      expect(out[0]).toMatchObject({ status: 'rejected', reason: { code: 'LENGTH_MISMATCH' } });
      expect(out[1]).toMatchObject({ status: 'rejected' });
      expect(['COMM_FAILED', 'COMM_TIMEOUT']).toContain((out[1] as PromiseRejectedResult).reason.code);
      for (const a of [f64, f32, small]) a.free();
      closeAll(g, boot);
    });

    it('mismatched collectives fail with COMM_FAILED on every rank', async () => {
      const { boot, g } = await ncclGroups(2);
      const out = await Promise.allSettled([g[0]!.broadcast(Float32Array.from([1, 2]), 0, { timeoutMs: 10_000 }), g[1]!.barrier({ timeoutMs: 10_000 })]);
      for (const o of out) expect(o).toMatchObject({ status: 'rejected', reason: { code: 'COMM_FAILED' } });
      closeAll(g, boot);
    });

    it('a rank that never arrives: its peer fails with COMM_TIMEOUT within the deadline, and the group stays broken', async () => {
      const { boot, g } = await ncclGroups(2);
      await expect(g[0]!.allReduce(Float32Array.from([1, 2, 3]), 'sum', { timeoutMs: 300 })).rejects.toMatchObject({ code: 'COMM_TIMEOUT' });
      await expect(g[0]!.barrier({ timeoutMs: 300 })).rejects.toMatchObject({ code: 'COMM_FAILED' });
      // the late rank finds its peer gone: failed (the communicator was aborted) or timed out, never a hang
      const late = await g[1]!.allReduce(Float32Array.from([1, 2, 3]), 'sum', { timeoutMs: 300 }).catch((e: { code: string }) => e.code);
      expect(['COMM_FAILED', 'COMM_TIMEOUT']).toContain(late);
      closeAll(g, boot);
    });
  });
});

// Process groups over in-process threads: every collective against closed-form results for 1–4 ranks,
// the byte counters, argument checks, and failures (missing rank, mismatched call, a rank that left).
import { describe, it, expect } from 'vitest';
import { createInProcessGroups, localDevice, type ProcessGroup } from '../../lib/sharded/group.js';
import { EmbshardError } from '../../lib/errors.js';
import { allReduceBytes, exactInputOf, inputOf, naiveSum, rankOrderSumF32 } from './allreduce-oracle.mjs';

function closeAll(gs: ProcessGroup[]): void {
  for (const g of gs) g.close();
}

/** Rank s's send buffer: (s + d + 1) elements for each destination d, element k = s*1000 + d*10 + k. */
function rankBlocks(s: number, n: number): { counts: number[]; vals: number[] } {
  const counts = Array.from({ length: n }, (_, d) => s + d + 1);
  const vals: number[] = [];
  for (let d = 0; d < n; d++) for (let k = 0; k < counts[d]!; k++) vals.push(s * 1000 + d * 10 + k);
  return { counts, vals };
}

describe.each([1, 2, 3, 4])('in-process group of %i ranks', (n) => {
  it('allToAllV delivers block (src → dst) of rank-specific sizes', async () => {
    const gs = createInProcessGroups(n);
    const res = await Promise.all(
      gs.map((g) => {
        const { counts, vals } = rankBlocks(g.rank, n);
        return g.allToAllV(Float64Array.from(vals), counts);
      }),
    );
    for (let d = 0; d < n; d++) {
      const expected: number[] = [];
      const counts: number[] = [];
      for (let s = 0; s < n; s++) {
        counts.push(s + d + 1);
        for (let k = 0; k < s + d + 1; k++) expected.push(s * 1000 + d * 10 + k);
      }
      expect(res[d]!.data).toBeInstanceOf(Float64Array);
      expect(Array.from(res[d]!.data)).toEqual(expected);
      expect(res[d]!.counts).toEqual(counts);
    }
    closeAll(gs);
  });

  it('allToAllV and allGather with known receive counts (no count phase)', async () => {
    const gs = createInProcessGroups(n);
    const res = await Promise.all(
      gs.map((g) => {
        const { counts, vals } = rankBlocks(g.rank, n);
        return g.allToAllV(Int32Array.from(vals), counts, { recvCounts: Array.from({ length: n }, (_, s) => s + g.rank + 1) });
      }),
    );
    for (let d = 0; d < n; d++) {
      const expected: number[] = [];
      for (let s = 0; s < n; s++) for (let k = 0; k < s + d + 1; k++) expected.push(s * 1000 + d * 10 + k);
      expect(Array.from(res[d]!.data)).toEqual(expected);
    }
    const ag = await Promise.all(gs.map((g) => g.allGather(new Float32Array(g.rank + 1).fill(g.rank), { recvCounts: Array.from({ length: n }, (_, s) => s + 1) })));
    for (const r of ag) expect(r.counts).toEqual(Array.from({ length: n }, (_, s) => s + 1));
    closeAll(gs);
  });

  it('allToAllV with empty messages and BigInt64 ids', async () => {
    const gs = createInProcessGroups(n);
    const res = await Promise.all(
      gs.map((g) => {
        // only even ranks send, one id to each odd destination
        const counts = Array.from({ length: n }, (_, d) => (g.rank % 2 === 0 && d % 2 === 1 ? 1 : 0));
        const ids: bigint[] = [];
        for (let d = 0; d < n; d++) if (counts[d]) ids.push(BigInt(g.rank) * 2n ** 40n + BigInt(d));
        return g.allToAllV(BigInt64Array.from(ids), counts);
      }),
    );
    for (let d = 0; d < n; d++) {
      const expected: bigint[] = [];
      if (d % 2 === 1) for (let s = 0; s < n; s += 2) expected.push(BigInt(s) * 2n ** 40n + BigInt(d));
      expect(Array.from(res[d]!.data)).toEqual(expected);
    }
    closeAll(gs);
  });

  it('allGather concatenates contributions of different sizes in rank order', async () => {
    const gs = createInProcessGroups(n);
    const res = await Promise.all(gs.map((g) => g.allGather(new Int32Array(g.rank + 1).fill(g.rank + 7))));
    const expected: number[] = [];
    for (let s = 0; s < n; s++) for (let k = 0; k <= s; k++) expected.push(s + 7);
    for (const r of res) {
      expect(Array.from(r.data)).toEqual(expected);
      expect(r.counts).toEqual(Array.from({ length: n }, (_, s) => s + 1));
    }
    closeAll(gs);
  });

  it('allReduce sum / max / min in place, identical on every rank', async () => {
    const gs = createInProcessGroups(n);
    const f = gs.map((g) => Float32Array.from([g.rank + 0.5, -g.rank, 2 ** 20 + g.rank]));
    await Promise.all(gs.map((g, r) => g.allReduce(f[r]!, 'sum')));
    // closed form: Σ_{r<n} (r + 0.5) = n(n-1)/2 + n/2, exact in fp32 at these sizes
    for (const a of f) expect(Array.from(a)).toEqual([(n * (n - 1)) / 2 + n / 2, -(n * (n - 1)) / 2, n * 2 ** 20 + (n * (n - 1)) / 2]);
    const mx = gs.map((g) => Int32Array.from([g.rank, -g.rank]));
    await Promise.all(gs.map((g, r) => g.allReduce(mx[r]!, 'max')));
    for (const a of mx) expect(Array.from(a)).toEqual([n - 1, 0]);
    const mn = gs.map((g) => BigInt64Array.from([BigInt(g.rank) - 5n]));
    await Promise.all(gs.map((g, r) => g.allReduce(mn[r]!, 'min')));
    for (const a of mn) expect(Array.from(a)).toEqual([-5n]);
    const d = gs.map((g) => Float64Array.from([0.1 * (g.rank + 1)]));
    await Promise.all(gs.map((g, r) => g.allReduce(d[r]!)));
    let acc = 0.1;
    for (let r = 1; r < n; r++) acc += 0.1 * (r + 1); // rank order, the documented reduction order
    for (const a of d) expect(a[0]).toBe(acc);
    closeAll(gs);
  });

  it('a collective option the group does not know is INVALID_CONFIG naming it, before anything is sent', async () => {
    const gs = createInProcessGroups(2);
    const g = gs[0]!;
    const calls: [string, () => Promise<unknown>][] = [
      ['allToAllV options.timeout', () => g.allToAllV(Float32Array.of(1, 2), [1, 1], { timeout: 5 } as never)],
      ['allGather options.timeout', () => g.allGather(Float32Array.of(1), { timeout: 5 } as never)],
      ['allReduce options.recvCounts', () => g.allReduce(Float32Array.of(1), 'sum', { recvCounts: [1, 1] } as never)],
      ['allReduce options.determinstic', () => g.allReduce(Float32Array.of(1), 'sum', { determinstic: true } as never)],
      ['broadcast options.recvCounts', () => g.broadcast(Float32Array.of(1), 0, { recvCounts: [1, 1] } as never)],
      ['barrier options.timeout', () => g.barrier({ timeout: 5 } as never)],
    ];
    for (const [field, call] of calls) await expect(call(), field).rejects.toMatchObject({ code: 'INVALID_CONFIG', message: expect.stringContaining(`${field}: unknown field`) });
    expect(Object.values(g.stats()).reduce((n, k) => n + k.calls + k.sent, 0)).toBe(0);
    // the group still works: known options pass
    await Promise.all(gs.map((x) => x.barrier({ timeoutMs: 5000 })));
    closeAll(gs);
  });

  it('integer sums wrap modulo 2^32 / 2^64, both modes (BigInt.asIntN of the exact sum)', async () => {
    const gs = createInProcessGroups(3);
    for (const deterministic of [false, true]) {
      const i32 = gs.map((g) => Int32Array.from([2 ** 31 - 1, -(2 ** 31), 7 * (g.rank + 1)]));
      const i64 = gs.map(() => BigInt64Array.from([(1n << 63n) - 1n, -(1n << 63n), 3n]));
      await Promise.all(gs.map((g, r) => g.allReduce(i32[r]!, 'sum', { deterministic })));
      await Promise.all(gs.map((g, r) => g.allReduce(i64[r]!, 'sum', { deterministic })));
      const want32 = [3n * (2n ** 31n - 1n), -3n * 2n ** 31n, 42n].map((x) => Number(BigInt.asIntN(32, x)));
      const want64 = [3n * ((1n << 63n) - 1n), -3n * (1n << 63n), 9n].map((x) => BigInt.asIntN(64, x));
      for (const a of i32) expect(Array.from(a), `int32, deterministic ${deterministic}`).toEqual(want32);
      for (const a of i64) expect(Array.from(a), `int64, deterministic ${deterministic}`).toEqual(want64);
    }
    closeAll(gs);
  });

  it('allReduce, bandwidth-optimal and deterministic, equals the rank-order sum and counts its bytes in stats()', async () => {
    const rpn = n === 4 ? 2 : n;
    const gs = createInProcessGroups(n, { ranksPerNode: rpn });
    for (const len of [0, 1, 3, 1000, 4099]) {
      for (const deterministic of [false, true]) {
        const before = gs.map((g) => g.stats().allReduce);
        const bufs = gs.map((g) => inputOf(g.rank, len));
        await Promise.all(gs.map((g, r) => g.allReduce(bufs[r]!, 'sum', { deterministic })));
        const inputs = gs.map((g) => inputOf(g.rank, len));
        // in-process both ways reduce each element in rank order: bitwise the naive fp32 loop
        const ref = rankOrderSumF32(inputs);
        for (const b of bufs) expect(b).toEqual(ref);
        const ref64 = naiveSum(inputs);
        for (let i = 0; i < len; i++) expect(Math.abs(bufs[0]![i]! - ref64[i]!)).toBeLessThanOrEqual(1e-3 * Math.max(1, Math.abs(ref64[i]!)));
        gs.forEach((g, r) => {
          const a = g.stats().allReduce, b = before[r]!;
          const exp = allReduceBytes(len, 4, n, r, rpn, deterministic);
          expect({ sent: a.sent - b.sent, recv: a.recv - b.recv, sentInter: a.sentInter - b.sentInter, recvInter: a.recvInter - b.recvInter, calls: a.calls - b.calls }).toEqual({ ...exp, calls: 1 });
        });
        const ex = gs.map((g) => exactInputOf(g.rank, len));
        await Promise.all(gs.map((g, r) => g.allReduce(ex[r]!, 'sum', { deterministic })));
        for (const e of ex) expect(e).toEqual(Float32Array.from(naiveSum(gs.map((g) => exactInputOf(g.rank, len)))));
      }
    }
    closeAll(gs);
  });

  it('broadcast from every root, barrier', async () => {
    const gs = createInProcessGroups(n);
    for (let root = 0; root < n; root++) {
      const bufs = gs.map((g) => (g.rank === root ? Uint16Array.from([root, 2 * root, 65535]) : new Uint16Array(3)));
      await Promise.all(gs.map((g, r) => g.broadcast(bufs[r]!, root)));
      for (const b of bufs) expect(Array.from(b)).toEqual([root, 2 * root, 65535]);
    }
    await Promise.all(gs.map((g) => g.barrier()));
    closeAll(gs);
  });
});

describe('one-rank group', () => {
  it('settles every collective before the event loop turns (a local copy, no worker-thread hop), in call order', async () => {
    const [g] = createInProcessGroups(1);
    const order: string[] = [];
    const later = new Promise<string>((r) => setImmediate(() => r('event loop')));
    const a = g.allToAllV(Float32Array.of(1, 2, 3), [3]).then((x) => (order.push('allToAllV'), x));
    const b = g.allGather(Int32Array.of(7, 8)).then((x) => (order.push('allGather'), x));
    const c = g.allReduce(Float64Array.of(0.5, -2), 'sum').then((x) => (order.push('allReduce'), x));
    expect(await Promise.race([Promise.all([a, b, c]).then(() => 'collectives'), later])).toBe('collectives');
    expect(order).toEqual(['allToAllV', 'allGather', 'allReduce']);
    expect(Array.from((await a).data)).toEqual([1, 2, 3]);
    expect(Array.from((await b).data)).toEqual([7, 8]);
    expect(Array.from(await c)).toEqual([0.5, -2]);
    // a failure settles at once too, as a rejection: known receive counts that disagree with the send
    await expect(g.allToAllV(Float32Array.of(1, 2), [2], { recvCounts: [3] })).rejects.toMatchObject({ code: 'COMM_FAILED' });
    g.close();
  });
});

describe('in-process group accounting and failures', () => {
  it('counts payload bytes per peer as intra / inter / local by node', async () => {
    const gs = createInProcessGroups(4, { ranksPerNode: 2 });
    // rank s sends (d + 1) float32 to d
    await Promise.all(gs.map((g) => g.allToAllV(new Float32Array(10), [1, 2, 3, 4])));
    for (const g of gs) {
      const s = g.rank;
      const node = Math.floor(s / 2);
      let sentIntra = 0, sentInter = 0, recvIntra = 0, recvInter = 0;
      for (let p = 0; p < 4; p++) {
        if (p === s) continue;
        const same = Math.floor(p / 2) === node;
        if (same) { sentIntra += (p + 1) * 4; recvIntra += (s + 1) * 4; }
        else { sentInter += (p + 1) * 4; recvInter += (s + 1) * 4; }
      }
      expect(g.traffic).toEqual({ sentIntra, sentInter, recvIntra, recvInter, local: (s + 1) * 4 });
    }
    closeAll(gs);
  });

  it('a rank that never arrives gives COMM_TIMEOUT / COMM_FAILED within the timeout, and the group stays broken', async () => {
    const gs = createInProcessGroups(3);
    const t0 = Date.now();
    const rs = await Promise.allSettled([gs[0]!.barrier({ timeoutMs: 300 }), gs[1]!.barrier({ timeoutMs: 300 })]);
    expect(Date.now() - t0).toBeLessThan(3000);
    const codes = rs.map((r) => (r.status === 'rejected' ? (r.reason as EmbshardError).code : 'ok'));
    expect(codes).toContain('COMM_TIMEOUT');
    for (const c of codes) expect(['COMM_TIMEOUT', 'COMM_FAILED']).toContain(c);
    for (const r of rs) if (r.status === 'rejected') expect((r.reason as Error).message).toMatch(/rank\(s\) 2/);
    // the late rank and every later call fail fast
    await expect(gs[2]!.barrier({ timeoutMs: 5000 })).rejects.toMatchObject({ code: 'COMM_FAILED' });
    await expect(gs[0]!.allGather(new Int32Array(1))).rejects.toMatchObject({ code: 'COMM_FAILED' });
    closeAll(gs);
  });

  it('a rank that leaves mid-run fails its peers with COMM_FAILED at once', async () => {
    const gs = createInProcessGroups(3);
    await Promise.all(gs.map((g) => g.barrier()));
    const p = Promise.allSettled([gs[0]!.barrier({ timeoutMs: 60_000 }), gs[1]!.barrier({ timeoutMs: 60_000 })]);
    const t0 = Date.now();
    gs[2]!.close('rank 2 crashed');
    const rs = await p;
    expect(Date.now() - t0).toBeLessThan(5000);
    for (const r of rs) {
      expect(r.status).toBe('rejected');
      expect((r as PromiseRejectedResult).reason).toBeInstanceOf(EmbshardError);
      expect((r as PromiseRejectedResult).reason.code).toBe('COMM_FAILED');
      expect((r as PromiseRejectedResult).reason.message).toMatch(/rank 2 crashed/);
    }
    closeAll(gs);
  });

  it('mismatched calls fail with COMM_FAILED on every rank', async () => {
    const gs = createInProcessGroups(2);
    const rs = await Promise.allSettled([gs[0]!.barrier(), gs[1]!.allGather(new Int32Array(2))]);
    for (const r of rs) expect((r as PromiseRejectedResult).reason.code).toBe('COMM_FAILED');
    expect((rs[0] as PromiseRejectedResult).reason.message).toMatch(/mismatched/);
    closeAll(gs);
    const gs2 = createInProcessGroups(2);
    const rs2 = await Promise.allSettled([gs2[0]!.broadcast(new Int32Array(2), 0), gs2[1]!.broadcast(new Int32Array(3), 0)]);
    for (const r of rs2) expect((r as PromiseRejectedResult).reason.code).toBe('COMM_FAILED');
    closeAll(gs2);
    const gs3 = createInProcessGroups(2);
    const rs3 = await Promise.allSettled([gs3[0]!.allReduce(new Float32Array(2)), gs3[1]!.allReduce(new Float32Array(3))]);
    for (const r of rs3) expect((r as PromiseRejectedResult).reason.code).toBe('COMM_FAILED');
    closeAll(gs3);
  });

  it('released results are detached and their memory is reused correctly; other arrays are left alone', async () => {
    const gs = createInProcessGroups(2);
    const mine = new Float32Array(4).fill(3);
    for (let round = 0; round < 5; round++) {
      const res = await Promise.all(gs.map((g) => g.allToAllV(Float32Array.from([g.rank + round, g.rank + round + 0.5]), [1, 1])));
      for (let d = 0; d < 2; d++) expect(Array.from(res[d]!.data)).toEqual([round + d * 0.5, 1 + round + d * 0.5]);
      gs.forEach((g, r) => g.release(res[r]!.data, mine));
      for (const r of res) expect(r.data.length).toBe(0);
    }
    expect(Array.from(mine)).toEqual([3, 3, 3, 3]);
    closeAll(gs);
  });

  it('wrong known receive counts fail with COMM_FAILED on every rank', async () => {
    const gs = createInProcessGroups(2);
    const rs = await Promise.allSettled(gs.map((g) => g.allToAllV(new Int32Array(2), [1, 1], { recvCounts: [1, 2] })));
    for (const r of rs) expect((r as PromiseRejectedResult).reason.code).toBe('COMM_FAILED');
    closeAll(gs);
  });

  it('rejects bad arguments with a code naming the field, before anything is sent', async () => {
    const gs = createInProcessGroups(2);
    const g = gs[0]!;
    await expect(g.allToAllV(new Int32Array(3), [1, 1])).rejects.toMatchObject({ code: 'LENGTH_MISMATCH', message: expect.stringMatching(/sendCounts/) });
    await expect(g.allToAllV(new Int32Array(2), [1])).rejects.toMatchObject({ code: 'LENGTH_MISMATCH' });
    await expect(g.allToAllV(new Int32Array(2), [3, -1])).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/sendCounts\[1\]/) });
    await expect(g.broadcast(new Int32Array(2), 2)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/root/) });
    await expect(g.barrier({ timeoutMs: -1 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/timeoutMs/) });
    await expect(g.allReduce(new Uint8Array(2) as unknown as Int32Array)).rejects.toMatchObject({ code: 'UNSUPPORTED_DTYPE' });
    expect(() => createInProcessGroups(4, { ranksPerNode: 3 })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    // nothing was sent: the group still works
    await Promise.all(gs.map((x) => x.barrier()));
    expect(g.traffic.sentIntra + g.traffic.local).toBe(0);
    g.close();
    await expect(g.barrier()).rejects.toMatchObject({ code: 'COMM_FAILED' });
    closeAll(gs);
  });
});

describe('in-process all-reduce signatures, deadlines, shared memory and releases', () => {
  /** Every rank's outcome: 'ok' or the error's code. */
  async function outcomes(ps: Promise<unknown>[]): Promise<string[]> {
    const rs = await Promise.allSettled(ps);
    return rs.map((r) => (r.status === 'fulfilled' ? 'ok' : ((r.reason as EmbshardError).code ?? 'untyped')));
  }

  it('an allReduce that disagrees across ranks on element type, op, count or mode fails with COMM_FAILED on every rank', async () => {
    // same bytes per phase on both ranks, so only the call itself tells them apart
    const cases: [string, (g: ProcessGroup) => Promise<unknown>][] = [
      ['f32 × 4 against f64 × 2', (g) => g.allReduce(g.rank === 0 ? Float32Array.of(1, 2, 3, 4) : Float64Array.of(1, 2))],
      ['f32 against i32', (g) => g.allReduce(g.rank === 0 ? Float32Array.of(1, 2) : Int32Array.of(1, 2))],
      ['sum against max', (g) => g.allReduce(Int32Array.of(1, 2), g.rank === 0 ? 'sum' : 'max')],
      ['deterministic f32 × 2 against i32 × 2', (g) => g.allReduce(g.rank === 0 ? Float32Array.of(1, 2) : Int32Array.of(1, 2), 'sum', { deterministic: true })],
      ['deterministic against not', (g) => g.allReduce(Int32Array.of(1, 2), 'sum', { deterministic: g.rank === 0 })],
    ];
    for (const [what, call] of cases) {
      const gs = createInProcessGroups(2, { timeoutMs: 10_000 });
      expect(await outcomes(gs.map(call)), what).toEqual(['COMM_FAILED', 'COMM_FAILED']);
      // the group stays broken
      expect(await outcomes(gs.map((g) => g.barrier())), what).toEqual(['COMM_FAILED', 'COMM_FAILED']);
      closeAll(gs);
    }
    // agreeing calls of every type and op still reduce (naive loop over ranks)
    const gs = createInProcessGroups(3);
    for (const op of ['sum', 'max', 'min'] as const) {
      const bufs = gs.map((g) => Int32Array.of(g.rank * 3 - 4, 7 - g.rank));
      await Promise.all(gs.map((g, r) => g.allReduce(bufs[r]!, op)));
      const col = (i: number): number[] => gs.map((g) => [g.rank * 3 - 4, 7 - g.rank][i]!);
      const red = (v: number[]): number => (op === 'sum' ? v.reduce((a, b) => a + b, 0) : op === 'max' ? Math.max(...v) : Math.min(...v));
      for (const b of bufs) expect(Array.from(b)).toEqual([red(col(0)), red(col(1))]);
    }
    closeAll(gs);
  });

  it('a timeout beyond the clock range waits for a late rank instead of expiring at once', async () => {
    for (const timeoutMs of [1e13, 1e300, Number.MAX_VALUE]) {
      const gs = createInProcessGroups(2);
      const early = gs[0]!.allToAllV(Int32Array.of(1, 2), [1, 1], { timeoutMs });
      await new Promise((r) => setTimeout(r, 100));
      const late = gs[1]!.allToAllV(Int32Array.of(3, 4), [1, 1], { timeoutMs });
      const [a, b] = await Promise.all([early, late]);
      expect(Array.from(a.data)).toEqual([1, 3]);
      expect(Array.from(b.data)).toEqual([2, 4]);
      closeAll(gs);
    }
  });

  it('rejects typed arrays over shared memory and recvCounts that are not arrays, with a code naming the argument', async () => {
    const gs = createInProcessGroups(2);
    const g = gs[0]!;
    const shared = new Int32Array(new SharedArrayBuffer(8));
    const sharedF = new Float32Array(new SharedArrayBuffer(8));
    await expect(g.allToAllV(shared, [1, 1])).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/allToAllV: send/) });
    await expect(g.allGather(shared)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/allGather: send/) });
    await expect(g.allReduce(sharedF)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/allReduce: data/) });
    await expect(g.broadcast(shared, 0)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/broadcast: data/) });
    for (const recvCounts of [null, 5, true]) {
      await expect(g.allToAllV(Int32Array.of(1, 2), [1, 1], { recvCounts: recvCounts as unknown as number[] })).rejects.toMatchObject({
        code: 'INVALID_ARGUMENT',
        message: expect.stringMatching(/allToAllV: recvCounts/),
      });
      await expect(g.allGather(Int32Array.of(1), { recvCounts: recvCounts as unknown as number[] })).rejects.toMatchObject({
        code: 'INVALID_ARGUMENT',
        message: expect.stringMatching(/allGather: recvCounts/),
      });
    }
    // nothing was sent: the group still works
    await Promise.all(gs.map((x) => x.barrier()));
    expect(g.stats().allToAllV.sent + g.stats().allGather.sent + g.traffic.local).toBe(0);
    closeAll(gs);
  });

  it('release() of a buffer a pending collective writes waits for it: the pool cannot hand it out meanwhile', async () => {
    const len = 4096;
    const gs = createInProcessGroups(2);
    const [local] = createInProcessGroups(1);
    // pooled receive buffers, one per rank
    const got = await Promise.all(gs.map((g) => g.allToAllV(new Float32Array(2 * len).fill(g.rank + 1), [len, len])));
    const x = got.map((r) => r.data);
    // rank 0's all-reduce waits for rank 1 while its buffer is released and fresh results are taken
    const p0 = gs[0]!.allReduce(x[0]!);
    gs[0]!.release(x[0]!);
    expect(x[0]!.length).toBe(2 * len); // still the collective's until it settles
    const fresh = [];
    for (let k = 0; k < 4; k++) fresh.push((await local!.allToAllV(new Float32Array(2 * len).fill(7 + k), [2 * len])).data);
    const p1 = gs[1]!.allReduce(x[1]!);
    await Promise.all([p0, p1]);
    for (let k = 0; k < 4; k++) expect(fresh[k]!.every((v) => v === 7 + k)).toBe(true);
    // rank 0's array held the sum until the call settled, then was released
    expect(x[0]!.length).toBe(0);
    // rank order: rank 0's block then rank 1's, each summed over both ranks
    expect(x[1]!.every((v, i) => v === (i < len ? 2 : 4))).toBe(true);
    closeAll(gs);
    local!.close();
  });
});

describe('localDevice', () => {
  it("'cuda:local' is the GPU of the local rank on its node; other devices pass through", () => {
    // 2 nodes of 4 ranks: ranks 0..7 → GPUs 0 1 2 3 0 1 2 3
    expect(Array.from({ length: 8 }, (_, r) => localDevice('cuda:local', r, 4))).toEqual(['cuda:0', 'cuda:1', 'cuda:2', 'cuda:3', 'cuda:0', 'cuda:1', 'cuda:2', 'cuda:3']);
    expect(localDevice('cpu', 5, 4)).toBe('cpu');
    expect(localDevice('cuda:2', 5, 4)).toBe('cuda:2');
  });
});

// prefetch.test.ts — the lookahead queue and the worker-thread source: order and completeness, the
// lookahead bound (runs ahead, but never more than depth), errors after the batches that preceded them,
// early exit closing the source, worker batches identical to in-thread ones, buffers transferred.
import { describe, it, expect } from 'vitest';
import { MessageChannel } from 'node:worker_threads';
import { setTimeout as sleep } from 'node:timers/promises';
import { JaggedBatch } from '../../lib/batch.js';
import { prefetch } from '../../lib/data/prefetch.js';
import { workerSource } from '../../lib/data/worker-source.js';
import { SyntheticSource } from '../../lib/data/synthetic.js';
import { batchFromMessage, batchTransfer } from '../../lib/data/batch-message.js';
import { isEmbshardError } from '../../lib/errors.js';
import type { Batch, BatchSource } from '../../lib/data/types.js';

/** A source of n numbered batches (labels[0] = k) that records how far it has been pulled. */
class Counting implements BatchSource {
  readonly features = ['f'];
  readonly numDense = 1;
  readonly batchSize = 1;
  produced = 0;
  closed = false;
  constructor(private readonly n: number, private readonly failAt = -1) {}
  async *[Symbol.asyncIterator](): AsyncIterator<Batch> {
    try {
      for (let k = 0; k < this.n; k++) {
        if (k === this.failAt) throw new Error(`source failed at ${k}`);
        await Promise.resolve();
        this.produced++;
        yield {
          dense: Float32Array.of(k),
          labels: Float32Array.of(k),
          size: 1,
          sparse: JaggedBatch.fromLengths({ features: ['f'], batchSize: 1, lengths: Int32Array.of(1), ids: Int32Array.of(k) }),
        };
      }
    } finally {
      this.closed = true;
    }
  }
}

describe('prefetch', () => {
  it('yields every batch once, in order', async () => {
    for (const depth of [1, 3, 50]) {
      const src = new Counting(20);
      const seen: number[] = [];
      for await (const b of prefetch(src, { depth })) seen.push(b.labels[0]!);
      expect(seen).toEqual(Array.from({ length: 20 }, (_, k) => k));
      expect(src.closed).toBe(true);
    }
  });

  it('runs ahead of the consumer by depth batches, and no further', async () => {
    const src = new Counting(100);
    const it = prefetch(src, { depth: 4 })[Symbol.asyncIterator]();
    let consumed = 0;
    for (let round = 0; round < 5; round++) {
      await it.next();
      consumed++;
      // a slow training step: the pump fills the queue meanwhile (poll, the CPU may be busy), then stops
      for (let t = 0; t < 200 && src.produced < consumed + 4; t++) await sleep(10);
      await sleep(10);
      expect(src.produced).toBe(consumed + 4);
    }
    await it.return!();
    expect(src.closed).toBe(true);
  });

  it('delivers the batches before a failure, then the failure', async () => {
    const seen: number[] = [];
    await expect(
      (async () => {
        for await (const b of prefetch(new Counting(10, 3), { depth: 8 })) seen.push(b.labels[0]!);
      })(),
    ).rejects.toThrow('source failed at 3');
    expect(seen).toEqual([0, 1, 2]);
  });

  it('closes the source when the consumer breaks out', async () => {
    const src = new Counting(1000);
    let n = 0;
    for await (const _ of prefetch(src, { depth: 2 })) if (++n === 3) break;
    expect(src.closed).toBe(true);
    expect(src.produced).toBeLessThanOrEqual(3 + 2 + 1);
  });

  it('rejects a bad depth', () => {
    try {
      prefetch(new Counting(1), { depth: 0 });
      expect.unreachable();
    } catch (e) {
      expect(isEmbshardError(e, 'INVALID_SIZE')).toBe(true);
      expect((e as Error).message).toMatch(/depth/);
    }
  });
});

describe('wire transfer', () => {
  it('moves the buffers (the sender’s views detach) and rebuilds an identical batch', async () => {
    const b = new SyntheticSource({ batchSize: 8, maxRows: 100, seed: 1 }).batch(0);
    const copy = { dense: Array.from(b.dense), ids: Array.from(b.sparse.ids as Int32Array), labels: Array.from(b.labels) };
    const { message, transfer } = batchTransfer(b);
    expect(new Set(transfer).size).toBe(transfer.length);
    const ch = new MessageChannel();
    const got = new Promise<Batch>((r) => ch.port2.once('message', (m) => r(batchFromMessage(m))));
    ch.port1.postMessage(message, transfer);
    const back = await got;
    ch.port1.close();
    expect(b.dense.length).toBe(0); // detached: transferred, not copied
    expect(b.sparse.ids.length).toBe(0);
    expect(Array.from(back.dense)).toEqual(copy.dense);
    expect(Array.from(back.sparse.ids as Int32Array)).toEqual(copy.ids);
    expect(Array.from(back.labels)).toEqual(copy.labels);
    expect(back.planted).toHaveLength(8);
  });
});

describe('workerSource', () => {
  const options = { batchSize: 64, numBatches: 6, maxRows: 2000, preset: 'mlperf-dcnv2' as const, seed: 9 };

  it('produces the same batches as the in-thread source, epoch after epoch', async () => {
    const local = new SyntheticSource(options);
    const ws = await workerSource({ kind: 'synthetic', options }, { depth: 2 });
    expect(ws.features).toEqual(local.features);
    expect(ws.numBatches).toBe(6);
    for (let epoch = 0; epoch < 2; epoch++) {
      let k = 0;
      for await (const b of ws) {
        const o = local.batch(k++);
        expect(Array.from(b.sparse.ids as Int32Array)).toEqual(Array.from(o.sparse.ids as Int32Array));
        expect(Array.from(b.dense)).toEqual(Array.from(o.dense));
        expect(Array.from(b.labels)).toEqual(Array.from(o.labels));
        expect(Array.from(b.planted!)).toEqual(Array.from(o.planted!));
      }
      expect(k).toBe(6);
    }
  });

  it('stops the worker when the consumer breaks, and validates the spec before starting one', async () => {
    const ws = await workerSource({ kind: 'synthetic', options: { ...options, numBatches: undefined } }, { depth: 2 });
    let n = 0;
    for await (const _ of ws) if (++n === 3) break;
    expect(n).toBe(3);
    await expect(workerSource({ kind: 'synthetic', options: { batchSize: 0 } })).rejects.toThrow(/batchSize/);
    await expect(workerSource({ kind: 'nope' } as never)).rejects.toThrow(/spec.kind/);
  });
});

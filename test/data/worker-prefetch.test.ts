// worker-prefetch.test.ts — the worker thread and the lookahead queue against the same source read
// directly: every batch byte for byte, in order, at depths 1, 2 and 7 (synthetic, Criteo TSV, torchrec
// npy, Arrow); errors after exactly the batches before them, with their value or code (a source failing in
// this thread, a reader failing in the worker, a worker killed mid-pass); the lookahead depth bounded
// (API, `openDataSpec`, `embshard train --prefetch`) and never overrun by the worker under a slow
// consumer; a batch's buffers transferred whole, parts of shared buffers copied.
import { describe, it, expect, afterEach, vi } from 'vitest';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync, openSync, writeSync, closeSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { MessageChannel, type Worker } from 'node:worker_threads';
import { setTimeout as sleep } from 'node:timers/promises';
import { JaggedBatch } from '../../lib/batch.js';
import { MAX_PREFETCH_DEPTH, prefetch } from '../../lib/data/prefetch.js';
import { workerSource } from '../../lib/data/worker-source.js';
import { openSource, type SourceSpec } from '../../lib/data/specs.js';
import { SyntheticSource } from '../../lib/data/synthetic.js';
import { arrowSource, batchesToTable } from '../../lib/data/arrow.js';
import { writeCriteoNpyDay } from '../../lib/data/criteo-npy.js';
import { parseNpyHeader } from '../../lib/data/npy.js';
import { batchFromMessage, batchTransfer } from '../../lib/data/batch-message.js';
import { openDataSpec } from '../../lib/cli/sources.js';
import { runTrain } from '../../lib/cli/train.js';
import { EmbshardError, isEmbshardError } from '../../lib/errors.js';
import type { Batch, BatchSource } from '../../lib/data/types.js';
import { capture } from '../train/capture.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('worker-prefetch');
const FIXTURE_TSV = fileURLToPath(new URL('../fixtures/data/criteo-sample.tsv', import.meta.url));
const NPY = fileURLToPath(new URL('../fixtures/data/npy/', import.meta.url));
const DEPTHS = [1, 2, 7];

/** A digest of every byte of a batch and of its shape: equal digests, the same batch. */
function digest(b: Batch): string {
  const h = createHash('sha256');
  const s = b.sparse;
  h.update(JSON.stringify({ size: b.size, features: s.features, ids: s.ids.constructor.name, weights: !!s.weights, planted: !!b.planted }));
  for (const a of [b.dense, b.labels, s.lengths, s.ids, s.weights, b.planted]) if (a) h.update(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
  return h.digest('hex');
}

/** The digests of a pass over `src`, and what ended it: 'end' or the value thrown. */
async function readAll(src: AsyncIterable<Batch>): Promise<{ got: string[]; end: unknown }> {
  const got: string[] = [];
  try {
    for await (const b of src) got.push(digest(b));
  } catch (e) {
    return { got, end: e };
  }
  return { got, end: 'end' };
}

/** Workers started in this process while `f` runs (each announced by process 'worker'). */
async function workersDuring<T>(f: () => Promise<T>): Promise<{ value: T; workers: Worker[] }> {
  const workers: Worker[] = [];
  const seen = (w: Worker) => void workers.push(w);
  process.on('worker', seen);
  try {
    return { value: await f(), workers };
  } finally {
    process.off('worker', seen);
  }
}

/** Polls `cond` (a worker on a busy machine may be slow) for up to a minute. */
async function until(cond: () => boolean): Promise<void> {
  for (let t = 0; t < 600 && !cond(); t++) await sleep(100);
}

/** `n` Criteo TSV lines (label, 13 dense, 26 categorical; every 50th with a missing field), then the fixture's own. */
function criteoText(n: number): Buffer {
  const line = (i: number) =>
    [i % 2, ...Array.from({ length: 13 }, (_, j) => (i * j + 3) % 11 === 0 ? '' : String((i * j) % 97)),
      ...Array.from({ length: i % 50 === 7 ? 25 : 26 }, (_, j) => ((((i + 1) * 31 + j) * 2654435761) % 4294967296).toString(16).padStart(8, '0'))].join('\t');
  return Buffer.concat([Buffer.from(Array.from({ length: n }, (_, i) => line(i)).join('\n') + '\n'), readFileSync(FIXTURE_TSV)]);
}

/** A TSV file of criteoText(n) in this file's folder. */
function tsvFile(n: number): string {
  const path = join(tmp.dir, `criteo-${n}.tsv`);
  writeFileSync(path, criteoText(n));
  return path;
}

const SPECS: Record<string, SourceSpec> = {
  synthetic: { kind: 'synthetic', options: { batchSize: 32, numBatches: 6, maxRows: 500, seed: 3 } },
  get 'criteo tsv'(): SourceSpec {
    return { kind: 'criteo-tsv', options: { path: tsvFile(300), batchSize: 37, maxRows: 1000, chunkSize: 4096 } };
  },
  npy: { kind: 'criteo-npy', options: { dir: NPY, days: [0, 1], batchSize: 5, hashes: Array.from({ length: 26 }, (_, f) => 100 + f) } },
};

describe('the same batches through the worker and the lookahead queue', () => {
  for (const [name, spec] of Object.entries(SPECS)) {
    it(`${name}: worker, prefetch and prefetch over the worker yield the direct read's bytes`, async () => {
      const direct = await readAll(await openSource(spec));
      expect(direct.end).toBe('end');
      expect(direct.got.length).toBeGreaterThan(2);
      for (const depth of DEPTHS) {
        expect(await readAll(await workerSource(spec, { depth })), `worker depth ${depth}`).toEqual(direct);
        expect(await readAll(prefetch(await openSource(spec), { depth })), `prefetch depth ${depth}`).toEqual(direct);
        expect(await readAll(prefetch(await workerSource(spec, { depth }), { depth })), `prefetch over worker depth ${depth}`).toEqual(direct);
      }
    });
  }

  it('Arrow (read in this thread): prefetch yields the direct read, pass after pass', async () => {
    const syn = new SyntheticSource({ batchSize: 24, numBatches: 4, maxRows: 300, seed: 5 });
    const batches: Batch[] = [];
    for await (const b of syn) batches.push(b);
    const src = arrowSource(batchesToTable(batches), { maxBatchSize: 10 });
    const direct = await readAll(src);
    expect(direct.end).toBe('end');
    expect(direct.got).toHaveLength(12); // 4 record batches of 24 samples, cut at 10
    const p = prefetch(src, { depth: 2 });
    for (const depth of DEPTHS) expect(await readAll(prefetch(src, { depth }))).toEqual(direct);
    expect(await readAll(p)).toEqual(direct);
    expect(await readAll(p)).toEqual(direct);
  });
});

/** Batch k of a synthetic stream, then `thrown` at batch failAt (thrown in this thread). */
class Failing implements BatchSource {
  readonly syn = new SyntheticSource({ batchSize: 8, maxRows: 100, seed: 2 });
  readonly features = this.syn.features;
  readonly numDense = this.syn.numDense;
  readonly batchSize = 8;
  closed = 0;
  constructor(
    private readonly failAt: number,
    private readonly thrown: unknown,
  ) {}
  async *[Symbol.asyncIterator](): AsyncIterator<Batch> {
    try {
      for (let k = 0; ; k++) {
        await Promise.resolve();
        if (k === this.failAt) throw this.thrown;
        yield this.syn.batch(k);
      }
    } finally {
      this.closed++;
    }
  }
}

/** A source of `n` batches whose hand-written iterator (no generator) counts the calls it gets. */
class Counted implements BatchSource {
  readonly syn = new SyntheticSource({ batchSize: 4, maxRows: 50, seed: 6 });
  readonly features = this.syn.features;
  readonly numDense = this.syn.numDense;
  readonly batchSize = 4;
  returns = 0;
  nextAfterEnd = 0;
  constructor(
    private readonly n: number,
    private readonly failAt = -1,
  ) {}
  [Symbol.asyncIterator](): AsyncIterator<Batch> {
    let k = 0, over = false;
    return {
      next: async () => {
        if (over) this.nextAfterEnd++;
        if (k === this.failAt) {
          over = true;
          throw new Error('failed');
        }
        if (k >= this.n) {
          over = true;
          return { done: true, value: undefined };
        }
        return { done: false, value: this.syn.batch(k++) };
      },
      return: async () => {
        this.returns++;
        over = true;
        return { done: true, value: undefined };
      },
    };
  }
}

describe('the iteration protocol', () => {
  it('prefetch closes the source exactly when a for-await loop over it would: when left early, not after its end or a failure', async () => {
    const loop = async (src: AsyncIterable<Batch>, stopAt: number): Promise<void> => {
      let n = 0;
      try {
        for await (const _ of src) if (++n === stopAt) break;
      } catch {
        // the failure case
      }
    };
    // left at batch 2 of 50 (failing at 30): the pump, at most 7 ahead, cannot have met the end or the failure
    for (const [n, failAt, stopAt] of [[5, -1, -1], [50, -1, 2], [5, 3, -1], [50, 30, 2], [0, -1, -1]] as const)
      for (const depth of DEPTHS) {
        const direct = new Counted(n, failAt), queued = new Counted(n, failAt);
        await loop(direct, stopAt);
        await loop(prefetch(queued, { depth }), stopAt);
        const what = `${n} batches, failing at ${failAt}, left at ${stopAt}, depth ${depth}`;
        expect(queued.returns, what).toBe(direct.returns);
        expect(queued.nextAfterEnd, what).toBe(0);
      }
  });
});

describe('errors', () => {
  it('prefetch: a source failing at batch k gives batches 0 … k−1, then the very value it threw', async () => {
    const values: unknown[] = [new Error('plain'), new EmbshardError('ID_OUT_OF_RANGE', 'id 7 of cat_3 is out of range'), 'a string', 42, undefined, null];
    for (const thrown of values)
      for (const k of [0, 1, 5])
        for (const depth of DEPTHS) {
          const src = new Failing(k, thrown);
          const r = await readAll(prefetch(src, { depth }));
          expect(r.got, `${String(thrown)} at ${k}, depth ${depth}`).toEqual(Array.from({ length: k }, (_, j) => digest(src.syn.batch(j))));
          expect(r.end).toBe(thrown);
          expect(src.closed).toBe(1);
        }
  });

  /** torchrec days of 4 batches of 8 whose labels file holds a 2 at row 19 (batch 2). */
  async function badLabelDays(): Promise<SourceSpec> {
    const dir = join(tmp.dir, 'bad-label');
    mkdirSync(dir, { recursive: true });
    const syn = new SyntheticSource({ batchSize: 8, numBatches: 4, maxRows: 200, seed: 4 });
    const batches: Batch[] = [];
    for await (const b of syn) batches.push(b);
    await writeCriteoNpyDay(dir, 0, batches);
    const labels = join(dir, 'day_0_labels.npy');
    const { dataOffset } = parseNpyHeader(readFileSync(labels), labels);
    const fd = openSync(labels, 'r+');
    writeSync(fd, Int32Array.of(2), 0, 4, dataOffset + 4 * 19);
    closeSync(fd);
    return { kind: 'criteo-npy', options: { dir, days: [0], batchSize: 8, hashes: syn.tableRows } };
  }

  /** Criteo TSV lines gzipped and cut at 60 %: a stream that breaks after some batches. */
  function truncatedGzip(): SourceSpec {
    const gz = gzipSync(criteoText(3000));
    const path = join(tmp.dir, 'cut.tsv.gz');
    writeFileSync(path, gz.subarray(0, Math.floor(gz.length * 0.6)));
    return { kind: 'criteo-tsv', options: { path, batchSize: 64, maxRows: 1000, chunkSize: 4096 } };
  }

  it('worker: a reader failing at batch k gives the direct read\'s batches 0 … k−1, then its code and message', async () => {
    for (const spec of [await badLabelDays(), truncatedGzip()]) {
      const direct = await readAll(await openSource(spec));
      expect(isEmbshardError(direct.end)).toBe(true);
      expect(direct.got.length).toBeGreaterThan(0);
      const { code, message } = direct.end as EmbshardError;
      expect(['INVALID_ARGUMENT', 'IO_ERROR']).toContain(code);
      const cases = [...DEPTHS.map((depth) => ({ depth, wrap: false })), { depth: 2, wrap: true }];
      for (const { depth, wrap } of cases) {
        const ws = await workerSource(spec, { depth });
        const r = await readAll(wrap ? prefetch(ws, { depth }) : ws);
        expect(r.got, `${spec.kind} depth ${depth}`).toEqual(direct.got);
        expect(isEmbshardError(r.end, code), String(r.end)).toBe(true);
        expect((r.end as Error).message).toBe(message);
      }
    }
  });

  it('a worker killed mid-pass is INTERNAL after a prefix of the batches, not a wait without end', async () => {
    const spec = SPECS.synthetic!;
    const direct = await readAll(await openSource({ kind: 'synthetic', options: { batchSize: 32, maxRows: 500, seed: 3, numBatches: 40 } }));
    for (const wrap of [false, true]) {
      const { value: r } = await workersDuring(async () => {
        const ws = await workerSource({ ...spec, options: { ...spec.options, numBatches: 40 } } as SourceSpec, { depth: 2 });
        const got: string[] = [];
        let killer: Worker | undefined;
        const seen = (w: Worker) => void (killer = w);
        process.on('worker', seen);
        try {
          for await (const b of wrap ? prefetch(ws, { depth: 2 }) : ws) {
            got.push(digest(b));
            if (got.length === 2) await killer!.terminate();
          }
        } catch (e) {
          return { got, end: e };
        } finally {
          process.off('worker', seen);
        }
        return { got, end: 'end' };
      });
      expect(isEmbshardError(r.end, 'INTERNAL'), String(r.end)).toBe(true);
      expect((r.end as Error).message).toMatch(/data worker/);
      expect(r.got.length).toBeGreaterThanOrEqual(2);
      expect(r.got).toEqual(direct.got.slice(0, r.got.length));
    }
  });
});

describe('depth', () => {
  afterEach(() => vi.restoreAllMocks());
  const BAD: unknown[] = [0, -1, 1.5, NaN, Infinity, '4', MAX_PREFETCH_DEPTH + 1, 1_000_000, 2 ** 53];
  const small = { kind: 'synthetic', options: { batchSize: 4, numBatches: 2, maxRows: 50, seed: 1 } } as const;

  it(`is an integer in [1, ${MAX_PREFETCH_DEPTH}]: anything else is INVALID_SIZE naming it, before any thread starts`, async () => {
    expect(MAX_PREFETCH_DEPTH).toBe(64);
    const src = new SyntheticSource(small.options);
    for (const depth of BAD) {
      let thrown: unknown;
      try {
        prefetch(src, { depth: depth as number });
      } catch (e) {
        thrown = e;
      }
      expect(isEmbshardError(thrown, 'INVALID_SIZE'), `prefetch depth ${String(depth)}`).toBe(true);
      expect((thrown as Error).message).toMatch(/^depth must be/);
      const { value: e, workers } = await workersDuring(() => workerSource(small, { depth: depth as number }).then(() => undefined, (x: unknown) => x));
      expect(isEmbshardError(e, 'INVALID_SIZE'), `workerSource depth ${String(depth)}`).toBe(true);
      expect((e as Error).message).toMatch(/^depth must be/);
      expect(workers).toHaveLength(0);
      const o = await workersDuring(() => openDataSpec('synthetic', { batch: 4, seed: 0, maxRows: 50, prefetch: depth as number }).then(() => undefined, (x: unknown) => x));
      expect(isEmbshardError(o.value, 'INVALID_SIZE'), `openDataSpec prefetch ${String(depth)}`).toBe(true);
      expect((o.value as Error).message).toMatch(/^--prefetch must be/);
      expect(o.workers).toHaveLength(0);
    }
    for (const depth of [1, MAX_PREFETCH_DEPTH]) {
      expect(prefetch(src, { depth }).depth).toBe(depth);
      expect(await readAll(await workerSource(small, { depth }))).toEqual(await readAll(src));
    }
  });

  it('embshard train --prefetch: beyond [1, 64] a usage error naming it, before any data is read', async () => {
    const base = ['--model', 'custom', '--bottom', '13-8-4', '--top', '8-1', '--max-rows', '50', '--batch', '16', '--data', 'synthetic', '--steps', '1', '--eval-batches', '0', '--quiet'];
    for (const v of ['0', '-1', '1.5', '65', '1000000', '1e3']) {
      const c = capture();
      const rc = await runTrain([...base, '--prefetch', v]);
      vi.restoreAllMocks();
      expect(rc, v).toBe(2);
      expect(c.err.join(''), v).toContain(`--prefetch must be an integer in [1, 64] (got '${v}')`);
    }
    const c = capture();
    const rc = await runTrain([...base, '--prefetch', '64']);
    vi.restoreAllMocks();
    expect(rc, c.err.join('')).toBe(0);
  }, 120_000);

  it('a worker never runs more than depth batches ahead of a slow consumer', async () => {
    for (const depth of [1, 3]) {
      let received = 0;
      const count = (w: Worker) => w.on('message', (m: { type: string }) => void (m.type === 'batch' && received++));
      process.on('worker', count);
      try {
        const it = (await workerSource({ kind: 'synthetic', options: { batchSize: 16, maxRows: 100, seed: 1 } }, { depth }))[Symbol.asyncIterator]();
        for (let taken = 1; taken <= 4; taken++) {
          await it.next();
          // a slow training step: the worker fills its credit meanwhile, then must stop
          await until(() => received >= taken + depth);
          await sleep(200);
          expect(received, `depth ${depth} after ${taken} batches`).toBe(taken + depth);
        }
        await it.return!();
      } finally {
        process.off('worker', count);
      }
    }
  });
});

describe('transfers', () => {
  it('the worker sources’ batches go whole: every array is sent as it is (no copy), each buffer listed once', async () => {
    for (const [name, spec] of Object.entries(SPECS)) {
      let n = 0;
      for await (const b of await openSource(spec)) {
        const { message, transfer } = batchTransfer(b);
        const arrays = [b.dense, b.labels, b.planted, b.sparse.lengths, b.sparse.ids, b.sparse.weights].filter((a) => a !== undefined);
        expect([message.dense, message.labels, message.planted, message.lengths, message.ids, message.weights].filter((a) => a !== undefined), name).toEqual(arrays);
        expect(message.dense, name).toBe(b.dense);
        expect(message.ids, name).toBe(b.sparse.ids);
        expect(message.lengths, name).toBe(b.sparse.lengths);
        expect(message.labels, name).toBe(b.labels);
        expect(new Set(transfer).size, name).toBe(transfer.length);
        expect(new Set(transfer), name).toEqual(new Set(arrays.map((a) => a!.buffer)));
        n++;
      }
      expect(n, name).toBeGreaterThan(2);
    }
  });

  /** Posts `b` through a port as the worker does; the batch that arrives. */
  async function roundTrip(b: Batch): Promise<{ back: Batch; transfer: ArrayBuffer[] }> {
    const { message, transfer } = batchTransfer(b);
    const ch = new MessageChannel();
    const got = new Promise<Batch>((r) => ch.port2.once('message', (m) => r(batchFromMessage(m))));
    ch.port1.postMessage(message, transfer);
    const back = await got;
    ch.port1.close();
    return { back, transfer };
  }

  it('arrays owning their whole buffer move (the sender’s views detach); parts of a shared buffer are copied, the original untouched', async () => {
    const one = new ArrayBuffer(4 * 64);
    const shared = new Float32Array(one);
    shared.forEach((_, i) => (shared[i] = i + 0.5));
    const lengths = Int32Array.of(2, 0, 1);
    const ids = Int32Array.of(4, 5, 6);
    const sab = new Float32Array(new SharedArrayBuffer(4 * 3));
    sab.set([0, 1, 0]);
    const b: Batch = {
      size: 3,
      dense: shared.subarray(0, 6), // two dense columns, a view into `one`
      labels: sab, // shared memory: never transferred
      planted: shared.subarray(10, 13),
      sparse: JaggedBatch.fromLengths({ features: ['f'], batchSize: 3, lengths, ids }),
    };
    const before = digest(b);
    const { back, transfer } = await roundTrip(b);
    expect(digest(back)).toBe(before);
    expect(new Set(transfer).size).toBe(transfer.length);
    expect(transfer).not.toContain(one);
    expect(transfer.some((t) => (t as unknown) instanceof SharedArrayBuffer)).toBe(false);
    expect(one.byteLength).toBe(4 * 64); // copied, not detached
    expect(Array.from(shared.subarray(0, 3))).toEqual([0.5, 1.5, 2.5]);
    expect(sab.length).toBe(3);
    expect(b.sparse.ids.length).toBe(0); // owned its buffer: moved
    expect(b.sparse.lengths.length).toBe(0);
  });
});

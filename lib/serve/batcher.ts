// batcher.ts — micro-batching: requests that arrive close together are joined into one forward pass.
// A request waits at most `maxWaitMs` for company (0: only until the event loop has read the requests
// that arrived with it; none when `maxBatch` samples are waiting already); while a forward runs, new
// requests gather and go together as soon as it ends — so under load batches grow by themselves. One forward is in flight
// at a time (they would queue on the model anyway), on a libuv thread, so the event loop keeps accepting
// and parsing requests meanwhile. Requests batch only with requests on the same model (a reload in
// between starts a new batch). A merged forward that fails is run again request by request, so a batch
// the model refuses fails alone, with its own error, never the requests it was joined with. A request
// whose signal aborts (its client hung up) before its forward starts leaves the queue: no forward is spent
// on an answer no one reads.
import { EmbshardError } from '../errors.js';
import type { PredictBatch, Trainer } from '../train/trainer.js';
import { concatBatches, splitResults } from './merge.js';
import type { Lease } from './model-slot.js';

export interface BatcherOptions {
  /** Samples per forward; a request larger than this runs alone. */
  maxBatch: number;
  /** Longest a request waits for others before its forward starts, in ms (0: the next turn of the event loop). */
  maxWaitMs: number;
  /** Called with the samples of every forward (metrics). */
  onBatch?: (samples: number, requests: number) => void;
}

interface Pending {
  batch: PredictBatch;
  lease: Lease;
  resolve: (p: Float32Array) => void;
  reject: (e: unknown) => void;
}

export class MicroBatcher {
  private queue: Pending[] = [];
  private queuedSamples = 0;
  private running = false;
  private timer: NodeJS.Timeout | NodeJS.Immediate | undefined;

  constructor(private readonly o: BatcherOptions) {}

  /**
   * Click probabilities of `batch` on the leased model; the lease is returned when they are known, or when
   * `signal` aborts before its forward starts (the request leaves the queue and rejects with DISPOSED).
   */
  submit(batch: PredictBatch, lease: Lease, signal?: AbortSignal): Promise<Float32Array> {
    return new Promise<Float32Array>((resolve, reject) => {
      const p: Pending = { batch, lease, resolve, reject };
      if (signal?.aborted) return withdraw(p);
      this.queue.push(p);
      this.queuedSamples += batch.size;
      signal?.addEventListener('abort', () => {
        const i = this.queue.indexOf(p);
        if (i < 0) return; // its forward has started
        this.queue.splice(i, 1);
        this.queuedSamples -= batch.size;
        withdraw(p);
      }, { once: true });
      this.schedule();
    });
  }

  /** Requests waiting for a forward. */
  get waiting(): number {
    return this.queue.length;
  }

  private schedule(): void {
    if (this.running || this.queue.length === 0) return;
    if (this.queuedSamples >= this.o.maxBatch) {
      this.flush();
      return;
    }
    this.timer ??= this.o.maxWaitMs > 0 ? setTimeout(() => this.flush(), this.o.maxWaitMs) : setImmediate(() => this.flush());
  }

  private flush(): void {
    if (this.timer) {
      if (this.o.maxWaitMs > 0) clearTimeout(this.timer as NodeJS.Timeout);
      else clearImmediate(this.timer as NodeJS.Immediate);
    }
    this.timer = undefined;
    if (this.running || this.queue.length === 0) return;
    const model = this.queue[0]!.lease.model;
    const take: Pending[] = [];
    let samples = 0, i = 0;
    for (; i < this.queue.length; i++) {
      const p = this.queue[i]!;
      if (p.lease.model !== model || (take.length > 0 && samples + p.batch.size > this.o.maxBatch)) break;
      take.push(p);
      samples += p.batch.size;
    }
    this.queue.splice(0, take.length);
    this.queuedSamples -= samples;
    this.running = true;
    this.o.onBatch?.(samples, take.length);
    void this.run(take, model.trainer).finally(() => {
      this.running = false;
      // whatever gathered meanwhile has waited long enough: it goes now
      if (this.queue.length) this.flush();
    });
  }

  private async run(take: Pending[], trainer: Trainer): Promise<void> {
    try {
      const p = await trainer.predict(concatBatches(take.map((t) => t.batch)));
      const parts = splitResults(p, take.map((t) => t.batch.size));
      take.forEach((t, k) => t.resolve(parts[k]!));
    } catch (e) {
      if (take.length === 1) take[0]!.reject(forwardError(e));
      else for (const t of take) await trainer.predict(t.batch).then(t.resolve, (e2: unknown) => t.reject(forwardError(e2)));
    } finally {
      for (const t of take) t.lease.release();
    }
  }
}

function withdraw(p: Pending): void {
  p.lease.release();
  p.reject(new EmbshardError('DISPOSED', 'the request was withdrawn before its forward'));
}

function forwardError(e: unknown): EmbshardError {
  return e instanceof EmbshardError ? e : new EmbshardError('INTERNAL', `the forward pass failed: ${(e as Error).message}`);
}

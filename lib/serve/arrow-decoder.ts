// arrow-decoder.ts — Arrow IPC request bodies decoded off the event loop, in a worker thread
// (arrow-worker.ts), under a deadline. A body is untrusted input, and the Arrow reader trusts the counts
// in its metadata: one changed byte can make it loop for minutes. A decode that outlasts the deadline
// ends its worker (the next body starts a fresh one) and the request is refused with INVALID_ARGUMENT,
// so the server keeps answering. The deadline counts from when a started worker takes the body, so a
// worker's start-up is not charged to it. Bodies are decoded one at a time, in arrival order.
import type { Worker } from 'node:worker_threads';
import { samplesFromMessage } from '../data/batch-message.js';
import { CallQueue } from '../call-queue.js';
import { startWorker } from '../worker-thread.js';
import { EmbshardError, ErrorCodes, type ErrorCode } from '../errors.js';
import type { ModelInputs } from '../train/inputs.js';
import type { PredictBatch } from '../train/trainer.js';
import type { DecodeReply, DecodeRequest } from './arrow-worker.js';

export class ArrowDecoder {
  /** the worker, once it has said it is ready */
  private worker: Promise<Worker> | undefined;
  private readonly calls = new CallQueue();
  private closed = false;

  /** `timeoutMs`: the longest one body may take to decode. */
  constructor(readonly timeoutMs: number) {}

  /** The body's batch for a model with these inputs (parseArrowRequest's checks and errors). */
  decode(body: Uint8Array, inputs: ModelInputs, maxSamples: number): Promise<PredictBatch> {
    return this.calls.run(() => this.run(body, inputs, maxSamples));
  }

  /** Ends the worker; later decodes are refused. */
  async close(): Promise<void> {
    this.closed = true;
    await this.calls.run(() => this.stop());
  }

  private async stop(): Promise<void> {
    const w = this.worker;
    this.worker = undefined;
    await (await w?.catch(() => undefined))?.terminate();
  }

  /** A worker that has loaded its modules ('ready'); INTERNAL when it fails to start. */
  private start(): Promise<Worker> {
    const w = startWorker(import.meta.url, 'arrow-worker', {});
    w.unref();
    return new Promise<Worker>((resolve, reject) => {
      const failed = (why: string): void => {
        w.off('message', ready);
        void w.terminate();
        reject(new EmbshardError('INTERNAL', `the Arrow decoding worker did not start: ${why}`));
      };
      const onError = (e: Error): void => failed(e.message);
      const onExit = (): void => failed('it exited');
      const ready = (m: unknown): void => {
        if (m !== 'ready') return;
        w.off('message', ready);
        w.off('error', onError);
        w.off('exit', onExit);
        resolve(w);
      };
      w.on('message', ready);
      w.once('error', onError);
      w.once('exit', onExit);
    });
  }

  private async run(body: Uint8Array, inputs: ModelInputs, maxSamples: number): Promise<PredictBatch> {
    if (this.closed) throw new EmbshardError('DISPOSED', 'the server is closed');
    const starting = (this.worker ??= this.start());
    let worker: Worker;
    try {
      worker = await starting;
    } catch (e) {
      if (this.worker === starting) this.worker = undefined;
      throw e;
    }
    const copy = new Uint8Array(body); // the body may be a view of a pooled buffer: send its bytes only
    const request: DecodeRequest = { body: copy, inputs, maxSamples };
    return new Promise<PredictBatch>((resolve, reject) => {
      const done = (): void => {
        clearTimeout(timer);
        worker.off('message', onMessage);
        worker.off('error', onError);
        worker.off('exit', onExit);
      };
      // the worker has failed or is stuck: it is ended, the next body gets a fresh one
      const fail = (e: EmbshardError): void => {
        done();
        if (this.worker === starting) this.worker = undefined;
        void worker.terminate().finally(() => reject(e));
      };
      const timer = setTimeout(
        () => fail(new EmbshardError('INVALID_ARGUMENT', `the Arrow body took longer than ${this.timeoutMs} ms to decode; its metadata is likely corrupt`)),
        this.timeoutMs,
      );
      const onMessage = (r: DecodeReply): void => {
        done();
        if (!r.ok) {
          const code = (ErrorCodes as readonly string[]).includes(r.code) ? (r.code as ErrorCode) : 'INTERNAL';
          reject(new EmbshardError(code, r.message));
          return;
        }
        try {
          resolve(samplesFromMessage(r.batch));
        } catch (e) {
          reject(e);
        }
      };
      const onError = (e: Error): void => fail(new EmbshardError('INVALID_ARGUMENT', `the Arrow body could not be decoded: ${e.message}`));
      const onExit = (): void => fail(new EmbshardError('INTERNAL', 'the Arrow decoding worker ended'));
      worker.on('message', onMessage);
      worker.on('error', onError);
      worker.on('exit', onExit);
      worker.postMessage(request, [copy.buffer]);
    });
  }
}

// worker-source.ts — runs a source (synthetic generation, TSV parsing, npy reading) in a worker thread,
// so loading and batching happen off the event loop and ahead of training: the worker keeps up to
// `depth` batches in flight, their buffers transferred, not copied. Each pass (epoch) starts a worker and
// ends it when the pass ends or the consumer breaks out, or once the garbage collector finds the pass's
// iterator dropped unfinished and unclosed. The spec is validated here first, so bad options throw in the
// caller, before any thread starts.
import type { Worker } from 'node:worker_threads';
import { EmbshardError, ErrorCodes, type ErrorCode } from '../errors.js';
import { openSource, type SourceSpec } from './specs.js';
import { startWorker } from '../worker-thread.js';
import { prefetchDepth } from './prefetch.js';
import type { Batch, BatchSource, DataReport } from './types.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { batchFromMessage, type BatchMessage } from './batch-message.js';

export interface WorkerSourceOptions {
  /** Batches produced ahead of the consumer, 1 … MAX_PREFETCH_DEPTH (prefetch.ts). Default 4. */
  depth?: number | undefined;
}

const WORKER_FIELDS = fieldsOf<WorkerSourceOptions>({ depth: true });

/** The worker of one pass, once the pass has started. */
interface PassWorker {
  worker?: Worker | undefined;
}

/** Ends the worker of a pass whose iterator was dropped without finishing or closing it. */
const abandoned = new FinalizationRegistry<PassWorker>((p) => void p.worker?.terminate());

type WorkerMessage = { type: 'batch'; batch: BatchMessage } | { type: 'end'; report?: DataReport } | { type: 'error'; code: string; message: string };

export class WorkerSource implements BatchSource {
  private lastReport: DataReport | undefined;

  private constructor(
    readonly spec: SourceSpec,
    private readonly local: BatchSource,
    readonly depth: number,
  ) {}

  /** Validates the spec (opening it here reads only headers) and returns the worker-backed source. */
  static async create(spec: SourceSpec, options: WorkerSourceOptions = {}): Promise<WorkerSource> {
    rejectUnknownFields(options, WORKER_FIELDS);
    const depth = prefetchDepth('depth', options.depth ?? 4);
    const local = await openSource(spec);
    return new WorkerSource(JSON.parse(JSON.stringify(spec)) as SourceSpec, local, depth);
  }

  get features(): readonly string[] {
    return this.local.features;
  }
  get numDense(): number {
    return this.local.numDense;
  }
  get batchSize(): number {
    return this.local.batchSize;
  }
  get tableRows(): readonly number[] | undefined {
    return this.local.tableRows;
  }
  get numBatches(): number | undefined {
    return this.local.numBatches;
  }
  get endless(): boolean | undefined {
    return this.local.endless;
  }
  /** The report of the last finished pass (the worker sends it when its pass ends). */
  report(): DataReport | undefined {
    return this.lastReport;
  }

  [Symbol.asyncIterator](): AsyncIterator<Batch> {
    const held: PassWorker = {};
    const pass = this.pass(held);
    abandoned.register(pass, held, held);
    return pass;
  }

  /** One pass: a worker started on the first next(), ended with the pass (held.worker is its worker). */
  private async *pass(held: PassWorker): AsyncGenerator<Batch> {
    const worker = startWorker(import.meta.url, 'source-worker', { spec: this.spec, depth: this.depth });
    held.worker = worker;
    worker.unref();
    const queue: WorkerMessage[] = [];
    let wake: (() => void) | undefined;
    let exited = false, exitError: Error | undefined;
    worker.on('message', (m: WorkerMessage) => {
      queue.push(m);
      wake?.();
    });
    worker.on('error', (e) => {
      exitError = e;
      wake?.();
    });
    worker.on('exit', () => {
      exited = true;
      wake?.();
    });
    try {
      for (;;) {
        const m = queue.shift();
        if (!m) {
          if (exitError) throw new EmbshardError('INTERNAL', `the data worker failed: ${exitError.message}`);
          if (exited) throw new EmbshardError('INTERNAL', 'the data worker exited before finishing its pass');
          // the worker keeps the process alive only while someone waits for it: an abandoned pass
          // (an iterator neither finished nor closed) does not hold the process open
          worker.ref();
          await new Promise<void>((r) => (wake = r));
          worker.unref();
          wake = undefined;
          continue;
        }
        if (m.type === 'batch') {
          worker.postMessage('credit');
          yield batchFromMessage(m.batch);
        } else if (m.type === 'end') {
          this.lastReport = m.report;
          return;
        } else {
          const code = (ErrorCodes as readonly string[]).includes(m.code) ? (m.code as ErrorCode) : 'INTERNAL';
          throw new EmbshardError(code, m.message);
        }
      }
    } finally {
      abandoned.unregister(held);
      await worker.terminate();
    }
  }
}

/** Opens `spec` in a worker thread with `depth` batches of lookahead. */
export function workerSource(spec: SourceSpec, options: WorkerSourceOptions = {}): Promise<WorkerSource> {
  return WorkerSource.create(spec, options);
}

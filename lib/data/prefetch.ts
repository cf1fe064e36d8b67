// prefetch.ts — a lookahead queue over any BatchSource: a pump pulls up to `depth` batches ahead while
// the consumer trains, yielding to the event loop between batches so the consumer's own callbacks (a
// native step resolving) run in between. Order is the source's; errors surface after the batches that
// preceded them; breaking out of the loop stops the pump and closes the source's iterator. A depth is at
// most MAX_PREFETCH_DEPTH batches (the worker source's and `--prefetch` too).
import { setImmediate as nextTurn } from 'node:timers/promises';
import { EmbshardError } from '../errors.js';
import { positiveInt, type Batch, type BatchSource } from './types.js';
import { SourceView } from './source-view.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';

/** The most batches a lookahead queue holds ahead of its consumer: each one is a whole batch in memory. */
export const MAX_PREFETCH_DEPTH = 64;

/** Validates a lookahead depth: an integer in [1, MAX_PREFETCH_DEPTH], naming the field on failure. */
export function prefetchDepth(name: string, v: unknown): number {
  const n = positiveInt(name, v);
  if (n > MAX_PREFETCH_DEPTH) throw new EmbshardError('INVALID_SIZE', `${name} must be at most ${MAX_PREFETCH_DEPTH} batches (got ${n})`);
  return n;
}

export interface PrefetchOptions {
  /** Batches held ready ahead of the consumer, 1 … MAX_PREFETCH_DEPTH. Default 4. */
  depth?: number | undefined;
}

const PREFETCH_FIELDS = fieldsOf<PrefetchOptions>({ depth: true });

export class PrefetchSource extends SourceView {
  readonly depth: number;

  constructor(source: BatchSource, options: PrefetchOptions = {}) {
    rejectUnknownFields(options, PREFETCH_FIELDS);
    super(source);
    this.depth = prefetchDepth('depth', options.depth ?? 4);
  }

  /** the source read ahead */
  get source(): BatchSource {
    return this.inner;
  }
  get numBatches(): number | undefined {
    return this.inner.numBatches;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Batch> {
    const it = this.source[Symbol.asyncIterator]();
    const depth = this.depth;
    const buf: Batch[] = [];
    let finished = false, exhausted = false, failed = false, error: unknown, stopped = false;
    let wake: (() => void) | undefined, space: (() => void) | undefined;
    const pump = (async () => {
      try {
        while (!stopped) {
          if (buf.length >= depth) {
            await new Promise<void>((r) => (space = r));
            continue;
          }
          const r = await it.next();
          if (r.done) {
            exhausted = true;
            break;
          }
          buf.push(r.value);
          wake?.();
          await nextTurn();
        }
      } catch (e) {
        failed = true;
        error = e;
      } finally {
        finished = true;
        wake?.();
      }
    })();
    try {
      for (;;) {
        if (buf.length > 0) {
          const b = buf.shift()!;
          space?.();
          space = undefined;
          yield b;
          continue;
        }
        if (failed) throw error;
        if (finished) return;
        await new Promise<void>((r) => (wake = r));
        wake = undefined;
      }
    } finally {
      stopped = true;
      space?.();
      await pump;
      // closed as a for-await loop closes it: only when left early (a source that ended or threw has closed itself)
      if (!exhausted && !failed) await it.return?.();
    }
  }
}

/** Wraps `source` in a lookahead queue of `depth` batches (in this thread; see workerSource for another). */
export function prefetch(source: BatchSource, options: PrefetchOptions = {}): PrefetchSource {
  return new PrefetchSource(source, options);
}

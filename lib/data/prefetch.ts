// prefetch.ts — a lookahead queue over any BatchSource: a pump pulls up to `depth` batches ahead while
// the consumer trains, yielding to the event loop between batches so the consumer's own callbacks (a
// native step resolving) run in between. Order is the source's; errors surface after the batches that
// preceded them; breaking out of the loop stops the pump and closes the source's iterator.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { positiveInt, type Batch, type BatchSource } from './types.js';
import { SourceView } from './source-view.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';

export interface PrefetchOptions {
  /** Batches held ready ahead of the consumer. Default 4. */
  depth?: number | undefined;
}

const PREFETCH_FIELDS = fieldsOf<PrefetchOptions>({ depth: true });

export class PrefetchSource extends SourceView {
  readonly depth: number;

  constructor(source: BatchSource, options: PrefetchOptions = {}) {
    rejectUnknownFields(options, PREFETCH_FIELDS);
    super(source);
    this.depth = positiveInt('depth', options.depth ?? 4);
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
    let finished = false, failed = false, error: unknown, stopped = false;
    let wake: (() => void) | undefined, space: (() => void) | undefined;
    const pump = (async () => {
      try {
        while (!stopped) {
          if (buf.length >= depth) {
            await new Promise<void>((r) => (space = r));
            continue;
          }
          const r = await it.next();
          if (r.done) break;
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
      if (!failed) await it.return?.(); // a source that threw has closed itself
    }
  }
}

/** Wraps `source` in a lookahead queue of `depth` batches (in this thread; see workerSource for another). */
export function prefetch(source: BatchSource, options: PrefetchOptions = {}): PrefetchSource {
  return new PrefetchSource(source, options);
}

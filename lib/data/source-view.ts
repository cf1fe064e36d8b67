// source-view.ts — the base of sources that re-deal another source's batches (a sample range, a rank's
// share): features, dense width, batch size, table rows, whether it never ends, report and close are the
// inner source's.
import type { Batch, BatchSource, DataReport } from './types.js';

export abstract class SourceView implements BatchSource {
  constructor(readonly inner: BatchSource) {}

  get features(): readonly string[] {
    return this.inner.features;
  }
  get numDense(): number {
    return this.inner.numDense;
  }
  get batchSize(): number {
    return this.inner.batchSize;
  }
  get tableRows(): readonly number[] | undefined {
    return this.inner.tableRows;
  }
  get endless(): boolean | undefined {
    return this.inner.endless;
  }
  report(): DataReport | undefined {
    return this.inner.report?.();
  }
  close(): Promise<void> {
    return this.inner.close?.() ?? Promise.resolve();
  }

  abstract [Symbol.asyncIterator](): AsyncIterator<Batch>;
}

// full-batches.ts — a source's batches of exactly its batch size: a final batch with fewer samples (the
// end of a finite source) is left out, for consumers that train whole batches only (Herald's scheduler
// deals a global batch of world × batchSize samples). How many samples the last pass left out is kept.
import type { Batch, BatchSource } from './types.js';
import { SourceView } from './source-view.js';

export class FullBatchesSource extends SourceView {
  private droppedSamples = 0;

  /** Samples the latest pass left out (its final partial batch); 0 when it ended on a full batch. */
  get dropped(): number {
    return this.droppedSamples;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Batch> {
    this.droppedSamples = 0;
    const B = this.inner.batchSize;
    for await (const b of this.inner) {
      if (b.size === B) yield b;
      else this.droppedSamples += b.size;
    }
  }
}

/** `source` without its final partial batch (see FullBatchesSource). */
export function fullBatches(source: BatchSource): FullBatchesSource {
  return new FullBatchesSource(source);
}

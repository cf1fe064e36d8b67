// rank-split.ts — splits a batch stream between the ranks of a data-parallel run, for sources that have
// no split of their own (Criteo TSV, Arrow). The rule: the source is read at the per-rank batch size B
// and its batches are dealt round robin — global batch j (samples j·B … j·B + B − 1 of the source, in
// file / row order after malformed lines are skipped) goes to rank j mod world. Batches are only handed
// out in whole rounds of `world`: a final round with fewer than `world` batches is dropped, so every rank
// takes the same number of steps (the dense all-reduce needs it). Every rank reads the whole source and
// keeps its share; batches are passed through untouched (no per-sample copies).
import { EmbshardError } from '../errors.js';
import type { Batch, BatchSource } from '../data/types.js';
import { SourceView } from '../data/source-view.js';

/** Global batch indices rank `rank` of `world` receives from a source of `numBatches` batches. */
export function rankBatchIndices(numBatches: number, rank: number, world: number): number[] {
  checkRank(rank, world);
  const rounds = Math.floor(numBatches / world);
  return Array.from({ length: rounds }, (_, k) => k * world + rank);
}

function checkRank(rank: number, world: number): void {
  if (!Number.isSafeInteger(world) || world < 1) throw new EmbshardError('INVALID_ARGUMENT', `world must be a positive integer (got ${String(world)})`);
  if (!Number.isSafeInteger(rank) || rank < 0 || rank >= world)
    throw new EmbshardError('INVALID_ARGUMENT', `rank must be an integer in [0, ${world}) (got ${String(rank)})`);
}

/** The share of `source` that belongs to `rank` of `world` (see the header for the rule). */
export class RankSplitSource extends SourceView {
  constructor(
    inner: BatchSource,
    readonly rank: number,
    readonly world: number,
  ) {
    super(inner);
    checkRank(rank, world);
  }

  get numBatches(): number | undefined {
    const n = this.inner.numBatches;
    return n === undefined ? undefined : Math.floor(n / this.world);
  }
  async *[Symbol.asyncIterator](): AsyncIterator<Batch> {
    let mine: Batch | undefined;
    let j = 0;
    for await (const b of this.inner) {
      if (j % this.world === this.rank) mine = b;
      j++;
      // a round is complete: hand out this rank's batch of it
      if (j % this.world === 0) {
        const out = mine!;
        mine = undefined;
        yield out;
      }
    }
  }
}

export function rankSplit(source: BatchSource, rank: number, world: number): BatchSource {
  return world === 1 ? source : new RankSplitSource(source, rank, world);
}

// rank-view.ts — one rank's view of a Herald step (native/herald/rank_view.h, computed beside the plan by the
// scheduler given a rank): the engine rows it reads and writes, and the layouts of its send buffers and of
// what it receives as copy segments (five int32 each: destination buffer, offset, source buffer, offset,
// floats) that the addon runs in bulk; and the typed access to those native ops (with the routes of a lookup
// outside training, native/herald/lookup.h).
import { loadAddon } from '../native.js';

export interface RankView {
  /** engine ids whose values this rank sends, table by table (sendStart, T + 1), send order */
  sendIds: BigInt64Array;
  sendStart: Int32Array;
  /** the moves among them: their optimizer state is sent too */
  sendStateIds: BigInt64Array;
  sendStateStart: Int32Array;
  /** dst 0: the send buffer; src 2t: the values read of table t, 2t + 1: the state read of table t */
  sendSegs: Int32Array;
  /** floats to / from every peer */
  sendCounts: Float64Array;
  recvCounts: Float64Array;
  /** engine ids receiving moved rows, table by table (moveStart), record order */
  moveIds: BigInt64Array;
  moveStart: Int32Array;
  /** copies received per table (T + 1 offsets) */
  copyStart: Int32Array;
  /** src 0: the received data; dst 3t: moved values of table t, 3t + 1: their state, 3t + 2: copies of table t */
  recvSegs: Int32Array;
  /** cache slots (numbered over all tables) freed by moves out, when still holding freeKeys; then filled by moves in */
  freeSlots: Int32Array;
  freeKeys: Float64Array;
  holdSlots: Int32Array;
  holdKeys: Float64Array;
  /** the forward's reads from the engine per table (engStart): engine id and position among the rank's reads */
  engIds: BigInt64Array;
  engPos: Int32Array;
  engStart: Int32Array;
  /** position among the rank's reads of every received copy (by copyStart) */
  copyPos: Int32Array;
  /**
   * every id of the rank's samples (in their order), feature by feature in the scheduler's feature order (each
   * table's features in turn): its index among the rank's distinct rows of the table (inverseStart: F + 1)
   */
  inverse: Int32Array;
  inverseStart: Int32Array;
  /** dst 0: the gradient message; src t: the rank's partial sums of table t */
  gradSendSegs: Int32Array;
  gradSendCounts: Float64Array;
  gradRecvCounts: Float64Array;
  /** the owner side, per table (updStart): engine ids of the contributions, source rank by source rank */
  updIds: BigInt64Array;
  updStart: Int32Array;
  /** dst 0: the backward's pooled gradient [updRows × pooledDim]; src t: partial sums of table t, T: received gradients */
  updSegs: Int32Array;
  /** distinct engine ids per table among the contributions */
  updDistinct: Int32Array;
  updRows: number;
}

interface HeraldOps {
  copySegments(dsts: Float32Array[], srcs: Float32Array[], segs: Int32Array): void;
  applySlots(slotKey: Float64Array, freeSlots: Int32Array, freeKeys: Float64Array, holdSlots: Int32Array, holdKeys: Float64Array): void;
  /** one cache's slots holding a row: their rows (key − rowBase) and engine ids (owned + slot) */
  heldSlots(slotKey: Float64Array, owned: number, rowBase: number): { rows: Float64Array; ids: BigInt64Array };
  /** a lookup's routes: distinct rows read from gathered held copies, the others asked of their owners (lo: W + 1 range starts) */
  lookupRoutes(rows: BigInt64Array, held: Float64Array, lo: Float64Array): { heldPos: Int32Array; heldSrc: Int32Array; askCounts: Float64Array; ask: BigInt64Array; askPos: Int32Array };
}

let cached: HeraldOps | undefined;
/** The addon's per-step ops of a rank (synchronous: one pass of bulk copies). */
export function heraldOps(): HeraldOps {
  return (cached ??= (loadAddon() as unknown as { herald: HeraldOps }).herald);
}

// step-status.ts — how the ranks agree that a step goes ahead: a rank whose batch fails routing (an id out
// of range, ...) still takes part in the step's first exchange, sending a status word in its uncounted
// counts (the relays' id gather under the hierarchical protocol, the input metadata under the flat one)
// instead of ids; after that exchange every rank ends the step with the same error code and nothing
// changed, rather than the others waiting on exchanges the rejecting rank never joins. The backward's
// agreement (agreeOnGradients) does the same for gradients, before any of them moves, agreeOnCall for
// calls whose first exchange carries no status (a sharded load), agreeOnKind for calls of two kinds that
// every rank must make alike (a Herald forward: its training step or a lookup), agreeOnTranslation after
// an admitting forward's dynamic translation, and agreeOnWrite for checkpoints one rank writes.
import { EmbshardError, ErrorCodes, type ErrorCode } from '../errors.js';
import type { ProcessGroup } from './group.js';
import type { Routed } from './routing.js';

/** A batch this rank rejected before its ids moved (the error routing raised), or its routed ids. */
export type RoutedOrRejected = Routed | EmbshardError;

/** The status of a rank that rejects its step's input with `code`: 1 + the code's index (0 is "go on"). */
export function rejectionStatus(code: ErrorCode): number {
  return 1 + ErrorCodes.indexOf(code);
}

/** The status word of the first exchange: 0, or the rejecting rank's rejectionStatus. */
export function statusOf(x: RoutedOrRejected): number {
  return x instanceof EmbshardError ? rejectionStatus(x.code) : 0;
}

/** The error a rank's rejection status `s` stands for: its code, saying who rejected what. */
function rejectedBy(s: number, who: string, what: string, scope = 'step'): EmbshardError {
  const code = ErrorCodes[s - 1] ?? 'INTERNAL';
  return new EmbshardError(code, `${who} rejected its ${what} (${code}); the ${scope} changed nothing on any rank`);
}

/** Every rank's status in one uncounted all-reduce (max): the highest. */
async function maxStatus(group: ProcessGroup, status: number): Promise<number> {
  return (await group.allReduce(Float32Array.of(status), 'max', { uncounted: true }))[0]!;
}

/** Ends the step on a rank where some rank's status is not 0: its own error, or the lowest such rank's. */
export function agreeOnStatus(x: RoutedOrRejected, status: (p: number) => number, W: number): void {
  if (x instanceof EmbshardError) throw x;
  for (let p = 0; p < W; p++) {
    const s = status(p);
    if (s !== 0) throw rejectedBy(s, `rank ${p}`, 'batch');
  }
}

/** The backward agreement's status of NaN / Inf gradients (below every 1 + error-code index: a rejection wins). */
export const NON_FINITE_STATUS = 0.5;

/**
 * A backward's first collective: every rank's status (0; NON_FINITE_STATUS for NaN / Inf gradients; 1 +
 * an error code's index for gradients the rank rejected) in one uncounted all-reduce (max). True when
 * every rank may go on; false when some rank's gradients are not finite (and none rejected) or this rank
 * rejected its own (its caller throws its error); another rank's rejection throws its code here.
 */
export async function agreeOnGradients(group: ProcessGroup, status: number): Promise<boolean> {
  const all = await maxStatus(group, status);
  if (all === 0) return true;
  if (all === NON_FINITE_STATUS || status > NON_FINITE_STATUS) return false;
  throw rejectedBy(all, 'another rank', 'gradients');
}

/**
 * The outcome of a backward whose ranks agreed that some rank's gradients hold NaN / Inf (`finite`: this
 * rank's own do not): NON_FINITE_GRADIENT, or a skipped step under nonFinite 'skip'. Nothing has changed.
 */
export function nonFiniteOutcome(finite: boolean, nonFinite: 'error' | 'skip', what = ''): { skipped: true; uniqueRows: 0 } {
  if (nonFinite !== 'skip')
    throw new EmbshardError('NON_FINITE_GRADIENT', `${what}${finite ? "another rank's gradients contain NaN or Inf" : 'the gradients contain NaN or Inf'}; no table was changed on any rank`);
  return { skipped: true, uniqueRows: 0 };
}

/**
 * The agreement of a call every rank makes with its own input (a sharded load's part of a checkpoint, a Herald save's folder):
 * every rank's status (0, or rejectionStatus of the error that rejects its `what`)
 * in one uncounted all-reduce (max). A rank with an error throws it; when another rank rejected its
 * input, this one throws that code.
 */
export async function agreeOnCall(group: ProcessGroup, bad: EmbshardError | undefined, what: string, scope: string): Promise<void> {
  const all = await maxStatus(group, bad ? rejectionStatus(bad.code) : 0);
  if (bad) throw bad;
  if (all !== 0) throw rejectedBy(all, 'another rank', what, scope);
}

/**
 * A load that is a collective: `local()` builds this rank's part (reading and checking the checkpoint at
 * `dir`), then every rank agrees (agreeOnCall) before any uses it; a rank whose part failed throws its own
 * error (one that is not an EmbshardError as INTERNAL to the others), every other rank that code, and the
 * parts built are disposed.
 */
export async function agreeOnLoad<T extends { dispose(): void }>(group: ProcessGroup, dir: string, local: () => Promise<T>): Promise<T> {
  let part: T | undefined;
  let failure: unknown;
  try {
    part = await local();
  } catch (e) {
    failure = e;
  }
  const bad = failure === undefined || failure instanceof EmbshardError ? failure : new EmbshardError('INTERNAL', String((failure as Error)?.message ?? failure));
  try {
    await agreeOnCall(group, bad, `part of checkpoint '${dir}'`, 'load');
  } catch (e) {
    part?.dispose();
    throw failure ?? e;
  }
  return part!;
}

/**
 * The agreement after an admitting forward's dynamic translation (raw ids → slots of each rank's shards),
 * one uncounted all-reduce (max): a rank whose translation failed throws its own error, every other rank
 * that code, instead of waiting in the output exchange for the failed rank. Ids the ranks admitted in that
 * forward stay admitted, as after any forward.
 */
export async function agreeOnTranslation(group: ProcessGroup, bad: EmbshardError | undefined): Promise<void> {
  const all = await maxStatus(group, bad ? rejectionStatus(bad.code) : 0);
  if (bad) throw bad;
  if (all === 0) return;
  const code = ErrorCodes[all - 1] ?? 'INTERNAL';
  throw new EmbshardError(code, `another rank's dynamic shards failed this forward (${code}); it ended on every rank, the ids admitted in it stay`);
}

/** What agreeOnKind found: whether some rank made the call of kind 1, and the error that ends it here (none: go on). */
export interface KindAgreement {
  some: boolean;
  error?: EmbshardError;
}

/**
 * The agreement of a call of two kinds (0 or 1) that every rank must make alike, each with its own input (a
 * Herald forward: a lookup, or the step its scheduler planned): every rank's status (as agreeOnCall), kind
 * and `signature` (an integer below 2^24 that ranks making the same call compute alike: a Herald step's
 * plan) in one uncounted all-reduce (max) of five values. The call ends on every rank when some rank
 * rejected its `what` (this rank's own error, or that code), or with `differ(why)` when the ranks' kinds
 * differ ('kind') or, of one kind, their signatures ('signature'); `some` says whether any rank made the
 * call of kind 1, so every rank can undo what such a call prepared.
 */
export async function agreeOnKind(
  group: ProcessGroup,
  bad: EmbshardError | undefined,
  kind: 0 | 1,
  signature: number,
  what: string,
  scope: string,
  differ: (why: 'kind' | 'signature') => EmbshardError,
): Promise<KindAgreement> {
  const all = await group.allReduce(Float32Array.of(bad ? rejectionStatus(bad.code) : 0, kind, 1 - kind, signature, -signature), 'max', { uncounted: true });
  const some = all[1] === 1;
  if (bad) return { some, error: bad };
  if (all[0] !== 0) return { some, error: rejectedBy(all[0]!, 'another rank', what, scope) };
  if (all[1] === 1 && all[2] === 1) return { some, error: differ('kind') };
  return all[3] !== -all[4]! ? { some, error: differ('signature') } : { some };
}

/**
 * Every rank learns whether some rank's part of a collective write failed (a checkpoint rank 0 writes):
 * one sum all-reduce of one value, over any group with one. A rank whose part failed throws its own error
 * (`failure`); the others throw `otherwise()`.
 */
export async function agreeOnWrite(group: { allReduce(data: Float32Array, op: 'sum'): Promise<unknown> }, failure: unknown, otherwise: () => EmbshardError): Promise<void> {
  const failed = Float32Array.of(failure ? 1 : 0);
  await group.allReduce(failed, 'sum');
  if (failure) throw failure;
  if (failed[0]! > 0) throw otherwise();
}

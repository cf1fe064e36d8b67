// step-status.ts — how the ranks agree that a step goes ahead: a rank whose batch fails routing (an id out
// of range, ...) still takes part in the step's first exchange, sending a status word in its uncounted
// counts (the relays' id gather under the hierarchical protocol, the input metadata under the flat one)
// instead of ids; after that exchange every rank ends the step with the same error code and nothing
// changed, rather than the others waiting on exchanges the rejecting rank never joins.
import { EmbshardError, ErrorCodes } from '../errors.js';
import type { Routed } from './routing.js';

/** A batch this rank rejected before its ids moved (the error routing raised), or its routed ids. */
export type RoutedOrRejected = Routed | EmbshardError;

/** The status word of the first exchange: 0, or 1 + the index of the rejecting rank's error code. */
export function statusOf(x: RoutedOrRejected): number {
  return x instanceof EmbshardError ? 1 + ErrorCodes.indexOf(x.code) : 0;
}

/** Ends the step on a rank where some rank's status is not 0: its own error, or the lowest such rank's. */
export function agreeOnStatus(x: RoutedOrRejected, status: (p: number) => number, W: number): void {
  if (x instanceof EmbshardError) throw x;
  for (let p = 0; p < W; p++) {
    const s = status(p);
    if (s === 0) continue;
    const code = ErrorCodes[s - 1] ?? 'INTERNAL';
    throw new EmbshardError(code, `rank ${p} rejected its batch (${code}); the step changed nothing on any rank`);
  }
}

// synthetic-sessions.ts — the optional session-locality model of the synthetic source (synthetic.ts). Click
// logs are not i.i.d.: a user's impressions arrive over a window of time and repeat the user's own fields
// (user, device, location, …) while the ad and context fields vary. Off by default (samples i.i.d.); with
// `sessions`:
//   - `concurrent` sessions are open at any time, each lasting `concurrent × samples` consecutive stream
//     samples, so a session has `samples` samples on average, spread over that window; sample i belongs to
//     slot j = hash(i) mod concurrent, and slot j's sessions follow each other at offsets staggered by a hash
//     of j: session = ⌊(i + offset_j) / window⌋ · concurrent + j;
//   - a fixed `share` of the features (chosen by the seed) are session fields: every sample of a session has
//     the session's bag there (its ids drawn once per session, from the same Zipf law); the other features
//     are drawn per sample as without sessions.
// Every value stays a pure function of (seed, global sample index). The marginal law of each id is the same
// Zipf law as without sessions; only the repetition across samples changes.
import { EmbshardError } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { hash2, unit } from '../random/rng.js';
import { positiveInt } from './types.js';

export interface SessionOptions {
  /** sessions open at any time */
  concurrent: number;
  /** mean samples per session */
  samples: number;
  /** share of the features that are session fields, in [0, 1] (default 0.5) */
  share?: number | undefined;
}

export interface SessionConfig {
  concurrent: number;
  samples: number;
  share: number;
}

const SESSION_FIELDS = fieldsOf<SessionOptions>({ concurrent: true, samples: true, share: true });

/** Validates `sessions` (undefined: none); throws EmbshardError naming the field. */
export function resolveSessions(o: SessionOptions | undefined): SessionConfig | null {
  if (o === undefined) return null;
  if (o === null || typeof o !== 'object') throw new EmbshardError('INVALID_ARGUMENT', 'sessions must be an object { concurrent, samples, share? }');
  rejectUnknownFields(o, SESSION_FIELDS, 'sessions');
  const concurrent = positiveInt('sessions.concurrent', o.concurrent);
  const samples = positiveInt('sessions.samples', o.samples);
  if (!Number.isSafeInteger(concurrent * samples * 2)) throw new EmbshardError('INVALID_SIZE', 'sessions.concurrent × sessions.samples is too large');
  const share = o.share ?? 0.5;
  if (typeof share !== 'number' || !(share >= 0 && share <= 1)) throw new EmbshardError('INVALID_ARGUMENT', `sessions.share must be a number in [0, 1] (got ${String(share)})`);
  return { concurrent, samples, share };
}

/**
 * The keys of the session model for one seed: sample i's slot is j = hashIndex(slotKey, i) mod concurrent,
 * its session ⌊(i + hash2(offsetKey, j) mod window) / window⌋ · concurrent + j, and a session field f's bag
 * key hashIndex(bagKeys[f], session) (the native generator, native/data/synthetic_batch.cc, applies them).
 */
export class SessionModel {
  /** concurrent × samples: the span of stream samples one session's samples fall in */
  readonly window: number;
  readonly slotKey: number;
  readonly offsetKey: number;
  /** per feature: whether it is a session field */
  readonly sessionField: boolean[];
  /** per feature: the key stream of its session bags */
  readonly bagKeys: number[];

  constructor(
    readonly cfg: SessionConfig,
    seed: number,
    features: number,
  ) {
    this.window = cfg.concurrent * cfg.samples;
    this.slotKey = hash2(seed, 0x5e55);
    this.offsetKey = hash2(seed, 0x5e56);
    this.sessionField = Array.from({ length: features }, (_, f) => unit(hash2(hash2(seed, 0x5e57), f)) < cfg.share);
    this.bagKeys = Array.from({ length: features }, (_, f) => hash2(seed, 0x5e00 + f));
  }
}

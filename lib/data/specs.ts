// specs.ts — data sources described as plain JSON-able specs, so a worker thread (or the CLI) can open
// the same source from a description: synthetic, Criteo TSV, or torchrec's binary Criteo days.
import { EmbshardError } from '../errors.js';
import { rejectUnknownFields } from '../fields.js';
import { CriteoNpySource, type CriteoNpyOptions } from './criteo-npy.js';
import { CriteoTsvSource, type CriteoTsvOptions } from './criteo-tsv.js';
import { SyntheticSource, type SyntheticOptions } from './synthetic.js';
import type { BatchSource } from './types.js';

export type SourceSpec =
  | { kind: 'synthetic'; options: SyntheticOptions }
  | { kind: 'criteo-tsv'; options: CriteoTsvOptions }
  | { kind: 'criteo-npy'; options: CriteoNpyOptions };

const SPEC_FIELDS = ['kind', 'options'];

/** Opens (and validates) the source a spec describes, in this thread. */
export async function openSource(spec: SourceSpec): Promise<BatchSource> {
  if (spec === null || typeof spec !== 'object') throw new EmbshardError('INVALID_ARGUMENT', 'a source spec must be an object');
  rejectUnknownFields(spec, SPEC_FIELDS, 'spec');
  switch (spec.kind) {
    case 'synthetic':
      return new SyntheticSource(spec.options);
    case 'criteo-tsv':
      return new CriteoTsvSource(spec.options);
    case 'criteo-npy':
      return new CriteoNpySource(spec.options).open();
    default:
      throw new EmbshardError('INVALID_ARGUMENT', `spec.kind must be 'synthetic', 'criteo-tsv' or 'criteo-npy' (got ${String((spec as { kind: unknown }).kind)})`);
  }
}

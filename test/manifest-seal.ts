// manifest-seal.ts — for tests that edit a checkpoint's manifest on purpose, to reach a check that stands
// behind its seal: the fields without the seal, and the text of edited fields sealed again. The seal,
// written from its definition: manifestSha256 = the SHA-256 (hex) of the other fields' compact JSON.
import { createHash } from 'node:crypto';

/** The fields of a manifest's text, its seal taken off. */
export function manifestFields(text: string): Record<string, any> {
  const { manifestSha256: _, ...fields } = JSON.parse(text) as Record<string, unknown>;
  return fields;
}

/** The text of a manifest holding `fields`, sealed. */
export function sealedManifest(fields: object): string {
  return JSON.stringify({ ...fields, manifestSha256: createHash('sha256').update(JSON.stringify(fields)).digest('hex') }, null, 2);
}

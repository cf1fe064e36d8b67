// criteo-hash.ts — how a raw Criteo categorical value becomes a table row, written once for the TSV
// reader and the inference server: the value is 1 … 8 hex digits read as an unsigned 32-bit v, then
// row = v mod rows ('modulo', DLRM's --max-ind-range and torchrec's `hashes`) or
// row = fmix32(v xor salt_f) mod rows ('murmur': spreads values whose low bits are correlated;
// salt_f = hash2(0xc817e0, f) for the feature's column f).
import { fmix32, hash2 } from '../random/rng.js';

export type CategoricalHash = 'modulo' | 'murmur';

/** Parses a 1 … 8 digit hex field buf[s, e); −1 when not hex or too long. */
export function parseHex(buf: Uint8Array, s: number, e: number): number {
  if (e - s > 8 || e <= s) return -1;
  let v = 0;
  for (let i = s; i < e; i++) {
    const c = buf[i]!;
    let d: number;
    if (c >= 48 && c <= 57) d = c - 48;
    else if (c >= 97 && c <= 102) d = c - 87;
    else if (c >= 65 && c <= 70) d = c - 55;
    else return -1;
    v = v * 16 + d;
  }
  return v;
}

/** The salt of categorical column f under 'murmur'. */
export function categoricalSalt(f: number): number {
  return hash2(0xc817e0, f);
}

/** Row of a parsed categorical value v (≥ 0) of column f with salt `salt` in a table of `rows` rows. */
export function hashCategorical(v: number, salt: number, rows: number, hash: CategoricalHash): number {
  return hash === 'murmur' ? fmix32(v ^ salt) % rows : v % rows;
}

/** Row of a raw hex string of column f; −1 when the string is not 1 … 8 hex digits. */
export function hashHexString(text: string, f: number, rows: number, hash: CategoricalHash): number {
  if (text.length === 0 || text.length > 8) return -1;
  const v = parseHex(Buffer.from(text, 'latin1'), 0, text.length);
  return v < 0 ? -1 : hashCategorical(v, categoricalSalt(f), rows, hash);
}

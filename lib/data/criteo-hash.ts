// criteo-hash.ts — how a raw Criteo categorical value becomes a table row, written once for the TSV
// reader and the inference server: the value is 1 … 8 hex digits read as an unsigned 32-bit v, then
// row = v mod rows ('modulo', DLRM's --max-ind-range and torchrec's `hashes`) or
// row = fmix32(v xor salt_f) mod rows ('murmur': spreads values whose low bits are correlated;
// salt_f = hash2(0xc817e0, f) for the feature's column f).
import { fmix32, hash2 } from '../random/rng.js';

export type CategoricalHash = 'modulo' | 'murmur';

/** The value of hex digit character code c, or −1. */
function hexDigit(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  if (c >= 65 && c <= 70) return c - 55;
  return -1;
}

/** Parses a 1 … 8 digit hex field buf[s, e); −1 when not hex or too long. */
export function parseHex(buf: Uint8Array, s: number, e: number): number {
  if (e - s > 8 || e <= s) return -1;
  let v = 0;
  for (let i = s; i < e; i++) {
    const d = hexDigit(buf[i]!);
    if (d < 0) return -1;
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
  // read as UTF-16 code units: any character outside 0-9 a-f A-F (U+0141 included) makes it not hex
  let v = 0;
  for (let i = 0; i < text.length; i++) {
    const d = hexDigit(text.charCodeAt(i));
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return hashCategorical(v, categoricalSalt(f), rows, hash);
}

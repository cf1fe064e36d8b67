// fused.ts — several typed arrays per peer sent as one exchange of bytes: the sharded runtime's ids,
// lengths and weights travel together (one all-to-all instead of three), as do the ids and gradients of
// replica syncs. A message is its parts' bytes back to back, in the order both sides derive from the
// schedule, so no framing goes on the wire and the byte counts are the parts' sums (docs/wire-protocol.md).
import type { CommArray } from './binding.js';

type Ctor<T extends CommArray> = { new (n: number): T; readonly BYTES_PER_ELEMENT: number };

/** One message per peer from its parts: the bytes to send and the byte count per peer. */
export function fuse(perPeer: readonly (readonly CommArray[])[]): { bytes: Uint8Array; counts: number[] } {
  const counts = perPeer.map((parts) => parts.reduce((n, a) => n + a.byteLength, 0));
  const bytes = new Uint8Array(counts.reduce((a, b) => a + b, 0));
  let o = 0;
  for (const parts of perPeer)
    for (const a of parts) {
      bytes.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), o);
      o += a.byteLength;
    }
  return { bytes, counts };
}

/**
 * Reads the parts of received messages in order. Each part is copied into its own aligned array (a
 * part's offset in the message need not be a multiple of its element size).
 */
export class PartReader {
  private at = 0;
  constructor(private readonly bytes: Uint8Array) {}

  take<T extends CommArray>(C: Ctor<T>, n: number): T {
    const out = new C(n);
    const nb = n * C.BYTES_PER_ELEMENT;
    new Uint8Array(out.buffer).set(this.bytes.subarray(this.at, this.at + nb));
    this.at += nb;
    return out;
  }

  /** Bytes read so far. */
  get offset(): number {
    return this.at;
  }
}

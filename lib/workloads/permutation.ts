// permutation.ts — seeded uniformly random permutations of a table's ids (Fisher–Yates on the package's
// counter-based Rng), for workloads whose ids are scattered as hashed ids are: Zipf rank r becomes id
// perm[r], so the hot rows are anywhere in the table. Recent permutations are kept for reuse.
import { Rng } from '../random/rng.js';

const cache = new Map<string, Int32Array>();
const KEEP = 64;

/** The permutation of [0, rows) for (seed, table): perm[rank] = id. */
export function idPermutation(rows: number, seed: number, table: number): Int32Array {
  const key = `${rows}:${seed}:${table}`;
  let p = cache.get(key);
  if (!p) {
    p = new Int32Array(rows);
    for (let i = 0; i < rows; i++) p[i] = i;
    const rng = new Rng(seed, 0x9e37 + table);
    for (let i = rows - 1; i > 0; i--) {
      const j = rng.int(0, i);
      const t = p[i]!;
      p[i] = p[j]!;
      p[j] = t;
    }
    if (cache.size >= KEEP) cache.delete(cache.keys().next().value!);
    cache.set(key, p);
  }
  return p;
}

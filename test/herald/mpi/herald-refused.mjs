// Run under mpirun (test/herald/herald-mpi.test.ts): Herald training steps that one rank refuses in the
// forward — rank 1 by the caller's reject, then the last rank by a forward of another batch — between good
// steps. Args: 'refused' (g0, the two refused tries of g1, g2) or 'clean' (g0, g2). Every rank prints one
// JSON line: the codes its refused forwards rejected with, whether its engine rows and state were bitwise
// unchanged by them, a digest of its outputs, engine rows and state after g2, and the gathered tables'
// distance to one EmbeddingCollection trained on g0 and g2.
import { JaggedBatch } from '../../../dist/lib/batch.js';
import { EmbeddingCollection } from '../../../dist/lib/collection.js';
import { EmbshardError } from '../../../dist/lib/errors.js';
import { createMpiGroup } from '../../../dist/lib/sharded/group.js';
import { HeraldEmbeddingCollection } from '../../../dist/lib/herald/collection.js';
import * as S from '../scenario.mjs';

const [mode = 'refused'] = process.argv.slice(2);
const lib = { JaggedBatch };
const g = await createMpiGroup({ timeoutMs: 20_000 });
const W = g.size, r = g.rank, B = 6;
const cfg = S.config({ type: 'adagrad', lr: 0.1 });
const h = new HeraldEmbeddingCollection(cfg, g, { cacheRows: 8, batchSize: B });

/** FNV-1a over the bytes of float arrays. */
function digest(arrays, d = 0x811c9dc5) {
  for (const a of arrays) for (const b of new Uint8Array(a.buffer, a.byteOffset, a.byteLength)) d = Math.imul(d ^ b, 0x01000193) >>> 0;
  return d;
}
const engine = () => h.local.tables.flatMap((t) => {
  const ids = Int32Array.from({ length: t.rows }, (_, j) => j);
  return [h.local.readRows(t.name, ids), h.local.readState(t.name, ids)];
});
async function train(global, k) {
  const out = await h.forward(h.assign(global));
  await h.backward(out, { pooled: S.gradsFor(k, out.samples, h.pooledDim) });
  return out;
}

const g0 = S.globalBatch(lib, 0, W * B), g1 = S.globalBatch(lib, 1, W * B), g2 = S.globalBatch(lib, 2, W * B);
await train(g0, 0);
const codes = [];
let unchanged = true;
if (mode === 'refused') {
  const before = digest(engine());
  const tries = [
    (local) => h.forward(local, r === 1 ? { reject: new EmbshardError('NON_FINITE_GRADIENT', 'rank 1 refuses') } : {}),
    (local) => h.forward(r === W - 1 ? S.globalBatch(lib, 50 + r, B) : local),
  ];
  for (const t of tries) {
    try {
      await t(h.assign(g1));
      codes.push('fulfilled');
    } catch (e) {
      codes.push(e.code ?? String(e));
    }
    unchanged &&= digest(engine()) === before;
  }
}
const out = await train(g2, 2);
const after = digest([out.pooled, Float32Array.from(out.samples), ...engine()]);
const oracle = new EmbeddingCollection(cfg);
for (const [batch, k] of [[g0, 0], [g2, 2]]) {
  const go = await oracle.forward(batch);
  await oracle.backward(go, { pooled: S.gradsFor(k, Int32Array.from({ length: W * B }, (_, i) => i), oracle.pooledDim) });
}
let tableErr = 0;
for (const t of oracle.tables) tableErr = Math.max(tableErr, S.relErr((await h.gather(t.name)).weights, oracle.readRows(t.name, Int32Array.from({ length: t.rows }, (_, j) => j))));
console.log(JSON.stringify({ rank: r, size: W, codes, unchanged, digest: after, tableErr }));
h.dispose();
oracle.dispose();
g.close();

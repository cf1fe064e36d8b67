// quickstart.mjs — the README's example, kept runnable by test/embedding/readme.test.ts.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EmbeddingCollection, JaggedBatch, EmbshardError, backends } from 'embshard';

console.log(backends().map((b) => `${b.name}: ${b.available ? 'available' : b.reason}`).join('\n'));

const ec = new EmbeddingCollection({
  tables: [
    { name: 'user', rows: 1_000_000, dim: 64, pooling: 'sum', features: ['user_id'] },
    { name: 'item', rows: 500_000, dim: 64, pooling: 'mean', features: ['item_id', 'clicked_items'] }, // shared table
    { name: 'hist', rows: 100_000, dim: 16, pooling: 'none', features: ['history'] }, // sequence output
  ],
  optimizer: { type: 'adagrad', lr: 0.01, eps: 1e-8 }, // 'sgd' | 'adagrad' | 'rowwise_adagrad' | 'adam'
  device: 'cpu',
  seed: 42,
});

// Two samples. lengths are feature-major: [user_id × 2, item_id × 2, clicked_items × 2, history × 2].
const features = ['user_id', 'item_id', 'clicked_items', 'history'];
const batch = JaggedBatch.fromLengths({
  features,
  batchSize: 2,
  lengths: Int32Array.of(1, 1, 1, 1, 3, 0, 2, 1),
  ids: BigInt64Array.of(7n, 42n, 10n, 11n, 10n, 99n, 12n, 5n, 6n, 7n),
});

const out = await ec.forward(batch); // off the event loop
console.log(ec.pooledFeatures, out.pooled.length === 2 * ec.pooledDim); // [user_id, item_id, clicked_items] true
console.log(out.sequences.history.values.length); // 3 ids × 16

await ec.backward(out, {
  pooled: new Float32Array(2 * ec.pooledDim).fill(0.1),
  sequences: { history: new Float32Array(3 * 16).fill(0.1) },
}); // gradients in; fused Adagrad update applied

const rows = ec.readRows('user', BigInt64Array.of(0n, 7n)); // Float32Array [2 × 64]
ec.writeRows('user', BigInt64Array.of(0n), rows.subarray(64, 128));

const tmp = mkdtempSync(join(tmpdir(), 'embshard-'));
const dir = join(tmp, 'ckpt');
await ec.save(dir);
const back = await EmbeddingCollection.load(dir);
console.log(back.step, back.readRows('user', [0n])[0] === rows[64]); // 1 true

try {
  await ec.forward(JaggedBatch.fromLengths({ features, batchSize: 1, lengths: Int32Array.of(1, 0, 0, 0), ids: BigInt64Array.of(5_000_000n) }));
} catch (e) {
  if (!(e instanceof EmbshardError)) throw e;
  console.log(e.code); // ID_OUT_OF_RANGE
}
ec.dispose();
back.dispose();
rmSync(tmp, { recursive: true, force: true }); // the checkpoint takes 0.8 GB

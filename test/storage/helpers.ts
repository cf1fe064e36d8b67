// helpers.ts — batches over a collection's features with uniform or Zipf ids (hot ranks scattered over
// the id space), random gradients, and the kill tests' child process.
import { spawn } from 'node:child_process';
import { EmbeddingCollection, JaggedBatch } from '../../lib/index.js';
import { Rng } from '../../lib/random/rng.js';
import { makeScatter, scatter, ZipfSampler } from '../../lib/random/zipf.js';

/** A batch of B samples with bags of 0..maxLen ids; alpha 0 = uniform ids, else Zipf(alpha). */
export function idBatch(ec: EmbeddingCollection, rng: Rng, B: number, maxLen: number, alpha: number, weights = false): JaggedBatch {
  const feats = ec.featureInfo.map((f) => f.name);
  const lengths = new Int32Array(feats.length * B);
  const ids: bigint[] = [];
  ec.featureInfo.forEach((f, s) => {
    const rows = ec.tables.find((t) => t.name === f.table)!.rows;
    const z = alpha > 0 ? new ZipfSampler(rows, alpha) : undefined;
    const sc = makeScatter(rows, 11, s);
    for (let b = 0; b < B; b++) {
      const len = rng.int(0, maxLen);
      lengths[s * B + b] = len;
      for (let k = 0; k < len; k++) ids.push(BigInt(z ? scatter(sc, z.sample(rng)) : rng.int(0, rows - 1)));
    }
  });
  const w = weights ? Float32Array.from(ids, () => Math.fround(rng.float() * 2 - 0.5)) : undefined;
  return JaggedBatch.fromLengths({ features: feats, batchSize: B, lengths, ids: BigInt64Array.from(ids), weights: w });
}

export function grads(ec: EmbeddingCollection, batch: JaggedBatch, rng: Rng): { pooled: Float32Array; sequences: Record<string, Float32Array> } {
  const pooled = Float32Array.from({ length: batch.batchSize * ec.pooledDim }, () => rng.float() * 2 - 1);
  const sequences: Record<string, Float32Array> = {};
  for (const f of ec.featureInfo) {
    if (f.pooling !== 'none') continue;
    const n = batch.feature(f.name).lengths.reduce((a, b) => a + b, 0);
    sequences[f.name] = Float32Array.from({ length: n * f.dim }, () => rng.float() * 2 - 1);
  }
  return { pooled, sequences };
}

/** Every row and every state value of every table. */
export function everything(ec: EmbeddingCollection): Float32Array[] {
  return ec.tables.flatMap((t) => {
    const ids = BigInt64Array.from({ length: t.rows }, (_, i) => BigInt(i));
    return [ec.readRows(t.name, ids), ec.readState(t.name, ids)];
  });
}

/**
 * Runs `node script ...args` (a kill-*.mjs run that prints `saved <step>` after each finished save) and
 * SIGKILLs it `delayMs` after it has printed a save of step `afterStep` or later, at whatever point of a
 * step or a save it then is; resolves with the last step it printed as saved.
 */
export function killAfterSaves(script: string, args: string[], afterStep: number, delayMs: number): Promise<number> {
  const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let lastSaved = 0;
  let err = '';
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  return new Promise<number>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      for (const m of d.toString().matchAll(/saved (\d+)/g)) lastSaved = Number(m[1]);
      if (lastSaved >= afterStep) setTimeout(() => child.kill('SIGKILL'), delayMs);
    });
    child.on('exit', (_code, signal) => (signal === 'SIGKILL' ? resolve(lastSaved) : reject(new Error(`child exited: ${err}`))));
  });
}

// checkpoint.ts — the trainer's checkpoint folder: trainer.json (model spec, optimizer, schedule, step
// counts, base learning rates, the dense file's size and SHA-256, the model's inputs), dense.bin (dense parameters then
// dense optimizer state, float32 little-endian) and embeddings/ (the embedding module's own checkpoint).
// Written to a temporary sibling folder, fsynced, then swapped in by rename, so a crash never leaves a
// half-written checkpoint under `dir`.
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, open, readFile, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { EmbshardError } from '../errors.js';
import type { DenseModel, DenseModelSpec, DenseOptimizerConfig } from './dense.js';
import type { EmbeddingModule } from './embeddings.js';
import type { ResolvedSchedule } from './schedule.js';
import type { ModelInputs } from './inputs.js';

export const TRAINER_MANIFEST = 'trainer.json';
export const DENSE_FILE = 'dense.bin';
export const EMBEDDINGS_DIR = 'embeddings';

export interface TrainerManifest {
  format: 'embshard.trainer';
  version: 1;
  model: DenseModelSpec;
  optimizer: Required<DenseOptimizerConfig>;
  seed: number;
  schedule: ResolvedSchedule;
  /** Trainer steps completed. */
  steps: number;
  /** Dense optimizer updates applied (Adam's t). */
  denseStep: number;
  denseBaseLr: number;
  embeddingBaseLr: number;
  dense: { file: string; params: number; state: number; sha256: string };
  /** What the model takes as input (feature names, dense width, table rows, hashing), for predict and serve. */
  inputs?: ModelInputs;
}

export interface TrainerState {
  dense: DenseModel;
  embeddings: EmbeddingModule;
  steps: number;
  schedule: ResolvedSchedule;
  denseBaseLr: number;
  embeddingBaseLr: number;
  inputs?: ModelInputs | undefined;
  /**
   * false on ranks other than 0 of a sharded run: they take part in the embeddings' collective save
   * (which rank 0 writes) and write nothing themselves — dense weights are identical on every rank.
   */
  writer?: boolean;
}

function bytesOf(a: Float32Array): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

async function writeDurable(path: string, chunks: Uint8Array[]): Promise<void> {
  const fh = await open(path, 'w');
  try {
    for (const c of chunks) await fh.write(c);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

function ioError(e: unknown, what: string): EmbshardError {
  if (e instanceof EmbshardError) return e;
  return new EmbshardError('IO_ERROR', `${what}: ${(e as Error).message}`);
}

export async function writeTrainerCheckpoint(dir: string, s: TrainerState): Promise<void> {
  if (typeof dir !== 'string' || dir.length === 0) throw new EmbshardError('INVALID_ARGUMENT', 'dir must be a non-empty path');
  if (s.writer === false) {
    await s.embeddings.save(join(dir, EMBEDDINGS_DIR)); // a collective; rank 0 writes it
    return;
  }
  const tmp = join(dirname(dir), `.${basename(dir)}.tmp-${process.pid}-${Date.now()}`);
  try {
    await mkdir(tmp, { recursive: true });
    await s.embeddings.save(join(tmp, EMBEDDINGS_DIR));
    const p = bytesOf(s.dense.params), st = bytesOf(s.dense.state);
    const sha = createHash('sha256').update(p).update(st).digest('hex');
    await writeDurable(join(tmp, DENSE_FILE), [p, st]);
    const manifest: TrainerManifest = {
      format: 'embshard.trainer',
      version: 1,
      model: s.dense.spec,
      optimizer: s.dense.optimizer,
      seed: s.dense.seed,
      schedule: s.schedule,
      steps: s.steps,
      denseStep: s.dense.step,
      denseBaseLr: s.denseBaseLr,
      embeddingBaseLr: s.embeddingBaseLr,
      dense: { file: DENSE_FILE, params: s.dense.params.length, state: s.dense.state.length, sha256: sha },
      ...(s.inputs ? { inputs: s.inputs } : {}),
    };
    await writeDurable(join(tmp, TRAINER_MANIFEST), [new TextEncoder().encode(JSON.stringify(manifest, null, 2))]);
    const old = existsSync(dir) ? `${tmp}.old` : undefined;
    if (old) await rename(dir, old);
    await rename(tmp, dir);
    if (old) await rm(old, { recursive: true, force: true });
  } catch (e) {
    await rm(tmp, { recursive: true, force: true }).catch(() => undefined);
    throw ioError(e, `saving the trainer checkpoint to '${dir}'`);
  }
}

export interface LoadedTrainerCheckpoint {
  manifest: TrainerManifest;
  params: Float32Array;
  state: Float32Array;
  embeddingsDir: string;
}

export async function readTrainerCheckpoint(dir: string): Promise<LoadedTrainerCheckpoint> {
  const mpath = join(dir, TRAINER_MANIFEST);
  if (!existsSync(mpath)) throw new EmbshardError('CHECKPOINT_MISSING', `no trainer checkpoint at '${dir}' (${TRAINER_MANIFEST} is missing)`);
  let m: TrainerManifest;
  try {
    m = JSON.parse(await readFile(mpath, 'utf8')) as TrainerManifest;
  } catch (e) {
    throw new EmbshardError('CHECKPOINT_CORRUPT', `'${mpath}' is not valid JSON: ${(e as Error).message}`);
  }
  if (m?.format !== 'embshard.trainer' || m.version !== 1 || !m.dense || !m.model)
    throw new EmbshardError('CHECKPOINT_CORRUPT', `'${mpath}' is not an embshard trainer manifest (version 1)`);
  const dpath = join(dir, m.dense.file);
  if (!existsSync(dpath)) throw new EmbshardError('CHECKPOINT_MISSING', `'${dpath}' is missing`);
  const buf = await readFile(dpath);
  const want = (m.dense.params + m.dense.state) * 4;
  if (buf.byteLength !== want)
    throw new EmbshardError('CHECKPOINT_CORRUPT', `'${dpath}' holds ${buf.byteLength} bytes; the manifest says ${want}`);
  const sha = createHash('sha256').update(buf).digest('hex');
  if (sha !== m.dense.sha256) throw new EmbshardError('CHECKPOINT_CORRUPT', `'${dpath}' fails its SHA-256 check`);
  const all = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
  return {
    manifest: m,
    params: all.subarray(0, m.dense.params),
    state: all.subarray(m.dense.params),
    embeddingsDir: join(dir, EMBEDDINGS_DIR),
  };
}

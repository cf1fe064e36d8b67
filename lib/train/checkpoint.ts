// checkpoint.ts — the trainer's checkpoint folder: trainer.json (model spec, optimizer, schedule, step
// counts, base learning rates, the dense file's size and SHA-256, the model's inputs), dense.bin (dense parameters then
// dense optimizer state, float32 little-endian) and embeddings/ (the embedding module's own checkpoint).
// Written through lib/checkpoint.ts's atomic folder writer, so a crash never leaves a half-written
// checkpoint under `dir`; the manifest and the dense file are read back from one save even while another
// process saves to `dir` (readConsistent).
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { checkDir, isNotFound, parseManifest, readConsistent, versionFault, writeCheckpointDir, writeFileDurable } from '../checkpoint.js';
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

/** The fields of a trainer manifest; any other is CHECKPOINT_CORRUPT. */
const TRAINER_KEYS: readonly (keyof TrainerManifest)[] = [
  'format', 'version', 'model', 'optimizer', 'seed', 'schedule', 'steps', 'denseStep', 'denseBaseLr', 'embeddingBaseLr', 'dense', 'inputs',
];

/** What gives one of `m`'s fields another kind than a trainer manifest gives it, naming the field, or undefined (values are checked where they are used). */
function manifestFault(m: TrainerManifest): string | undefined {
  const obj = (v: unknown): boolean => typeof v === 'object' && v !== null && !Array.isArray(v);
  if (m.format !== 'embshard.trainer') return `format is ${JSON.stringify(m.format)}, not "embshard.trainer"`;
  const version = versionFault(m.version);
  if (version) return version;
  for (const k of ['model', 'optimizer', 'schedule'] as const) if (!obj(m[k])) return `${k} is not an object`;
  for (const k of ['seed', 'steps', 'denseStep'] as const) if (!Number.isSafeInteger(m[k]) || m[k] < 0) return `${k} is ${JSON.stringify(m[k])}, not a count`;
  for (const k of ['denseBaseLr', 'embeddingBaseLr'] as const) if (typeof m[k] !== 'number' || !Number.isFinite(m[k])) return `${k} is not a finite number`;
  if (m.inputs !== undefined && !obj(m.inputs)) return 'inputs is not an object';
  const d = m.dense as Partial<TrainerManifest['dense']> | undefined;
  if (!obj(d) || typeof d!.file !== 'string' || d!.file.length === 0 || /[/\\]/.test(d!.file) || d!.file === '.' || d!.file === '..')
    return 'dense.file is not a file name';
  if (![d!.params, d!.state].every((v) => Number.isSafeInteger(v) && v! >= 0)) return 'dense.params / dense.state are not counts';
  if (typeof d!.sha256 !== 'string') return 'dense.sha256 is not a string';
  return undefined;
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

export async function writeTrainerCheckpoint(dir: string, s: TrainerState): Promise<void> {
  checkDir(dir);
  if (s.writer === false) {
    await s.embeddings.save(join(dir, EMBEDDINGS_DIR)); // a collective; rank 0 writes it
    return;
  }
  await writeCheckpointDir(
    dir,
    async (tmp): Promise<TrainerManifest> => {
      await s.embeddings.save(join(tmp, EMBEDDINGS_DIR));
      const p = bytesOf(s.dense.params), st = bytesOf(s.dense.state);
      const sha = createHash('sha256').update(p).update(st).digest('hex');
      await writeFileDurable(join(tmp, DENSE_FILE), [p, st]);
      return {
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
    },
    TRAINER_MANIFEST,
  );
}

/** Reads a file of a trainer checkpoint; CHECKPOINT_MISSING when it is not there. */
async function readPart(path: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (isNotFound(err))
      throw new EmbshardError('CHECKPOINT_MISSING', `no trainer checkpoint at '${path}' (${err.code === 'ENOTDIR' ? 'a file stands where its path names a folder' : 'the file is missing'})`);
    throw new EmbshardError('IO_ERROR', `reading '${path}': ${err.message}`);
  }
}

export interface LoadedTrainerCheckpoint {
  manifest: TrainerManifest;
  params: Float32Array;
  state: Float32Array;
  embeddingsDir: string;
}

/**
 * Reads and checks a trainer checkpoint's manifest and dense file, both of one save while other processes
 * save to `dir` (readConsistent). The caller reads the embeddings from `embeddingsDir`.
 */
export async function readTrainerCheckpoint(dir: string): Promise<LoadedTrainerCheckpoint> {
  return readConsistent(dir, readTrainerFolder);
}

/** The checked manifest (trainer.json) of the trainer checkpoint at `dir`, its dense file not read. */
export async function readTrainerManifest(dir: string): Promise<TrainerManifest> {
  return readConsistent(dir, manifestIn);
}

async function manifestIn(folder: string): Promise<TrainerManifest> {
  const mpath = join(folder, TRAINER_MANIFEST);
  const text = (await readPart(mpath)).toString('utf8');
  const m = parseManifest(text, mpath, TRAINER_KEYS) as unknown as TrainerManifest;
  const fault = manifestFault(m);
  if (fault) throw new EmbshardError('CHECKPOINT_CORRUPT', `'${mpath}' is not an embshard trainer manifest (version 1): ${fault}`);
  return m;
}

/**
 * readTrainerCheckpoint's one read, of the folder as it stands (checkpointDir's folder): for a caller that
 * reads the whole checkpoint again itself when a save replaced it (Trainer.load).
 */
export async function readTrainerFolder(dir: string): Promise<LoadedTrainerCheckpoint> {
  const m = await manifestIn(dir);
  const dpath = join(dir, m.dense.file);
  const buf = await readPart(dpath);
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

// checkpoint.ts — the checkpoint directory format and its atomic write / verified read.
//   <dir>/manifest.json  { format: 'embshard.checkpoint', version: 1, config, step, payload: { file, bytes, crc32c },
//                          manifestSha256 }
//   <dir>/tables.bin     both native arenas (weights, optimizer state) with a header; CRC-32C in the manifest
//   <dir>/dynamic-<t>.bin the id map of each dynamic table (lib/storage/dynamic.ts), when there are any
//   <dir>/spill-<t>.bin   the live records of a spilling dynamic table's spill file (a compact copy)
// Every manifest ends with its seal, manifestSha256: the SHA-256 of the rest of the manifest as compact
// JSON, checked by every reader (parseManifest), so a manifest altered after it was written is refused
// like an altered payload file. A save writes a fresh sibling folder, fsyncs every file and the folder,
// then swaps it in with two renames (the old folder aside, the new one in). A crash leaves the old
// checkpoint or the new one, never a torn one: between the two renames neither stands at the path, and
// readers take the new folder from its sibling (checkpointDir) until the next save completes the swap.
// A save replaces only a checkpoint: the path must be free, an empty folder, a checkpoint folder (one
// holding a manifest) or a symbolic link (the link is replaced, the folder it names is left as it was).
// Saves to one path at once each land whole, the last swap winning. A loader reads through readConsistent
// to see one save whole while other processes save to the same path.
import { createHash, randomBytes } from 'node:crypto';
import { constants as fsConstants, promises as fs } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { EmbshardError } from './errors.js';
import type { ResolvedConfig } from './config.js';

export const PAYLOAD_FILE = 'tables.bin';
export const MANIFEST_FILE = 'manifest.json';

/** One dynamic table's id map in a checkpoint folder. */
export interface DynamicPayload {
  table: string;
  file: string;
  bytes: number;
  crc32c: number;
  /** a table with spill: the copy of its spill file's live records */
  spill?: { file: string; bytes: number; crc32c: number; records: number };
}

export interface Manifest {
  format: 'embshard.checkpoint';
  version: 1;
  config: ResolvedConfig;
  step: number;
  payload: { file: string; bytes: number; crc32c: number };
  /** the id maps of the collection's dynamic tables */
  dynamic?: DynamicPayload[];
  /** extra state written by higher layers (trainer, sharded runtime) */
  extra?: Record<string, unknown>;
}

/** The fields of a collection manifest; any other is CHECKPOINT_CORRUPT. */
const MANIFEST_KEYS: readonly string[] = ['format', 'version', 'config', 'step', 'payload', 'dynamic', 'extra'];

/** The manifest field that seals the others. */
export const MANIFEST_SEAL = 'manifestSha256';

/** The seal of a manifest's fields: the SHA-256 (hex) of their compact JSON, in their order. */
function manifestDigest(fields: object): string {
  return createHash('sha256').update(JSON.stringify(fields)).digest('hex');
}

/**
 * A checkpoint manifest read back: the JSON object of `text` (the file at `path`) with its seal checked and
 * taken off, and no field outside `keys`; CHECKPOINT_CORRUPT naming the file when the text is not a JSON
 * object, a field is unknown, or the fields are not those sealed (truncated or altered). Manifests written
 * without a seal (by earlier versions) are read as they are.
 */
export function parseManifest(text: string, path: string, keys: readonly string[]): Record<string, unknown> {
  let m: unknown;
  try {
    m = JSON.parse(text);
  } catch (e) {
    throw new EmbshardError('CHECKPOINT_CORRUPT', `'${path}' is not valid JSON (truncated or altered): ${(e as Error).message}`);
  }
  if (m === null || typeof m !== 'object' || Array.isArray(m)) throw new EmbshardError('CHECKPOINT_CORRUPT', `'${path}' is not a JSON object`);
  const { [MANIFEST_SEAL]: seal, ...fields } = m as Record<string, unknown>;
  const unknown = Object.keys(fields).find((k) => !keys.includes(k));
  if (unknown !== undefined) throw new EmbshardError('CHECKPOINT_CORRUPT', `'${path}' has an unknown field '${unknown}' (altered)`);
  if (seal !== undefined && seal !== manifestDigest(fields))
    throw new EmbshardError('CHECKPOINT_CORRUPT', `'${path}' fails its ${MANIFEST_SEAL} check (altered after it was written)`);
  return fields;
}

async function fsyncPath(path: string, dir = false): Promise<void> {
  const h = await fs.open(path, dir ? 'r' : 'r+');
  try {
    await h.sync();
  } finally {
    await h.close();
  }
}

/** Writes `data` (a string, bytes, or byte chunks in order) to `path` and fsyncs the file; IO_ERROR naming the file. */
export async function writeFileDurable(path: string, data: string | Uint8Array | readonly Uint8Array[]): Promise<void> {
  try {
    const h = await fs.open(path, 'w');
    try {
      if (typeof data === 'string' || data instanceof Uint8Array) await h.writeFile(data);
      else for (const c of data) await h.write(c);
      await h.sync();
    } finally {
      await h.close();
    }
  } catch (e) {
    throw new EmbshardError('IO_ERROR', `writing '${path}': ${(e as Error).message}`);
  }
}

/** The sibling folders of a checkpoint at `target` that its saves leave while they run: `.<name>.<kind>-<tag>`. */
function siblingName(target: string, kind: 'tmp' | 'old', tag: string): string {
  return `.${basename(target)}.${kind}-${tag}`;
}

/** A save's tag: this process and a random part; a stale sibling's process is gone. */
function newTag(): string {
  return `${process.pid}-${randomBytes(4).toString('hex')}`;
}

/** Whether the process that named a sibling with `tag` is gone (on this host), so its folder is stale. */
function writerGone(tag: string): boolean {
  const pid = Number(tag.split('-')[0]);
  if (!Number.isSafeInteger(pid) || pid <= 0) return true;
  if (pid === process.pid) return false;
  try {
    process.kill(pid, 0);
    return false;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

/** The names in `target`'s parent folder (none when it cannot be read). */
async function siblingsOf(target: string): Promise<string[]> {
  try {
    return (await fs.readdir(dirname(target))).sort();
  } catch {
    return [];
  }
}

/** INVALID_ARGUMENT unless `dir` is a non-empty path string (a checkpoint folder to save to or load from). */
export function checkDir(dir: unknown): asserts dir is string {
  if (typeof dir !== 'string' || dir.length === 0)
    throw new EmbshardError('INVALID_ARGUMENT', `a checkpoint folder must be a non-empty path string (got ${dir === '' ? "''" : typeof dir})`);
}

/** Whether a file-system error says the path is not there (ENOENT; ENOTDIR: a file where a folder was named). */
export function isNotFound(e: unknown): boolean {
  const code = (e as NodeJS.ErrnoException | null)?.code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}

/** Whether `path` exists; an error other than not-found counts as existing (the caller's next step reports it). */
async function exists(path: string): Promise<boolean> {
  try {
    await fs.stat(path);
    return true;
  } catch (e) {
    return !isNotFound(e);
  }
}

/**
 * A save of `target` cut off between its two renames, among `names` (its parent's): the new folder
 * (complete, it was fsynced before the old one was moved) and its tag, or undefined.
 */
function interruptedSwap(target: string, names: readonly string[]): { fresh: string; tag: string } | undefined {
  const prefix = siblingName(target, 'old', '');
  for (const n of names) {
    if (!n.startsWith(prefix)) continue;
    const tag = n.slice(prefix.length);
    const tmp = siblingName(target, 'tmp', tag);
    if (names.includes(tmp)) return { fresh: join(dirname(target), tmp), tag };
  }
  return undefined;
}

/**
 * The folder to read the checkpoint saved at `dir` from: `dir` itself, or, when a save was cut off between
 * its two renames (no folder at `dir`), the complete new folder it left beside it. Every loader starts here.
 */
export async function checkpointDir(dir: string): Promise<string> {
  checkDir(dir);
  const target = resolve(dir);
  if (await exists(target)) return dir;
  return interruptedSwap(target, await siblingsOf(target))?.fresh ?? dir;
}

/** How often readConsistent reads a checkpoint that saves keep replacing while it reads. */
const READ_TRIES = 20;

/** The folder the checkpoint at `dir` is read from now and its identity (device, inode, change time: a save's renames change it), or undefined for the identity of none. */
async function folderNow(dir: string): Promise<{ folder: string; id: string | undefined }> {
  const folder = await checkpointDir(dir);
  try {
    const st = await fs.stat(folder, { bigint: true });
    return { folder, id: `${resolve(folder)}\0${st.dev}:${st.ino}:${st.ctimeNs}` };
  } catch {
    return { folder, id: undefined };
  }
}

/**
 * Runs `read(folder)` (several reads of the files of the checkpoint at `dir`) so that it sees one
 * checkpoint whole while other processes save to `dir`: a reader takes each file by its path, so a save
 * that swaps its folder in meanwhile would hand it files of two checkpoints (refused by their checksums,
 * or, across the files of a trainer's folder, mixed). When the folder changed during the read, its result
 * is let go (`discard`) or its error dropped, and it reads again; IO_ERROR when saves keep replacing it.
 */
export async function readConsistent<T>(dir: string, read: (folder: string) => Promise<T>, discard: (value: T) => void = () => undefined): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const before = await folderNow(dir);
    let outcome: { value: T } | { error: unknown };
    try {
      outcome = { value: await read(before.folder) };
    } catch (e) {
      outcome = { error: e };
    }
    if ((await folderNow(dir)).id === before.id) {
      if ('error' in outcome) throw outcome.error;
      return outcome.value;
    }
    if ('value' in outcome) discard(outcome.value);
    if (attempt === READ_TRIES)
      throw new EmbshardError('IO_ERROR', `checkpoint '${dir}' was replaced by other saves each of the ${READ_TRIES} times it was read`);
  }
}

/**
 * Before a save: completes a swap an earlier save left cut off (its new folder renamed into place), and
 * removes the sibling folders of saves whose process is gone (an unfinished new folder, an old one).
 */
async function tidyCheckpoint(target: string): Promise<void> {
  const parent = dirname(target);
  const names = await siblingsOf(target);
  const swap = interruptedSwap(target, names);
  if (swap && writerGone(swap.tag) && !(await exists(target))) {
    try {
      await fs.rename(swap.fresh, target);
      await fsyncPath(parent, true);
    } catch (e) {
      // another save's tidying completed it first (the new folder gone, or a folder at the path)
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTEMPTY' && code !== 'EEXIST') throw e;
    }
  }
  for (const kind of ['tmp', 'old'] as const) {
    const prefix = siblingName(target, kind, '');
    for (const n of names)
      if (n.startsWith(prefix) && writerGone(n.slice(prefix.length))) await fs.rm(join(parent, n), { recursive: true, force: true });
  }
}

/** The manifest files a checkpoint folder holds one of (a collection's, a trainer's); a save replaces only such a folder. */
const CHECKPOINT_MANIFESTS: readonly string[] = [MANIFEST_FILE, 'trainer.json'];

/**
 * Why a save must not replace what stands at `target` (its folder would be deleted), or undefined: a file,
 * or a folder holding neither a checkpoint manifest nor nothing. Free paths and symbolic links pass.
 */
async function replaceRefusal(dir: string, target: string): Promise<string | undefined> {
  let st;
  try {
    st = await fs.lstat(target);
  } catch (e) {
    if (isNotFound(e)) return undefined;
    throw e;
  }
  if (st.isSymbolicLink()) return undefined;
  if (!st.isDirectory()) return `a file stands at '${dir}' (a checkpoint is a folder; a save would delete the file)`;
  let names: string[];
  try {
    names = await fs.readdir(target);
  } catch (e) {
    if (isNotFound(e)) return undefined; // another save moved it aside meanwhile
    throw e;
  }
  if (names.length === 0 || names.some((n) => CHECKPOINT_MANIFESTS.includes(n))) return undefined;
  return `'${dir}' is a folder that holds no checkpoint (no ${CHECKPOINT_MANIFESTS.join(' or ')}); a save replaces the whole folder, so it would delete what it holds`;
}

/** Makes `path`'s parent folder if missing and checks that it is writable; throws the file system's error. */
export async function ensureWritableParent(path: string): Promise<void> {
  const parent = dirname(resolve(path));
  await fs.mkdir(parent, { recursive: true });
  await fs.access(parent, fsConstants.W_OK);
}

/**
 * Whether a checkpoint could be written at `dir` now: its parent folder made if missing, and a temporary
 * sibling folder made and removed there, as writeCheckpointDir begins (a writable-looking parent such as
 * /proc may still refuse it); the IO_ERROR writeCheckpointDir would raise, or undefined. (Ranks of a
 * sharded save agree on it before the save's collectives.)
 */
export async function checkpointWritable(dir: string): Promise<EmbshardError | undefined> {
  try {
    checkDir(dir);
  } catch (e) {
    return e as EmbshardError;
  }
  try {
    await ensureWritableParent(dir);
    const target = resolve(dir);
    const refusal = await replaceRefusal(dir, target);
    if (refusal) return new EmbshardError('IO_ERROR', `saving checkpoint '${dir}' failed: ${refusal}`);
    const probe = join(dirname(target), siblingName(target, 'tmp', newTag()));
    await fs.mkdir(probe);
    await fs.rmdir(probe);
    return undefined;
  } catch (e) {
    return new EmbshardError('IO_ERROR', `saving checkpoint '${dir}' failed: ${(e as Error).message}`);
  }
}

/**
 * Writes a checkpoint folder atomically — the one writer every checkpoint of the package goes through:
 * `fill(tmpDir)` writes the payload files into a fresh temporary sibling folder and returns the manifest,
 * written last, sealed (MANIFEST_SEAL), as `manifestFile`; every file and the folder are fsynced, then
 * the folder replaces `dir` by renames and the parent folder is fsynced. A crash leaves the old checkpoint
 * or the new one (see checkpointDir); the next save tidies what a crashed one left. One writer per path at
 * a time.
 */
export async function writeCheckpointDir(dir: string, fill: (tmp: string) => Promise<object>, manifestFile = MANIFEST_FILE): Promise<void> {
  checkDir(dir);
  const target = resolve(dir);
  const parent = dirname(target);
  const tag = newTag();
  const tmp = join(parent, siblingName(target, 'tmp', tag));
  const old = join(parent, siblingName(target, 'old', tag));
  let refusal: string | undefined;
  try {
    await fs.mkdir(parent, { recursive: true });
    refusal = await replaceRefusal(dir, target);
    if (!refusal) {
      await tidyCheckpoint(target);
      await fs.mkdir(tmp);
    }
  } catch (e) {
    throw new EmbshardError('IO_ERROR', `saving checkpoint '${dir}' failed: ${(e as Error).message}`);
  }
  if (refusal) throw new EmbshardError('IO_ERROR', `saving checkpoint '${dir}' failed: ${refusal}`);
  try {
    const manifest = await fill(tmp);
    const sealed = { ...manifest, [MANIFEST_SEAL]: manifestDigest(manifest) };
    await writeFileDurable(join(tmp, manifestFile), JSON.stringify(sealed, null, 2));
    await fsyncPath(tmp, true);
    await swapIn(tmp, target, old);
  } catch (e) {
    await fs.rm(tmp, { recursive: true, force: true });
    if (e instanceof EmbshardError) throw e;
    throw new EmbshardError('IO_ERROR', `saving checkpoint '${dir}' failed: ${(e as Error).message}`);
  }
  // the new checkpoint stands: the old one goes whatever happens next
  await fs.rm(old, { recursive: true, force: true }).catch(() => undefined);
  try {
    await fsyncPath(parent, true);
  } catch (e) {
    throw new EmbshardError('IO_ERROR', `saving checkpoint '${dir}': the folder was written but its parent could not be synced: ${(e as Error).message}`);
  }
}

/** How often a save retries its swap when other saves of the same path keep putting their folders there first. */
const SWAP_TRIES = 16;

/**
 * Swaps the complete folder `tmp` in at `target`: what stands there moved aside to `old`, `tmp` renamed in.
 * When another save of the same path puts its own folder at `target` between the two renames, that
 * folder (complete: every save fsyncs before its swap) is what this save replaces: the older one moved
 * aside is deleted and the swap tried again. On failure the folder moved aside goes back to `target`.
 */
async function swapIn(tmp: string, target: string, old: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    // Move an existing checkpoint aside by trying to (no separate existence check that could go stale).
    let aside = false;
    try {
      await fs.rename(target, old);
      aside = true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
    try {
      await fs.rename(tmp, target);
      return;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if ((code !== 'ENOTEMPTY' && code !== 'EEXIST') || attempt === SWAP_TRIES) {
        if (aside) await fs.rename(old, target).catch(() => undefined);
        throw e;
      }
      // another save's complete folder stands at target now: the one moved aside is older, and goes
      if (aside) await fs.rm(old, { recursive: true, force: true });
    }
  }
}

/**
 * Whether a manifest entry names one file of the checkpoint folder: a plain file name (no path), its byte
 * size, and an integer checksum under `crc` ('crc32c', or 'crc32' for zlib's CRC-32).
 */
export function isFileEntry(e: unknown, crc: 'crc32c' | 'crc32' = 'crc32c'): e is { file: string; bytes: number } {
  const x = e as Record<string, unknown> | null | undefined;
  return typeof x === 'object' && x !== null && typeof x.file === 'string' && !x.file.includes('/') && Number.isSafeInteger(x.bytes) && Number.isInteger(x[crc]);
}

/**
 * The bytes of file `file` of checkpoint `dir`, checked against the size and checksum its manifest entry
 * gives (`checksum(bytes)` must equal `crc`); CHECKPOINT_CORRUPT naming the file when it cannot be read,
 * is truncated or was altered.
 */
export async function readVerified(dir: string, file: string, bytes: number, crc: number, checksum: (b: Uint8Array) => number): Promise<Uint8Array> {
  let data: Uint8Array;
  try {
    data = new Uint8Array(await fs.readFile(join(dir, file)));
  } catch (err) {
    throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}': ${file} cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  if (data.length !== bytes || checksum(data) !== crc)
    throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}': ${file} has ${data.length} bytes / another checksum than its manifest says (truncated or altered)`);
  return data;
}

/** Reads and validates a manifest; CHECKPOINT_MISSING / CHECKPOINT_CORRUPT. */
export async function readManifest(dir: string): Promise<Manifest> {
  let text: string;
  try {
    text = await fs.readFile(join(dir, MANIFEST_FILE), 'utf8');
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    throw new EmbshardError(
      isNotFound(err) ? 'CHECKPOINT_MISSING' : 'IO_ERROR',
      `no checkpoint at '${dir}': ${MANIFEST_FILE} cannot be read (${err.code ?? err.message})`,
    );
  }
  const m = parseManifest(text, join(dir, MANIFEST_FILE), MANIFEST_KEYS) as unknown as Manifest;
  const fault = manifestFault(m);
  if (fault) throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${dir}': ${MANIFEST_FILE} is not an embshard v1 manifest: ${fault}`);
  return m;
}

/** What makes `m` no collection manifest of this version, naming the field, or undefined. */
function manifestFault(m: Manifest): string | undefined {
  if (m.format !== 'embshard.checkpoint') return `format is ${JSON.stringify(m.format)}, not "embshard.checkpoint"`;
  const version = versionFault(m.version);
  if (version) return version;
  if (typeof m.config !== 'object' || m.config === null || Array.isArray(m.config)) return 'config is not an object';
  if (!Number.isSafeInteger(m.step) || m.step < 0) return `step is ${JSON.stringify(m.step)}, not a count`;
  if (!isFileEntry(m.payload)) return 'payload is not a file entry { file, bytes, crc32c }';
  return undefined;
}

/** What is wrong with a manifest's `version` field (this code reads version 1), or undefined. */
export function versionFault(version: unknown): string | undefined {
  if (version === 1) return undefined;
  if (Number.isInteger(version) && (version as number) > 1) return `version is ${version}, newer than this embshard reads (1): load it with a newer embshard`;
  return `version is ${JSON.stringify(version)}, not 1`;
}

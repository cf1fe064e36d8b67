// predict.ts — `embshard predict --checkpoint <dir> --data <source> --out <file>`: scores every sample of
// a source (or its first --samples N; synthetic data, which never ends, needs them) with a saved model and streams one click probability per sample, in source order, to a CSV
// file (header `probability`) or, when the file ends in .arrow, an Arrow IPC file (one Float32 column
// `probability`, one RecordBatch per batch). A progress bar goes to stderr when it is a terminal.
import { createWriteStream, openSync, readdirSync, statSync, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import { once } from 'node:events';
import { Field, Float32, RecordBatch, RecordBatchFileWriter, Schema, Struct, makeData } from 'apache-arrow';
import { EmbshardError, isEmbshardError } from '../errors.js';
import { loadAddon } from '../native.js';
import { Trainer } from '../train/trainer.js';
import type { ModelInputs } from '../train/inputs.js';
import { DATA_SPEC_FORMS, isEndlessSpec, openDataSpec, splitSpec } from './sources.js';
import { progressLine } from './progress.js';
import { intArg, parseArgs, runCommand } from './command.js';
import { MAX_BATCH_SIZE } from '../data/types.js';

export const PREDICT_USAGE = `usage: embshard predict --checkpoint <dir> --data <source> --out <file.csv|file.arrow>
                        [--samples N] [--batch 4096] [--max-rows N] [--threads N] [--quiet]
  --data: ${DATA_SPEC_FORMS}
Writes one click probability per sample of --data (its first N with --samples N; synthetic data never
ends and needs --samples), in order: CSV (header 'probability') or, for a name
ending in .arrow, an Arrow IPC file with one Float32 column 'probability'. Raw categorical values are
hashed into the checkpoint's tables as it was trained; the data's features must be the model's.`;

interface Args {
  checkpoint?: string;
  data?: string;
  out?: string;
  batch: number;
  maxRows?: number;
  samples?: number;
  threads?: number;
  quiet: boolean;
}

function parse(argv: string[]): Args | string {
  const a: Args = { batch: 4096, quiet: false };
  const problem = parseArgs(argv, { '--quiet': () => (a.quiet = true) }, (k, v) => {
    const int = () => intArg(k, v);
    switch (k) {
      case '--checkpoint': a.checkpoint = v; break;
      case '--data': a.data = v; break;
      case '--out': a.out = v; break;
      case '--batch': a.batch = intArg(k, v, 1, MAX_BATCH_SIZE); break;
      case '--max-rows': a.maxRows = int(); break;
      case '--samples': a.samples = int(); break;
      case '--threads': a.threads = int(); break;
      default: return `unknown option '${k}'`;
    }
    return undefined;
  });
  if (problem !== undefined) return problem;
  if (!a.checkpoint) return '--checkpoint is required';
  if (!a.data) return '--data is required';
  if (!a.out) return '--out is required';
  if (a.samples === undefined && isEndlessSpec(a.data)) return '--data synthetic never ends: give --samples N';
  return a;
}

/** A sink for probabilities: CSV lines or Arrow record batches, with backpressure. */
interface Sink {
  write(p: Float32Array): Promise<void>;
  close(): Promise<void>;
}

/**
 * The output file, opened now so that a path that cannot be written fails here (IO_ERROR through
 * runCommand) rather than as a stream's unhandled 'error' event; a later write error stays on the stream
 * (`errored`) and is thrown by the next write (a wait for 'drain' or 'finish' rejects with it).
 */
function openOutput(path: string): WriteStream {
  const file = createWriteStream(path, { fd: openSync(path, 'w') });
  file.on('error', () => undefined); // kept as file.errored
  return file;
}

async function writeChunk(file: WriteStream, chunk: string | Uint8Array): Promise<void> {
  if (file.errored) throw file.errored;
  if (!file.write(chunk)) await once(file, 'drain');
}

function csvSink(file: WriteStream): Sink {
  let first = true;
  return {
    async write(p) {
      const head = first ? 'probability\n' : '';
      first = false;
      await writeChunk(file, head + Array.from(p, String).join('\n') + '\n');
    },
    async close() {
      if (first) await writeChunk(file, 'probability\n');
      file.end();
      await once(file, 'finish');
    },
  };
}

function arrowSink(file: WriteStream): Sink {
  const field = new Field('probability', new Float32(), false);
  const schema = new Schema([field]);
  const writer = new RecordBatchFileWriter();
  const done = new Promise<void>((resolve, reject) => {
    file.on('finish', resolve);
    file.on('error', reject);
  });
  done.catch(() => undefined); // awaited in close(); until then write() throws a kept error itself
  writer.toNodeStream().pipe(file);
  let wrote = false;
  return {
    async write(p) {
      if (file.errored) throw file.errored;
      const col = makeData({ type: new Float32(), length: p.length, data: p });
      writer.write(new RecordBatch(schema, makeData({ type: new Struct([field]), length: p.length, children: [col], nullCount: 0 })));
      wrote = true;
      if (file.writableNeedDrain) await once(file, 'drain');
    },
    async close() {
      if (!wrote) writer.reset(undefined, schema);
      writer.finish();
      await done;
    },
  };
}

/** The files a data spec reads (none for synthetic data) and the checkpoint's, which --out must not be. */
function inputFiles(spec: string, checkpoint: string): string[] {
  const { kind, arg } = splitSpec(spec);
  const under = (dir: string) => {
    try {
      return readdirSync(dir, { recursive: true }).map((f) => join(dir, String(f)));
    } catch {
      return [];
    }
  };
  const data = kind === 'criteo-tsv' ? arg.split(',') : kind === 'arrow' ? [arg] : kind === 'binary' ? under(arg) : [];
  return [...data, ...under(checkpoint)];
}

/**
 * Refuses an --out that is one of the files the run reads: opening it for writing would empty it (the
 * data is read as the run goes, so it would also leave nothing to predict).
 */
function checkOutput(out: string, inputs: readonly string[]): void {
  const o = statSync(out, { throwIfNoEntry: false });
  if (!o?.isFile()) return;
  for (const f of inputs) {
    const s = statSync(f, { throwIfNoEntry: false });
    if (s && s.dev === o.dev && s.ino === o.ino)
      throw new EmbshardError('INVALID_ARGUMENT', `--out ${out} is ${f}, which this run reads (--data or --checkpoint): writing it would destroy it`);
  }
}

/** Checks that a source's features and tables are the model's. */
function checkData(inputs: ModelInputs, features: readonly string[], rows: readonly number[]): void {
  if (features.join('\u0000') !== inputs.sparse.join('\u0000'))
    throw new EmbshardError('UNKNOWN_FEATURE', `--data has features [${features.join(', ')}]; the model takes [${inputs.sparse.join(', ')}]`);
  const f = rows.findIndex((r, i) => r !== inputs.tableRows[i]);
  if (f >= 0)
    throw new EmbshardError('INVALID_ARGUMENT', `--data: feature '${features[f]}' has ${rows[f]} table rows; the model's table has ${inputs.tableRows[f]}`);
}

/** Runs `embshard predict`; resolves to the process exit code. */
export function runPredict(argv: string[]): Promise<number> {
  return runCommand('predict', PREDICT_USAGE, parse(argv), predict);
}

async function predict(a: Args): Promise<number> {
  let close: (() => Promise<void>) | undefined;
  try {
    if (a.threads) loadAddon().setThreads(a.threads);
    const trainer = await Trainer.load(a.checkpoint!);
    const inputs = trainer.inputs;
    if (!inputs) throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${a.checkpoint}' does not say what its model takes as input`);
    const d = await openDataSpec(a.data!, { batch: a.batch, maxRows: a.maxRows, tableRows: inputs.tableRows, seed: 0, prefetch: 4 });
    close = () => d.source.close?.() ?? Promise.resolve();
    checkData(inputs, d.source.features, d.tableRows);
    checkOutput(a.out!, inputFiles(a.data!, a.checkpoint!));
    const file = openOutput(a.out!);
    const sink = a.out!.endsWith('.arrow') ? arrowSink(file) : csvSink(file);
    const known = (d.source as { numSamples?: number }).numSamples;
    const total = a.samples === undefined ? known : Math.min(a.samples, known ?? Infinity);
    const tty = process.stderr.isTTY === true && !a.quiet;
    const t0 = performance.now();
    let n = 0, lastDraw = 0;
    // the next batch's forward runs while this one is written; the batch that reaches --samples is the
    // last, cut to the samples still wanted. A batch the model refuses (a NaN dense value, an id past its
    // table) fails the command when its turn to be written comes, naming its samples.
    let pending: Promise<Float32Array> | undefined;
    for await (const b of d.source) {
      const take = Math.min(b.size, (a.samples ?? Infinity) - n), at = n;
      const next = trainer.predict(b).then(
        (p) => (take < p.length ? p.subarray(0, take) : p),
        (e: unknown) => {
          throw isEmbshardError(e) ? new EmbshardError(e.code, `samples [${at}, ${at + b.size}) of --data: ${e.message}`) : e;
        },
      );
      next.catch(() => undefined); // it may reject while the previous batch is written: awaited below
      if (pending) await sink.write(await pending);
      pending = next;
      n += take;
      if (n === a.samples) break;
      const now = performance.now();
      if (tty && now - lastDraw > 100) {
        process.stderr.write(`\r${progressLine(n, total, (now - t0) / 1000, 'samples')}`);
        lastDraw = now;
      }
    }
    if (pending) await sink.write(await pending);
    await sink.close();
    const el = (performance.now() - t0) / 1000;
    if (tty) process.stderr.write(`\r${progressLine(n, total ?? n, el, 'samples')}\n`);
    // skipped lines have no row in the output: say so (even with --quiet), naming the first of them
    const bad = d.source.report?.();
    const skipped = bad?.malformed
      ? `${bad.malformed.toLocaleString()} malformed line(s) of ${bad.lines.toLocaleString()} skipped (${JSON.stringify(bad.byReason)}; first: ` +
        `${bad.issues.slice(0, 3).map((i) => `${i.file ? `${i.file}:` : 'line '}${i.line}`).join(', ')})`
      : '';
    if (n === 0) throw new EmbshardError('INVALID_ARGUMENT', `--data ${a.data}: no samples to predict${skipped ? `; ${skipped}` : ''}`);
    if (skipped) console.error(`embshard predict: ${skipped}: they have no row in the output, which holds one per good line, in order`);
    if (!a.quiet) console.log(`predicted ${n.toLocaleString()} samples of ${d.describe} in ${el.toFixed(1)} s → ${a.out}`);
    trainer.embeddings.dispose?.();
    return 0;
  } finally {
    await close?.();
  }
}

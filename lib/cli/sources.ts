// sources.ts — the `--data` / `--eval-data` source specs of the CLI (synthetic[:preset], criteo-tsv:<files>,
// binary:<dir>, arrow:<file>) opened as BatchSources, shared by `embshard train` and `embshard predict`.
// File sources are read by a worker thread (or prefetched) and split between ranks as lib/train/rank-split.ts
// describes; torchrec binary days split by row range themselves.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { tableFromIPC, type Table } from 'apache-arrow';
import { EmbshardError } from '../errors.js';
import { arrowSource, prefetch, workerSource, type BatchSource, type SourceSpec, type SyntheticPreset } from '../data/index.js';
import { prefetchDepth } from '../data/prefetch.js';
import type { SyntheticOptions } from '../data/synthetic.js';
import { rankSplit } from '../train/rank-split.js';

export const DATA_SPEC_FORMS = 'synthetic[:preset], criteo-tsv:<file[,file…]>, binary:<dir> or arrow:<file>';

export interface OpenSpecOptions {
  batch: number;
  /** Caps every table (TSV, synthetic); rows of every table (binary, Arrow) when tableRows is not given. */
  maxRows?: number | undefined;
  /** Rows of every table (one number) or of each (a list, e.g. a checkpoint's tables). */
  tableRows?: number | readonly number[] | undefined;
  /** The model preset, picking the synthetic preset. */
  model?: string | undefined;
  seed: number;
  /** Batches read ahead (`--prefetch`), 1 … MAX_PREFETCH_DEPTH. */
  prefetch: number;
  rank?: number | undefined;
  world?: number | undefined;
  /** This rank's batches to leave out at the start (a resumed run's position): synthetic data starts after them. */
  skip?: number | undefined;
}

export interface OpenedSource {
  source: BatchSource;
  tableRows: readonly number[];
  /** What the source is, for people. */
  describe: string;
  /** Set for synthetic data: the options it was opened with (a held-out set uses them at another offset). */
  synthetic?: SyntheticOptions | undefined;
}

function syntheticPresetFor(model: string | undefined): SyntheticPreset {
  if (model === 'dlrm-dcnv2') return 'mlperf-dcnv2';
  if (model === 'dlrm-benchmark') return 'dlrm-benchmark';
  return 'criteo-kaggle';
}

function rowsList(o: OpenSpecOptions, n: number, what: string): number[] {
  const r = o.tableRows ?? o.maxRows;
  if (r === undefined) throw new EmbshardError('INVALID_ARGUMENT', `${what} needs --max-rows N (ids are hashed into tables of that many rows)`);
  if (typeof r === 'number') return Array.from({ length: n }, () => r);
  if (r.length !== n) throw new EmbshardError('LENGTH_MISMATCH', `${what}: ${n} features but ${r.length} table sizes`);
  return [...r];
}

/** The kind of a data spec (what precedes its first ':'), and its argument. */
export function splitSpec(spec: string): { kind: string; arg: string } {
  const colon = spec.indexOf(':');
  return colon < 0 ? { kind: spec, arg: '' } : { kind: spec.slice(0, colon), arg: spec.slice(colon + 1) };
}

/** Whether a data spec names a source without an end (synthetic data): it has no epochs and no last sample. */
export function isEndlessSpec(spec: string): boolean {
  return splitSpec(spec).kind === 'synthetic';
}

/**
 * `source` without its first `n` batches (a resumed run's position in a file source): they are read and
 * dropped, across the end of the source (the next pass starts over) when it has fewer.
 */
export function skipBatches(source: BatchSource, n: number): BatchSource {
  if (n === 0) return source;
  let left = n;
  return {
    features: source.features, numDense: source.numDense, batchSize: source.batchSize, tableRows: source.tableRows, endless: source.endless,
    ...(source.report ? { report: () => source.report!() } : {}),
    ...(source.close ? { close: () => source.close!() } : {}),
    async *[Symbol.asyncIterator]() {
      let it = source[Symbol.asyncIterator](), seen = 0, ended = false;
      try {
        while (left > 0) {
          const r = await it.next();
          if (r.done) {
            if (seen === 0) return; // an empty source
            left %= seen; // whole passes of the source
            seen = 0;
            it = source[Symbol.asyncIterator]();
            continue;
          }
          seen++;
          left--;
        }
        for (;;) {
          const r = await it.next();
          if (r.done) {
            ended = true;
            return;
          }
          yield r.value;
        }
      } finally {
        if (!ended) await it.return?.();
      }
    },
  };
}

/** An Arrow IPC file (or stream) as a table; a file that is not one is INVALID_ARGUMENT naming it. */
function readArrowFile(path: string): Table {
  try {
    return tableFromIPC(readFileSync(path));
  } catch (e) {
    throw new EmbshardError('INVALID_ARGUMENT', `arrow:${path}: not an Arrow IPC file or stream (${(e as Error).message})`);
  }
}

/** Opens one data spec (see DATA_SPEC_FORMS) as this rank's share of it. */
export async function openDataSpec(spec: string, o: OpenSpecOptions): Promise<OpenedSource> {
  const { kind, arg } = splitSpec(spec);
  const B = o.batch, rank = o.rank ?? 0, world = o.world ?? 1;
  const depth = prefetchDepth('--prefetch', o.prefetch);
  const splitNote = world > 1 ? ` (batch j to rank j mod ${world})` : '';
  if (kind === 'synthetic') {
    const preset = (arg || syntheticPresetFor(o.model)) as SyntheticPreset;
    const options: SyntheticOptions = {
      batchSize: B, preset, seed: o.seed, rank, worldSize: world, ...(o.maxRows ? { maxRows: o.maxRows } : {}), ...(o.skip ? { sampleOffset: o.skip * B * world } : {}),
    };
    const source = await workerSource({ kind: 'synthetic', options }, { depth });
    return { source, tableRows: source.tableRows!, describe: `synthetic ${preset}${o.maxRows ? ` (tables capped at ${o.maxRows} rows)` : ''}`, synthetic: options };
  }
  if (kind === 'criteo-tsv') {
    if (!arg) throw new EmbshardError('INVALID_ARGUMENT', 'criteo-tsv:<file[,file…]> needs a path');
    const options = {
      path: arg.split(','), batchSize: B,
      ...(Array.isArray(o.tableRows) ? { tableRows: o.tableRows } : {}),
      ...(o.maxRows ? { maxRows: o.maxRows } : {}),
    };
    const spec: SourceSpec = { kind: 'criteo-tsv', options };
    const source = rankSplit(await workerSource(spec, { depth }), rank, world);
    return { source, tableRows: source.tableRows!, describe: `Criteo TSV ${arg}${splitNote}` };
  }
  if (kind === 'binary') {
    if (!arg || !existsSync(arg)) throw new EmbshardError('INVALID_ARGUMENT', `binary:<dir>: '${arg}' does not exist`);
    const days = readdirSync(arg).map((f) => /^day_(\d+)_dense\.npy$/.exec(f)?.[1]).filter((d): d is string => d !== undefined).map(Number).sort((x, y) => x - y);
    if (days.length === 0) throw new EmbshardError('INVALID_ARGUMENT', `binary:${arg}: no day_<d>_dense.npy files (torchrec's npy layout)`);
    const hashes = rowsList(o, 26, 'binary:<dir>');
    const options = { dir: arg, days, batchSize: B, hashes, rank, worldSize: world };
    const source = await workerSource({ kind: 'criteo-npy', options }, { depth });
    return { source, tableRows: hashes, describe: `torchrec binary days ${days.join(',')} in ${arg}` };
  }
  if (kind === 'arrow') {
    if (!arg || !existsSync(arg)) throw new EmbshardError('INVALID_ARGUMENT', `arrow:<file>: '${arg}' does not exist`);
    const table = readArrowFile(arg);
    const src = arrowSource(table, { maxBatchSize: B });
    const source = Object.assign(prefetch(rankSplit(src, rank, world), { depth }), world === 1 ? { numSamples: table.numRows } : {});
    const rows = o.tableRows ?? o.maxRows;
    if (rows === undefined) throw new EmbshardError('INVALID_ARGUMENT', 'arrow: needs --table-rows N (the Arrow file does not say how many rows each table has)');
    return { source, tableRows: rowsList({ ...o, tableRows: rows }, src.features.length, 'arrow:<file>'), describe: `Arrow ${arg}${splitNote}` };
  }
  throw new EmbshardError('INVALID_ARGUMENT', `'${spec}' is not ${DATA_SPEC_FORMS}`);
}

// criteo-npy.ts — the preprocessed binary Criteo layout of torchrec's DLRM pipelines (the MLPerf
// DLRM-DCNv2 reference reads it through torchrec's InMemoryBinaryCriteoIterDataPipe): per day d three
// NumPy files written by BinaryCriteoUtils.tsv_to_npys (and kept by sparse_to_contiguous / shuffle):
//   day_{d}_dense.npy   float32 [N, 13]  ln(x + 3) of the integer columns, missing = 0
//   day_{d}_sparse.npy  int32   [N, 26]  categorical values (raw hex as int32, or contiguous ids)
//   day_{d}_labels.npy  int32   [N, 1]   0 / 1
// Reading follows InMemoryBinaryCriteoIterDataPipe: rank r of W takes one contiguous row range of the
// concatenated days (equal sizes, the first N mod W ranks one row more), batches of batchSize rows span
// day boundaries, and with `hashes` each id becomes value mod hashes[f] (floored, as NumPy's %, so a
// negative int32 value maps into [0, hashes[f])). Dense values are passed through as stored.
// Multi-hot (the MLPerf DLRM-DCNv2 dataset from torchrec's materialize_synthetic_multihot_dataset.py):
//   day_{d}_sparse_multi_hot.npz   arrays '0' … '25', each int32 [N, h_f]   (h_f ids per bag of feature f)
// replaces the sparse file (`multiHot: true`, or any sparse path ending in .npz); bags have h_f ids.
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { EmbshardError } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { JaggedBatch } from '../batch.js';
import { NpyFile, writeNpy } from './npy.js';
import { NpzFile } from './npz.js';
import { batchSizeOf, boolOption, featureNamesOption, listOption, nonNegativeInt, positiveInt, type Batch, type BatchSource } from './types.js';

export interface CriteoNpyOptions {
  /** Folder holding day_{d}_{dense,sparse,labels}.npy (with `days`). */
  dir?: string | undefined;
  /** With `dir`: read day_{d}_sparse_multi_hot.npz instead of day_{d}_sparse.npy. Default false. */
  multiHot?: boolean | undefined;
  /** Days to read from `dir`, in order. */
  days?: readonly number[] | undefined;
  /** Or explicit file lists (same length, same order). */
  files?: { dense: readonly string[]; sparse: readonly string[]; labels: readonly string[] } | undefined;
  batchSize: number;
  /** Table sizes: id = value mod hashes[f]. Without it values are used as ids and must be ≥ 0. */
  hashes?: readonly number[] | undefined;
  rank?: number | undefined;
  worldSize?: number | undefined;
  /** Drop a last batch smaller than batchSize. Default false. */
  dropLast?: boolean | undefined;
  /** Feature names (default cat_0 … cat_{F−1}). */
  features?: readonly string[] | undefined;
}

export interface CriteoNpyConfig {
  dense: string[];
  sparse: string[];
  labels: string[];
  batchSize: number;
  hashes: number[] | null;
  rank: number;
  worldSize: number;
  dropLast: boolean;
  features: string[] | null;
}

export function dayFiles(dir: string, day: number, multiHot = false): { dense: string; sparse: string; labels: string } {
  return {
    dense: join(dir, `day_${day}_dense.npy`),
    sparse: join(dir, multiHot ? `day_${day}_sparse_multi_hot.npz` : `day_${day}_sparse.npy`),
    labels: join(dir, `day_${day}_labels.npy`),
  };
}

const NPY_FIELDS = fieldsOf<CriteoNpyOptions>({
  dir: true, multiHot: true, days: true, files: true, batchSize: true, hashes: true, rank: true, worldSize: true, dropLast: true, features: true,
});
const NPY_FILES_FIELDS = fieldsOf<NonNullable<CriteoNpyOptions['files']>>({ dense: true, sparse: true, labels: true });

export function resolveCriteoNpy(o: CriteoNpyOptions): CriteoNpyConfig {
  if (o === null || typeof o !== 'object') throw new EmbshardError('INVALID_ARGUMENT', 'criteo npy options must be an object');
  rejectUnknownFields(o, NPY_FIELDS);
  if (o.files !== undefined && o.files !== null && typeof o.files === 'object') rejectUnknownFields(o.files, NPY_FILES_FIELDS, 'files');
  const multiHot = boolOption('multiHot', o.multiHot, false);
  let dense: string[], sparse: string[], labels: string[];
  if (o.files !== undefined) {
    if (o.files === null || typeof o.files !== 'object') throw new EmbshardError('INVALID_ARGUMENT', 'files must be an object { dense, sparse, labels }');
    dense = listOption('files.dense', o.files.dense) ?? [];
    sparse = listOption('files.sparse', o.files.sparse) ?? [];
    labels = listOption('files.labels', o.files.labels) ?? [];
    for (const [k, list] of [['dense', dense], ['sparse', sparse], ['labels', labels]] as const)
      list.forEach((p, i) => {
        if (typeof p !== 'string' || p.length === 0) throw new EmbshardError('INVALID_ARGUMENT', `files.${k}[${i}] must be a file path`);
      });
    if (dense.length === 0 || dense.length !== sparse.length || dense.length !== labels.length)
      throw new EmbshardError('LENGTH_MISMATCH', 'files.dense, files.sparse and files.labels must be non-empty lists of the same length');
  } else {
    if (typeof o.dir !== 'string' || !Array.isArray(o.days) || o.days.length === 0)
      throw new EmbshardError('INVALID_ARGUMENT', 'give either files, or dir with a non-empty days list');
    o.days.forEach((d, i) => nonNegativeInt(`days[${i}]`, d));
    const fs = o.days.map((d) => dayFiles(o.dir!, d, multiHot));
    dense = fs.map((f) => f.dense);
    sparse = fs.map((f) => f.sparse);
    labels = fs.map((f) => f.labels);
  }
  const hashes = listOption('hashes', o.hashes) ?? null;
  hashes?.forEach((h, f) => positiveInt(`hashes[${f}]`, h));
  if (hashes?.some((h) => h > 0x7fffffff)) throw new EmbshardError('INVALID_SIZE', 'hashes must be at most 2^31 − 1');
  const worldSize = o.worldSize === undefined ? 1 : positiveInt('worldSize', o.worldSize);
  const rank = o.rank === undefined ? 0 : nonNegativeInt('rank', o.rank);
  if (rank >= worldSize) throw new EmbshardError('INVALID_ARGUMENT', `rank ${rank} must be below worldSize ${worldSize}`);
  const features = featureNamesOption('features', o.features) ?? null;
  return {
    dense, sparse, labels, batchSize: batchSizeOf('batchSize', o.batchSize), hashes, rank, worldSize,
    dropLast: boolOption('dropLast', o.dropLast, false), features,
  };
}

interface Day {
  dense: NpyFile;
  labels: NpyFile | null;
  /** one-hot: int32 [N, F] */
  sparse: NpyFile | null;
  /** multi-hot: F arrays int32 [N, h_f], members of `npz` */
  multi: NpyFile[] | null;
  npz: NpzFile | null;
  rows: number;
}

interface Meta {
  numDense: number;
  numSparse: number;
  hotness: number[];
  rows: number[];
}

async function closeDay(d: Day): Promise<void> {
  await Promise.all([d.dense.close(), d.labels?.close(), d.sparse?.close(), d.npz?.close()]);
}

/** Rows [first, last) of the concatenated days that rank r of W reads (torchrec's split). */
export function rankRowRange(total: number, rank: number, worldSize: number): [number, number] {
  const per = Math.floor(total / worldSize), rem = total % worldSize;
  const first = rank < rem ? rank * (per + 1) : rem * (per + 1) + (rank - rem) * per;
  return [first, first + per + (rank < rem ? 1 : 0)];
}

/** The torchrec binary Criteo days as a BatchSource. Files are opened per pass and closed after it. */
export class CriteoNpySource implements BatchSource {
  readonly cfg: CriteoNpyConfig;
  private meta: Meta | undefined;

  constructor(readonly options: CriteoNpyOptions) {
    this.cfg = resolveCriteoNpy(options);
  }

  /** Reads the headers and checks the files agree (shapes, dtypes); done by the first pass too. */
  async open(): Promise<this> {
    const days = await this.openDays();
    await Promise.all(days.map(closeDay));
    return this;
  }

  private async openDays(): Promise<Day[]> {
    const c = this.cfg;
    const days: Day[] = [];
    const bad = (what: string): never => {
      throw new EmbshardError('INVALID_ARGUMENT', what);
    };
    try {
      for (let i = 0; i < c.dense.length; i++) {
        const day: Day = { dense: await NpyFile.open(c.dense[i]!), labels: null, sparse: null, multi: null, npz: null, rows: 0 };
        days.push(day);
        day.labels = await NpyFile.open(c.labels[i]!);
        if (c.sparse[i]!.endsWith('.npz')) {
          day.npz = await NpzFile.open(c.sparse[i]!);
          const names = day.npz.names;
          const F = names.length;
          if (F === 0 || names.some((n) => !/^\d+$/.test(n) || Number(n) >= F))
            bad(`${c.sparse[i]}: a multi-hot archive must hold arrays named 0 … F−1 (has ${names.join(', ')})`);
          day.multi = [];
          for (let f = 0; f < F; f++) day.multi.push(await day.npz.array(String(f)));
        } else day.sparse = await NpyFile.open(c.sparse[i]!);
        const { dense, labels, sparse, multi } = day;
        if (dense.header.dtype !== '<f4' || dense.header.shape.length !== 2) bad(`${dense.path}: dense must be float32 [N, D] (got ${dense.header.dtype} [${dense.header.shape}])`);
        if (sparse && (sparse.header.dtype !== '<i4' || sparse.header.shape.length !== 2)) bad(`${sparse.path}: sparse must be int32 [N, F] (got ${sparse.header.dtype} [${sparse.header.shape}])`);
        for (const m of multi ?? [])
          if (m.header.dtype !== '<i4' || m.header.shape.length !== 2) bad(`${m.path}: multi-hot arrays must be int32 [N, h] (got ${m.header.dtype} [${m.header.shape}])`);
        if (labels.header.dtype !== '<i4' || labels.rowSize !== 1) bad(`${labels.path}: labels must be int32 [N, 1] or [N] (got ${labels.header.dtype} [${labels.header.shape}])`);
        const sparseRows = sparse ? [sparse.rows] : multi!.map((m) => m.rows);
        if (sparseRows.some((r) => r !== dense.rows) || labels.rows !== dense.rows)
          bad(`day ${i}: dense, sparse and labels have ${dense.rows}, ${[...new Set(sparseRows)].join('/')}, ${labels.rows} rows`);
        day.rows = dense.rows;
        const hot = sparse ? Array.from({ length: sparse.rowSize }, () => 1) : multi!.map((m) => m.rowSize);
        if (i > 0) {
          const d0 = days[0]!, hot0 = this.hotnessOf(d0);
          if (dense.rowSize !== d0.dense.rowSize || hot.join() !== hot0.join())
            bad(`day ${i}: ${dense.rowSize} dense columns / bag sizes [${hot}] differ from day 0's ${d0.dense.rowSize} / [${hot0}]`);
        }
      }
      const hotness = this.hotnessOf(days[0]!);
      const F = hotness.length;
      if (c.hashes && c.hashes.length !== F) bad2(`hashes has ${c.hashes.length} entries but the sparse files have ${F} features`);
      if (c.features && c.features.length !== F) bad2(`features has ${c.features.length} names but the sparse files have ${F} features`);
      this.meta = { numDense: days[0]!.dense.rowSize, numSparse: F, hotness, rows: days.map((d) => d.rows) };
      return days;
    } catch (e) {
      await Promise.all(days.map(closeDay));
      throw e;
    }
  }

  private hotnessOf(d: Day): number[] {
    return d.sparse ? Array.from({ length: d.sparse.rowSize }, () => 1) : d.multi!.map((m) => m.rowSize);
  }

  private get m(): Meta {
    if (!this.meta) throw new EmbshardError('INVALID_ARGUMENT', 'call await source.open() (or iterate once) before reading its shape');
    return this.meta;
  }
  get features(): readonly string[] {
    return this.cfg.features ?? Array.from({ length: this.m.numSparse }, (_, i) => `cat_${i}`);
  }
  get numDense(): number {
    return this.m.numDense;
  }
  get batchSize(): number {
    return this.cfg.batchSize;
  }
  get tableRows(): readonly number[] | undefined {
    return this.cfg.hashes ?? undefined;
  }
  /** Ids per bag of each feature (all 1 for the one-hot layout). */
  get hotness(): readonly number[] {
    return this.m.hotness;
  }
  get numBatches(): number {
    const total = this.m.rows.reduce((a, b) => a + b, 0);
    const [lo, hi] = rankRowRange(total, this.cfg.rank, this.cfg.worldSize);
    const n = hi - lo, B = this.cfg.batchSize;
    return this.cfg.dropLast ? Math.floor(n / B) : Math.ceil(n / B);
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Batch> {
    const days = await this.openDays();
    try {
      const c = this.cfg, B = c.batchSize;
      const { numDense: D, numSparse: F, hotness } = this.m;
      const perSample = hotness.reduce((a, b) => a + b, 0);
      const features = this.features;
      const starts = [0];
      for (const d of days) starts.push(starts[starts.length - 1]! + d.rows);
      const [lo, hi] = rankRowRange(starts[starts.length - 1]!, c.rank, c.worldSize);
      for (let g = lo; g < hi; g += B) {
        const n = Math.min(B, hi - g);
        if (n < B && c.dropLast) break;
        const dense = new Float32Array(n * D);
        const labels = new Float32Array(n);
        const ids = new Int32Array(n * perSample);
        const lengths = new Int32Array(n * F);
        const featStart: number[] = [];
        for (let f = 0, o = 0; f < F; f++) {
          featStart.push(o);
          lengths.fill(hotness[f]!, f * n, (f + 1) * n);
          o += n * hotness[f]!;
        }
        let r = 0;
        while (r < n) {
          const row = g + r;
          let di = 0;
          while (starts[di + 1]! <= row) di++;
          const day = days[di]!;
          const local = row - starts[di]!;
          const take = Math.min(n - r, day.rows - local);
          const [dv, lv] = await Promise.all([day.dense.readRows(local, take), day.labels!.readRows(local, take)]);
          dense.set(dv as Float32Array, r * D);
          const l32 = lv as Int32Array;
          for (let i = 0; i < take; i++) {
            const y = l32[i]!;
            if (y !== 0 && y !== 1) throw new EmbshardError('INVALID_ARGUMENT', `${day.labels!.path}: row ${local + i} holds label ${y}; labels must be 0 or 1`);
            labels[r + i] = y;
          }
          if (day.sparse) {
            const s32 = (await day.sparse.readRows(local, take)) as Int32Array;
            for (let f = 0; f < F; f++) foldInto(ids, featStart[f]! + r, s32, f, F, take, c.hashes?.[f] ?? 0, day.sparse.path, local, 1);
          } else {
            const parts = await Promise.all(day.multi!.map((m) => m.readRows(local, take)));
            parts.forEach((p, f) => {
              const h = hotness[f]!;
              foldInto(ids, featStart[f]! + r * h, p as Int32Array, 0, 1, take * h, c.hashes?.[f] ?? 0, day.multi![f]!.path, local, h);
            });
          }
          r += take;
        }
        const sparse = JaggedBatch.fromLengths({ features, batchSize: n, lengths, ids });
        yield { dense, sparse, labels, size: n };
      }
    } finally {
      await Promise.all(days.map(closeDay));
    }
  }
}

/** ids[at + i] = src[i·stride + col] folded into [0, mod) (floor-mod), for i < count; mod 0 = as is (≥ 0); perRow values per file row. */
function foldInto(ids: Int32Array, at: number, src: Int32Array, col: number, stride: number, count: number, mod: number, path: string, row0: number, perRow: number): void {
  for (let i = 0; i < count; i++) {
    let v = src[i * stride + col]!;
    if (mod) {
      v %= mod;
      if (v < 0) v += mod;
    } else if (v < 0)
      throw new EmbshardError('ID_OUT_OF_RANGE', `${path}: row ${row0 + Math.floor(i / perRow)} holds ${v}; give hashes to fold values into tables`);
    ids[at + i] = v;
  }
}

function bad2(msg: string): never {
  throw new EmbshardError('LENGTH_MISMATCH', msg);
}

export function criteoNpySource(options: CriteoNpyOptions): CriteoNpySource {
  return new CriteoNpySource(options);
}

/**
 * Writes one-hot batches (every bag exactly one id, ids < 2^31) as day `day` of the torchrec layout in
 * `dir`: dense float32 [N, D] as the batches hold it, sparse int32 [N, F], labels int32 [N, 1].
 */
export async function writeCriteoNpyDay(dir: string, day: number, batches: readonly Batch[]): Promise<{ rows: number }> {
  nonNegativeInt('day', day);
  if (batches.length === 0) throw new EmbshardError('INVALID_ARGUMENT', 'batches must not be empty');
  const F = batches[0]!.sparse.features.length;
  const D = batches[0]!.dense.length / batches[0]!.size;
  let N = 0;
  for (const [i, b] of batches.entries()) {
    if (b.sparse.features.length !== F || b.dense.length !== b.size * D)
      throw new EmbshardError('LENGTH_MISMATCH', `batches[${i}] has another feature or dense count than batches[0]`);
    if (b.sparse.lengths.some((l) => l !== 1)) throw new EmbshardError('INVALID_ARGUMENT', `batches[${i}] is not one-hot; the npy layout holds one id per feature`);
    N += b.size;
  }
  const dense = new Float32Array(N * D), sparse = new Int32Array(N * F), labels = new Int32Array(N);
  let r = 0;
  for (const b of batches) {
    dense.set(b.dense, r * D);
    const ids = b.sparse.ids;
    for (let f = 0; f < F; f++)
      for (let i = 0; i < b.size; i++) {
        const v = Number(ids[f * b.size + i]!);
        if (v < 0 || v > 0x7fffffff) throw new EmbshardError('ID_OUT_OF_RANGE', `id ${v} does not fit int32`);
        sparse[(r + i) * F + f] = v;
      }
    for (let i = 0; i < b.size; i++) labels[r + i] = b.labels[i]!;
    r += b.size;
  }
  try {
    await mkdir(dir, { recursive: true });
  } catch (e) {
    throw new EmbshardError('IO_ERROR', `cannot create '${dir}': ${(e as Error).message}`);
  }
  const f = dayFiles(dir, day);
  await writeNpy(f.dense, dense, [N, D]);
  await writeNpy(f.sparse, sparse, [N, F]);
  await writeNpy(f.labels, labels, [N, 1]);
  return { rows: N };
}

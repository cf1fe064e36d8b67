// criteo-tsv.ts — streams Criteo Kaggle / Terabyte TSV files (label, 13 integer and 26 hex categorical
// columns, tab-separated, one sample per line) into batches. Bytes are parsed in place (no per-line
// strings); a line is committed only when all its fields are valid, otherwise it is counted in the report
// with its number and reason and skipped — a malformed file never throws.
//
// As DLRM does (dlrm_data_pytorch / torchrec tsv_to_npys): a missing integer is 0, a missing categorical
// is the value 0 (or an empty bag with missingCategorical 'empty'); dense = ln(1 + max(x, 0)).
// Categorical ids: the hex value (Criteo's values are 8 hex digits, already hashed by Criteo) becomes a
// row by lib/data/criteo-hash.ts ('modulo' or 'murmur'), the rule the inference server applies too.
import { createReadStream, existsSync, statSync } from 'node:fs';
import { createGunzip } from 'node:zlib';
import { EmbshardError } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { JaggedBatch } from '../batch.js';
import { CAT_FEATURE_NAMES, CRITEO_KAGGLE_CARDINALITIES, NUM_DENSE, NUM_SPARSE } from './criteo.js';
import { categoricalSalt, hashCategorical, parseHex, type CategoricalHash } from './criteo-hash.js';
import { batchSizeOf, boolOption, emptyReport, listOption, positiveInt, type Batch, type BatchSource, type DataReport } from './types.js';

export interface CriteoTsvOptions {
  /** One file or several, read in order (`.gz` files are gunzipped on the fly). */
  path: string | readonly string[];
  batchSize: number;
  /** Rows of each of the 26 tables. Default: the Criteo Kaggle cardinalities. */
  tableRows?: readonly number[] | undefined;
  /** Caps every table at this many rows (applied after tableRows). */
  maxRows?: number | undefined;
  /** How a categorical value becomes a row. Default 'modulo'. */
  hash?: CategoricalHash | undefined;
  /** False for files without the label column (Kaggle's test.txt); labels are then 0. Default true. */
  hasLabel?: boolean | undefined;
  /** 'zero': a missing categorical is the value 0 (DLRM); 'empty': an empty bag. Default 'zero'. */
  missingCategorical?: 'zero' | 'empty' | undefined;
  /** Drop a last batch smaller than batchSize. Default false. */
  dropLast?: boolean | undefined;
  /** Malformed lines listed in the report (all are counted). Default 100. */
  maxIssues?: number | undefined;
  /** Read-stream chunk size in bytes. Default 1 MiB. */
  chunkSize?: number | undefined;
}

export interface CriteoTsvConfig {
  paths: string[];
  batchSize: number;
  tableRows: number[];
  hash: CategoricalHash;
  hasLabel: boolean;
  missingCategorical: 'zero' | 'empty';
  dropLast: boolean;
  maxIssues: number;
  chunkSize: number;
}

const TSV_FIELDS = fieldsOf<CriteoTsvOptions>({
  path: true, batchSize: true, tableRows: true, maxRows: true, hash: true, hasLabel: true, missingCategorical: true, dropLast: true,
  maxIssues: true, chunkSize: true,
});

export function resolveCriteoTsv(o: CriteoTsvOptions): CriteoTsvConfig {
  if (o === null || typeof o !== 'object') throw new EmbshardError('INVALID_ARGUMENT', 'criteo TSV options must be an object');
  rejectUnknownFields(o, TSV_FIELDS);
  const paths = typeof o.path === 'string' ? [o.path] : Array.isArray(o.path) ? [...o.path] : [];
  if (paths.length === 0 || paths.some((p) => typeof p !== 'string' || p.length === 0))
    throw new EmbshardError('INVALID_ARGUMENT', 'path must be a file path or a non-empty list of file paths');
  for (const p of paths) {
    const st = existsSync(p) ? statSync(p) : undefined;
    if (st === undefined) throw new EmbshardError('IO_ERROR', `path: no such file '${p}'`);
    if (st.isDirectory()) throw new EmbshardError('IO_ERROR', `path: '${p}' is a directory, not a file (name the TSV files in it)`);
    if (!st.isFile()) throw new EmbshardError('IO_ERROR', `path: '${p}' is not a regular file`);
  }
  const batchSize = batchSizeOf('batchSize', o.batchSize);
  let rows = listOption('tableRows', o.tableRows) ?? [...CRITEO_KAGGLE_CARDINALITIES];
  if (rows.length !== NUM_SPARSE) throw new EmbshardError('LENGTH_MISMATCH', `tableRows must have ${NUM_SPARSE} entries (got ${rows.length})`);
  rows.forEach((r, f) => positiveInt(`tableRows[${f}]`, r));
  if (o.maxRows !== undefined) {
    const m = positiveInt('maxRows', o.maxRows);
    rows = rows.map((r) => Math.min(r, m));
  }
  if (rows.some((r) => r > 0x7fffffff)) throw new EmbshardError('INVALID_SIZE', 'tableRows must be at most 2^31 − 1 (ids are Int32)');
  const hash = o.hash ?? 'modulo';
  if (hash !== 'modulo' && hash !== 'murmur') throw new EmbshardError('INVALID_ARGUMENT', `hash must be 'modulo' or 'murmur' (got ${String(hash)})`);
  const missingCategorical = o.missingCategorical ?? 'zero';
  if (missingCategorical !== 'zero' && missingCategorical !== 'empty')
    throw new EmbshardError('INVALID_ARGUMENT', `missingCategorical must be 'zero' or 'empty' (got ${String(missingCategorical)})`);
  const maxIssues = o.maxIssues ?? 100;
  if (!Number.isSafeInteger(maxIssues) || maxIssues < 0) throw new EmbshardError('INVALID_ARGUMENT', `maxIssues must be a non-negative integer (got ${maxIssues})`);
  return {
    paths, batchSize, tableRows: rows, hash, hasLabel: boolOption('hasLabel', o.hasLabel, true), missingCategorical,
    dropLast: boolOption('dropLast', o.dropLast, false), maxIssues, chunkSize: positiveInt('chunkSize', o.chunkSize ?? 1 << 20),
  };
}

const TAB = 9, LF = 10, CR = 13, MINUS = 45;

/** Parses an optionally negative decimal integer of at most 15 digits; NaN when malformed. */
function parseInt10(buf: Uint8Array, s: number, e: number): number {
  let neg = false;
  if (buf[s] === MINUS) {
    neg = true;
    s++;
  }
  if (s >= e || e - s > 15) return NaN;
  let v = 0;
  for (let i = s; i < e; i++) {
    const d = buf[i]! - 48;
    if (d < 0 || d > 9) return NaN;
    v = v * 10 + d;
  }
  return neg ? -v : v;
}

function fieldText(buf: Uint8Array, s: number, e: number): string {
  const t = Buffer.from(buf.buffer, buf.byteOffset + s, Math.min(e - s, 40)).toString('latin1');
  return e - s > 40 ? `${t}…` : t;
}

/** The synchronous, chunk-fed parser behind CriteoTsvSource (usable on its own for in-memory text). */
export class CriteoTsvParser {
  readonly report: DataReport = emptyReport();
  private readonly B: number;
  private readonly cols: number;
  private readonly salts: Int32Array;
  private carry: Uint8Array = new Uint8Array(0);
  private carryLen = 0;
  private lineNo = 0;
  private file: string | undefined;
  // current batch
  private n = 0;
  private dense!: Float32Array;
  private labels!: Float32Array;
  private ids!: Int32Array; // [26 × B] feature-major, −1 = missing ('empty' policy)
  private anyMissing = false;
  // one line's parsed fields, committed only when the whole line is valid
  private readonly tDense = new Float64Array(NUM_DENSE);
  private readonly tCat = new Float64Array(NUM_SPARSE);

  constructor(readonly cfg: CriteoTsvConfig) {
    this.B = cfg.batchSize;
    this.cols = (cfg.hasLabel ? 1 : 0) + NUM_DENSE + NUM_SPARSE;
    this.salts = Int32Array.from({ length: NUM_SPARSE }, (_, f) => categoricalSalt(f));
    this.fresh();
  }

  /** Names later issues after this file and restarts line numbers. */
  beginFile(name: string | undefined): void {
    this.file = name;
    this.lineNo = 0;
  }

  private fresh(): void {
    this.n = 0;
    this.dense = new Float32Array(this.B * NUM_DENSE);
    this.labels = new Float32Array(this.B);
    this.ids = new Int32Array(this.B * NUM_SPARSE);
    this.anyMissing = false;
  }

  private bad(reason: string, message: string): void {
    const r = this.report;
    r.malformed++;
    r.byReason[reason] = (r.byReason[reason] ?? 0) + 1;
    if (r.issues.length < this.cfg.maxIssues) r.issues.push({ file: this.file, line: this.lineNo, reason, message });
  }

  /** Parses one line [s, e) (no newline); returns a finished batch when this line filled one. */
  private line(buf: Uint8Array, s: number, e: number): Batch | undefined {
    this.lineNo++;
    this.report.lines++;
    if (this.lineNo === 1 && e - s >= 3 && buf[s] === 0xef && buf[s + 1] === 0xbb && buf[s + 2] === 0xbf) s += 3; // a UTF-8 byte-order mark
    if (e > s && buf[e - 1] === CR) e--;
    if (e === s) {
      this.bad('blank', 'empty line');
      return undefined;
    }
    let tabs = 0;
    for (let i = s; i < e; i++) if (buf[i] === TAB) tabs++;
    if (tabs + 1 !== this.cols) {
      this.bad('columns', `expected ${this.cols} tab-separated columns, found ${tabs + 1}`);
      return undefined;
    }
    const cfg = this.cfg;
    let p = s, col = 0, label = 0;
    while (p <= e) {
      let q = p;
      while (q < e && buf[q] !== TAB) q++;
      const field = cfg.hasLabel ? col - 1 : col; // -1 = label, 0..12 int, 13..38 cat
      if (field < 0) {
        if (q - p !== 1 || (buf[p] !== 48 && buf[p] !== 49)) {
          this.bad('label', `label '${fieldText(buf, p, q)}' is not 0 or 1`);
          return undefined;
        }
        label = buf[p]! - 48;
      } else if (field < NUM_DENSE) {
        if (q === p) this.tDense[field] = 0;
        else {
          const v = parseInt10(buf, p, q);
          if (Number.isNaN(v)) {
            this.bad('integer', `column I${field + 1} '${fieldText(buf, p, q)}' is not an integer`);
            return undefined;
          }
          this.tDense[field] = v;
        }
      } else {
        const f = field - NUM_DENSE;
        if (q === p) this.tCat[f] = -1;
        else {
          const v = parseHex(buf, p, q);
          if (v < 0) {
            this.bad('categorical', `column C${f + 1} '${fieldText(buf, p, q)}' is not a hex value of 1 to 8 digits`);
            return undefined;
          }
          this.tCat[f] = v;
        }
      }
      col++;
      p = q + 1;
    }
    // commit
    const r = this.n, B = this.B;
    this.labels[r] = label;
    for (let j = 0; j < NUM_DENSE; j++) {
      const x = this.tDense[j]!;
      this.dense[r * NUM_DENSE + j] = Math.log1p(x > 0 ? x : 0);
    }
    const empty = cfg.missingCategorical === 'empty', hash = cfg.hash;
    for (let f = 0; f < NUM_SPARSE; f++) {
      let v = this.tCat[f]!;
      if (v < 0) {
        if (empty) {
          this.ids[f * B + r] = -1;
          this.anyMissing = true;
          continue;
        }
        v = 0;
      }
      this.ids[f * B + r] = hashCategorical(v, this.salts[f]!, cfg.tableRows[f]!, hash);
    }
    this.report.samples++;
    this.n++;
    return this.n === B ? this.finishBatch() : undefined;
  }

  private finishBatch(): Batch {
    const n = this.n, B = this.B;
    const lengths = new Int32Array(NUM_SPARSE * n);
    let ids: Int32Array;
    if (!this.anyMissing) {
      lengths.fill(1);
      if (n === B) ids = this.ids;
      else {
        ids = new Int32Array(NUM_SPARSE * n);
        for (let f = 0; f < NUM_SPARSE; f++) ids.set(this.ids.subarray(f * B, f * B + n), f * n);
      }
    } else {
      let total = 0;
      for (let f = 0; f < NUM_SPARSE; f++) for (let r = 0; r < n; r++) if (this.ids[f * B + r]! >= 0) total++;
      ids = new Int32Array(total);
      let o = 0;
      for (let f = 0; f < NUM_SPARSE; f++)
        for (let r = 0; r < n; r++) {
          const v = this.ids[f * B + r]!;
          if (v >= 0) {
            ids[o++] = v;
            lengths[f * n + r] = 1;
          }
        }
    }
    const dense = n === B ? this.dense : this.dense.slice(0, n * NUM_DENSE);
    const labels = n === B ? this.labels : this.labels.slice(0, n);
    const sparse = JaggedBatch.fromLengths({ features: CAT_FEATURE_NAMES, batchSize: n, lengths, ids });
    this.fresh();
    return { dense, sparse, labels, size: n };
  }

  /** Feeds a chunk of bytes; returns the batches it completed. */
  push(chunk: Uint8Array): Batch[] {
    const out: Batch[] = [];
    let s = 0;
    let nl = chunk.indexOf(LF);
    if (this.carryLen > 0) {
      if (nl < 0) {
        this.append(chunk, 0, chunk.length);
        return out;
      }
      this.append(chunk, 0, nl);
      const b = this.line(this.carry, 0, this.carryLen);
      this.carryLen = 0;
      if (b) out.push(b);
      s = nl + 1;
      nl = chunk.indexOf(LF, s);
    }
    while (nl >= 0) {
      const b = this.line(chunk, s, nl);
      if (b) out.push(b);
      s = nl + 1;
      nl = chunk.indexOf(LF, s);
    }
    if (s < chunk.length) this.append(chunk, s, chunk.length);
    return out;
  }

  private append(chunk: Uint8Array, s: number, e: number): void {
    const need = this.carryLen + (e - s);
    if (need > this.carry.length) {
      const grown = new Uint8Array(Math.max(need, this.carry.length * 2, 4096));
      grown.set(this.carry.subarray(0, this.carryLen));
      this.carry = grown;
    }
    this.carry.set(chunk.subarray(s, e), this.carryLen);
    this.carryLen = need;
  }

  /** Ends the current file: a last line without a newline is parsed. Returns a batch it completed. */
  endFile(): Batch | undefined {
    if (this.carryLen === 0) return undefined;
    const b = this.line(this.carry, 0, this.carryLen);
    this.carryLen = 0;
    return b;
  }

  /** Ends the input: the partial last batch, unless empty or dropLast. */
  finish(): Batch | undefined {
    const last = this.endFile();
    if (last) return last;
    if (this.n === 0 || this.cfg.dropLast) return undefined;
    return this.finishBatch();
  }
}

/** Criteo TSV files as a BatchSource: each pass streams the files again. */
export class CriteoTsvSource implements BatchSource {
  readonly cfg: CriteoTsvConfig;
  private _report: DataReport | undefined;

  constructor(readonly options: CriteoTsvOptions) {
    this.cfg = resolveCriteoTsv(options);
  }

  get features(): readonly string[] {
    return CAT_FEATURE_NAMES;
  }
  get numDense(): number {
    return NUM_DENSE;
  }
  get batchSize(): number {
    return this.cfg.batchSize;
  }
  get tableRows(): readonly number[] {
    return this.cfg.tableRows;
  }

  report(): DataReport | undefined {
    return this._report;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Batch> {
    const parser = new CriteoTsvParser(this.cfg);
    this._report = parser.report;
    const multi = this.cfg.paths.length > 1;
    for (const path of this.cfg.paths) {
      parser.beginFile(multi ? path : undefined);
      const raw = createReadStream(path, { highWaterMark: this.cfg.chunkSize });
      const stream = path.endsWith('.gz') ? raw.pipe(createGunzip()) : raw;
      try {
        for await (const chunk of stream as AsyncIterable<Buffer>) for (const b of parser.push(chunk)) yield b;
      } catch (e) {
        if (e instanceof EmbshardError) throw e;
        throw new EmbshardError('IO_ERROR', `reading '${path}': ${(e as Error).message}`);
      } finally {
        raw.destroy();
      }
      const b = parser.endFile();
      if (b) yield b;
    }
    const last = parser.finish();
    if (last) yield last;
  }
}

export function criteoTsvSource(options: CriteoTsvOptions): CriteoTsvSource {
  return new CriteoTsvSource(options);
}

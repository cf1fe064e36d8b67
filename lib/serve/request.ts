// request.ts — a prediction request body turned into a validated batch for one model, before it joins a
// micro-batch: every check (shape, feature names, lengths, id ranges, hex strings) happens here, per
// request, so one bad request is refused with its own EmbshardError and never fails the batch it would
// have joined. Two bodies:
//   JSON   { "dense": [[numDense numbers], …], "sparse": { "<feature>": [[ids…], …], … } }
//          ids: integers in [0, rows), or raw Criteo-style hex strings hashed into the table as the
//          Criteo TSV reader does (lib/data/criteo-hash.ts, with the model's hash rule);
//   Arrow  an IPC stream or file whose record batches follow lib/data/arrow.ts's layout (a 'dense'
//          FixedSizeList<Float32> column, one Int32/Uint32/Int64 list column per feature; no label).
//          The reader trusts the body's metadata, so what it yields is checked as JSON is: list offsets
//          that run backwards or past their ids, non-finite dense values, ids outside the tables.
import { tableFromIPC, type RecordBatch } from 'apache-arrow';
import { EmbshardError } from '../errors.js';
import { rejectUnknownFields } from '../fields.js';
import { JaggedBatch } from '../batch.js';
import { hashHexString } from '../data/criteo-hash.js';
import { checkDenseFinite, checkListOffsets, idsToRows, recordBatchToBatch } from '../data/arrow.js';
import type { ModelInputs } from '../train/inputs.js';
import type { PredictBatch } from '../train/trainer.js';
import { concatBatches } from './merge.js';

const BODY_FIELDS = ['dense', 'sparse'];

function fail(code: 'INVALID_ARGUMENT' | 'INVALID_SIZE' | 'LENGTH_MISMATCH' | 'UNKNOWN_FEATURE' | 'MISSING_FEATURE' | 'ID_OUT_OF_RANGE', message: string): never {
  throw new EmbshardError(code, message);
}

function checkSize(B: number, maxSamples: number, what: string): void {
  if (B === 0) fail('INVALID_SIZE', `${what} holds no samples`);
  if (B > maxSamples) fail('INVALID_SIZE', `${what} holds ${B} samples; at most ${maxSamples} per request`);
}

/** A JSON body → a batch for the model with these inputs. Throws EmbshardError naming the field. */
export function parseJsonRequest(body: unknown, inputs: ModelInputs, maxSamples: number): PredictBatch {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) fail('INVALID_ARGUMENT', 'the body must be a JSON object { "dense": [...], "sparse": {...} }');
  const o = body as Record<string, unknown>;
  rejectUnknownFields(o, BODY_FIELDS, '', 'INVALID_ARGUMENT');
  const D = inputs.numDense;
  const rowsIn = o.dense;
  if (!Array.isArray(rowsIn)) fail('INVALID_ARGUMENT', 'dense must be an array of samples, each an array of numbers');
  const B = rowsIn.length;
  checkSize(B, maxSamples, 'dense');
  const dense = new Float32Array(B * D);
  for (let b = 0; b < B; b++) {
    const row = rowsIn[b] as unknown;
    if (!Array.isArray(row)) fail('INVALID_ARGUMENT', `dense[${b}] must be an array of ${D} numbers`);
    if (row.length !== D) fail('LENGTH_MISMATCH', `dense[${b}] has ${row.length} values; the model takes ${D}`);
    for (let j = 0; j < D; j++) {
      const x = row[j] as unknown;
      if (typeof x !== 'number' || !Number.isFinite(x)) fail('INVALID_ARGUMENT', `dense[${b}][${j}] must be a finite number`);
      if (!Number.isFinite(Math.fround(x))) fail('INVALID_ARGUMENT', `dense[${b}][${j}] = ${x} is beyond the float32 range of the model's inputs`);
      dense[b * D + j] = x;
    }
  }
  const sp = o.sparse;
  if (sp === null || typeof sp !== 'object' || Array.isArray(sp)) fail('INVALID_ARGUMENT', 'sparse must be an object { "<feature>": [[ids…], …] }');
  const spo = sp as Record<string, unknown>;
  for (const k of Object.keys(spo))
    if (!inputs.sparse.includes(k)) fail('UNKNOWN_FEATURE', `sparse.${k}: the model has no feature '${k}' (it has ${inputs.sparse.join(', ')})`);
  const F = inputs.sparse.length;
  const lengths = new Int32Array(F * B);
  const bags: unknown[][] = [];
  let total = 0;
  for (let f = 0; f < F; f++) {
    const name = inputs.sparse[f]!;
    const col = spo[name];
    if (col === undefined) fail('MISSING_FEATURE', `sparse.${name} is missing (the model needs every one of ${inputs.sparse.join(', ')})`);
    if (!Array.isArray(col)) fail('INVALID_ARGUMENT', `sparse.${name} must be an array of ${B} bags (arrays of ids)`);
    if (col.length !== B) fail('LENGTH_MISMATCH', `sparse.${name} has ${col.length} bags; dense has ${B} samples`);
    for (let b = 0; b < B; b++) {
      const bag = col[b] as unknown;
      if (!Array.isArray(bag)) fail('INVALID_ARGUMENT', `sparse.${name}[${b}] must be an array of ids`);
      lengths[f * B + b] = bag.length;
      total += bag.length;
      bags.push(bag);
    }
  }
  const ids = new Int32Array(total);
  let k = 0;
  for (let f = 0; f < F; f++) {
    const name = inputs.sparse[f]!, rows = inputs.tableRows[f]!;
    for (let b = 0; b < B; b++) {
      const bag = bags[f * B + b]!;
      for (let i = 0; i < bag.length; i++) {
        const v = bag[i];
        let id: number;
        if (typeof v === 'number') {
          if (!Number.isInteger(v) || v < 0 || v >= rows) fail('ID_OUT_OF_RANGE', `sparse.${name}[${b}][${i}] = ${v} is not a row of its table (an integer in [0, ${rows}))`);
          id = v;
        } else if (typeof v === 'string') {
          id = hashHexString(v, f, rows, inputs.hash);
          if (id < 0) fail('INVALID_ARGUMENT', `sparse.${name}[${b}][${i}] = '${v.slice(0, 20)}' is not a Criteo hex value of 1 to 8 digits`);
        } else fail('INVALID_ARGUMENT', `sparse.${name}[${b}][${i}] must be an integer id or a hex string`);
        ids[k++] = id;
      }
    }
  }
  return { dense, sparse: JaggedBatch.fromLengths({ features: inputs.sparse, batchSize: B, lengths, ids }), size: B };
}

/** An Arrow IPC body → one batch (all its record batches) for the model with these inputs. */
export function parseArrowRequest(body: Uint8Array, inputs: ModelInputs, maxSamples: number): PredictBatch {
  let table;
  try {
    table = tableFromIPC(body);
  } catch (e) {
    fail('INVALID_ARGUMENT', `the body is not an Arrow IPC stream or file: ${(e as Error).message}`);
  }
  checkSize(table.numRows, maxSamples, 'the Arrow body');
  for (const fld of table.schema.fields)
    if (fld.name !== 'dense' && !inputs.sparse.includes(fld.name)) fail('UNKNOWN_FEATURE', `column '${fld.name}': the model has no feature '${fld.name}' (columns: dense, ${inputs.sparse.join(', ')})`);
  try {
    return checkedArrow(table.batches.filter((rb) => rb.numRows > 0), inputs);
  } catch (e) {
    // the body's metadata contradicts itself in a way no check above names (a buffer shorter than its
    // counts): still the body's fault
    if (e instanceof EmbshardError) throw e;
    fail('INVALID_ARGUMENT', `the Arrow body is corrupt: ${(e as Error).message}`);
  }
}

function checkedArrow(batches: RecordBatch[], inputs: ModelInputs): PredictBatch {
  for (const rb of batches) for (const name of inputs.sparse) checkListOffsets(rb, name);
  const parts = batches.map((rb) => recordBatchToBatch(rb, { features: inputs.sparse, label: null, dense: 'dense' }));
  const D = inputs.numDense;
  let row = 0;
  for (const p of parts) {
    if (p.dense.length !== p.size * D) fail('LENGTH_MISMATCH', `column 'dense' has ${p.dense.length / p.size} values per sample; the model takes ${D}`);
    checkDenseFinite(p.dense, D, row);
    row += p.size;
  }
  const checked = parts.map((p) => {
    const ids = new Int32Array(p.sparse.ids.length);
    let o = 0;
    inputs.sparse.forEach((name, f) => (o += idsToRows(p.sparse.feature(name).ids, inputs.tableRows[f]!, name, ids, o)));
    return { dense: p.dense, sparse: JaggedBatch.fromLengths({ features: inputs.sparse, batchSize: p.size, lengths: p.sparse.lengths, ids }), size: p.size };
  });
  return checked.length === 1 ? checked[0]! : concatBatches(checked);
}

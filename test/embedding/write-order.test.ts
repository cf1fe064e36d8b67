// write-order.test.ts — writeRows / writeState are synchronous: while a forward, backward or save of the
// collection (a failing one included) is queued or running they are refused with INVALID_ARGUMENT and
// write nothing, so a write never lands ahead of such a call made before it (a save called before a write
// never holds it); once those calls have settled, beside a queued release or learning rate, and between
// sync calls, they act at once.
// Expected tables by closed form (rows set by formula; an sgd step of a constant gradient).
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError, JaggedBatch } from '../../lib/index.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('write-order');

const ROWS = 50, DIM = 4, LR = 0.25, GRAD = 0.5;
const all = BigInt64Array.from({ length: ROWS }, (_, i) => BigInt(i));

/** Rows of state k by formula (multiples of 1/64: exact in fp32, and after an sgd step of LR·GRAD). */
function rowsOf(k: number): Float32Array {
  return Float32Array.from({ length: ROWS * DIM }, (_, i) => k + Math.floor(i / DIM) / 8 + (i % DIM) / 64);
}

/** Rows of state k after one sgd step whose batch looks up rows 3 and 7 once each with pooled gradient GRAD. */
function stepped(k: number): Float32Array {
  const w = rowsOf(k);
  for (const r of [3, 7]) for (let c = 0; c < DIM; c++) w[r * DIM + c]! -= LR * GRAD;
  return w;
}

/** A collection of one table (sgd or adagrad) holding rows of state 1 (adagrad: its state k/4 everywhere). */
function collection(optimizer: 'sgd' | 'adagrad'): EmbeddingCollection {
  const ec = new EmbeddingCollection({ tables: [{ name: 'a', rows: ROWS, dim: DIM }], optimizer: { type: optimizer, lr: LR } });
  ec.writeRows('a', all, rowsOf(1));
  if (optimizer === 'adagrad') ec.writeState('a', all, new Float32Array(ROWS * DIM).fill(0.25));
  return ec;
}

const batch = () => JaggedBatch.fromLengths({ features: ['a'], batchSize: 2, lengths: Int32Array.of(1, 1), ids: BigInt64Array.of(3n, 7n) });
const grads = () => ({ pooled: new Float32Array(2 * DIM).fill(GRAD) });

/** The error a synchronous call throws, as [code, message]; 'ok' when it returns. */
function outcome(call: () => unknown): [string, string] | 'ok' {
  try {
    call();
    return 'ok';
  } catch (e) {
    expect(e).toBeInstanceOf(EmbshardError);
    return [(e as EmbshardError).code, (e as Error).message];
  }
}

const refused = (what: string) => ['INVALID_ARGUMENT', expect.stringMatching(new RegExp(`^${what}: \\d+ forward / backward / save call\\(s\\) of this collection are still queued or running`))];

describe('writeRows / writeState while calls of the collection are queued or running', () => {
  it('a save called before them: both refused, the checkpoint and the tables hold the state at the save; once it settled they act', async () => {
    const ec = collection('adagrad');
    const dir = join(tmp.dir, 'save');
    const saved = ec.save(dir);
    expect(outcome(() => ec.writeRows('a', all, rowsOf(2)))).toEqual(refused('writeRows'));
    expect(outcome(() => ec.writeState('a', all, new Float32Array(ROWS * DIM).fill(9)))).toEqual(refused('writeState'));
    await saved;
    const back = await EmbeddingCollection.load(dir);
    expect(back.readRows('a', all)).toEqual(rowsOf(1));
    expect(back.readState('a', all)).toEqual(new Float32Array(ROWS * DIM).fill(0.25));
    back.dispose();
    expect(ec.readRows('a', all)).toEqual(rowsOf(1));
    expect(ec.readState('a', all)).toEqual(new Float32Array(ROWS * DIM).fill(0.25));
    expect(outcome(() => ec.writeRows('a', all, rowsOf(2)))).toBe('ok');
    expect(outcome(() => ec.writeState('a', all, new Float32Array(ROWS * DIM).fill(9)))).toBe('ok');
    expect(ec.readRows('a', all)).toEqual(rowsOf(2));
    expect(ec.readState('a', all)).toEqual(new Float32Array(ROWS * DIM).fill(9));
    ec.dispose();
  });

  it('a forward, then a backward queued: refused, the step applies to the rows it looked up; afterwards the write acts', async () => {
    const ec = collection('sgd');
    const forward = ec.forward(batch());
    expect(outcome(() => ec.writeRows('a', all, rowsOf(5)))).toEqual(refused('writeRows'));
    const out = await forward;
    const update = ec.backward(out, grads());
    expect(outcome(() => ec.writeRows('a', all, rowsOf(5)))).toEqual(refused('writeRows'));
    await update;
    expect(ec.readRows('a', all)).toEqual(stepped(1));
    expect(outcome(() => ec.writeRows('a', all, rowsOf(5)))).toBe('ok');
    expect(ec.readRows('a', all)).toEqual(rowsOf(5));
    ec.dispose();
  });

  it('a call that fails counts until it settled; a learning rate set in call order, a release, hold no write back', async () => {
    const ec = collection('sgd');
    const failing = ec.save('');
    expect(outcome(() => ec.writeRows('a', all, rowsOf(3)))).toEqual(refused('writeRows'));
    await expect(failing).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(outcome(() => ec.writeRows('a', all, rowsOf(3)))).toBe('ok');
    // the rate is applied once the forward has settled; the write right after it acts, and the step
    // called after both takes the new rate on the written rows
    const forward = ec.forward(batch());
    ec.setLearningRate(LR / 2);
    const out = await forward;
    expect(outcome(() => ec.writeRows('a', all, rowsOf(1)))).toBe('ok');
    await ec.backward(out, grads());
    const want = rowsOf(1);
    for (const r of [3, 7]) for (let c = 0; c < DIM; c++) want[r * DIM + c]! -= (LR / 2) * GRAD;
    expect(ec.readRows('a', all)).toEqual(want);
    // a release leaves the tables as they are: a write called after it may act ahead of it
    const released = ec.release(await ec.forward(batch()));
    expect(outcome(() => ec.writeRows('a', all, rowsOf(4)))).toBe('ok');
    expect(await released).toBe(1);
    expect(ec.readRows('a', all)).toEqual(rowsOf(4));
    ec.dispose();
  });

  it('between forwardSync and backwardSync (no queue): the write acts at once', () => {
    const ec = collection('sgd');
    const out = ec.forwardSync(batch());
    expect(outcome(() => ec.writeRows('a', all, rowsOf(1)))).toBe('ok');
    ec.backwardSync(out, grads());
    expect(ec.readRows('a', all)).toEqual(stepped(1));
    ec.dispose();
  });
});

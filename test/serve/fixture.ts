// fixture.ts — a Criteo TSV file for the held-out, predict and serve tests: sample i's first integer column
// is i itself (so dense[0] = ln(1 + i) names the sample), labels follow a planted rule the model can
// learn, categoricals are 8-digit hex values; optional malformed lines in between. trainOn(): a small
// DLRM trained over such a file, one pass.
import { writeFileSync } from 'node:fs';
import { CriteoTsvSource } from '../../lib/data/criteo-tsv.js';
import { embeddingsFor } from '../../lib/train/embeddings.js';
import { Trainer } from '../../lib/train/trainer.js';

export function hexOf(i: number, j: number): string {
  return (((i * 131 + j * 7919) * 2654435761) % 4294967296).toString(16).padStart(8, '0');
}

export function criteoLine(i: number): string {
  const label = (i * 2654435761) % 7 < 3 ? 1 : 0;
  const ints = [String(i), ...Array.from({ length: 12 }, (_, j) => String((i * (j + 3)) % 11))];
  const cats = Array.from({ length: 26 }, (_, j) => hexOf(i % 50, j));
  return [String(label), ...ints, ...cats].join('\t');
}

/** Writes n good samples (indices 0 … n−1), with a malformed line after every `badEvery` good ones. */
export function writeCriteoTsv(path: string, n: number, badEvery = 0): void {
  const lines: string[] = [];
  for (let i = 0; i < n; i++) {
    lines.push(criteoLine(i));
    if (badEvery && i % badEvery === badEvery - 1) lines.push('malformed\tline');
  }
  writeFileSync(path, lines.join('\n') + '\n');
}

/** The sample index a batch row carries in dense[0] = ln(1 + i). */
export function sampleIndex(dense: Float32Array, row: number, numDense = 13): number {
  return Math.round(Math.expm1(dense[row * numDense]!));
}

/** A small DLRM (dim 4, dot interaction, Adagrad) trained over one pass of the TSV `file`, tables of `maxRows` rows. */
export async function trainOn(file: string, o: { batchSize: number; seed: number; maxRows: number }): Promise<Trainer> {
  const src = new CriteoTsvSource({ path: file, batchSize: o.batchSize, maxRows: o.maxRows });
  const emb = embeddingsFor(src.features, src.tableRows, { dim: 4, optimizer: { type: 'adagrad', lr: 0.1 }, seed: o.seed });
  const t = new Trainer({ model: { denseIn: 13, bottom: [8, 4], top: [8, 1], numSparse: 26, embDim: 4, interaction: 'dot' }, embeddings: emb, optimizer: { type: 'adagrad', lr: 0.05 }, seed: o.seed });
  for await (const b of src) await t.step(b);
  return t;
}

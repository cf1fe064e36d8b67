// arrow-worker.ts — the worker-thread side of ArrowDecoder (arrow-decoder.ts): says 'ready' once loaded,
// then decodes each Arrow IPC request body it is sent with parseArrowRequest and posts the batch back,
// its arrays transferred, or the typed error's code and message.
import { parentPort } from 'node:worker_threads';
import { owned } from '../data/batch-message.js';
import type { ModelInputs } from '../train/inputs.js';
import { parseArrowRequest } from './request.js';

export interface DecodeRequest {
  body: Uint8Array;
  inputs: ModelInputs;
  maxSamples: number;
}

export type DecodeReply =
  | { ok: true; dense: Float32Array; features: string[]; lengths: Int32Array; ids: Int32Array; size: number }
  | { ok: false; code: string; message: string };

const port = parentPort!;
port.on('message', (m: DecodeRequest) => {
  let reply: DecodeReply, transfer: ArrayBuffer[] = [];
  try {
    const b = parseArrowRequest(m.body, m.inputs, m.maxSamples);
    const dense = owned(b.dense), lengths = owned(b.sparse.lengths), ids = owned(b.sparse.ids as Int32Array);
    reply = { ok: true, dense, features: [...b.sparse.features], lengths, ids, size: b.size };
    transfer = [...new Set([dense.buffer, lengths.buffer, ids.buffer] as ArrayBuffer[])];
  } catch (e) {
    const err = e as { code?: unknown; message?: unknown };
    reply = { ok: false, code: typeof err.code === 'string' ? err.code : 'INTERNAL', message: String(err.message ?? e) };
  }
  port.postMessage(reply, transfer);
});
port.postMessage('ready');

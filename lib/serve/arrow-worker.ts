// arrow-worker.ts — the worker-thread side of ArrowDecoder (arrow-decoder.ts): says 'ready' once loaded,
// then decodes each Arrow IPC request body it is sent with parseArrowRequest and posts the batch back,
// its arrays transferred (batch-message.ts), or the typed error's code and message. The Arrow reader's
// per-element work runs in the native addon, which this thread loads for itself.
import { parentPort } from 'node:worker_threads';
import { samplesTransfer, type SamplesMessage } from '../data/batch-message.js';
import { loadAddon } from '../native.js';
import type { ModelInputs } from '../train/inputs.js';
import { parseArrowRequest } from './request.js';

export interface DecodeRequest {
  body: Uint8Array;
  inputs: ModelInputs;
  maxSamples: number;
}

export type DecodeReply =
  | { ok: true; batch: SamplesMessage }
  | { ok: false; code: string; message: string };

const port = parentPort!;
port.on('message', (m: DecodeRequest) => {
  let reply: DecodeReply, transfer: ArrayBuffer[] = [];
  try {
    const { message, transfer: buffers } = samplesTransfer(parseArrowRequest(m.body, m.inputs, m.maxSamples));
    reply = { ok: true, batch: message };
    transfer = buffers;
  } catch (e) {
    const err = e as { code?: unknown; message?: unknown };
    reply = { ok: false, code: typeof err.code === 'string' ? err.code : 'INTERNAL', message: String(err.message ?? e) };
  }
  port.postMessage(reply, transfer);
});
loadAddon(); // before 'ready': a body's deadline is not charged with it, and a failure is a failed start
port.postMessage('ready');

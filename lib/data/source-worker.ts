// source-worker.ts — the worker-thread side of workerSource(): opens the source a spec describes, and
// posts its batches to the parent with their ArrayBuffers transferred (not copied), never more than
// `depth` ahead of what the parent has taken (one 'credit' message per batch taken).
import { parentPort, workerData } from 'node:worker_threads';
import { openSource, type SourceSpec } from './specs.js';
import { batchTransfer } from './batch-message.js';

const port = parentPort!;
const { spec, depth } = workerData as { spec: SourceSpec; depth: number };
let credit = depth;
let wake: (() => void) | undefined;
port.on('message', (m: unknown) => {
  if (m === 'credit') {
    credit++;
    wake?.();
    wake = undefined;
  }
});

try {
  const source = await openSource(spec);
  for await (const b of source) {
    while (credit <= 0) await new Promise<void>((r) => (wake = r));
    credit--;
    const { message, transfer } = batchTransfer(b);
    port.postMessage({ type: 'batch', batch: message }, transfer);
  }
  port.postMessage({ type: 'end', report: source.report?.() });
} catch (e) {
  const err = e as { code?: unknown; message?: unknown; details?: unknown };
  port.postMessage({ type: 'error', code: typeof err.code === 'string' ? err.code : 'INTERNAL', message: String(err.message ?? e) });
}
port.close();

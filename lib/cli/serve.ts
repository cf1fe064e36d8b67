// serve.ts — `embshard serve --checkpoint <dir>`: runs lib/serve's inference server until SIGINT/SIGTERM,
// then stops accepting, answers the requests it holds (new ones get 503) and exits.
import { intArg, numArg, parseArgs, runCommand } from './command.js';
import { loadAddon } from '../native.js';
import { createServer, type ServerOptions } from '../serve/server.js';

export const SERVE_USAGE = `usage: embshard serve --checkpoint <dir> [--port 8080] [--host 127.0.0.1]
                      [--max-batch 1024] [--max-wait-ms 0] [--max-request-samples 4096]
                      [--body-limit 8388608] [--decode-timeout-ms 2000] [--request-timeout-ms 30000]
                      [--max-in-flight 256] [--threads N] [--log]
  POST /v1/predict    {"dense": [[13 numbers], …], "sparse": {"<feature>": [[ids or hex strings…], …]}}
                      or an Arrow IPC body → {"probabilities": [...]} (Arrow bodies are decoded in
                      a worker thread; one that takes over --decode-timeout-ms is refused with 400)
  GET  /healthz       the model served (checkpoint, version, steps)
  GET  /metrics       Prometheus text: requests, latency, batch sizes, errors
  POST /admin/reload  {"checkpoint": "<dir>"} (or no body: the same folder again), swapped in atomically
A request (headers and body) not received within --request-timeout-ms is answered with 408 and its
connection closed. At most --max-in-flight prediction requests are held at once (received, waiting or in
a forward); one more is answered 503 (Retry-After: 1) before its body is read. On SIGINT / SIGTERM the
server stops accepting, answers the requests it holds, and exits.
Concurrent requests are joined into one forward pass: those read together, those that arrive while
a forward runs, and those arriving within --max-wait-ms of the first.`;

interface Args extends Omit<ServerOptions, 'checkpoint'> {
  checkpoint?: string;
  port: number;
  host: string;
  threads?: number;
}

function parse(argv: string[]): Args | string {
  const a: Args = { port: 8080, host: '127.0.0.1' };
  const problem = parseArgs(argv, { '--log': () => (a.logger = true) }, (k, v) => {
    const num = (min: number, integer = true) => (integer ? intArg(k, v, min) : numArg(k, v, min));
    switch (k) {
      case '--checkpoint': a.checkpoint = v; break;
      case '--port': a.port = intArg(k, v, 0, 65535); break;
      case '--host': a.host = v; break;
      case '--max-batch': a.maxBatch = num(1); break;
      case '--max-wait-ms': a.maxWaitMs = num(0, false); break;
      case '--max-request-samples': a.maxRequestSamples = num(1); break;
      case '--body-limit': a.bodyLimit = num(1024); break;
      case '--decode-timeout-ms': a.decodeTimeoutMs = intArg(k, v, 1, 2 ** 31 - 1); break;
      case '--request-timeout-ms': a.requestTimeoutMs = intArg(k, v, 1, 2 ** 31 - 1); break;
      case '--max-in-flight': a.maxInFlight = num(1); break;
      case '--threads': a.threads = num(1); break;
      default: return `unknown option '${k}'`;
    }
    return undefined;
  });
  if (problem !== undefined) return problem;
  if (!a.checkpoint) return '--checkpoint is required';
  return a;
}

/** Runs `embshard serve`; resolves to the exit code when a signal stops it. */
export function runServe(argv: string[]): Promise<number> {
  return runCommand('serve', SERVE_USAGE, parse(argv), serve);
}

async function serve(a: Args): Promise<number> {
  if (a.threads) loadAddon().setThreads(a.threads);
  const { port, host, threads: _t, ...options } = a;
  const server = await createServer({ ...options, checkpoint: a.checkpoint! });
  const url = await server.listen({ port, host });
  const m = server.model;
  console.error(`embshard serve: ${m.checkpoint} (${m.steps} steps, ${m.inputs.sparse.length} sparse + ${m.inputs.numDense} dense features) on ${url}`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await server.close();
  return 0;
}

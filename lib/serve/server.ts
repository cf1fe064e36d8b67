// server.ts — the inference server (fastify): POST /v1/predict (JSON or Arrow IPC body → click
// probabilities), GET /healthz, GET /metrics (Prometheus text), POST /admin/reload (swap in a checkpoint
// atomically). Every refused request gets a 4xx (503 when the server is full or closing) and
// `{ "error": { "code", "message" } }` with the EmbshardError code; nothing a client sends can stop the server (Arrow bodies are decoded in a worker
// thread under a deadline: arrow-decoder.ts). At most maxInFlight prediction requests are held at once
// (in-flight.ts): one more is answered 503 before its body is read. close() answers the requests it holds
// and refuses new ones (503) before the process may exit. createServer() is what `embshard serve` runs and
// what embedders call.
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { EmbshardError, type ErrorCode } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { MicroBatcher } from './batcher.js';
import { ServerMetrics } from './metrics.js';
import { ModelSlot, type LoadedModel } from './model-slot.js';
import { parseJsonRequest } from './request.js';
import { ArrowDecoder } from './arrow-decoder.js';
import { OpenRequests, Places, type Place } from './in-flight.js';

export interface ServerOptions {
  /** A checkpoint folder written by Trainer.save / `embshard train --save`. */
  checkpoint: string;
  /** Samples per forward pass. Default 1024. */
  maxBatch?: number;
  /**
   * Longest a request waits for others to share its forward, in ms. Default 0: a forward starts as soon
   * as the requests that arrived together are read; requests arriving while it runs share the next one.
   */
  maxWaitMs?: number;
  /** Samples one request may carry. Default 4096. */
  maxRequestSamples?: number;
  /** Largest request body in bytes. Default 8 MiB. */
  bodyLimit?: number;
  /**
   * Longest an Arrow body may take to decode, in ms (decoded in a worker thread; past it the request is
   * refused with 400 and the worker replaced). Default 2000.
   */
  decodeTimeoutMs?: number;
  /**
   * Longest a client may take to send a whole request (headers and body), in ms, from the connection's
   * opening (its first request) or the request's first byte (later ones on a keep-alive connection). Past
   * it the request is answered with 408 and the connection closed, so a client that stops sending or
   * trickles bytes holds no socket or buffer. Default 30000.
   */
  requestTimeoutMs?: number;
  /**
   * Prediction requests held at once, from their headers until they are answered (or their client is gone)
   * and their forward has run; one more is answered 503 before its body is read. Bounds the memory of
   * requests at about maxInFlight × bodyLimit. Default 256.
   */
  maxInFlight?: number;
  /** Device of the dense model ('cpu' | 'cuda:N'). Default cpu. */
  device?: string;
  /** fastify's request log (pino) on stdout. Default false. */
  logger?: boolean;
}

const OPTION_FIELDS = fieldsOf<ServerOptions>({ checkpoint: true, maxBatch: true, maxWaitMs: true, maxRequestSamples: true, bodyLimit: true, decodeTimeoutMs: true, requestTimeoutMs: true, maxInFlight: true, device: true, logger: true });
export const ARROW_TYPES = ['application/vnd.apache.arrow.stream', 'application/vnd.apache.arrow.file'];
const MAX_TIMER_MS = 2 ** 31 - 1;
/** How long an idle keep-alive connection stays open after an answer (fastify's default: beyond common proxies' idle timeouts). */
const KEEP_ALIVE_MS = 72_000;

interface ResolvedOptions {
  checkpoint: string;
  maxBatch: number;
  maxWaitMs: number;
  maxRequestSamples: number;
  bodyLimit: number;
  decodeTimeoutMs: number;
  requestTimeoutMs: number;
  maxInFlight: number;
  device: string;
  logger: boolean;
}

function resolveOptions(o: ServerOptions): ResolvedOptions {
  if (o === null || typeof o !== 'object') throw new EmbshardError('INVALID_CONFIG', 'server options must be an object');
  rejectUnknownFields(o, OPTION_FIELDS);
  if (typeof o.checkpoint !== 'string' || o.checkpoint.length === 0) throw new EmbshardError('INVALID_CONFIG', 'checkpoint must be a checkpoint folder');
  const int = (name: string, v: number | undefined, def: number, min: number): number => {
    const x = v ?? def;
    if (!Number.isSafeInteger(x) || x < min) throw new EmbshardError('INVALID_CONFIG', `${name} must be an integer >= ${min} (got ${String(v)})`);
    return x;
  };
  const maxWaitMs = o.maxWaitMs ?? 0;
  if (typeof maxWaitMs !== 'number' || !(maxWaitMs >= 0 && maxWaitMs <= 10_000)) throw new EmbshardError('INVALID_CONFIG', `maxWaitMs must be a number in [0, 10000] (got ${String(o.maxWaitMs)})`);
  if (o.device !== undefined && typeof o.device !== 'string') throw new EmbshardError('INVALID_CONFIG', `device must be 'cpu' or 'cuda:N' (got ${String(o.device)})`);
  if (o.logger !== undefined && typeof o.logger !== 'boolean') throw new EmbshardError('INVALID_CONFIG', `logger must be a boolean (got ${String(o.logger)})`);
  // at most a timer's longest delay: past it a Node timer fires at once (and every Arrow body would be refused)
  const timeout = (name: string, v: number | undefined, def: number): number => {
    const x = int(name, v, def, 1);
    if (x > MAX_TIMER_MS) throw new EmbshardError('INVALID_CONFIG', `${name} must be at most ${MAX_TIMER_MS} (got ${x})`);
    return x;
  };
  const decodeTimeoutMs = timeout('decodeTimeoutMs', o.decodeTimeoutMs, 2000);
  const requestTimeoutMs = timeout('requestTimeoutMs', o.requestTimeoutMs, 30_000);
  return {
    checkpoint: o.checkpoint,
    maxBatch: int('maxBatch', o.maxBatch, 1024, 1),
    maxWaitMs,
    maxRequestSamples: int('maxRequestSamples', o.maxRequestSamples, 4096, 1),
    bodyLimit: int('bodyLimit', o.bodyLimit, 8 << 20, 1024),
    decodeTimeoutMs,
    requestTimeoutMs,
    maxInFlight: int('maxInFlight', o.maxInFlight, 256, 1),
    device: o.device ?? 'cpu',
    logger: o.logger ?? false,
  };
}

/**
 * An error of the model's forward on a request that passed validation against the model's inputs: the
 * server's fault, not the client's (e.g. a table row that is not finite, which the dense forward refuses
 * as INVALID_ARGUMENT naming pooled[…]), so a 4xx code becomes INTERNAL (500) with the model's message.
 */
function modelFault(e: unknown): unknown {
  if (!(e instanceof EmbshardError) || statusOf(e.code) >= 500) return e;
  return new EmbshardError('INTERNAL', `the model refused a request that passed validation (${e.code}): ${e.message}`);
}

/** HTTP status of a refused or failed request by its code. */
function statusOf(code: ErrorCode): number {
  switch (code) {
    case 'INTERNAL':
    case 'IO_ERROR':
    case 'ALLOC_FAILED':
    case 'CUDA_ERROR':
    case 'BACKEND_UNAVAILABLE':
    case 'DISPOSED':
      return 500;
    case 'OVERLOADED':
      return 503;
    case 'CHECKPOINT_MISSING':
    case 'CHECKPOINT_CORRUPT':
      return 422;
    default:
      return 400;
  }
}

/** A fastify error (body parsing, size limits, content types) as an EmbshardError with its status. */
function fromFastify(e: FastifyError): { status: number; error: EmbshardError } {
  const s = e.statusCode ?? 500;
  if (s === 413) return { status: 413, error: new EmbshardError('INVALID_SIZE', `the body is larger than the server's limit: ${e.message}`) };
  if (s === 415) return { status: 415, error: new EmbshardError('INVALID_ARGUMENT', `unsupported content type (send application/json or ${ARROW_TYPES.join(' / ')}): ${e.message}`) };
  if (s >= 400 && s < 500) return { status: s, error: new EmbshardError('INVALID_ARGUMENT', `malformed request: ${e.message}`) };
  return { status: 500, error: new EmbshardError('INTERNAL', e.message) };
}

export interface EmbshardServer {
  readonly app: FastifyInstance;
  readonly metrics: ServerMetrics;
  /** The model being served now. */
  readonly model: LoadedModel;
  /** Starts listening (default 127.0.0.1:8080); resolves to the base URL. */
  listen(o?: { port?: number; host?: string }): Promise<string>;
  /** Swaps in `checkpoint` (default: the current folder again) once it is completely loaded. */
  reload(checkpoint?: string): Promise<LoadedModel>;
  /**
   * Stops accepting connections and refuses new requests (503); answers the requests already received,
   * gives those still arriving up to requestTimeoutMs, then closes every connection and disposes the model.
   */
  close(): Promise<void>;
}

/** Loads the checkpoint and builds the server (not yet listening). */
export async function createServer(options: ServerOptions): Promise<EmbshardServer> {
  const o = resolveOptions(options);
  const slot = await ModelSlot.open(o.checkpoint, o.device);
  const metrics = new ServerMetrics();
  metrics.modelVersion.set(1);
  const batcher = new MicroBatcher({
    maxBatch: o.maxBatch,
    maxWaitMs: o.maxWaitMs,
    onBatch: (samples, requests) => {
      metrics.batchSamples.observe(samples);
      metrics.batchRequests.observe(requests);
    },
  });
  const decoder = new ArrowDecoder(o.decodeTimeoutMs);
  // the code of each refused request's error, counted with the request once its answer is written
  const refused = new WeakMap<FastifyReply, ErrorCode>();
  const send = (reply: FastifyReply, status: number, e: EmbshardError) => {
    refused.set(reply, e.code);
    return reply.code(status).send({ error: { code: e.code, message: e.message } });
  };
  // the responses of requests not received within requestTimeoutMs, answered 408 on the socket (clientError)
  const timedOut = new WeakSet<ServerResponse>();
  // Every request is counted once, when its response closes: with its status when the answer was
  // written (408 when it was written on the socket because the request did not arrive in time), as
  // 'aborted' when the client went away first (mid-body, or while its forward ran). A request is in
  // embshard_errors_total only when its refusal reached the client, so the errors are the 4xx / 5xx
  // answers' count.
  const open = new OpenRequests();
  const track = (route: string, reply: FastifyReply): void => {
    open.opened(reply);
    reply.raw.once('close', () => {
      open.closed(reply);
      const late = timedOut.has(reply.raw);
      if (!late && !reply.raw.writableFinished) {
        metrics.requests.inc({ route, status: 'aborted' });
        return;
      }
      metrics.requests.inc({ route, status: late ? '408' : String(reply.statusCode) });
      metrics.latency.observe({ route }, reply.elapsedTime / 1000);
      const code = late ? 'INVALID_ARGUMENT' : refused.get(reply);
      if (code !== undefined) metrics.errors.inc({ code });
    });
  };
  // bytes that are not HTTP (a bad request line, header or chunk; headers over Node's limit) never become
  // a request: they are answered on the socket, in the same error shape, and the connection is closed.
  // So is a request not wholly received within requestTimeoutMs (408): one whose headers had arrived has
  // reached its route, and is counted there with that status when the connection closes.
  const clientError = (err: NodeJS.ErrnoException, socket: Socket): void => {
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    const [status, text, code, message]: [number, string, ErrorCode, string] =
      err.code === 'HPE_HEADER_OVERFLOW' ? [431, 'Request Header Fields Too Large', 'INVALID_SIZE', 'the request headers are larger than the server reads']
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? [408, 'Request Timeout', 'INVALID_ARGUMENT', `the request was not received within ${o.requestTimeoutMs} ms (requestTimeoutMs)`]
      : [400, 'Bad Request', 'INVALID_ARGUMENT', `malformed HTTP request (${err.code ?? err.message})`];
    const body = JSON.stringify({ error: { code, message } });
    // the response of the request being received, if it got as far as a route (its headers were read)
    const res = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
    // an answer already under way on this connection cannot be followed by another one
    if (res?.headersSent) {
      socket.destroy();
      return;
    }
    if (status === 408 && res) timedOut.add(res);
    if (socket.writable) socket.write(`HTTP/1.1 ${status} ${text}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n\r\n${body}`);
    socket.destroy();
  };
  const app = Fastify({
    logger: o.logger,
    bodyLimit: o.bodyLimit,
    // a request (headers and body) must arrive within requestTimeoutMs, checked every tenth of it (at
    // most every second; Node's own check runs every 30 s); an idle keep-alive connection closes after
    // KEEP_ALIVE_MS; a request being worked on (a forward, a reload) has no deadline
    requestTimeout: o.requestTimeoutMs,
    keepAliveTimeout: KEEP_ALIVE_MS,
    connectionTimeout: 0,
    http: {
      requestTimeout: o.requestTimeoutMs,
      headersTimeout: o.requestTimeoutMs,
      connectionsCheckingInterval: Math.min(1000, Math.max(10, Math.ceil(o.requestTimeoutMs / 10))),
    },
    // close() ends the connections itself, once the requests it holds are answered
    forceCloseConnections: false,
    return503OnClosing: false,
    clientErrorHandler: clientError,
    // a path that is not valid percent-encoding ('/%zz'): refused like any unknown route
    frameworkErrors: (err, _req, reply) => {
      track('unmatched', reply);
      return send(reply, 400, new EmbshardError('INVALID_ARGUMENT', `malformed request: ${err.message}`));
    },
  });
  app.removeContentTypeParser('text/plain'); // JSON or Arrow only: anything else is a 415
  app.addContentTypeParser(ARROW_TYPES, { parseAs: 'buffer', bodyLimit: o.bodyLimit }, (_req, body, done) => done(null, body));
  app.setErrorHandler((err, _req, reply) => {
    if (err instanceof EmbshardError) return send(reply, statusOf(err.code), err);
    const f = fromFastify(err as FastifyError);
    return send(reply, f.status, f.error);
  });
  app.setNotFoundHandler((req, reply) =>
    send(reply, 404, new EmbshardError('INVALID_ARGUMENT', `no route ${req.method} ${req.url} (POST /v1/predict, GET /healthz, GET /metrics, POST /admin/reload)`)),
  );
  // a server that is closing refuses new requests (those on connections it already had) and closes each
  // connection once its answer is written
  let closing: Promise<void> | undefined;
  app.addHook('onRequest', async (req, reply) => {
    track(req.routeOptions.url ?? 'unmatched', reply);
    if (closing) return send(reply, 503, new EmbshardError('DISPOSED', 'the server is shutting down'));
  });
  app.addHook('preHandler', async (_req, reply) => open.working(reply));
  app.addHook('onSend', async (_req, reply) => {
    if (closing) reply.header('connection', 'close');
  });
  // the prediction requests held: a place taken when the headers arrive, before the body is read
  const places = new Places(o.maxInFlight);
  const placeOf = new WeakMap<object, Place>();
  const admit = async (req: FastifyRequest, reply: FastifyReply) => {
    if (closing) return;
    const place = places.take();
    if (!place) {
      reply.header('retry-after', '1');
      return send(reply, 503, new EmbshardError('OVERLOADED', `the server holds ${o.maxInFlight} prediction requests already (maxInFlight); retry later`));
    }
    placeOf.set(req, place);
    reply.raw.once('close', () => place.end());
  };

  // a body's click probabilities, on the model current when it is parsed; `gone` aborts when the client
  // hangs up (its request then leaves the batcher's queue if its forward has not started)
  const predict = async (body: unknown, gone: AbortSignal) => {
    const lease = slot.acquire();
    let batch;
    try {
      const { inputs } = lease.model;
      batch = Buffer.isBuffer(body)
        ? await decoder.decode(body, inputs, o.maxRequestSamples)
        : parseJsonRequest(body, inputs, o.maxRequestSamples);
    } catch (e) {
      lease.release();
      throw e;
    }
    const p = await batcher.submit(batch, lease, gone).catch((e: unknown) => {
      throw modelFault(e);
    });
    return { probabilities: Array.from(p), model: lease.model.version };
  };

  app.post('/v1/predict', { onRequest: admit }, async (req, reply) => {
    // the place is freed when both the connection and this work are done
    const place = placeOf.get(req);
    const held = place?.begin() ?? false;
    // its client left between sending the body and this handler: no one to answer, nothing to run
    if (place && !held) throw new EmbshardError('INVALID_ARGUMENT', 'the client closed the connection');
    const gone = new AbortController();
    reply.raw.once('close', () => reply.raw.writableFinished || gone.abort());
    try {
      return await predict(req.body, gone.signal);
    } finally {
      if (held) place!.end();
    }
  });
  app.get('/healthz', async () => {
    const m = slot.current;
    return { status: 'ok', model: { checkpoint: m.checkpoint, version: m.version, steps: m.steps }, waiting: batcher.waiting, inFlight: places.inUse };
  });
  app.get('/metrics', async (_req, reply) => {
    reply.header('content-type', metrics.registry.contentType);
    return metrics.registry.metrics();
  });
  app.post('/admin/reload', async (req) => {
    const body = req.body as { checkpoint?: unknown } | undefined | null;
    if (body !== undefined && body !== null && (typeof body !== 'object' || Array.isArray(body) || Buffer.isBuffer(body) || Object.keys(body).some((k) => k !== 'checkpoint')))
      throw new EmbshardError('INVALID_ARGUMENT', 'the reload body is empty or { "checkpoint": "<folder>" }');
    const dir = body?.checkpoint;
    if (dir !== undefined && (typeof dir !== 'string' || dir.length === 0)) throw new EmbshardError('INVALID_ARGUMENT', 'checkpoint must be a folder path');
    try {
      const m = await slot.reload(dir);
      metrics.reloads.inc({ result: 'ok' });
      metrics.modelVersion.set(m.version);
      return { checkpoint: m.checkpoint, version: m.version, steps: m.steps };
    } catch (e) {
      metrics.reloads.inc({ result: 'failed' });
      throw e;
    }
  });

  return {
    app,
    metrics,
    get model() {
      return slot.current;
    },
    async listen(l = {}) {
      rejectUnknownFields(l, ['port', 'host'], 'listen options');
      const port = l.port ?? 8080, host = l.host ?? '127.0.0.1';
      if (!Number.isInteger(port) || port < 0 || port > 65535) throw new EmbshardError('INVALID_ARGUMENT', `listen: port must be an integer in [0, 65535] (got ${String(port)})`);
      if (typeof host !== 'string' || host === '') throw new EmbshardError('INVALID_ARGUMENT', 'listen: host must be a non-empty string');
      return app.listen({ port, host });
    },
    async reload(checkpoint?: string) {
      const m = await slot.reload(checkpoint);
      metrics.modelVersion.set(m.version);
      return m;
    },
    close() {
      closing ??= (async () => {
        const stopped = app.close(); // no new connections; idle keep-alive ones are closed
        await open.drained(o.requestTimeoutMs);
        app.server.closeAllConnections(); // requests still arriving past the deadline, connections left idle
        await stopped;
        await decoder.close();
        await slot.close();
      })();
      return closing;
    },
  };
}

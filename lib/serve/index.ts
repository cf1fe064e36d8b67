// index.ts — `embshard/serve`: the inference server as an API (createServer) and its pieces for embedders
// (request parsing, micro-batching, the reloadable model slot).
export { createServer, ARROW_TYPES } from './server.js';
export type { ServerOptions, EmbshardServer } from './server.js';
export { parseJsonRequest, parseArrowRequest } from './request.js';
export { concatBatches, splitResults } from './merge.js';
export { MicroBatcher } from './batcher.js';
export type { BatcherOptions } from './batcher.js';
export { ModelSlot } from './model-slot.js';
export type { LoadedModel, Lease } from './model-slot.js';
export { ServerMetrics } from './metrics.js';

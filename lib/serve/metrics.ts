// metrics.ts — the server's Prometheus metrics (prom-client, one registry per server so embedded servers
// do not share counters): requests by route and status, request latency, samples and requests per
// forward, errors by EmbshardError code, reloads, the model version; plus the process's own metrics
// (memory, event-loop lag) under the same prefix, collected once per process and registered in every
// server's registry: prom-client's collectors start a GC observer and an event-loop delay monitor that
// cannot be stopped, so collecting them per server would keep every closed server's metrics for ever.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

let processMetrics: Registry | undefined;

/** The process's own metrics (prefix embshard_), collected by one set of collectors for the process. */
function processRegistry(): Registry {
  if (!processMetrics) {
    processMetrics = new Registry();
    collectDefaultMetrics({ register: processMetrics, prefix: 'embshard_' });
  }
  return processMetrics;
}

export class ServerMetrics {
  /** This server's metrics and the process's. */
  readonly registry: Registry;
  readonly requests: Counter<'route' | 'status'>;
  readonly latency: Histogram<'route'>;
  readonly batchSamples: Histogram;
  readonly batchRequests: Histogram;
  readonly errors: Counter<'code'>;
  readonly reloads: Counter<'result'>;
  readonly modelVersion: Gauge;

  constructor() {
    const own = new Registry();
    const registers = [own];
    this.requests = new Counter({ name: 'embshard_requests_total', help: 'HTTP requests by route and status', labelNames: ['route', 'status'], registers });
    this.latency = new Histogram({
      name: 'embshard_request_duration_seconds', help: 'Time from request start to response, by route', labelNames: ['route'], registers,
      buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    });
    const pow2 = Array.from({ length: 14 }, (_, i) => 2 ** i);
    this.batchSamples = new Histogram({ name: 'embshard_batch_samples', help: 'Samples per forward pass (micro-batch)', buckets: pow2, registers });
    this.batchRequests = new Histogram({ name: 'embshard_batch_requests', help: 'Requests joined into one forward pass', buckets: pow2.slice(0, 10), registers });
    this.errors = new Counter({ name: 'embshard_errors_total', help: 'Refused or failed requests by EmbshardError code', labelNames: ['code'], registers });
    this.reloads = new Counter({ name: 'embshard_reloads_total', help: 'Checkpoint reloads by result', labelNames: ['result'], registers });
    this.modelVersion = new Gauge({ name: 'embshard_model_version', help: 'Version of the model being served (1 + successful reloads)', registers });
    this.registry = Registry.merge([own, processRegistry()]);
  }
}

// bench/paced-load.ts — an open-loop load generator at a fixed request rate: request i is due at
// t0 + i / rate, whatever happened to the earlier ones (autocannon's rate limit sends each second's quota
// in a burst at the start of the second, which measures bursts, not a rate). Latency is taken from the
// moment a request was due, so a generator or server falling behind shows up in it (no coordinated
// omission). Requests due within the same timer tick (≈ 1 ms) leave together. Keep-alive connections
// through node:http, against 127.0.0.1 only.
import { Agent, request } from 'node:http';

export interface PacedResult {
  rate: number;
  sent: number;
  completed: number;
  errors: number;
  achievedPerSec: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

/** POSTs `body` (JSON) to `path`, or GETs it when no body is given, `rate` times a second for `seconds`. */
export async function pacedLoad(o: { url: string; path: string; body?: string; rate: number; seconds: number; maxSockets?: number }): Promise<PacedResult> {
  const u = new URL(o.url);
  if (u.hostname !== '127.0.0.1') throw new Error('pacedLoad targets 127.0.0.1 only');
  const agent = new Agent({ keepAlive: true, maxSockets: o.maxSockets ?? 64 });
  const payload = o.body === undefined ? undefined : Buffer.from(o.body);
  const total = Math.round(o.rate * o.seconds);
  const lat = new Float64Array(total);
  let completed = 0, errors = 0, sent = 0;
  const t0 = performance.now();
  const fire = (i: number, due: number) =>
    new Promise<void>((resolve) => {
      const req = request(
        {
          host: u.hostname, port: u.port, path: o.path, agent,
          ...(payload ? { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': payload.length } } : { method: 'GET' }),
        },
        (res) => {
          res.resume();
          res.on('end', () => {
            lat[i] = performance.now() - due;
            if (res.statusCode === 200) completed++;
            else errors++;
            resolve();
          });
        },
      );
      req.on('error', () => {
        errors++;
        lat[i] = performance.now() - due;
        resolve();
      });
      req.end(payload);
    });
  const inflight: Promise<void>[] = [];
  while (sent < total) {
    const now = performance.now();
    while (sent < total && t0 + (sent * 1000) / o.rate <= now) {
      inflight.push(fire(sent, t0 + (sent * 1000) / o.rate));
      sent++;
    }
    const next = t0 + (sent * 1000) / o.rate - performance.now();
    // timers, never a spin: a spinning generator would take a core from the server it measures
    if (next > 0) await new Promise((r) => setTimeout(r, next));
  }
  await Promise.all(inflight);
  const elapsed = (performance.now() - t0) / 1000;
  agent.destroy();
  const sorted = Array.from(lat).sort((a, b) => a - b);
  const q = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
  return { rate: o.rate, sent, completed, errors, achievedPerSec: completed / elapsed, p50Ms: q(0.5), p99Ms: q(0.99), maxMs: sorted[sorted.length - 1]! };
}

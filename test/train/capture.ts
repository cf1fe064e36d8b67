// capture.ts — collects what a CLI command prints (console.log, console.error, stderr writes) for the CLI
// suites; restore with vi.restoreAllMocks().
import { vi } from 'vitest';

export function capture() {
  const out: string[] = [], err: string[] = [];
  vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void out.push(a.join(' ')));
  vi.spyOn(console, 'error').mockImplementation((...a: unknown[]) => void err.push(a.join(' ')));
  vi.spyOn(process.stderr, 'write').mockImplementation((s: string | Uint8Array) => (err.push(String(s)), true));
  return { out, err };
}

// temp-dir.ts — a test file's temporary folder: made on first use, so a suite that skips (no GPU, no
// mpirun) makes none, and removed after the file's tests by the afterAll hook it registers.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';

export interface TempDir {
  /** the folder (made on first read) */
  readonly dir: string;
  /** removes it (if it was made) */
  cleanup(): void;
}

/** A temporary folder `embshard-<tag>-XXXXXX`, removed after the calling file's tests. */
export function tempDir(tag: string): TempDir {
  let made: string | undefined;
  const t: TempDir = {
    get dir() {
      return (made ??= mkdtempSync(join(tmpdir(), `embshard-${tag}-`)));
    },
    cleanup() {
      if (made) rmSync(made, { recursive: true, force: true });
      made = undefined;
    },
  };
  afterAll(() => t.cleanup());
  return t;
}

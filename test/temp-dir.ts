// temp-dir.ts — a test file's temporary folder: made on first use, so a suite that skips (no GPU, no
// mpirun) makes none, and removed after the file's tests by the afterAll hook it registers.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';

/** A temporary folder `embshard-<tag>-XXXXXX` (`dir`, made on first read), removed after the calling file's tests. */
export function tempDir(tag: string): { readonly dir: string } {
  let made: string | undefined;
  afterAll(() => {
    if (made) rmSync(made, { recursive: true, force: true });
    made = undefined;
  });
  return {
    get dir() {
      return (made ??= mkdtempSync(join(tmpdir(), `embshard-${tag}-`)));
    },
  };
}

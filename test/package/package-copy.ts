// package-copy.ts — builds a throwaway copy of the embshard package in a temp folder (package.json, the
// loader's JavaScript, node_modules linked to this checkout's), without build/ or prebuilds/, and runs
// scripts in it in a child Node process with a controlled environment. The loader is the real
// lib/*.ts, transpiled file by file (TypeScript's transpileModule, no type check) into
// <copy>/dist/lib, so its packageRoot is the copy and none of this checkout's binaries can be found by
// accident.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';
import { packageRoot } from '../../lib/native.js';

export const root = packageRoot;

/** The lib/ files that `entry` reaches through relative value imports (type-only imports are skipped). */
function closure(entry: string): string[] {
  const seen = new Set<string>();
  const todo = [resolve(root, entry)];
  while (todo.length > 0) {
    const file = todo.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    const src = readFileSync(file, 'utf8');
    const re = /(?:^|\n)\s*(import|export)(\s+type)?[^'";]*?from\s+'(\.{1,2}\/[^']+)\.js'|import\(\s*'(\.{1,2}\/[^']+)\.js'\s*\)/g;
    for (let m = re.exec(src); m; m = re.exec(src)) {
      if (m[2]) continue; // import type / export type
      const spec = m[3] ?? m[4]!;
      todo.push(resolve(dirname(file), `${spec}.ts`));
    }
  }
  return [...seen];
}

export interface PackageCopy {
  dir: string;
  /** runs an ESM script (source text) inside the copy; returns its exit status and output */
  run(script: string, env?: Record<string, string>): { status: number | null; stdout: string; stderr: string };
  remove(): void;
}

/** A copy of the package holding the JavaScript of `entries` (paths relative to the package root). */
export function makePackageCopy(entries: string[] = ['lib/index.ts']): PackageCopy {
  const dir = mkdtempSync(join(tmpdir(), 'embshard-pkg-'));
  copyFileSync(join(root, 'package.json'), join(dir, 'package.json'));
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'), 'dir');
  const files = new Set(entries.flatMap(closure));
  for (const file of files) {
    const out = join(dir, 'dist', relative(root, file)).replace(/\.ts$/, '.js');
    mkdirSync(dirname(out), { recursive: true });
    const js = ts.transpileModule(readFileSync(file, 'utf8'), {
      compilerOptions: { module: ts.ModuleKind.ES2022, target: ts.ScriptTarget.ES2022 },
      fileName: file,
    }).outputText;
    writeFileSync(out, js);
  }
  return {
    dir,
    run(script, env = {}) {
      const file = join(dir, `script-${Math.random().toString(36).slice(2)}.mjs`);
      writeFileSync(file, script);
      // Only the variables that matter to the loader are controlled; the rest of the environment stays.
      const base = { ...process.env };
      for (const k of ['EMBSHARD_ADDON', 'EMBSHARD_BUILD_DIR', 'EMBSHARD_CUDA_ADDON', 'EMBSHARD_PREBUILD', 'PREBUILDS_ONLY']) delete base[k];
      const r = spawnSync(process.execPath, [file], { cwd: dir, env: { ...base, ...env }, encoding: 'utf8', timeout: 60_000 });
      return { status: r.status, stdout: r.stdout ?? '', stderr: r.stderr ?? '' };
    },
    remove() {
      if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The last line of `stdout` that starts with `mark`, parsed as JSON. */
export function answer<T>(stdout: string, mark = '@@answer@@'): T {
  const line = stdout.split('\n').reverse().find((l) => l.startsWith(mark));
  if (!line) throw new Error(`no answer line in child output:\n${stdout}`);
  return JSON.parse(line.slice(mark.length)) as T;
}

// loader-missing.test.ts — when no binary can be loaded, loadAddon() throws EmbshardError
// BINARY_NOT_FOUND whose message lists every place tried, in search order, each with its reason. Run in
// a package copy without build/ or prebuilds/ (package-copy.ts), in a child process, so this checkout's
// binaries stay where they are and cannot be found.
import { mkdirSync, realpathSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { answer, makePackageCopy, type PackageCopy } from './package-copy.js';

interface Outcome {
  loaded?: boolean;
  isEmbshard?: boolean;
  name?: string;
  code?: string;
  message?: string;
}

const LOAD = `
import { loadAddon } from './dist/lib/native.js';
import { EmbshardError } from './dist/lib/errors.js';
let out;
try { loadAddon(); out = { loaded: true }; }
catch (e) { out = { isEmbshard: e instanceof EmbshardError, name: e.name, code: e.code, message: e.message }; }
console.log('@@answer@@' + JSON.stringify(out));
`;

function tried(message: string): string[] {
  const lines = message.split('\n');
  const at = lines.indexOf('Tried:');
  expect(at, `no 'Tried:' line in:\n${message}`).toBeGreaterThan(0);
  return lines.slice(at + 1).filter((l) => l.startsWith('  ')).map((l) => l.slice(2));
}

describe('loadAddon() with no binary anywhere', () => {
  let copy: PackageCopy;
  let dir: string;
  const tag = `${process.platform}-${process.arch}`;

  beforeAll(() => {
    copy = makePackageCopy(['lib/native.ts']);
    dir = realpathSync(copy.dir);
    mkdirSync(join(dir, 'build-empty'));
  });
  afterAll(() => copy?.remove());

  it('throws BINARY_NOT_FOUND naming $EMBSHARD_ADDON, $EMBSHARD_BUILD_DIR/Release, build/Release and prebuilds/, in that order', () => {
    const missing = join(dir, 'nowhere', 'embshard.node');
    const r = copy.run(LOAD, { EMBSHARD_ADDON: missing, EMBSHARD_BUILD_DIR: 'build-empty' });
    expect(r.status, r.stderr).toBe(0);
    const o = answer<Outcome>(r.stdout);
    expect(o.loaded).toBeUndefined();
    expect(o.isEmbshard).toBe(true);
    expect(o.name).toBe('EmbshardError');
    expect(o.code).toBe('BINARY_NOT_FOUND');
    const t = tried(o.message!);
    expect(t).toHaveLength(4);
    expect(t[0]).toBe(`${missing}: not found`);
    expect(t[1]).toBe(`${join(dir, 'build-empty', 'Release', 'embshard.node')}: not found`);
    expect(t[2]).toBe(`${join(dir, 'build', 'Release', 'embshard.node')}: not found`);
    // node-gyp-build's own answer for the prebuilds folder of this platform
    expect(t[3]).toMatch(new RegExp(`^prebuilds/${tag}: No native build was found for platform=${process.platform} arch=${process.arch}`));
    expect(o.message).toContain(`for ${tag} (Node ${process.version}`);
    expect(o.message).toContain('npm rebuild embshard');
  });

  it('without the overrides, it tries build/Release and prebuilds/ only', () => {
    const o = answer<Outcome>(copy.run(LOAD).stdout);
    expect(o.code).toBe('BINARY_NOT_FOUND');
    const t = tried(o.message!);
    expect(t).toHaveLength(2);
    expect(t[0]).toBe(`${join(dir, 'build', 'Release', 'embshard.node')}: not found`);
    expect(t[1]).toMatch(new RegExp(`^prebuilds/${tag}: No native build was found`));
  });

  it('a file that exists but is no addon is reported with the loader error, and the search goes on', () => {
    const bad = join(dir, 'bad.node');
    writeFileSync(bad, 'this is not a shared object\n');
    const o = answer<Outcome>(copy.run(LOAD, { EMBSHARD_ADDON: bad }).stdout);
    expect(o.code).toBe('BINARY_NOT_FOUND');
    const t = tried(o.message!);
    expect(t).toHaveLength(3);
    expect(t[0]!.startsWith(`${bad}: `)).toBe(true);
    expect(t[0]).toMatch(/invalid ELF header|file too short/);
    expect(t[1]).toBe(`${join(dir, 'build', 'Release', 'embshard.node')}: not found`);
  });
});

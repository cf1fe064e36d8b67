// prebuild.test.ts — the prebuilt binaries: what scripts/prebuild.mjs writes (prebuildify through
// scripts/gyp-shim.mjs) and that a package holding only prebuilds/ loads them. Two sources:
//  - the build in $EMBSHARD_BUILD_DIR (default build/), packaged with `prebuild.mjs --reuse-build --out
//    <package copy>` (the real prebuildify run, minus the compile): runs wherever the addon is built;
//  - this checkout's own prebuilds/ from `npm run prebuild`: CI runs that before the tests, so under CI
//    it must be there; elsewhere the suite says why it skips.
// Each package copy (package-copy.ts) has no build/ folder, so the loader can only find the prebuilds.
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, realpathSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readElf } from './elf.js';
import { answer, makePackageCopy, root, type PackageCopy } from './package-copy.js';

const tag = `${process.platform}-${process.arch}`;
const buildDir = join(root, process.env.EMBSHARD_BUILD_DIR ?? 'build');
const built = join(buildDir, 'Release', 'embshard.node');
const nvcc = spawnSync('nvcc', ['--version'], { encoding: 'utf8' });
const hasNvcc = !nvcc.error && nvcc.status === 0;
const inCi = !!process.env.CI && process.env.CI !== 'false';
const machine = process.arch === 'x64' ? 62 : process.arch === 'arm64' ? 183 : -1;

// Loads the addon through the loader, reports which .node files this process loaded, and runs one
// forward pass of a 6 × 3 table whose rows the test chose.
const LOAD_AND_FORWARD = `
import { createRequire } from 'node:module';
import { loadAddon } from './dist/lib/native.js';
import { EmbeddingCollection, JaggedBatch } from './dist/lib/index.js';
loadAddon();
const loaded = Object.keys(createRequire(import.meta.url).cache).filter((k) => k.endsWith('.node'));
const ec = new EmbeddingCollection({ tables: [{ name: 't', rows: 6, dim: 3 }], optimizer: { type: 'sgd', lr: 0.1 }, seed: 1 });
const rows = Float32Array.from({ length: 18 }, (_, i) => Math.floor(i / 3) * 10 + (i % 3) + 0.5);
ec.writeRows('t', BigInt64Array.from([0n, 1n, 2n, 3n, 4n, 5n]), rows);
const batch = JaggedBatch.fromLengths({ features: ['t'], batchSize: 3, lengths: Int32Array.from([2, 0, 3]), ids: BigInt64Array.from([1n, 4n, 5n, 5n, 0n]) });
const out = await ec.forward(batch);
console.log('@@answer@@' + JSON.stringify({ loaded, pooled: Array.from(out.pooled) }));
`;

// Oracle for LOAD_AND_FORWARD: row r is [10r + 0.5, 10r + 1.5, 10r + 2.5]; sum pooling per bag.
function expectedPooled(): number[] {
  const row = (r: number) => [10 * r + 0.5, 10 * r + 1.5, 10 * r + 2.5];
  const bags = [[1, 4], [], [5, 5, 0]];
  return bags.flatMap((bag) => [0, 1, 2].map((j) => bag.reduce((s, r) => s + row(r)[j]!, 0)));
}

const PROBE_CUDA = `
import { existsSync } from 'node:fs';
import { cudaAddonCandidates } from './dist/lib/native.js';
import { probeCudaBinary } from './dist/lib/backends.js';
const file = cudaAddonCandidates().find((f) => existsSync(f)) ?? null;
console.log('@@answer@@' + JSON.stringify({ file, probe: file ? probeCudaBinary(file) : null }));
`;

function checkLayout(prebuilds: string): void {
  expect(readdirSync(join(prebuilds, tag))).toEqual(['embshard.node']);
  const cpu = readElf(join(prebuilds, tag, 'embshard.node'));
  expect(cpu.type).toBe(3); // shared object
  expect(cpu.machine).toBe(machine);
  expect(cpu.sections.map((s) => s.name)).not.toContain('.symtab'); // --strip
  expect(cpu.definedDynamic).toContain('napi_register_module_v1');
  const cudaDir = join(prebuilds, `${tag}-cuda`);
  if (hasNvcc) {
    expect(readdirSync(cudaDir)).toEqual(['embshard_cuda.node']);
    const cuda = readElf(join(cudaDir, 'embshard_cuda.node'));
    expect(cuda.machine).toBe(machine);
    expect(cuda.sections.map((s) => s.name)).not.toContain('.symtab');
    expect(cuda.sections.find((s) => s.name === '.nv_fatbin')?.size ?? 0).toBeGreaterThan(0); // kernels survive the strip
    expect(cuda.definedDynamic).toContain('napi_register_module_v1');
  }
}

function checkLoads(copy: PackageCopy): void {
  const dir = realpathSync(copy.dir);
  mkdirSync(join(dir, 'build-empty'), { recursive: true });
  // $EMBSHARD_BUILD_DIR naming an empty folder changes nothing: the prebuild is what loads.
  const r = copy.run(LOAD_AND_FORWARD, { EMBSHARD_BUILD_DIR: 'build-empty' });
  expect(r.status, r.stderr).toBe(0);
  const a = answer<{ loaded: string[]; pooled: number[] }>(r.stdout);
  expect(a.loaded).toEqual([join(dir, 'prebuilds', tag, 'embshard.node')]);
  expect(a.pooled).toEqual(expectedPooled());
}

function checkCudaProbe(copy: PackageCopy): void {
  const dir = realpathSync(copy.dir);
  const r = copy.run(PROBE_CUDA);
  expect(r.status, r.stderr).toBe(0);
  const a = answer<{ file: string | null; probe: { ok: boolean; reason?: string; info?: { runtimeVersion: number; available: boolean } } | null }>(r.stdout);
  expect(a.file).toBe(join(dir, 'prebuilds', `${tag}-cuda`, 'embshard_cuda.node'));
  // the stripped binary loads in the probe's child process and answers cudaInfo(), GPU or not
  expect(a.probe?.reason).toBeUndefined();
  expect(a.probe?.ok).toBe(true);
  expect(a.probe!.info!.runtimeVersion).toBeGreaterThanOrEqual(12000);
}

if (!existsSync(built)) {
  console.log(`test/package/prebuild: ${built} is not built, so there is nothing to package${inCi ? ' (CI: failing)' : ' (skipped)'}`);
}

describe.runIf(existsSync(built) || inCi)('prebuild.mjs --reuse-build: the packaged build', () => {
  let copy: PackageCopy;
  let run: ReturnType<typeof spawnSync>;
  beforeAll(() => {
    expect(existsSync(built), `${built} must be built before the tests (npm ci builds it in CI)`).toBe(true);
    copy = makePackageCopy();
    // stale files from an earlier run, which prebuild.mjs must clear
    for (const [d, f] of [[tag, 'embshard.glibc.node'], [tag, 'node.napi.node'], [`${tag}-cuda`, 'old.node']] as const) {
      mkdirSync(join(copy.dir, 'prebuilds', d), { recursive: true });
      writeFileSync(join(copy.dir, 'prebuilds', d, f), 'stale');
    }
    run = spawnSync(process.execPath, [join(root, 'scripts', 'prebuild.mjs'), '--reuse-build', '--out', copy.dir], {
      cwd: root,
      env: process.env,
      encoding: 'utf8',
      timeout: 120_000,
    });
  });
  afterAll(() => copy?.remove());

  it('prebuildify names the CPU addon prebuilds/<platform>-<arch>/embshard.node, stripped, alone in its folder', () => {
    expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);
    checkLayout(join(copy.dir, 'prebuilds'));
    if (!hasNvcc) expect(existsSync(join(copy.dir, 'prebuilds', `${tag}-cuda`))).toBe(false);
  });

  it('a package without build/ loads the prebuild through node-gyp-build, and it computes a forward pass', () => {
    checkLoads(copy);
  });

  it.runIf(hasNvcc)('the CUDA prebuild is the candidate the backend probe finds, and it loads', () => {
    checkCudaProbe(copy);
  });

  it('node-gyp-build never looks in prebuilds/<platform>-<arch>-cuda/, even for a loadable CPU addon', () => {
    const other = makePackageCopy(['lib/native.ts']);
    try {
      mkdirSync(join(other.dir, 'prebuilds', `${tag}-cuda`), { recursive: true });
      cpSync(join(copy.dir, 'prebuilds', tag, 'embshard.node'), join(other.dir, 'prebuilds', `${tag}-cuda`, 'embshard.node'));
      const r = other.run(`
import { loadAddon } from './dist/lib/native.js';
try { loadAddon(); console.log('@@answer@@"loaded"'); } catch (e) { console.log('@@answer@@' + JSON.stringify(e.code)); }
`);
      expect(r.status, r.stderr).toBe(0);
      expect(answer<string>(r.stdout)).toBe('BINARY_NOT_FOUND');
    } finally {
      other.remove();
    }
  });
});

const rootPrebuilds = join(root, 'prebuilds');
if (!existsSync(join(rootPrebuilds, tag, 'embshard.node'))) {
  console.log(`test/package/prebuild: ${rootPrebuilds}/${tag}/embshard.node is absent (run \`npm run prebuild\`)${inCi ? ' (CI: failing)' : ' (skipped)'}`);
}

describe.runIf(existsSync(join(rootPrebuilds, tag, 'embshard.node')) || inCi)('npm run prebuild: this checkout\'s prebuilds/', () => {
  let copy: PackageCopy;
  beforeAll(() => {
    expect(existsSync(join(rootPrebuilds, tag, 'embshard.node')), 'CI runs `npm run prebuild` before the tests').toBe(true);
    copy = makePackageCopy();
    cpSync(rootPrebuilds, join(copy.dir, 'prebuilds'), { recursive: true });
  });
  afterAll(() => copy?.remove());

  it('has the layout node-gyp-build and cudaAddonCandidates() expect', () => {
    checkLayout(rootPrebuilds);
  });

  it('loads from a package holding only the prebuilds, and computes a forward pass', () => {
    checkLoads(copy);
  });

  it.runIf(hasNvcc)('its CUDA prebuild loads in the backend probe', () => {
    checkCudaProbe(copy);
  });
});

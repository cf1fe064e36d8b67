// prebuild.mjs — `npm run prebuild`: packages the native addons as prebuilt binaries.
//   prebuilds/<platform>-<arch>/embshard.node            CPU addon, made by prebuildify (--napi --strip) through
//                                                        scripts/gyp-shim.mjs (cmake-js instead of node-gyp);
//                                                        node-gyp-build's resolve(packageRoot) finds it
//   prebuilds/<platform>-<arch>-cuda/embshard_cuda.node  CUDA addon (when the build has CUDA on), stripped the same
//                                                        way; a folder node-gyp-build ignores (its name splits into
//                                                        three parts), found by lib/native.ts cudaAddonCandidates()
// The CPU folder holds exactly one file: node-gyp-build breaks ties between same-specificity files by
// directory order, so a second .node there could shadow the CPU addon.
// Options: --out <dir>  write prebuilds/ under <dir> instead of the package root;
//          --reuse-build  package the binaries already in $EMBSHARD_BUILD_DIR (default build/) without compiling.
import { spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const argv = process.argv.slice(2);

function die(msg) {
  console.error(`prebuild: ${msg}`);
  process.exit(1);
}

let out = root;
let reuse = false;
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === '--out' && argv[i + 1]) out = resolve(argv[++i]);
  else if (argv[i] === '--reuse-build') reuse = true;
  else die(`unknown argument '${argv[i]}' (usage: node scripts/prebuild.mjs [--out <dir>] [--reuse-build])`);
}

const buildDir = resolve(root, process.env.EMBSHARD_BUILD_DIR ?? 'build');
const tag = `${process.platform}-${process.arch}`;
const cpuDir = join(out, 'prebuilds', tag);
const cudaDir = join(out, 'prebuilds', `${tag}-cuda`);
const shim = join(root, 'scripts', 'gyp-shim.mjs');
const prebuildify = join(root, 'node_modules', 'prebuildify', 'bin.js');
if (!existsSync(prebuildify)) die(`${prebuildify} is missing: run npm ci (prebuildify is a devDependency)`);

// Stale files from an older run must not linger beside the new binaries.
rmSync(cpuDir, { recursive: true, force: true });
rmSync(cudaDir, { recursive: true, force: true });
chmodSync(shim, 0o755); // prebuildify spawns the shim directly (no shell)

const staging = mkdtempSync(join(tmpdir(), 'embshard-prebuild-'));
try {
  const r = spawnSync(
    process.execPath,
    [prebuildify, '--napi', '--strip', '--name', 'embshard', '--cwd', staging, '--out', out, '--node-gyp', shim],
    { cwd: root, stdio: 'inherit', env: { ...process.env, ...(reuse ? { EMBSHARD_PREBUILD_REUSE: '1' } : {}) } },
  );
  if (r.status !== 0) die(`prebuildify failed (exit ${r.status ?? r.signal})`);
} finally {
  rmSync(staging, { recursive: true, force: true });
}
const files = existsSync(cpuDir) ? readdirSync(cpuDir) : [];
if (files.length !== 1 || files[0] !== 'embshard.node') die(`expected exactly ${join(cpuDir, 'embshard.node')}, found [${files.join(', ')}]`);

// The CUDA addon is part of this build when its CMake cache has CUDA enabled and a CUDA compiler.
function cudaConfigured() {
  const cache = join(buildDir, 'CMakeCache.txt');
  if (!existsSync(cache)) return false;
  const text = readFileSync(cache, 'utf8');
  const withCuda = /^WITH_CUDA:BOOL=(.*)$/m.exec(text)?.[1] ?? 'ON';
  const nvcc = /^CMAKE_CUDA_COMPILER:[A-Z]+=(.*)$/m.exec(text)?.[1] ?? '';
  return /^(ON|1|TRUE|YES)$/i.test(withCuda) && nvcc !== '' && !nvcc.endsWith('NOTFOUND');
}
const made = [join(cpuDir, 'embshard.node')];
if (cudaConfigured()) {
  const cuda = join(buildDir, 'Release', 'embshard_cuda.node');
  if (!existsSync(cuda)) die(`the build in ${buildDir} has CUDA on but ${cuda} does not exist`);
  mkdirSync(cudaDir, { recursive: true });
  const dest = join(cudaDir, 'embshard_cuda.node');
  copyFileSync(cuda, dest);
  const s = spawnSync(process.env.PREBUILD_STRIP_BIN ?? 'strip', ['--strip-all', dest], { stdio: 'inherit' });
  if (s.status !== 0) die(`strip ${dest} failed (exit ${s.status ?? s.signal})`);
  made.push(dest);
} else {
  console.log(`prebuild: the build in ${buildDir} has no CUDA addon (no CUDA compiler or WITH_CUDA=OFF); no ${tag}-cuda prebuild`);
}
for (const f of made) console.log(`prebuild: ${f} (${(statSync(f).size / 1024).toFixed(0)} KiB)`);

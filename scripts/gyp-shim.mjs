#!/usr/bin/env node
// gyp-shim.mjs — stands in for node-gyp when prebuildify builds embshard (prebuildify has no cmake-js
// backend). prebuildify runs `<shim> rebuild --target=<node> --devdir=<d> --arch=<a> --release` in its
// working folder and then takes the first build/Release/*.node there. This shim ignores node-gyp's
// arguments (cmake-js would read --target as a CMake target), compiles with scripts/build-native.mjs into
// $EMBSHARD_BUILD_DIR (default build/, incremental like `npm run build:native`), and copies ONLY the CPU
// addon into <working folder>/build/Release, so that prebuildify can never pick embshard_cuda.node.
// EMBSHARD_PREBUILD_REUSE=1 skips the compile and packages the binary already built there.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);

function die(msg) {
  console.error(`gyp-shim: ${msg}`);
  process.exit(1);
}

if (args[0] !== 'rebuild') die(`only 'rebuild' is supported (prebuildify's call), got '${args.join(' ')}'`);
if (args.includes('--debug')) die('embshard prebuilds are Release builds; --debug is not supported');
const arch = args.find((a) => a.startsWith('--arch='))?.slice('--arch='.length);
if (arch && arch !== process.arch) die(`cannot cross-compile: asked for --arch=${arch} on ${process.arch}`);

const buildDir = resolve(root, process.env.EMBSHARD_BUILD_DIR ?? 'build');
if (process.env.EMBSHARD_PREBUILD_REUSE !== '1') {
  const r = spawnSync(process.execPath, [join(root, 'scripts', 'build-native.mjs')], { cwd: root, stdio: 'inherit', env: process.env });
  if (r.status !== 0) die(`scripts/build-native.mjs failed (exit ${r.status ?? r.signal})`);
}
const built = join(buildDir, 'Release', 'embshard.node');
if (!existsSync(built)) die(`${built} does not exist (build it with scripts/build-native.mjs, or drop --reuse-build)`);
const dest = join(process.cwd(), 'build', 'Release');
mkdirSync(dest, { recursive: true });
copyFileSync(built, join(dest, 'embshard.node'));
console.log(`gyp-shim: ${built} -> ${join(dest, 'embshard.node')}`);

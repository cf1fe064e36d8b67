// npm install hook: use a prebuilt binary when one loads, otherwise compile the addon with cmake-js;
// in a git checkout (TypeScript present) also compile the TypeScript sources to dist/.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);

function run(cmd, args) {
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit', shell: false });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

let prebuilt = false;
if (!process.env.EMBSHARD_BUILD_FROM_SOURCE) {
  try {
    const p = require('node-gyp-build').resolve(root);
    prebuilt = p.includes(`${join('prebuilds', '')}`);
  } catch { prebuilt = false; }
}
if (!prebuilt) run(process.execPath, [join(root, 'scripts', 'build-native.mjs')]);
if (existsSync(join(root, 'tsconfig.json')) && existsSync(join(root, 'node_modules', 'typescript'))) {
  run(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json']);
}

// Builds what is stale before tests, benches and the demo: the native addon when any file under
// native/ or CMakeLists.txt is newer than the binary, and the TypeScript output (tsc is incremental).
// `--ts-only` skips the native part (planner tools need no addon).
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = process.env.EMBSHARD_BUILD_DIR ?? 'build';
const binary = join(root, out, 'Release', 'embshard.node');

function newest(path) {
  const st = statSync(path);
  if (!st.isDirectory()) return st.mtimeMs;
  let t = st.mtimeMs;
  for (const e of readdirSync(path)) t = Math.max(t, newest(join(path, e)));
  return t;
}
function run(args) {
  const r = spawnSync(process.execPath, args, { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

if (!process.argv.includes('--ts-only')) {
  const srcTime = Math.max(newest(join(root, 'native')), newest(join(root, 'CMakeLists.txt')));
  if (!existsSync(binary) || statSync(binary).mtimeMs < srcTime) run([join(root, 'scripts', 'build-native.mjs')]);
}
run([join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json']);

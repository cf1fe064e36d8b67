// worker-thread.ts — starts the package's worker threads (startWorker): the compiled script beside the
// caller, or, in development only, its TypeScript source: when lib/ runs from its TypeScript sources
// (vitest, no dist build) a worker thread cannot load .ts files, so the worker starts through this
// bootstrap, which registers module hooks that resolve './x.js' to './x.ts' and transpile .ts with the
// project's own `typescript` (a devDependency). A built package (dist/) never takes that path.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { EmbshardError } from './errors.js';

/** Module hooks (an ES module's source): resolve .js → .ts when only the .ts exists; transpile .ts. */
export const TS_HOOKS = `
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
let ts;
export function initialize(data) { ts = createRequire(data.base)('typescript'); }
export async function resolve(spec, ctx, next) {
  try { return await next(spec, ctx); } catch (e) {
    if (spec.endsWith('.js') && ctx.parentURL && ctx.parentURL.startsWith('file:') && ctx.parentURL.endsWith('.ts'))
      return next(spec.slice(0, -3) + '.ts', ctx);
    throw e;
  }
}
export async function load(url, ctx, next) {
  if (url.startsWith('file:') && url.endsWith('.ts')) {
    const file = fileURLToPath(url);
    const out = ts.transpileModule(readFileSync(file, 'utf8'), {
      fileName: file,
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, sourceMap: false },
    });
    return { format: 'module', source: out.outputText, shortCircuit: true };
  }
  return next(url, ctx);
}
`;

/** The worker's eval'd entry: register the hooks, then import the real (TypeScript) worker module. */
export const TS_BOOT = `
(async () => {
  const { register } = await import('node:module');
  const { workerData } = await import('node:worker_threads');
  register('data:text/javascript,' + encodeURIComponent(workerData.__tsHooks), { data: { base: workerData.__tsBase } });
  await import(workerData.__tsEntry);
})().catch((e) => { setImmediate(() => { throw e; }); });
`;

/**
 * A worker thread running the script `name` ('x' for x.js, or x.ts in development) that lies beside the
 * module `base` (its import.meta.url), with `workerData` = data.
 */
export function startWorker(base: string, name: string, data: Record<string, unknown>): Worker {
  const js = new URL(`./${name}.js`, base);
  if (existsSync(fileURLToPath(js))) return new Worker(js, { workerData: data });
  const ts = new URL(`./${name}.ts`, base);
  if (!existsSync(fileURLToPath(ts))) throw new EmbshardError('INTERNAL', `the worker script ${name} is missing next to ${base}`);
  return new Worker(TS_BOOT, {
    eval: true,
    workerData: { ...data, __tsHooks: TS_HOOKS, __tsBase: fileURLToPath(base), __tsEntry: ts.href },
  });
}

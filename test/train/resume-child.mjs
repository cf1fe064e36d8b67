// resume-child.mjs — a child process that trains `steps` steps of a Trainer, saves it to `checkpoint`,
// prints "saved" and waits to be killed (resume-kill.test.ts kills it with SIGKILL).
// Usage: node resume-child.mjs <dist folder> <JSON: { data, config, trainer, steps, checkpoint }>
const [dist, json] = process.argv.slice(2);
const o = JSON.parse(json);
const { EmbeddingCollection } = await import(`${dist}/lib/index.js`);
const { Trainer } = await import(`${dist}/lib/train/index.js`);
const { SyntheticSource } = await import(`${dist}/lib/data/index.js`);
const data = new SyntheticSource(o.data);
const t = new Trainer({ ...o.trainer, embeddings: new EmbeddingCollection(o.config) });
for (let k = 0; k < o.steps; k++) await t.step(data.batch(k));
await t.save(o.checkpoint);
process.stdout.write('saved\n');
setInterval(() => undefined, 1000); // alive until killed

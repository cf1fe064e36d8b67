// index.ts — workload presets and their seeded batch generators.
export { workload, WORKLOAD_NAMES, type Workload, type BagSpec } from './presets.js';
export { generateBatch, generateBatches, type GenerateOptions } from './generator.js';
export { ZipfSampler } from '../random/zipf.js';
export { Rng } from '../random/rng.js';

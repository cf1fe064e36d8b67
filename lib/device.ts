// device.ts — picks the addon that serves a device string: 'cpu' → the CPU addon; 'cuda:N' → the CUDA
// addon when lib/backends.ts finds it usable, otherwise EmbshardError BACKEND_UNAVAILABLE with the reason.
import { EmbshardError } from './errors.js';
import { loadAddon } from './native.js';
import { resolveBackend } from './backends.js';
import type { Addon } from './binding.js';

export function addonFor(device: string): Addon {
  if (device === 'cpu') return loadAddon();
  if (/^cuda:\d+$/.test(device)) return resolveBackend(device);
  throw new EmbshardError('BACKEND_UNAVAILABLE', `unknown device '${device}' (expected 'cpu' or 'cuda:N')`);
}

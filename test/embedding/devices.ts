// devices.ts — the backends the embedding suite runs on: the CPU always, cuda:0 where lib/backends.ts
// finds a usable GPU; elsewhere the CUDA run is reported as skipped with the reason.
import { backends } from '../../lib/index.js';

export interface TestDevice {
  device: string;
  skip: string | false;
}

export function testDevices(): TestDevice[] {
  const cuda = backends().find((b) => b.name === 'cuda');
  return [
    { device: 'cpu', skip: false },
    { device: 'cuda:0', skip: cuda?.available ? false : `CUDA unavailable: ${cuda?.reason ?? 'no CUDA backend'}` },
  ];
}

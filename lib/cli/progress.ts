// progress.ts — the CLI's progress-line pieces: rates in k/M units and a 20-character bar with counts,
// rate and elapsed time (drawn on stderr by `train` and `predict`).

/** 1234567 → '1.23M', 12345 → '12.3k', 123 → '123'; the unit is chosen after rounding (999,999 → '1.00M', not '1000.0k'). */
export function fmtRate(x: number): string {
  const k = (x / 1e3).toFixed(1);
  return Number(k) >= 1000 ? `${(x / 1e6).toFixed(2)}M` : Number(x.toFixed(0)) >= 1000 ? `${k}k` : x.toFixed(0);
}

/** '[#####...............] 1,000/4,000 samples  2.5k samples/s  0s' (no bar when the total is unknown). */
export function progressLine(done: number, total: number | undefined, seconds: number, unit: string): string {
  const frac = total ? Math.min(1, done / total) : undefined;
  const bar = frac === undefined ? '' : `[${'#'.repeat(Math.round(frac * 20)).padEnd(20, '.')}] `;
  return `${bar}${done.toLocaleString()}${total ? `/${total.toLocaleString()}` : ''} ${unit}  ${fmtRate(done / Math.max(seconds, 1e-9))} ${unit}/s  ${seconds.toFixed(0)}s`;
}

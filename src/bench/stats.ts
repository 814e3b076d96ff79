/** Percentiles of a sample, by nearest rank. */
export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank] as number;
}

export interface Summary {
  n: number;
  p50: number;
  p95: number;
}

export function summarize(samples: number[]): Summary {
  return { n: samples.length, p50: percentile(samples, 50), p95: percentile(samples, 95) };
}

/** Times an async operation n times (after `warmup` untimed runs), in milliseconds. */
export async function timeIt(n: number, op: (i: number) => Promise<unknown>, warmup = 2): Promise<number[]> {
  for (let i = 0; i < warmup; i++) await op(i);
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const start = performance.now();
    await op(i);
    samples.push(performance.now() - start);
  }
  return samples;
}

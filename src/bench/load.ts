import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import type { LoadRequest, LoadSamples } from './load-worker.js';
import { summarize } from './stats.js';

export interface LoadResult {
  sessions: number;
  durationMs: number;
  operations: number;
  errors: number;
  firstError: string | null;
  p50Ms: number;
  p95Ms: number;
  ticks: number;
  lateTicks: number;
  /** Late ticks in % of all ticks. */
  lateTicksPercent: number;
  /** p99 and max of the orchestrator's event-loop delay meanwhile (how late its timer fired), in milliseconds. */
  eventLoopP99Ms: number;
  eventLoopMaxMs: number;
  /** The same p99 as Node's histogram holds it: the time between its timer's ticks, the 10 ms period included. */
  eventLoopTickP99Ms: number;
}

/** How often the event-loop histogram's timer is due (ms). */
const EVENT_LOOP_RESOLUTION_MS = 10;

/**
 * The load (see load-worker.ts) on the given sessions, with the client in a worker
 * thread while this thread, the orchestrator's, records its event-loop delay
 * (perf_hooks.monitorEventLoopDelay, 10 ms resolution). Node's histogram records the time
 * between its timer's ticks, so an idle loop reads 10 ms; the delay is what lies beyond the
 * period (nodejs/node#62935 says the same of the interval sampler).
 */
export async function runLoad(baseUrl: string, sessionIds: string[], intervalMs: number, durationMs: number): Promise<LoadResult> {
  const histogram = monitorEventLoopDelay({ resolution: EVENT_LOOP_RESOLUTION_MS });
  const request: LoadRequest = { baseUrl, sessionIds, intervalMs, durationMs };
  const worker = new Worker(new URL('./load-worker.js', import.meta.url), { workerData: request });
  histogram.enable();
  let raw: LoadSamples;
  try {
    raw = await new Promise<LoadSamples>((resolve, reject) => {
      worker.once('message', (message: LoadSamples) => resolve(message));
      worker.once('error', reject);
      worker.once('exit', (code) => reject(new Error(`the load worker exited (${code}) without a result`)));
    });
  } finally {
    histogram.disable();
    await worker.terminate();
  }
  const summary = summarize(raw.samples);
  return {
    sessions: sessionIds.length,
    durationMs: raw.durationMs,
    operations: raw.samples.length,
    errors: raw.errors,
    firstError: raw.firstError,
    p50Ms: summary.p50,
    p95Ms: summary.p95,
    ticks: raw.ticks,
    lateTicks: raw.lateTicks,
    lateTicksPercent: raw.ticks > 0 ? (100 * raw.lateTicks) / raw.ticks : 0,
    eventLoopP99Ms: Math.max(0, histogram.percentile(99) / 1e6 - EVENT_LOOP_RESOLUTION_MS),
    eventLoopMaxMs: Math.max(0, histogram.max / 1e6 - EVENT_LOOP_RESOLUTION_MS),
    eventLoopTickP99Ms: histogram.percentile(99) / 1e6,
  };
}

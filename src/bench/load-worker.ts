/**
 * The load's client, in a worker thread of its own: the orchestrator's event loop then
 * serves requests only, so its event-loop delay is the orchestrator's, not the client's.
 * (The worker's CPU is still this process's: the CPU figures do not use the load.)
 */
import { parentPort, workerData } from 'node:worker_threads';
import { setTimeout as sleep } from 'node:timers/promises';
import { SandboxClient } from '../client/index.js';

export interface LoadRequest {
  baseUrl: string;
  sessionIds: string[];
  intervalMs: number;
  durationMs: number;
}

export interface LoadSamples {
  /** Latency of every operation (screenshot or click), in milliseconds. */
  samples: number[];
  /** Failed operations, and the first failure's message. */
  errors: number;
  firstError: string | null;
  ticks: number;
  /** Ticks that started after they were due (the previous tick's work overran). */
  lateTicks: number;
  durationMs: number;
}

/**
 * Every session takes a screenshot and then clicks, once every `intervalMs`, all sessions
 * at once. A tick whose work overruns starts the next one at once (no overlap within a
 * session, as an agent loop would not overlap), and counts as late.
 */
async function run(request: LoadRequest): Promise<LoadSamples> {
  const client = new SandboxClient({ baseUrl: request.baseUrl });
  const out: LoadSamples = { samples: [], errors: 0, firstError: null, ticks: 0, lateTicks: 0, durationMs: 0 };
  const started = performance.now();
  const end = started + request.durationMs;
  const n = request.sessionIds.length;
  await Promise.all(
    request.sessionIds.map(async (id, s) => {
      // Spread the sessions over the interval, as independent agents would be.
      let due = started + (request.intervalMs * s) / n;
      for (let tick = 0; due < end; tick++) {
        const wait = due - performance.now();
        if (wait > 0) await sleep(wait);
        else if (tick > 0) out.lateTicks++;
        out.ticks++;
        const click = { action: 'left_click', coordinate: [100 + (tick % 8) * 100, 100 + (s % 6) * 100] as [number, number] };
        for (const op of [() => client.screenshot(id), () => client.action(id, click)]) {
          const t = performance.now();
          try {
            await op();
            out.samples.push(performance.now() - t);
          } catch (err) {
            out.errors++;
            out.firstError ??= err instanceof Error ? err.message : String(err);
          }
        }
        due += request.intervalMs;
      }
    }),
  );
  out.durationMs = performance.now() - started;
  return out;
}

if (parentPort) {
  const port = parentPort;
  run(workerData as LoadRequest).then(
    (result) => port.postMessage(result),
    (err: unknown) => {
      throw err;
    },
  );
}

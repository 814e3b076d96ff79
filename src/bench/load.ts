import { setTimeout as sleep } from 'node:timers/promises';
import type { Sandbox } from '../client/index.js';

export interface LoadResult {
  sessions: number;
  durationMs: number;
  /** Failed operations (a screenshot or a click that threw). */
  errors: number;
  /** Latency of every operation (screenshot or click), in milliseconds. */
  samples: number[];
  /** Ticks whose work was still running when the next one was due (the pace was not kept). */
  lateTicks: number;
}

/**
 * The load: every session takes a screenshot and then clicks, once every
 * `intervalMs`, all sessions at once, for `durationMs`. A tick whose work overruns starts
 * the next one at once (no overlap within a session, as an agent loop would not overlap).
 */
export async function runLoad(sandboxes: Sandbox[], intervalMs: number, durationMs: number): Promise<LoadResult> {
  const samples: number[] = [];
  let errors = 0;
  let lateTicks = 0;
  const started = performance.now();
  const end = started + durationMs;
  await Promise.all(
    sandboxes.map(async (sandbox, s) => {
      // Spread the sessions over the interval, as independent agents would be.
      let due = started + (intervalMs * s) / sandboxes.length;
      for (let tick = 0; due < end; tick++) {
        const wait = due - performance.now();
        if (wait > 0) await sleep(wait);
        else if (tick > 0) lateTicks++;
        for (const op of [() => sandbox.screenshot(), () => sandbox.leftClick(100 + (tick % 8) * 100, 100 + (s % 6) * 100)]) {
          const t = performance.now();
          try {
            await op();
            samples.push(performance.now() - t);
          } catch {
            errors++;
          }
        }
        due += intervalMs;
      }
    }),
  );
  return { sessions: sandboxes.length, durationMs: performance.now() - started, errors, samples, lateTicks };
}

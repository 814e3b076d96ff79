import type { SandboxClient, Sandbox } from '../client/index.js';
import { runLoad, type LoadResult } from './load.js';

/** A step of the ramp passes with no error and a p95 at or under this (the bar). */
export const RAMP_P95_LIMIT_MS = 250;

export interface RampResult {
  /** Each step's session count and outcome, in order; the last may be the one that failed. */
  steps: Array<{ sessions: number; errors: number; p95Ms: number; lateTicksPercent: number; passed: boolean }>;
  /** The most sessions that passed (0 when not even the first step did). */
  maxSessions: number;
  /**
   * Why the ramp stopped: a step failed, it reached its cap, or the first step failed and
   * it went down (halving the sessions) to the first that passed, or to none.
   */
  stoppedBy: 'failure' | 'cap' | 'went-down' | 'create-refused';
  /** Why a create for the next step failed (the host's capacity, say), when it did. */
  createError?: string;
}

export function rampPassed(load: LoadResult): boolean {
  return load.errors === 0 && load.p95Ms <= RAMP_P95_LIMIT_MS;
}

/**
 * The most sessions under the load: starting from the sessions already measured (the
 * 16-session load, `first`), add `step` sessions at a time and run the load for
 * `seconds`, until a step fails or `max` is reached. Every session it created is
 * destroyed before it returns, whatever happens. When the first step fails already, it goes
 * down instead (half the sessions, then half again) to the first step that passes.
 */
export async function rampSessions(opts: {
  client: SandboxClient;
  sandboxes: Sandbox[];
  first: LoadResult;
  step: number;
  max: number;
  seconds: number;
  intervalMs: number;
  create: () => Promise<Sandbox>;
}): Promise<RampResult> {
  const steps: RampResult['steps'] = [];
  const record = (load: LoadResult): boolean => {
    const passed = rampPassed(load);
    steps.push({ sessions: load.sessions, errors: load.errors, p95Ms: load.p95Ms, lateTicksPercent: load.lateTicksPercent, passed });
    console.error(
      `bench: ramp ${load.sessions} sessions: ${load.errors} errors, p95 ${load.p95Ms.toFixed(1)} ms, ` +
        `late ticks ${load.lateTicksPercent.toFixed(1)}%: ${passed ? 'passed' : 'failed'}`,
    );
    return passed;
  };
  const added: Sandbox[] = [];
  try {
    if (!record(opts.first)) {
      // A host too busy for the first step still gets a figure: half as many, and so on.
      for (let sessions = Math.floor(opts.sandboxes.length / 2); sessions >= 1; sessions = Math.floor(sessions / 2)) {
        const ids = opts.sandboxes.slice(0, sessions).map((s) => s.id);
        if (record(await runLoad(opts.client.baseUrl, ids, opts.intervalMs, opts.seconds * 1000))) {
          return { steps, maxSessions: sessions, stoppedBy: 'went-down' };
        }
      }
      return { steps, maxSessions: 0, stoppedBy: 'went-down' };
    }
    let sessions = opts.sandboxes.length;
    while (sessions + opts.step <= opts.max) {
      sessions += opts.step;
      try {
        while (opts.sandboxes.length + added.length < sessions) {
          const sandbox = await opts.create();
          added.push(sandbox);
          await sandbox.screenshot(); // used once, like the others
        }
      } catch (err) {
        // Not the load failing: the host would not give more sessions. Report what passed.
        const createError = err instanceof Error ? err.message : String(err);
        console.error(`bench: ramp: could not create session ${opts.sandboxes.length + added.length + 1}: ${createError}`);
        return { steps, maxSessions: sessions - opts.step, stoppedBy: 'create-refused', createError };
      }
      const ids = [...opts.sandboxes, ...added].map((s) => s.id);
      const load = await runLoad(opts.client.baseUrl, ids, opts.intervalMs, opts.seconds * 1000);
      if (!record(load)) {
        const passed = steps.filter((s) => s.passed);
        return { steps, maxSessions: passed.at(-1)?.sessions ?? 0, stoppedBy: 'failure' };
      }
    }
    return { steps, maxSessions: sessions, stoppedBy: 'cap' };
  } finally {
    await Promise.allSettled(added.map((s) => s.destroy()));
  }
}

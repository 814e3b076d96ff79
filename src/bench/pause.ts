import type { SandboxClient } from '../client/index.js';
import { summarize, type Summary } from './stats.js';

/** Memory pause and resume of one 1024x768 session over the API (issue 25's goal: p50 <= 50 ms each). */
export interface PauseFigures {
  pause: Summary;
  resume: Summary;
}

/**
 * Pauses (mode memory) and resumes a fresh session n times, each timed over HTTP from the
 * request to the answer: a pause is the connection let go and the sandbox frozen, a resume
 * the sandbox thawed and a new connection and desktop attached (the next action just works).
 * Null when the runtime cannot pause in memory here.
 */
export async function measurePause(client: SandboxClient, n: number): Promise<PauseFigures | null> {
  const sandbox = await client.create({ width: 1024, height: 768 });
  try {
    await sandbox.screenshot();
    const pauses: number[] = [];
    const resumes: number[] = [];
    for (let i = 0; i < n + 1; i++) {
      let started = performance.now();
      try {
        await sandbox.pause('memory');
      } catch (err) {
        if ((err as { code?: string }).code === 'pause_mode_unavailable') return null;
        throw err;
      }
      const pauseMs = performance.now() - started;
      started = performance.now();
      await sandbox.resume();
      const resumeMs = performance.now() - started;
      // The first of each is a warm-up; a screenshot between rounds is the agent's next step.
      if (i > 0) {
        pauses.push(pauseMs);
        resumes.push(resumeMs);
      }
      await sandbox.screenshot();
    }
    return { pause: summarize(pauses), resume: summarize(resumes) };
  } finally {
    await sandbox.destroy();
  }
}

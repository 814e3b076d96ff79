import os from 'node:os';
import pino from 'pino';
import { SandboxClient } from '../client/index.js';
import { startOrchestrator } from '../orchestrator.js';
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

/** `npm run bench -- pause`: the figures alone, on an orchestrator of their own (no warm pool). */
export async function pauseAlone(config: Parameters<typeof startOrchestrator>[0], rounds: number): Promise<void> {
  const orchestrator = await startOrchestrator(config, pino({ level: 'warn' }), { buildImageIfMissing: false });
  try {
    const address = orchestrator.server.server.address();
    if (!address || typeof address === 'string') throw new Error('server has no TCP address');
    const figures = await measurePause(new SandboxClient({ baseUrl: `http://127.0.0.1:${address.port}` }), rounds);
    console.log(
      `memory pause p50 ${figures?.pause.p50.toFixed(1)} ms (p95 ${figures?.pause.p95.toFixed(1)}), resume p50 ${figures?.resume.p50.toFixed(1)} ms (p95 ${figures?.resume.p95.toFixed(1)}), goal <= 50 ms each`,
    );
    console.log(JSON.stringify({ runtime: orchestrator.manager.runtimeName, cores: os.cpus().length, ...figures }, null, 2));
  } finally {
    await orchestrator.close();
  }
}

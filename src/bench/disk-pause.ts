import os from 'node:os';
import { SandboxClient } from '../client/index.js';
import { withOwnOrchestrator, type BenchConfig } from './own-orchestrator.js';
import { summarize, type Summary } from './stats.js';

/** Pause to disk of a 1024x768 QEMU desktop (issue 25's goals: pause <= 2 s, resume to the first screenshot <= 1.5 s, state <= 200 MB). */
export interface DiskPauseFigures {
  runtime: string;
  pause: Summary;
  /** From the resume request to the first screenshot's answer. */
  resumeToScreenshot: Summary;
  /** The state file's bytes, per round. */
  stateBytes: number[];
}

/**
 * Pauses a fresh session to disk and resumes it n times, each timed over HTTP: a pause is the
 * VM stopped, its state streamed (gzip'd) into its file and its QEMU ended; a resume is a new
 * QEMU loading it, plus the first screenshot (the agent's next step). Null when the runtime
 * cannot pause to disk here.
 */
export async function measureDiskPause(client: SandboxClient, n: number): Promise<DiskPauseFigures | null> {
  const sandbox = await client.create({ width: 1024, height: 768 });
  try {
    await sandbox.screenshot();
    const pauses: number[] = [];
    const resumes: number[] = [];
    const stateBytes: number[] = [];
    let runtime = '';
    for (let i = 0; i < n; i++) {
      let started = performance.now();
      let paused;
      try {
        paused = await sandbox.pause('disk');
      } catch (err) {
        if ((err as { code?: string }).code === 'pause_mode_unavailable') return null;
        throw err;
      }
      pauses.push(performance.now() - started);
      stateBytes.push(paused.paused?.bytes ?? 0);
      runtime = paused.runtime;
      started = performance.now();
      await sandbox.resume();
      await sandbox.screenshot();
      resumes.push(performance.now() - started);
    }
    return { runtime, pause: summarize(pauses), resumeToScreenshot: summarize(resumes), stateBytes };
  } finally {
    await sandbox.destroy();
  }
}

/** `npm run bench -- disk-pause`: the pause-to-disk figures alone, `rounds` times on an orchestrator of its own. */
export async function diskPauseAlone(settings: BenchConfig, rounds: number): Promise<void> {
  await withOwnOrchestrator(settings, 'diskpause', async (client, orchestrator) => {
    const figures = await measureDiskPause(client, rounds);
    if (!figures) {
      console.log(`the ${orchestrator.manager.runtimeName} runtime cannot pause to disk here`);
      return;
    }
    const mib = figures.stateBytes.map((b) => (b / 2 ** 20).toFixed(1)).join(', ');
    console.log(
      `pause to disk p50 ${figures.pause.p50.toFixed(0)} ms (goal <= 2000), resume to the first screenshot p50 ${figures.resumeToScreenshot.p50.toFixed(0)} ms (goal <= 1500), state ${mib} MiB (goal <= 200 MB); load average ${os.loadavg()[0]?.toFixed(1)}`,
    );
    console.log(JSON.stringify({ cores: os.cpus().length, ...figures }, null, 2));
  });
}

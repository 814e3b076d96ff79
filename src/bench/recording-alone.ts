import os from 'node:os';
import pino from 'pino';
import { SandboxClient, type Sandbox } from '../client/index.js';
import { startOrchestrator } from '../orchestrator.js';
import { openDirect } from './direct.js';
import { measureRecording, type RecordingCost } from './recording.js';

type OrchestratorConfig = Parameters<typeof startOrchestrator>[0];

export interface RecordingAloneOptions {
  config: OrchestratorConfig;
  /** Screenshots per side (BENCH_N). */
  n: number;
  /** Each CPU window, recorded and not (BENCH_RECORDING_SECONDS). */
  cpuSeconds: number;
}

export interface RecordingAloneFigures {
  loadAverage: number[];
  static: RecordingCost;
  changing: RecordingCost;
}

/**
 * `npm run bench -- recording`: issue 15's recording figures alone (issue 27's goal: a
 * changing screen recorded at 5 fps for at most 8 % of a core), one 1024x768 session on an
 * orchestrator of its own, with where the CPU goes: ffmpeg, the guest's capture helper and its
 * sshd, and the rest (the orchestrator: the frames' decryption, inflating the changed
 * rectangles, copying them and writing them to ffmpeg).
 */
export async function measureRecordingAlone(opts: RecordingAloneOptions): Promise<RecordingAloneFigures> {
  const orchestrator = await startOrchestrator(opts.config, pino({ level: 'warn' }), { buildImageIfMissing: false });
  let sandbox: Sandbox | undefined;
  try {
    const address = orchestrator.server.server.address();
    if (!address || typeof address === 'string') throw new Error('server has no TCP address');
    const client = new SandboxClient({ baseUrl: `http://127.0.0.1:${address.port}` });
    sandbox = await client.create({ width: 1024, height: 768 });
    const direct = await openDirect(opts.config.stateDir, orchestrator.names, sandbox.id);
    try {
      const figures = await measureRecording({
        sandbox,
        direct,
        names: orchestrator.names,
        display: opts.config.display,
        n: opts.n,
        cpuSeconds: opts.cpuSeconds,
      });
      return { loadAverage: os.loadavg(), ...figures };
    } finally {
      direct.close();
    }
  } finally {
    await sandbox?.destroy().catch(() => undefined);
    await orchestrator.close();
  }
}

/** The figures as the bench prints them. */
export function describeRecordingAlone(f: RecordingAloneFigures): string {
  const pct = (v: number) => `${(v * 100).toFixed(1)} %`;
  const lines = [`recording at 5 fps, 1024x768 (load average ${f.loadAverage.map((l) => l.toFixed(2)).join(' ')})`];
  for (const [name, c] of [
    ['static screen', f.static],
    ['changing screen', f.changing],
  ] as const) {
    const rest = c.cpuCoreFraction - c.ffmpegCoreFraction - c.guestCoreFraction;
    lines.push(
      `  ${name}: ${pct(c.cpuCoreFraction)} of a core (goal <= 8 % on the changing one): ffmpeg ${pct(c.ffmpegCoreFraction)}, ` +
        `the guest's capture helper and sshd ${pct(c.guestCoreFraction)}, the orchestrator ${pct(rest)}; ` +
        `PNG screenshots p50 ${c.screenshotsAlone.p50.toFixed(1)} ms alone, ${c.screenshotsRecorded.p50.toFixed(1)} ms recorded`,
    );
  }
  return lines.join('\n');
}

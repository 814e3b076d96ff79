import os from 'node:os';
import pino from 'pino';
import { SandboxClient, type Sandbox } from '../client/index.js';
import { startOrchestrator } from '../orchestrator.js';
import { runLoad, type LoadResult } from './load.js';
import { rampSessions, type RampResult } from './ramp.js';

type OrchestratorConfig = Parameters<typeof startOrchestrator>[0];

export interface LoadAloneOptions {
  config: OrchestratorConfig;
  sessions: number;
  intervalMs: number;
  seconds: number;
  /** Then the ramp from those sessions (`npm run bench -- ramp`): `step` more at a time, up to `max`, `seconds` each. */
  ramp?: { step: number; max: number; seconds: number };
}

/**
 * `npm run bench -- load`: the 16-session load alone (issue 27's event-loop figure) on an
 * orchestrator of its own: the sessions made, used once, then the load's screenshots and
 * clicks while the event loop's delay is recorded (load.ts); with `ramp`, then the ramp from
 * there (ramp.ts: the most sessions with 0 errors and p95 <= 250 ms).
 */
export async function measureLoadAlone(opts: LoadAloneOptions): Promise<LoadResult & { ramp?: RampResult }> {
  const orchestrator = await startOrchestrator(opts.config, pino({ level: 'warn' }), { buildImageIfMissing: false });
  const sandboxes: Sandbox[] = [];
  try {
    const address = orchestrator.server.server.address();
    if (!address || typeof address === 'string') throw new Error('server has no TCP address');
    const client = new SandboxClient({ baseUrl: `http://127.0.0.1:${address.port}` });
    for (let i = 0; i < opts.sessions; i++) sandboxes.push(await client.create({ width: 1024, height: 768 }));
    for (const s of sandboxes) {
      await s.screenshot();
      await s.leftClick(1000, 700);
    }
    const load = await runLoad(
      client.baseUrl,
      sandboxes.map((s) => s.id),
      opts.intervalMs,
      opts.seconds * 1000,
    );
    if (!opts.ramp) return load;
    const create = () => client.create({ width: 1024, height: 768 });
    const ramp = await rampSessions({ client, sandboxes, first: load, ...opts.ramp, intervalMs: opts.intervalMs, create });
    return { ...load, ramp };
  } finally {
    await Promise.allSettled(sandboxes.map((s) => s.destroy()));
    await orchestrator.close();
  }
}

/** One line for the console. */
export function describeLoad(load: LoadResult & { ramp?: RampResult }): string {
  const ramp = load.ramp
    ? `\nramp: ${load.ramp.maxSessions} sessions with 0 errors and p95 <= 250 ms (stopped by ${load.ramp.stoppedBy}${load.ramp.createError ? `: ${load.ramp.createError}` : ''}), goal >= 64`
    : '';
  return (
    `load: ${load.sessions} sessions on ${os.cpus().length} cores, ${load.operations} operations, ${load.errors} errors, p50 ${load.p50Ms.toFixed(1)} ms, ` +
    `p95 ${load.p95Ms.toFixed(1)} ms, late ticks ${load.lateTicksPercent.toFixed(1)} %; event-loop delay p99 ${load.eventLoopP99Ms.toFixed(1)} ms ` +
    `(max ${load.eventLoopMaxMs.toFixed(1)}; between ticks of its 10 ms timer ${load.eventLoopTickP99Ms.toFixed(1)}), goal <= 10 ms${ramp}`
  );
}

import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { SandboxClient } from '../client/index.js';
import { removeTreeOnOneMount } from '../host/remove-tree.js';
import { startOrchestrator } from '../orchestrator.js';

type OrchestratorConfig = Parameters<typeof startOrchestrator>[0];
import type { TransportChoice } from '../transport/settings.js';
import { summarize, timeIt, type Summary } from './stats.js';

/** Issue 23: one transport's figures, for containers without egress (the sessions a Unix socket serves). */
export interface TransportFigures {
  transport: TransportChoice;
  /** What the session view said carried it, and its interfaces (`['lo']`: no NIC). */
  carriedBy: string;
  interfaces: string[];
  /** POST /v1/sessions to its answer (ready), cold. */
  createToReady: Summary;
  /** A mouse_move over the API, and a screenshot. */
  action: Summary;
  screenshot: Summary;
}

/**
 * Containers over TCP and over a Unix socket, side by side in one run: each on an
 * orchestrator of its own (the transport is a host setting), the same creates and actions.
 * Empty where the runtime is not the container runtime (the only one with a choice here).
 */
export async function measureTransports(base: OrchestratorConfig, creates: number, n: number): Promise<TransportFigures[]> {
  const figures: TransportFigures[] = [];
  for (const transport of ['tcp', 'unix'] as const) {
    const stateDir = await mkdtemp(path.join(os.tmpdir(), `sbx-bench-${transport}-`));
    const config: OrchestratorConfig = {
      ...base,
      stateDir,
      port: 0,
      warmPoolSize: 0,
      runtimes: { ...base.runtimes, container: { ...base.runtimes.container, transport } },
    };
    const orchestrator = await startOrchestrator(config, pino({ level: 'warn' }), { buildImageIfMissing: false });
    try {
      if (orchestrator.manager.runtimeName !== 'container') return [];
      const address = orchestrator.server.server.address();
      if (!address || typeof address === 'string') throw new Error('server has no TCP address');
      const client = new SandboxClient({ baseUrl: `http://127.0.0.1:${address.port}` });
      const createTimes: number[] = [];
      for (let i = 0; i < creates; i++) {
        const started = performance.now();
        const sandbox = await client.create({ template: 'minimal', network: { egress: false } });
        createTimes.push(performance.now() - started);
        if (i < creates - 1) await sandbox.destroy();
        else {
          const view = await sandbox.refresh();
          const action = await timeIt(n, (i) => sandbox.action({ action: 'mouse_move', coordinate: [100 + (i % 400), 200] }));
          const screenshot = await timeIt(n, () => sandbox.screenshot());
          figures.push({
            transport,
            carriedBy: view.network?.transport ?? 'unknown',
            interfaces: view.network?.interfaces ?? [],
            createToReady: summarize(createTimes),
            action: summarize(action),
            screenshot: summarize(screenshot),
          });
          await sandbox.destroy();
        }
      }
    } finally {
      await orchestrator.close();
      await removeTreeOnOneMount(stateDir);
    }
  }
  return figures;
}

export function describeTransports(figures: TransportFigures[]): string {
  if (figures.length === 0) return 'transports: not the container runtime here: no choice of transport to compare';
  return figures
    .map(
      (f) =>
        `transport ${f.transport} (carried by ${f.carriedBy}, interfaces ${f.interfaces.join(',')}): create to ready p50 ${f.createToReady.p50.toFixed(0)} ms ` +
        `(n ${f.createToReady.n}), mouse_move p50 ${f.action.p50.toFixed(2)} ms, screenshot p50 ${f.screenshot.p50.toFixed(2)} ms`,
    )
    .join('\n');
}

import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { SandboxClient } from '../client/index.js';
import { removeTreeOnOneMount } from '../host/remove-tree.js';
import { startOrchestrator } from '../orchestrator.js';

export type BenchConfig = Parameters<typeof startOrchestrator>[0];
export type Orchestrator = Awaited<ReturnType<typeof startOrchestrator>>;

/**
 * A bench part alone (`npm run bench -- <part>`): an orchestrator of its own on a fresh state
 * directory (no warm pool, any free port), a client of its API, and everything removed after.
 */
export async function withOwnOrchestrator(
  settings: BenchConfig,
  name: string,
  run: (client: SandboxClient, orchestrator: Orchestrator) => Promise<void>,
): Promise<void> {
  const stateDir = await mkdtemp(path.join(os.tmpdir(), `sbx-bench-${name}-`));
  const config = { ...settings, stateDir, port: 0, warmPoolSize: 0 };
  const orchestrator = await startOrchestrator(config, pino({ level: 'warn' }), { buildImageIfMissing: false });
  try {
    const address = orchestrator.server.server.address();
    if (!address || typeof address === 'string') throw new Error('server has no TCP address');
    await run(new SandboxClient({ baseUrl: `http://127.0.0.1:${address.port}` }), orchestrator);
  } finally {
    await orchestrator.close();
    await removeTreeOnOneMount(stateDir);
  }
}

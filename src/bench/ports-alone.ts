import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { SandboxClient, type Sandbox } from '../client/index.js';
import { removeTreeOnOneMount } from '../host/remove-tree.js';
import { startOrchestrator } from '../orchestrator.js';
import type { GuestTransport } from '../transport/index.js';
import { openDirect } from './direct.js';
import { describeGuestPorts, measureGuestPorts, type GuestPortFigures } from './guest-ports.js';
import { describeProcessStart, measureProcessStart } from './processes.js';

/** Issue 24's figures; the CDP one on a desktop session (null when the desktop template is not built or has no Chromium). */
export async function measurePortsWithDesktop(
  client: SandboxClient,
  sandbox: Sandbox,
  direct: GuestTransport,
  n: number,
  withDesktop: boolean,
): Promise<GuestPortFigures> {
  const desktop = withDesktop ? await client.create({ template: 'desktop', width: 1024, height: 768 }).catch(() => undefined) : undefined;
  try {
    const figures = await measureGuestPorts({ client, sandbox, direct, n, ...(desktop ? { desktop } : {}) });
    console.error(describeGuestPorts(figures));
    return figures;
  } finally {
    await desktop?.destroy();
  }
}

/** `npm run bench -- ports`: issue 24's figures alone (guest ports, CDP, process start), on an orchestrator of their own. */
export async function portsAlone(defaults: Parameters<typeof startOrchestrator>[0], n: number, withDesktop: boolean): Promise<void> {
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-bench-'));
  const config = {
    ...defaults,
    stateDir,
    port: 0,
    warmPoolSize: 0,
    tenantRequestsPerSecond: 10_000,
    tenantRequestBurst: 10_000,
  };
  const orchestrator = await startOrchestrator(config, pino({ level: 'warn' }), { buildImageIfMissing: false });
  const address = orchestrator.server.server.address();
  if (!address || typeof address === 'string') throw new Error('server has no TCP address');
  const client = new SandboxClient({ baseUrl: `http://127.0.0.1:${address.port}` });
  try {
    const sandbox = await client.create({ template: 'minimal', width: 1024, height: 768 });
    const direct = await openDirect(stateDir, orchestrator.names, sandbox.id);
    try {
      const figures = await measurePortsWithDesktop(client, sandbox, direct, n, withDesktop);
      const processStart = await measureProcessStart(sandbox, direct, n);
      console.error(describeProcessStart(processStart));
      console.log(JSON.stringify({ ...figures, processStart }, null, 2));
    } finally {
      direct.close();
      await sandbox.destroy();
    }
  } finally {
    await orchestrator.close();
    await removeTreeOnOneMount(stateDir);
  }
}

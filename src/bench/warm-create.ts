import { setTimeout as sleep } from 'node:timers/promises';
import type { SandboxClient } from '../client/index.js';
import type { SessionManager } from '../sessions/manager.js';

/**
 * Create-to-ready from the warm pool, over the API: the pool is grown to one sandbox, and
 * each create is timed once that sandbox is ready and no refill is booting (a refill running
 * during the create would measure the refill's boot, not the claim). Returns [] when the
 * runtime cannot have a pool (see RuntimeCapabilities.configDirIsLive).
 */
export async function measureWarmCreates(manager: SessionManager, client: SandboxClient, n: number, template?: string): Promise<number[]> {
  try {
    await manager.resizeWarmPool(1, template);
  } catch {
    return [];
  }
  const samples: number[] = [];
  try {
    for (let i = 0; i < n + 1; i++) {
      await waitForPool(manager, template);
      const started = performance.now();
      const sandbox = await client.create({ width: 1024, height: 768, ...(template ? { template } : {}) });
      const ms = performance.now() - started;
      if (i > 0) samples.push(ms); // the first is a warm-up
      await sandbox.destroy();
    }
  } finally {
    await manager.resizeWarmPool(0, template);
  }
  return samples;
}

async function waitForPool(manager: SessionManager, template: string | undefined, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const status = manager.warmPoolStatus(template);
    if (status.ready.length >= 1 && status.booting === 0) {
      // Let the guest's own start-up work (the desktop settling) finish too.
      await sleep(300);
      return;
    }
    await sleep(25);
  }
  throw new Error('the warm pool did not fill within a minute');
}

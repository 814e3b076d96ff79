import { setTimeout as sleep } from 'node:timers/promises';
import type { SandboxClient } from '../client/index.js';
import type { ResourceNames } from '../network/names.js';
import type { SessionManager } from '../sessions/manager.js';
import { measureIdleMemory } from './idle-memory.js';
import { summarize, timeIt, type Summary } from './stats.js';
import { measureWarmCreates } from './warm-create.js';

/** Issue 14's figures for one template: create-to-ready cold and from its warm pool, and an idle session's host memory. */
export interface TemplateFigures {
  template: string;
  cold: Summary;
  warm: Summary | null;
  /** Mean host memory of an idle session of this template (container runtime only). */
  idleMiB: number | null;
}

/**
 * Create-to-ready on `template` over the API, cold and from a pool of its own, then `idle`
 * sessions left idle for a few seconds after one screenshot (as between an agent's steps) and
 * measured like the main idle figure (idle-memory.ts). A template that is not built is skipped.
 */
export async function measureTemplate(opts: {
  client: SandboxClient;
  manager: SessionManager;
  names: ResourceNames;
  template: string;
  creates: number;
  idle: number;
}): Promise<TemplateFigures | undefined> {
  const { client, manager, template } = opts;
  try {
    await (await client.create({ template })).destroy(); // also the warm-up of its image's page cache
  } catch (err) {
    console.error(`bench: template ${template} skipped: ${err instanceof Error ? err.message : String(err)}`);
    return undefined;
  }
  const cold = summarize(await timeIt(opts.creates, async () => (await client.create({ template })).destroy(), 0));
  const warmSamples = await measureWarmCreates(manager, client, opts.creates, template);
  let idleMiB: number | null = null;
  if (manager.runtimeName === 'container' && opts.idle > 0) {
    const rssBefore = process.memoryUsage.rss();
    const sandboxes = [];
    try {
      for (let i = 0; i < opts.idle; i++) sandboxes.push(await client.create({ template, width: 1024, height: 768 }));
      for (const s of sandboxes) await s.screenshot();
      await sleep(5_000);
      idleMiB = (
        await measureIdleMemory(
          opts.names,
          sandboxes.map((s) => s.id),
          rssBefore,
        )
      ).perSessionMiB;
    } finally {
      await Promise.all(sandboxes.map((s) => s.destroy()));
    }
  }
  return { template, cold, warm: warmSamples.length > 0 ? summarize(warmSamples) : null, idleMiB };
}

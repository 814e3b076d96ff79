import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { openKeyStore } from '../api/auth/key-store-file.js';
import { SandboxClient } from '../client/index.js';
import { removeTreeOnOneMount } from '../host/remove-tree.js';
import { startOrchestrator } from '../orchestrator.js';
import { openDirect } from './direct.js';
import { summarize, timeIt, type Summary } from './stats.js';

type OrchestratorConfig = Parameters<typeof startOrchestrator>[0];

/** Issue 26: @e2b/desktop's own calls through our E2B surface, beside what they run and our own API. */
export interface E2bDesktopFigures {
  /** The SDK's screenshot() (scrot, then files.read) and leftClick(x, y) (two xdotool commands), through envd. */
  sdk: { screenshot: Summary; leftClick: Summary };
  /** The very same commands on a bare SSH channel of the bench's own: the SDK's cost without ours. */
  bare: { screenshot: Summary; leftClick: Summary };
  /** Our own API on the same desktop: GET .../screenshot and a left_click action. */
  api: { screenshot: Summary; leftClick: Summary };
  /** SDK minus bare, p50 (goal: at most 5 ms each). */
  addedP50Ms: { screenshot: number; leftClick: number };
}

/**
 * An orchestrator of its own (the SDK needs an API key, and the first key ends a keyless
 * server's keyless mode, which the rest of the bench relies on), one `@e2b/desktop` sandbox
 * (the `xfce` template, its X server started by the SDK), n of each call. Null when the SDK is
 * not installed (it is a dev dependency) or the xfce image is not built.
 */
export async function measureE2bDesktop(base: OrchestratorConfig, n: number): Promise<E2bDesktopFigures | null> {
  const sdk = await import('@e2b/desktop').catch(() => null);
  if (!sdk) return null;
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-bench-e2b-'));
  const store = openKeyStore(stateDir);
  const key = store.keys.create('bench').key;
  store.close();
  const orchestrator = await startOrchestrator(
    { ...base, stateDir, port: 0, warmPoolSize: 0, tenantRequestsPerSecond: 10_000, tenantRequestBurst: 10_000 },
    pino({ level: 'warn' }),
    {
      buildImageIfMissing: false,
    },
  );
  try {
    const address = orchestrator.server.server.address();
    if (!address || typeof address === 'string') throw new Error('server has no TCP address');
    const url = `http://127.0.0.1:${address.port}`;
    const desktop = await sdk.Sandbox.create({ apiUrl: url, sandboxUrl: url, apiKey: key, timeoutMs: 600_000 }).catch((err: unknown) => {
      console.error(`bench: @e2b/desktop: no sandbox (${err instanceof Error ? err.message : String(err)}); is the xfce image built?`);
      return null;
    });
    if (!desktop) return null;
    const direct = await openDirect(stateDir, orchestrator.names, desktop.sandboxId);
    const sandbox = await new SandboxClient({ baseUrl: url, apiKey: key }).connect(desktop.sandboxId);
    try {
      const at = (i: number): [number, number] => [200 + (i % 50) * 4, 300];
      const bare = (command: string) => direct.exec(`DISPLAY=:0 ${command}`, { timeoutMs: 30_000 });
      const figures = {
        sdk: {
          screenshot: summarize(await timeIt(n, () => desktop.screenshot())),
          leftClick: summarize(await timeIt(n, (i) => desktop.leftClick(...at(i)))),
        },
        bare: {
          screenshot: summarize(await timeIt(n, () => bare('scrot --pointer --overwrite /tmp/bench-shot.png && cat /tmp/bench-shot.png'))),
          leftClick: summarize(await timeIt(n, (i) => bare(`xdotool mousemove --sync ${at(i).join(' ')}`).then(() => bare('xdotool click 1')))),
        },
        api: {
          screenshot: summarize(await timeIt(n, () => sandbox.screenshot())),
          leftClick: summarize(await timeIt(n, (i) => sandbox.leftClick(...at(i)))),
        },
      };
      return {
        ...figures,
        addedP50Ms: {
          screenshot: figures.sdk.screenshot.p50 - figures.bare.screenshot.p50,
          leftClick: figures.sdk.leftClick.p50 - figures.bare.leftClick.p50,
        },
      };
    } finally {
      direct.close();
      await desktop.kill().catch(() => undefined);
    }
  } finally {
    await orchestrator.close();
    await removeTreeOnOneMount(stateDir);
  }
}

export function describeE2bDesktop(f: E2bDesktopFigures | null): string {
  if (!f) return '@e2b/desktop: not measured (the SDK or the xfce image is missing)';
  const row = (name: 'screenshot' | 'leftClick') =>
    `${name}() p50 ${f.sdk[name].p50.toFixed(1)} ms through our E2B surface, ${f.bare[name].p50.toFixed(1)} ms for the same commands on a bare channel ` +
    `(+${f.addedP50Ms[name].toFixed(1)} ms, goal <= 5), our own API ${f.api[name].p50.toFixed(1)} ms`;
  return `@e2b/desktop: ${row('screenshot')}; ${row('leftClick')}`;
}

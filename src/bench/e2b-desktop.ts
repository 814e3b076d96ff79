import { spawn } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { openKeyStore } from '../api/auth/key-store-file.js';
import { removeTreeOnOneMount } from '../host/remove-tree.js';
import { startOrchestrator } from '../orchestrator.js';
import { timeInGuest } from './baselines.js';
import { ownCpuSeconds } from './cpu.js';
import { openDirect } from './direct.js';
import { CLICK_COMMAND, type ClientPhase, type ClientSettings } from './e2b-phases.js';
import { summarize, type Summary } from './stats.js';

type OrchestratorConfig = Parameters<typeof startOrchestrator>[0];

/** A phase's latency and the orchestrator's CPU per call meanwhile (the bench's process is the orchestrator alone then). */
export interface PhaseFigures extends Summary {
  orchestratorCpuMs: number;
}

/** Issue 26: @e2b/desktop's calls through our E2B surface, beside what they run in the guest and our own API. */
export interface E2bDesktopFigures {
  /** Per SDK call: screenshot() (scrot, then files.read) and leftClick(x, y) (two xdotool commands). */
  calls: Record<
    'screenshot' | 'leftClick',
    {
      /** The SDK's call, from a client process of its own. */
      sdk: PhaseFigures;
      /** The very same commands (`bash -l -c ...`, and the file read) timed inside the guest: the SDK's own cost. */
      guest: Summary;
      /** Our own API on the same desktop, from the same client process. */
      api: PhaseFigures;
      /** SDK minus guest, p50: what our surface adds (goal: at most 5 ms). */
      addedP50Ms: number;
    }
  >;
  /** One command (`bash -l -c 'xdotool click 1'`) through each layer: where the added time goes. */
  command: { sdk: PhaseFigures; connect: PhaseFigures; processes: PhaseFigures; guest: Summary };
  /** The orchestrator's CPU while idle, in percent of a core (the desktop's capture, timers): left out of the per-call CPU. */
  idleOrchestratorCpuPercent: number;
}

/** The client process (e2b-client.ts): one JSON answer per line asked. */
class BenchClient {
  private readonly answers: AsyncIterator<string>;
  private readonly child;

  constructor(settings: ClientSettings) {
    const script = fileURLToPath(new URL('./e2b-client.js', import.meta.url));
    this.child = spawn(process.execPath, [script], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.child.on('error', () => undefined);
    this.child.stdin.on('error', () => undefined);
    this.child.stdin.write(`${JSON.stringify(settings)}\n`);
    this.answers = createInterface({ input: this.child.stdout })[Symbol.asyncIterator]();
  }

  async next<T>(): Promise<T> {
    const line = await this.answers.next();
    if (line.done === true) throw new Error('the e2b bench client ended early (its error is above)');
    return JSON.parse(line.value) as T;
  }

  async phase(name: ClientPhase, profileTo?: string): Promise<PhaseFigures> {
    const profiler = profileTo ? await startProfile() : undefined;
    const cpu = ownCpuSeconds();
    const began = performance.now();
    this.child.stdin.write(`${name}\n`);
    const { samples } = await this.next<{ samples: number[] }>();
    // Less what an idle orchestrator spends meanwhile (the desktop's capture, timers); the
    // client's two untimed warm-up calls ran on the orchestrator too.
    const busyMs = (ownCpuSeconds() - cpu) * 1000 - this.idleCpuPerMs * (performance.now() - began);
    const orchestratorCpuMs = busyMs / (samples.length + 2);
    if (profiler && profileTo) await writeFile(profileTo, JSON.stringify((await profiler.post('Profiler.stop')).profile));
    profiler?.disconnect();
    return { ...summarize(samples), orchestratorCpuMs };
  }

  /** The orchestrator's CPU per ms of wall time while nothing is asked of it. */
  idleCpuPerMs = 0;

  async measureIdle(ms: number): Promise<void> {
    const cpu = ownCpuSeconds();
    const began = performance.now();
    await sleep(ms);
    this.idleCpuPerMs = ((ownCpuSeconds() - cpu) * 1000) / (performance.now() - began);
  }

  async end(): Promise<void> {
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    if (this.child.exitCode === null) this.child.stdin.end('end\n');
    await exited;
  }
}

async function startProfile(): Promise<Session> {
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 100 });
  await session.post('Profiler.start');
  return session;
}

/**
 * An orchestrator of its own (the SDK needs an API key, and the first key ends a keyless
 * server's keyless mode, which the rest of the bench relies on), one `@e2b/desktop` sandbox
 * (the `xfce` template, its X server started by the SDK) made and driven by a client process
 * of its own, n of each call. `profilePhases`: each one's CPU profile of the orchestrator is
 * written to e2b-<phase>.cpuprofile. Null when the SDK is not installed (a dev dependency) or
 * the xfce image is not built.
 */
export async function measureE2bDesktop(base: OrchestratorConfig, n: number, profilePhases: string[] = []): Promise<E2bDesktopFigures | null> {
  if (!(await import('@e2b/desktop').catch(() => null))) return null;
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-bench-e2b-'));
  const store = openKeyStore(stateDir);
  const key = store.keys.create('bench').key;
  store.close();
  const orchestrator = await startOrchestrator(
    { ...base, stateDir, port: 0, warmPoolSize: 0, tenantRequestsPerSecond: 10_000, tenantRequestBurst: 10_000 },
    pino({ level: 'warn' }),
    { buildImageIfMissing: false },
  );
  try {
    const address = orchestrator.server.server.address();
    if (!address || typeof address === 'string') throw new Error('server has no TCP address');
    const client = new BenchClient({ url: `http://127.0.0.1:${address.port}`, apiKey: key, n });
    try {
      const made = await client.next<{ sandboxId: string }>().catch((err: unknown) => {
        console.error(`bench: @e2b/desktop: no sandbox (${err instanceof Error ? err.message : String(err)}); is the xfce image built?`);
        return null;
      });
      if (!made) return null;
      const phase = (name: ClientPhase) => client.phase(name, profilePhases.includes(name) ? `e2b-${name}.cpuprofile` : undefined);
      const direct = await openDirect(stateDir, orchestrator.names, made.sandboxId);
      await client.measureIdle(3_000);
      try {
        // In the guest, as the SDK's commands run there: its `bash -l -c`, display :0 (the X server it started).
        const sdkCommand = (command: string) => `bash -l -c "${command}"`;
        const shot = '/tmp/sbx-bench-shot.png';
        const guest = (command: string) => timeInGuest(direct, 0, command, n).then(summarize);
        // The points are clickPoint's, in bash.
        const guestClick = await guest(`{ ${sdkCommand(`xdotool mousemove --sync $((200 + i % 50 * 4)) 300`)}; ${sdkCommand(CLICK_COMMAND)}; }`);
        const screenshot = {
          sdk: await phase('sdk.screenshot'),
          guest: await guest(`{ ${sdkCommand(`scrot --pointer --overwrite ${shot}`)} && cat ${shot}; }`),
          api: await phase('api.screenshot'),
        };
        const leftClick = { sdk: await phase('sdk.leftClick'), guest: guestClick, api: await phase('api.leftClick') };
        const command = {
          sdk: await phase('sdk.run'),
          connect: await phase('connect.run'),
          processes: await phase('processes.run'),
          guest: await guest(sdkCommand(CLICK_COMMAND)),
        };
        return {
          calls: {
            screenshot: { ...screenshot, addedP50Ms: screenshot.sdk.p50 - screenshot.guest.p50 },
            leftClick: { ...leftClick, addedP50Ms: leftClick.sdk.p50 - leftClick.guest.p50 },
          },
          command,
          idleOrchestratorCpuPercent: client.idleCpuPerMs * 100,
        };
      } finally {
        direct.close();
      }
    } finally {
      await client.end();
    }
  } finally {
    await orchestrator.close();
    await removeTreeOnOneMount(stateDir);
  }
}

export function describeE2bDesktop(f: E2bDesktopFigures | null): string {
  if (!f) return '@e2b/desktop: not measured (the SDK or the xfce image is missing)';
  const ms = (x: number) => `${x.toFixed(1)} ms`;
  const cpu = (p: PhaseFigures) => `${p.orchestratorCpuMs.toFixed(1)} ms CPU`;
  const row = (name: 'screenshot' | 'leftClick') => {
    const c = f.calls[name];
    return (
      `  ${name}(): SDK p50 ${ms(c.sdk.p50)} (orchestrator ${cpu(c.sdk)}), its commands in the guest ${ms(c.guest.p50)}, ` +
      `added by our surface ${ms(c.addedP50Ms)} (goal <= 5); our own API ${ms(c.api.p50)} (${cpu(c.api)})`
    );
  };
  const { sdk, connect, processes, guest } = f.command;
  const layer = (name: string, p: PhaseFigures) => `${name} ${ms(p.p50)} (${cpu(p)})`;
  return [
    `@e2b/desktop through our E2B surface (p50; client in a process of its own; orchestrator CPU per call, less its idle ${f.idleOrchestratorCpuPercent.toFixed(1)} %):`,
    row('screenshot'),
    row('leftClick'),
    `  one command, bash -l -c '${CLICK_COMMAND}': ${layer('SDK commands.run', sdk)}, ${layer('a lean Connect client', connect)}, ` +
      `${layer('our processes API', processes)}, in the guest ${ms(guest.p50)}`,
  ].join('\n');
}

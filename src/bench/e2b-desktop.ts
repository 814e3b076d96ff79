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
import type { GuestTransport } from '../transport/index.js';
import { shellQuote } from '../transport/quote.js';
import { ownCpuSeconds } from './cpu.js';
import { openDirect } from './direct.js';
import { E2bFloorServer } from './e2b-floor-server.js';
import { CLICK_COMMAND, clickPoint, READ_FILE, type ClientPhase, type ClientSettings } from './e2b-phases.js';
import { percentile, summarize, type Summary } from './stats.js';

type OrchestratorConfig = Parameters<typeof startOrchestrator>[0];

/** A layer's latency and the orchestrator's CPU per call meanwhile (the bench's process is the orchestrator alone then). */
export interface PhaseFigures extends Summary {
  orchestratorCpuMs: number;
}

/** Summaries of a layer beside the guest's own runs of the same commands. */
interface Paired {
  /** The median over rounds of (this layer's call - the guest's run in the same round): what the layers add. */
  addedP50Ms: number;
}

/** The SDK's call against the floor's server (e2b-floor-server.ts), and what is left of "added" beyond it. */
interface Floored {
  /** The same SDK call against an envd that answers at once: the SDK's own client, with any server. */
  floor: Summary;
  /** The median over rounds of (the call - the guest's run - the floor's call): what our surface adds. */
  oursP50Ms: number;
}

/** Issue 26: @e2b/desktop's calls through our E2B surface, beside what they run in the guest and our own API. */
export interface E2bDesktopFigures {
  /** Per SDK call: screenshot() (scrot, then files.read) and leftClick(x, y) (two xdotool commands), each round interleaved. */
  calls: Record<
    'screenshot' | 'leftClick',
    {
      /** The SDK's call, from a client process of its own; addedP50Ms is the goal's figure (at most 5 ms). */
      sdk: PhaseFigures & Paired & Floored;
      /** The very same commands (`bash -l -c ...`, and the file read) timed inside the guest: the SDK's own cost. */
      guest: Summary;
      /** Our own API on the same desktop, from the same client process. */
      api: PhaseFigures;
    }
  >;
  /** The SDK's files.read of a screenshot file alone (/files over SFTP: stat, open, read), its part of screenshot(). */
  read: PhaseFigures & { bytes: number };
  /** One command (`bash -l -c 'xdotool click 1'`) through each layer, each round interleaved: where the added time goes. */
  command: { sdk: PhaseFigures & Paired & Floored; connect: PhaseFigures & Paired; processes: PhaseFigures & Paired; guest: Summary };
  /** The orchestrator's CPU while idle, in percent of a core (the desktop's capture, timers): left out of the per-call CPU. */
  idleOrchestratorCpuPercent: number;
}

/** The client process (e2b-client.ts): one call per line asked, its time answered. */
class BenchClient {
  private readonly answers: AsyncIterator<string>;
  private readonly child;
  /** The orchestrator's CPU per ms of wall time while nothing is asked of it. */
  idleCpuPerMs = 0;
  /** Orchestrator CPU (ms, less idle) summed per phase over its timed calls. */
  readonly cpuMs = new Map<ClientPhase, number>();

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

  /** One call of `name` in round i (negative: a warm-up, its CPU not counted); its time in ms. */
  async call(name: ClientPhase, i: number): Promise<number> {
    const cpu = ownCpuSeconds();
    const began = performance.now();
    this.child.stdin.write(`${name} ${Math.max(0, i)}\n`);
    const { ms } = await this.next<{ ms: number }>();
    if (i >= 0) {
      const busy = (ownCpuSeconds() - cpu) * 1000 - this.idleCpuPerMs * (performance.now() - began);
      this.cpuMs.set(name, (this.cpuMs.get(name) ?? 0) + busy);
    }
    return ms;
  }

  figures(name: ClientPhase, samples: number[]): PhaseFigures {
    return { ...summarize(samples), orchestratorCpuMs: (this.cpuMs.get(name) ?? 0) / samples.length };
  }

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

/**
 * Rounds of steps, each step once per round (2 warm-up rounds first, not kept): the layers of
 * one round run back to back, so a change of the host's load meets them alike.
 */
async function rounds<K extends string>(n: number, steps: Record<K, (i: number) => Promise<number>>): Promise<Record<K, number[]>> {
  const out = Object.fromEntries(Object.keys(steps).map((k) => [k, [] as number[]])) as Record<K, number[]>;
  for (let i = -2; i < n; i++) {
    for (const key of Object.keys(steps) as K[]) {
      const ms = await steps[key](i);
      if (i >= 0) out[key].push(ms);
    }
  }
  return out;
}

/** The median of a[i] - b[i] (- c[i]). */
function pairedP50(a: number[], b: number[], c?: number[]): number {
  return percentile(
    a.map((x, i) => x - (b[i] as number) - (c?.[i] ?? 0)),
    50,
  );
}

/** A command timed inside the guest with bash's $EPOCHREALTIME (as the SDK's process runs it there: display :0, home). */
async function inGuest(direct: GuestTransport, command: string): Promise<number> {
  const script = `export DISPLAY=:0 LANG=C.UTF-8; cd; s=$EPOCHREALTIME; ${command} >/dev/null 2>&1; e=$EPOCHREALTIME; echo "$s $e"`;
  const out = (await direct.exec(`bash -c ${shellQuote(script)}`, { timeoutMs: 60_000 })).stdout.toString().trim();
  const [s, e] = out.split(' ').map(Number);
  return ((e as number) - (s as number)) * 1000;
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
 * of its own, n rounds of each group of calls. `profileGroups` (screenshot, leftClick, read,
 * command): each one's CPU profile of the orchestrator is written to e2b-<group>.cpuprofile. Null when the SDK is not installed (a dev dependency) or
 * the xfce image is not built.
 */
export async function measureE2bDesktop(base: OrchestratorConfig, n: number, profileGroups: string[] = []): Promise<E2bDesktopFigures | null> {
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
  const floorServer = new E2bFloorServer();
  try {
    const address = orchestrator.server.server.address();
    if (!address || typeof address === 'string') throw new Error('server has no TCP address');
    const client = new BenchClient({ url: `http://127.0.0.1:${address.port}`, apiKey: key, floorUrl: await floorServer.listen() });
    try {
      const made = await client.next<{ sandboxId: string }>().catch((err: unknown) => {
        console.error(`bench: @e2b/desktop: no sandbox (${err instanceof Error ? err.message : String(err)}); is the xfce image built?`);
        return null;
      });
      if (!made) return null;
      const direct = await openDirect(stateDir, orchestrator.names, made.sandboxId);
      try {
        await client.measureIdle(3_000);
        const profile = async <K extends string>(group: string, n: number, steps: Record<K, (i: number) => Promise<number>>) => {
          const profiler = profileGroups.includes(group) ? await startProfile() : undefined;
          const out = await rounds(n, steps);
          if (profiler) await writeFile(`e2b-${group}.cpuprofile`, JSON.stringify((await profiler.post('Profiler.stop')).profile));
          profiler?.disconnect();
          return out;
        };
        // The SDK runs each command as `bash -l -c <cmd>`: so do the guest's own runs.
        const sdkCommand = (command: string) => `bash -l -c ${shellQuote(command)}`;
        const shot = '/tmp/sbx-bench-shot.png';
        const bytes = Number((await direct.exec(`DISPLAY=:0 scrot --overwrite ${READ_FILE} && stat -c %s ${READ_FILE}`)).stdout.toString().trim());
        floorServer.fileBody = Buffer.alloc(bytes);
        const s = await profile('screenshot', n, {
          sdk: (i) => client.call('sdk.screenshot', i),
          guest: () => inGuest(direct, `${sdkCommand(`scrot --pointer --overwrite ${shot}`)} && cat ${shot}`),
          api: (i) => client.call('api.screenshot', i),
          floor: (i) => client.call('floor.screenshot', i),
        });
        const c = await profile('leftClick', n, {
          sdk: (i) => client.call('sdk.leftClick', i),
          // 10 px below the SDK's point of the round: `mousemove --sync` to where the pointer already is waits for a motion that never comes.
          guest: (i) => {
            const [x, y] = clickPoint(Math.max(0, i));
            return inGuest(direct, `${sdkCommand(`xdotool mousemove --sync ${x} ${y + 10}`)}; ${sdkCommand(CLICK_COMMAND)}`);
          },
          api: (i) => client.call('api.leftClick', i),
          floor: (i) => client.call('floor.leftClick', i),
        });
        const r = await profile('read', n, { sdk: (i) => client.call('sdk.read', i) });
        const k = await profile('command', n, {
          sdk: (i) => client.call('sdk.run', i),
          connect: (i) => client.call('connect.run', i),
          processes: (i) => client.call('processes.run', i),
          guest: () => inGuest(direct, sdkCommand(CLICK_COMMAND)),
          floor: (i) => client.call('floor.run', i),
        });
        const layer = (name: ClientPhase, samples: number[], guest: number[]) => ({ ...client.figures(name, samples), addedP50Ms: pairedP50(samples, guest) });
        const sdkLayer = (name: ClientPhase, samples: number[], guest: number[], floor: number[]) => ({
          ...layer(name, samples, guest),
          floor: summarize(floor),
          oursP50Ms: pairedP50(samples, guest, floor),
        });
        return {
          calls: {
            screenshot: { sdk: sdkLayer('sdk.screenshot', s.sdk, s.guest, s.floor), guest: summarize(s.guest), api: client.figures('api.screenshot', s.api) },
            leftClick: { sdk: sdkLayer('sdk.leftClick', c.sdk, c.guest, c.floor), guest: summarize(c.guest), api: client.figures('api.leftClick', c.api) },
          },
          read: { ...client.figures('sdk.read', r.sdk), bytes },
          command: {
            sdk: sdkLayer('sdk.run', k.sdk, k.guest, k.floor),
            connect: layer('connect.run', k.connect, k.guest),
            processes: layer('processes.run', k.processes, k.guest),
            guest: summarize(k.guest),
          },
          idleOrchestratorCpuPercent: client.idleCpuPerMs * 100,
        };
      } finally {
        direct.close();
      }
    } finally {
      await client.end();
    }
  } finally {
    await floorServer.close();
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
      `added ${ms(c.sdk.addedP50Ms)}; the SDK's own client against a server that answers at once ${ms(c.sdk.floor.p50)}, ` +
      `so added by our surface ${ms(c.sdk.oursP50Ms)} (goal <= 5); our own API ${ms(c.api.p50)} (${cpu(c.api)})`
    );
  };
  const { sdk, connect, processes, guest } = f.command;
  const layer = (name: string, p: PhaseFigures & Paired) => `${name} ${ms(p.p50)} (+${ms(p.addedP50Ms)}; ${cpu(p)})`;
  return [
    '@e2b/desktop through our E2B surface (p50; client in a process of its own; each round of the layers interleaved; "added":',
    `the median of a call's time less the guest's run of its commands in the same round; orchestrator CPU per call, less its idle ${f.idleOrchestratorCpuPercent.toFixed(1)} %):`,
    row('screenshot'),
    row('leftClick'),
    `  the SDK's files.read of a ${(f.read.bytes / 1024).toFixed(0)} KiB screenshot (screenshot()'s read): ${ms(f.read.p50)} (${cpu(f.read)})`,
    `  one command, bash -l -c '${CLICK_COMMAND}': ${layer('SDK commands.run', sdk)}, ${layer('a lean Connect client', connect)}, ` +
      `${layer('our processes API', processes)}; in the guest ${ms(guest.p50)}; the SDK's against a server that answers at once ` +
      `${ms(sdk.floor.p50)}, so ours +${ms(sdk.oursP50Ms)}`,
  ].join('\n');
}

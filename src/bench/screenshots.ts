import { fork } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ScreenshotFormatOptions } from '../client/index.js';
import type { Sandbox } from '../client/index.js';
import type { ResourceNames } from '../network/names.js';
import type { GuestTransport } from '../transport/index.js';
import { timeInGuestWithCpu } from './baselines.js';
import { ownCpuSeconds, sessionProcessCpu } from './cpu.js';
import type { ScreenshotClientRequest, ScreenshotClientResult } from './screenshot-client.js';
import { summarize, type Summary } from './stats.js';

/**
 * The processes of a session that work for a screenshot besides the orchestrator: the
 * capture helper, and the sshd process that carries its channel (it encrypts every byte).
 */
const CAPTURE_PROCESSES = [/sbx-capture/, /^sshd: user@/];

export interface ScreenshotComparison {
  api: Summary;
  scrot: Summary;
  /** API p50 / scrot p50. */
  ratio: number;
  /** CPU seconds per screenshot: orchestrator process + capture helper + its sshd. */
  apiCpuSeconds: number;
  /** Of which the orchestrator process (the bench's HTTP client runs in a child process: not counted). */
  apiOrchestratorCpuSeconds: number;
  /** The bench's HTTP client's own CPU per screenshot (receiving the image), for reference. */
  clientCpuSeconds: number;
  /** CPU seconds per scrot run (its child rusage in the guest). */
  scrotCpuSeconds: number;
  cpuRatio: number;
}

export interface ComparisonTarget {
  sandbox: Sandbox;
  /** The bench's own SSH connection to the same guest (for scrot). */
  direct: GuestTransport;
  names: ResourceNames;
  display: number;
  n: number;
  /** The orchestrator's API, for the measuring client (a child process). */
  baseUrl: string;
  /** Raw or scaled, in one format: what each screenshot over the API asks for. */
  shot: { scaled: boolean; format: ScreenshotFormatOptions };
}

/** One screenshot over the API as `target` asks (in this process: for checks, not for CPU). */
export function captureOf(target: ComparisonTarget): () => Promise<Buffer> {
  return () => target.sandbox.screenshot({ scaled: target.shot.scaled, ...target.shot.format });
}

/**
 * Screenshots over the API against scrot in the guest, same screen, same moment, with the
 * CPU each costs.
 */
export async function compareScreenshots(opts: ComparisonTarget): Promise<ScreenshotComparison> {
  let own0 = 0;
  let guest0 = { seconds: 0 };
  const client = await runScreenshotClient(
    { baseUrl: opts.baseUrl, sessionId: opts.sandbox.id, ...opts.shot, n: opts.n, warmup: 2 },
    // After the warm-up (the capture helper runs before its CPU is read).
    async () => {
      own0 = ownCpuSeconds();
      guest0 = await sessionProcessCpu(opts.names, opts.sandbox.id, CAPTURE_PROCESSES);
    },
  );
  const own1 = ownCpuSeconds();
  const guest1 = await sessionProcessCpu(opts.names, opts.sandbox.id, CAPTURE_PROCESSES);
  const api = client.samples;
  const scrot = await timeInGuestWithCpu(opts.direct, opts.display, 'scrot -', opts.n);
  const orchestrator = (own1 - own0) / opts.n;
  const apiCpu = orchestrator + (guest1.seconds - guest0.seconds) / opts.n;
  const apiSummary = summarize(api);
  const scrotSummary = summarize(scrot.samples);
  return {
    api: apiSummary,
    scrot: scrotSummary,
    ratio: apiSummary.p50 / scrotSummary.p50,
    apiCpuSeconds: apiCpu,
    apiOrchestratorCpuSeconds: orchestrator,
    clientCpuSeconds: client.clientCpuSeconds / opts.n,
    scrotCpuSeconds: scrot.cpuSecondsPerRun,
    cpuRatio: apiCpu / scrot.cpuSecondsPerRun,
  };
}

/**
 * Runs the measuring client (screenshot-client.ts) in a child process; `warmedUp` runs once
 * its untimed screenshots are done, before the timed ones start.
 */
async function runScreenshotClient(request: ScreenshotClientRequest, warmedUp: () => Promise<void>): Promise<ScreenshotClientResult> {
  const child = fork(new URL('./screenshot-client.js', import.meta.url), [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  try {
    return await new Promise<ScreenshotClientResult>((resolve, reject) => {
      child.on('message', (message: 'warm' | ScreenshotClientResult) => {
        if (message === 'warm') warmedUp().then(() => child.send('go'), reject);
        else resolve(message);
      });
      child.once('error', reject);
      child.once('exit', (code) => reject(new Error(`the screenshot client exited (${code}) without a result`)));
      child.send(request);
    });
  } finally {
    if (child.exitCode === null) child.kill();
  }
}

/** compareScreenshots on the screen as it is, then while it changes every frame. */
export async function staticAndChanging(target: ComparisonTarget): Promise<{ static: ScreenshotComparison; changing: ScreenshotComparison }> {
  const staticScreen = await compareScreenshots(target);
  const stop = await startChangingScreen(target.direct, target.display, captureOf(target));
  try {
    return { static: staticScreen, changing: await compareScreenshots(target) };
  } finally {
    await stop();
  }
}

/**
 * A screen that changes every frame: an xterm printing numbered lines as fast as it can
 * (`yes | cat -n`: plain `yes` scrolls a column of identical lines, which looks static), on
 * top, started through the bench's own SSH connection. Returns a function that stops it.
 */
export async function startChangingScreen(direct: GuestTransport, display: number, capture: () => Promise<Buffer>): Promise<() => Promise<void>> {
  const title = 'sbx-bench-changing-screen';
  const started = await direct.exec(
    `export DISPLAY=:${display}; setsid xterm -T ${title} -geometry 120x50+0+0 -e sh -c 'yes | cat -n' </dev/null >/dev/null 2>&1 & echo $!; ` +
      `xdotool search --sync --onlyvisible --name '^${title}$' windowactivate --sync >/dev/null 2>&1`,
    { timeoutMs: 30_000 },
  );
  const pid = Number(started.stdout.toString('utf8').trim().split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0) throw new Error('could not start the changing screen');
  // A figure for a "changing" screen that did not change would be the static one again.
  const first = await capture();
  await sleep(50);
  if (first.equals(await capture())) console.error('bench: warning: the changing screen did not change between two captures');
  return async () => {
    await direct.exec(`kill ${pid}`, { timeoutMs: 10_000 });
  };
}

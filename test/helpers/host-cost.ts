import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readdir, readFile } from 'node:fs/promises';
import { setPriority } from 'node:os';

/** What an attack costs the host: the orchestrator's /healthz latency and CPU meanwhile (red-team tests). */

/**
 * A command run at a higher priority (a negative nice value), when this process may (root):
 * on a machine shared with other work, the orchestrator's latency and the sampler's would
 * otherwise measure who else was running (issue 21). Unchanged otherwise.
 */
export function withNice(nice: number | undefined, command: string[]): string[] {
  if (nice === undefined || process.getuid?.() !== 0) return command;
  return ['nice', '-n', String(nice), ...command];
}

/**
 * Gives every thread of a running process the nice value `nice` (Linux's nice is per thread;
 * when this process may: root). Not at spawn: what the orchestrator starts inherits it, and
 * its sandboxes (runc's children) must compete as any guest would. So: once they run.
 */
export async function raisePriority(pid: number, nice: number): Promise<void> {
  if (process.getuid?.() !== 0) return;
  for (const tid of await readdir(`/proc/${pid}/task`)) {
    try {
      setPriority(Number(tid), nice);
    } catch {
      // A thread that ended meanwhile.
    }
  }
}

export interface HealthzSample {
  /** When the request was sent (ms since the epoch, sub-ms: performance.timeOrigin + now()). */
  at: number;
  /** How long the answer took, ms. */
  ms: number;
}

/**
 * /healthz, asked one request after another (`intervalMs` apart) until stopped: when each
 * was sent and how long it took. From a process of its own, so the figure is the
 * orchestrator's, not this test's event loop (busy sending the attack meanwhile).
 */
export function healthzSampler(url: string, intervalMs = 20, options: { nice?: number } = {}): { stop(): Promise<HealthzSample[]> } {
  const script = `
    let running = true;
    process.on('SIGTERM', () => (running = false));
    (async () => {
      while (running) {
        const started = performance.now();
        const response = await fetch(${JSON.stringify(`${url}/healthz`)});
        await response.arrayBuffer();
        process.stdout.write((performance.timeOrigin + started).toFixed(3) + ' ' + (performance.now() - started).toFixed(2) + '\\n');
        await new Promise((resolve) => setTimeout(resolve, ${Number(intervalMs)}));
      }
    })();`;
  const command = withNice(options.nice, [process.execPath, '-e', script]);
  const child = spawn(command[0]!, command.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  return {
    async stop() {
      if (child.exitCode === null) {
        child.kill('SIGTERM');
        await once(child, 'exit');
      }
      // The first request pays for the sampler's own start-up (fetch's first connection in a
      // fresh process, 100 ms and more on a busy machine): not the orchestrator's latency.
      return output
        .trim()
        .split('\n')
        .filter(Boolean)
        .map((line) => {
          const [at, ms] = line.split(' ').map(Number) as [number, number];
          return { at, ms };
        })
        .slice(1);
    },
  };
}

/** /healthz latencies in ms, one request every 20 ms until stopped (see healthzSampler). */
export function sampleHealthz(url: string): { stop(): Promise<number[]> } {
  const sampler = healthzSampler(url);
  return { stop: async () => (await sampler.stop()).map((sample) => sample.ms) };
}

/** User and system CPU time a process has used, in seconds (/proc/<pid>/stat, in clock ticks of 1/100 s). */
export async function cpuSecondsOf(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which may hold spaces), from field 3 on: utime is 14, stime 15.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? NaN;
}

/**
 * The /healthz p99 beyond which an attack stalled the orchestrator: 250 ms, or ten times the
 * p99 measured just before without the attack, whichever is more. A stall detector, not a
 * cost: the attacks these tests close stalled it for seconds (a 2.5 s event-loop stall, 589 MB
 * for one request), while a tighter wall-clock bound measured the other load of a shared
 * 2-core machine as much as the attack (p99 51-220 ms at load 10-14, no attack needed). What
 * an attack costs is bounded in CPU time instead (cpuMsPerRequest).
 */
export function healthzStallLimit(control: number[]): number {
  return Math.max(250, 10 * percentile(control, 0.99));
}

/** The orchestrator's CPU per request of an attack, in ms: what it takes from the host, whatever else runs there. */
export function cpuMsPerRequest(cpuMs: number, requests: number): number {
  return cpuMs / Math.max(1, requests);
}

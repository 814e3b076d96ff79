import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';

/** What an attack costs the host: the orchestrator's /healthz latency and CPU meanwhile (red-team tests). */

/**
 * /healthz, asked one request after another until stopped: the latencies in ms. From a
 * process of its own, so the figure is the orchestrator's, not this test's event loop (busy
 * sending the attack meanwhile).
 */
export function sampleHealthz(url: string): { stop(): Promise<number[]> } {
  const script = `
    let running = true;
    process.on('SIGTERM', () => (running = false));
    (async () => {
      while (running) {
        const started = performance.now();
        const response = await fetch(${JSON.stringify(`${url}/healthz`)});
        await response.arrayBuffer();
        process.stdout.write((performance.now() - started).toFixed(2) + '\\n');
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
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
      return output.trim().split('\n').filter(Boolean).map(Number).slice(1);
    },
  };
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
 * The /healthz p99 an attack may cost the orchestrator: 50 ms, or three times the p99 measured
 * just before without the attack (the control), whichever is more. The attacks these tests
 * close stalled the orchestrator for seconds (a 2.5 s event-loop stall, 589 MB for one
 * request); a 2-core host busy with the guest's own work must not fail them, a stall still does.
 */
export function healthzP99Limit(control: number[]): number {
  return Math.max(50, 3 * percentile(control, 0.99));
}

/**
 * The screenshot comparison's HTTP client, in a child process of its own (forked by
 * screenshots.ts): the orchestrator's CPU figure (process.cpuUsage of the bench process, which
 * runs the orchestrator) then holds the orchestrator's work only, not the client's receiving
 * and parsing of the images (~2 ms of CPU per screenshot measured here: a third of the
 * orchestrator's own). The child times each request and reports its own CPU beside.
 */
import { SandboxClient, type ScreenshotFormatOptions } from '../client/index.js';

export interface ScreenshotClientRequest {
  baseUrl: string;
  sessionId: string;
  scaled: boolean;
  format: ScreenshotFormatOptions;
  n: number;
  /** Untimed screenshots first (connection set-up, the grabber's first whole frame). */
  warmup: number;
}

export interface ScreenshotClientResult {
  /** Latency of each timed screenshot, in milliseconds. */
  samples: number[];
  /** The client's own CPU seconds over the timed screenshots. */
  clientCpuSeconds: number;
}

async function run(request: ScreenshotClientRequest): Promise<ScreenshotClientResult> {
  const client = new SandboxClient({ baseUrl: request.baseUrl });
  const shot = () => client.screenshot(request.sessionId, { scaled: request.scaled, ...request.format });
  for (let i = 0; i < request.warmup; i++) await shot();
  // The parent reads its CPU now: it is told the warm-up is over, and answers when it has read.
  await handshake('warm');
  const before = process.cpuUsage();
  const samples: number[] = [];
  for (let i = 0; i < request.n; i++) {
    const start = performance.now();
    await shot();
    samples.push(performance.now() - start);
  }
  const used = process.cpuUsage(before);
  return { samples, clientCpuSeconds: (used.user + used.system) / 1e6 };
}

function handshake(message: string): Promise<void> {
  return new Promise((resolve) => {
    process.once('message', () => resolve());
    process.send?.(message);
  });
}

if (process.send) {
  process.once('message', (request: ScreenshotClientRequest) => {
    run(request).then(
      (result) => process.send?.(result, () => process.disconnect()),
      (err: unknown) => {
        console.error(`bench: screenshot client: ${err instanceof Error ? err.message : String(err)}`);
        process.exit(1);
      },
    );
  });
}

import { serverSentEvents } from '../../src/client/event-stream.js';

/** What one SSE reader of a process saw. */
export interface ProcessOutput {
  stdout: Buffer;
  stderr: Buffer;
  dropped: number;
  exit?: { exitCode: number | null; signal: string | null; reason: string; outputBytes: number };
  evicted?: string;
  /** The offset after the last output event. */
  end: number;
}

/**
 * Reads a process's SSE output until its exit (or `stopAfter` bytes, then it disconnects).
 * The data is kept as bytes, decoded from base64.
 */
export async function readProcessOutput(
  url: string,
  opts: { from?: number; stopAfter?: number; headers?: Record<string, string>; start?: unknown } = {},
): Promise<ProcessOutput> {
  const controller = new AbortController();
  // With `start`, `url` is the processes route: the process starts and is followed in one
  // request (Accept: text/event-stream), so no output comes before the reader is there.
  const response = opts.start
    ? await fetch(url, {
        method: 'POST',
        signal: controller.signal,
        headers: { ...opts.headers, 'content-type': 'application/json', accept: 'text/event-stream' },
        body: JSON.stringify(opts.start),
      })
    : await fetch(`${url}${opts.from === undefined ? '' : `?from=${opts.from}`}`, { signal: controller.signal, headers: opts.headers ?? {} });
  if (response.status !== 200) throw new Error(`output: ${response.status} ${await response.text()}`);
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  const out: ProcessOutput = { stdout: Buffer.alloc(0), stderr: Buffer.alloc(0), dropped: 0, end: opts.from ?? 0 };
  let bytes = 0;
  try {
    for await (const event of serverSentEvents(response.body)) {
      const data = JSON.parse(event.data) as Record<string, unknown>;
      if (event.event === 'output') {
        const chunk = Buffer.from(data.data as string, 'base64');
        (data.stream === 'stderr' ? stderr : stdout).push(chunk);
        bytes += chunk.length;
        out.end = (data.offset as number) + chunk.length;
        if (opts.stopAfter !== undefined && bytes >= opts.stopAfter) break;
      } else if (event.event === 'dropped') {
        out.dropped += data.bytes as number;
        out.end = data.offset as number;
      } else if (event.event === 'exit') {
        out.exit = data as unknown as ProcessOutput['exit'];
        break;
      } else if (event.event === 'evicted') {
        out.evicted = data.reason as string;
        break;
      }
    }
  } finally {
    controller.abort();
  }
  out.stdout = Buffer.concat(stdout);
  out.stderr = Buffer.concat(stderr);
  return out;
}

import type { Sandbox } from '../client/index.js';
import type { GuestConnection } from '../transport/ssh-connection.js';
import { summarize, timeIt, type Summary } from './stats.js';

export interface ProcessStartFigures {
  /** POST .../processes {argv: [echo]} to its first output byte on the SSE stream, through the SDK. */
  api: Summary;
  /** The floor: `echo` on a fresh channel of an open SSH connection of the bench's own, to its exit. */
  channel: Summary;
}

/** Issue 24: process start to first output byte (`echo`), against the same echo on a bare channel. */
export async function measureProcessStart(sandbox: Sandbox, direct: GuestConnection, n: number): Promise<ProcessStartFigures> {
  const api = await timeIt(n, async (i) => {
    const proc = await sandbox.processes.start({ argv: ['echo', `bench ${i}`] });
    for await (const event of proc.output()) if (event.type === 'stdout' || event.type === 'exit') break;
  });
  const channel = await timeIt(n, (i) => direct.exec(`echo bench ${i}`));
  return { api: summarize(api), channel: summarize(channel) };
}

export function describeProcessStart(f: ProcessStartFigures): string {
  return `process start to first output byte (echo): p50 ${f.api.p50.toFixed(1)} ms, p95 ${f.api.p95.toFixed(1)} ms; echo on a bare SSH channel p50 ${f.channel.p50.toFixed(1)} ms`;
}

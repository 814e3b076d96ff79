import type { Sandbox } from '../client/index.js';
import type { GuestTransport } from '../transport/index.js';
import { summarize, timeIt, type Summary } from './stats.js';

export interface ProcessStartFigures {
  /** One request: POST .../processes with Accept: text/event-stream (sandbox.processes.run) to its first output byte. */
  api: Summary;
  /** Two requests: POST .../processes, then GET .../output to its first output byte (start() then output()). */
  startThenOutput: Summary;
  /** The floor: `echo` on a fresh channel of an open SSH connection of the bench's own, to its exit. */
  channel: Summary;
}

/** Issue 24: process start to first output byte (`echo`), against the same echo on a bare channel. */
export async function measureProcessStart(sandbox: Sandbox, direct: GuestTransport, n: number): Promise<ProcessStartFigures> {
  const firstByte = async (events: AsyncGenerator<{ type: string }>) => {
    for await (const event of events) {
      if (event.type === 'stdout' || event.type === 'exit') {
        await events.return(undefined);
        return;
      }
    }
  };
  const api = await timeIt(n, (i) => firstByte(sandbox.processes.run({ argv: ['echo', `bench ${i}`] })));
  const twoRequests = await timeIt(n, async (i) => firstByte((await sandbox.processes.start({ argv: ['echo', `bench ${i}`] })).output()));
  const channel = await timeIt(n, (i) => direct.exec(`echo bench ${i}`));
  return { api: summarize(api), startThenOutput: summarize(twoRequests), channel: summarize(channel) };
}

export function describeProcessStart(f: ProcessStartFigures): string {
  return (
    `process start to first output byte (echo): p50 ${f.api.p50.toFixed(1)} ms, p95 ${f.api.p95.toFixed(1)} ms in one request ` +
    `(start then output: p50 ${f.startThenOutput.p50.toFixed(1)} ms); echo on a bare SSH channel p50 ${f.channel.p50.toFixed(1)} ms`
  );
}

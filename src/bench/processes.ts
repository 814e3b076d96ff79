import type { Sandbox } from '../client/index.js';
import { guestCommand, type ProcessSpec } from '../processes/process-request.js';
import { Spawner } from '../processes/spawner.js';
import type { GuestChannel, GuestTransport } from '../transport/index.js';
import { summarize, timeIt, type Summary } from './stats.js';

export interface ProcessStartFigures {
  /** One request: POST .../processes with Accept: text/event-stream (sandbox.processes.run) to its first output byte. */
  api: Summary;
  /** Two requests: POST .../processes, then GET .../output to its first output byte (start() then output()). */
  startThenOutput: Summary;
  /** The floor: `echo` on a fresh channel of an open SSH connection of the bench's own, to its exit. */
  channel: Summary;
  /**
   * The steps, on the bench's own connection (no HTTP, no orchestrator): the process layer's
   * guest side without the spawner (a channel of its own: sshd's session, the login shell, the
   * wrapper shell, then exec), to its pid line and to the first byte of `echo`; and the same
   * through a spawner (one frame on an open channel, a fork and exec in the guest).
   */
  steps: { channelPid: Summary; channelFirstByte: Summary; spawnerPid: Summary; spawnerFirstByte: Summary };
}

/** Times from now to the pid line (the first stderr bytes) and to the first stdout byte of one process's channel. */
function pidAndFirstByte(channel: GuestChannel, t0: number): Promise<{ pid: number; first: number }> {
  return new Promise((resolve, reject) => {
    let pid = 0;
    channel.stderr.on('data', () => (pid ||= performance.now() - t0));
    channel.once('data', () => {
      const first = performance.now() - t0;
      channel.close();
      resolve({ pid, first });
    });
    channel.once('close', () => reject(new Error('the process ended before it printed')));
    channel.on('error', reject);
    channel.end();
  });
}

/** Issue 24: process start to first output byte (`echo`), against the same echo on a bare channel, with the steps. */
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
  const spec = (i: number): ProcessSpec => ({ argv: ['echo', `bench ${i}`], env: [], stdin: false });
  const viaChannel = await samples(n, async (i) => {
    const t0 = performance.now();
    return pidAndFirstByte(await direct.spawn(guestCommand(spec(i), 0)), t0);
  });
  const spawner = await Spawner.start(direct);
  try {
    const viaSpawner = await samples(n, (i) => pidAndFirstByte(spawner.spawn(spec(i), 0), performance.now()));
    return {
      api: summarize(api),
      startThenOutput: summarize(twoRequests),
      channel: summarize(channel),
      steps: {
        channelPid: summarize(viaChannel.map((s) => s.pid)),
        channelFirstByte: summarize(viaChannel.map((s) => s.first)),
        spawnerPid: summarize(viaSpawner.map((s) => s.pid)),
        spawnerFirstByte: summarize(viaSpawner.map((s) => s.first)),
      },
    };
  } finally {
    spawner.close();
  }
}

async function samples<T>(n: number, op: (i: number) => Promise<T>, warmup = 2): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < n + warmup; i++) {
    const sample = await op(i);
    if (i >= warmup) out.push(sample);
  }
  return out;
}

export function describeProcessStart(f: ProcessStartFigures): string {
  const s = f.steps;
  return (
    `process start to first output byte (echo): p50 ${f.api.p50.toFixed(1)} ms, p95 ${f.api.p95.toFixed(1)} ms in one request ` +
    `(start then output: p50 ${f.startThenOutput.p50.toFixed(1)} ms); echo on a bare SSH channel p50 ${f.channel.p50.toFixed(1)} ms\n` +
    `  steps (bench's own connection, p50): a channel of its own (sshd, login shell, wrapper) to the pid ${s.channelPid.p50.toFixed(1)} ms, ` +
    `to the first byte ${s.channelFirstByte.p50.toFixed(1)} ms; the spawner to the pid ${s.spawnerPid.p50.toFixed(1)} ms, ` +
    `to the first byte ${s.spawnerFirstByte.p50.toFixed(1)} ms`
  );
}

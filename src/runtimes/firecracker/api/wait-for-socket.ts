import { stat } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FirecrackerClient } from './client.js';
import type { InstanceInfo } from './types.js';

export interface WaitForApiOptions {
  /** Give up after this long. Firecracker binds its socket within milliseconds of starting. */
  timeoutMs?: number;
  /** Pause between two attempts. */
  intervalMs?: number;
  /** Settles when the Firecracker (or jailer) process exits: waiting any longer is pointless. */
  exited?: Promise<unknown>;
}

/**
 * Waits until the process's API answers: first until its socket file exists, then until
 * `GET /` returns the instance info. The file alone is not enough: Firecracker creates it a
 * moment before it accepts connections. Bounded in time, and stops at once if the process
 * dies, so a VMM that fails at start-up is reported as such rather than as a timeout.
 */
export async function waitForApiSocket(client: FirecrackerClient, options: WaitForApiOptions = {}): Promise<InstanceInfo> {
  const timeoutMs = options.timeoutMs ?? 5_000;
  const intervalMs = options.intervalMs ?? 10;
  const deadline = Date.now() + timeoutMs;
  let exited = false;
  void options.exited?.then(
    () => (exited = true),
    () => (exited = true),
  );
  let lastProblem = 'the socket file does not exist yet';

  for (;;) {
    if (exited) throw new Error(`the Firecracker process exited before its API socket ${client.socketPath} answered`);
    const remaining = deadline - Date.now();
    if (remaining <= 0) {
      throw new Error(`the Firecracker API socket ${client.socketPath} did not answer within ${timeoutMs} ms: ${lastProblem}`);
    }
    const isSocket = await stat(client.socketPath).then(
      (s) => s.isSocket(),
      () => false,
    );
    if (isSocket) {
      try {
        return await client.getInstanceInfo({ timeoutMs: Math.min(remaining, 1_000) });
      } catch (err) {
        lastProblem = err instanceof Error ? err.message : String(err);
      }
    }
    await sleep(intervalMs);
  }
}

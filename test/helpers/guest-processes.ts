import type { GuestTransport } from '../../src/transport/index.js';
import { guestSh } from './guest.js';

/**
 * The guest's processes (pid -> command line), without the ps that lists them and its own
 * shell, and without the `sleep 1` that sandbox-init (pid 1) naps in between its checks.
 */
export async function guestProcesses(guest: GuestTransport): Promise<Map<number, string>> {
  const { text } = await guestSh(guest, 'echo $$; exec ps -eo pid=,ppid=,args=');
  const [self, ...rows] = text.trim().split('\n');
  const processes = new Map<number, string>();
  for (const row of rows) {
    const match = /^\s*(\d+)\s+(\d+)\s+(.*)$/.exec(row);
    if (!match) continue;
    const [pidText, ppid, args] = [match[1] as string, match[2] as string, match[3] as string];
    if (Number(pidText) === Number(self)) continue;
    if (Number(ppid) === 1 && args === 'sleep 1') continue;
    processes.set(Number(pidText), args);
  }
  return processes;
}

export function newProcesses(before: Map<number, string>, after: Map<number, string>): string[] {
  return [...after].filter(([pid]) => !before.has(pid)).map(([pid, args]) => `${pid} ${args}`);
}

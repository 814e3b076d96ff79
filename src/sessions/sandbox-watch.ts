import { access } from 'node:fs/promises';
import { isProcessAlive, processStartTime } from '../runtimes/container/process-watch.js';

/**
 * Watches what a live sandbox cannot do without, whatever its runtime: its top process (the
 * container's init, the VMM) and the network it is reached through (its netns and the host
 * end of its veth). The runtime's own `exited` promise reports a process that dies (with its
 * exit status); this also notices what no process exit says: a netns deleted from under a
 * running container, or a veth removed, after which the guest can never be reached again.
 */
export interface SandboxWatch {
  /** Settles with a reason once something the sandbox needs is gone. */
  readonly gone: Promise<string>;
  /** Looks now instead of at the next tick (a request that failed asks). */
  check(): Promise<string | undefined>;
  stop(): void;
}

export interface WatchedSandbox {
  pid: number;
  netns: string;
  hostVeth: string;
}

/** Each tick reads one /proc file and stats two paths: cheap for every session at once. */
export const SANDBOX_WATCH_INTERVAL_MS = 1_000;

export function watchSandbox(target: WatchedSandbox, intervalMs = SANDBOX_WATCH_INTERVAL_MS): SandboxWatch {
  const startTime = processStartTime(target.pid);
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let settle: (reason: string) => void = () => undefined;
  const gone = new Promise<string>((resolve) => (settle = resolve));

  const check = async (): Promise<string | undefined> => {
    if (!startTime || !(await isProcessAlive(target.pid, startTime))) return `its process (pid ${target.pid}) is gone`;
    if (!(await exists(`/run/netns/${target.netns}`))) return `its network namespace ${target.netns} was deleted`;
    if (!(await exists(`/sys/class/net/${target.hostVeth}`))) return `its host interface ${target.hostVeth} was deleted`;
    return undefined;
  };
  const tick = async () => {
    if (stopped) return;
    const reason = await check();
    if (stopped) return;
    if (reason) {
      settle(reason);
      return;
    }
    timer = setTimeout(() => void tick(), intervalMs);
    timer.unref();
  };
  timer = setTimeout(() => void tick(), intervalMs);
  timer.unref();
  return {
    gone,
    async check() {
      if (stopped) return undefined;
      const reason = await check();
      if (reason) settle(reason);
      return reason;
    },
    stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
  };
}

async function exists(file: string): Promise<boolean> {
  return access(file).then(
    () => true,
    () => false,
  );
}

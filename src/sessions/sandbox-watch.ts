import { access } from 'node:fs/promises';
import { isProcessAlive, processStartTime } from '../host/process-watch.js';

/**
 * Watches what a live sandbox cannot do without, whatever its runtime: its top process (the
 * container's init, the VMM) and the network it is reached through (its netns and the host
 * end of its veth). The runtime's own `exited` promise reports a process that dies (with its
 * exit status); this also notices what no process exit says: a netns deleted from under a
 * running container, or a veth removed, after which the guest can never be reached again.
 */
export interface SandboxWatch {
  /** Settles once something the sandbox needs is gone. */
  readonly gone: Promise<SandboxGone>;
  /** Looks now instead of at the next tick (a request that failed asks). */
  check(): Promise<SandboxGone | undefined>;
  stop(): void;
}

export interface SandboxGone {
  reason: string;
  /** Its process died: the runtime's own `exited` says how, better (exit status, kept log). */
  processExited: boolean;
}

export interface WatchedSandbox {
  pid: number;
  /** Absent for a sandbox without a NIC (its namespace is its own, gone with it). */
  netns?: string;
  /** Absent for a sandbox without a NIC (it has no host end to lose). */
  hostVeth?: string;
}

/** Each tick reads one /proc file and stats two paths: cheap for every session at once. */
export const SANDBOX_WATCH_INTERVAL_MS = 1_000;

export function watchSandbox(target: WatchedSandbox, intervalMs = SANDBOX_WATCH_INTERVAL_MS): SandboxWatch {
  const startTime = processStartTime(target.pid);
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let settle: (gone: SandboxGone) => void = () => undefined;
  const gone = new Promise<SandboxGone>((resolve) => (settle = resolve));

  const check = async (): Promise<SandboxGone | undefined> => {
    if (!startTime || !(await isProcessAlive(target.pid, startTime))) return { reason: `its process (pid ${target.pid}) is gone`, processExited: true };
    if (target.netns && !(await exists(`/run/netns/${target.netns}`)))
      return { reason: `its network namespace ${target.netns} was deleted`, processExited: false };
    if (target.hostVeth && !(await exists(`/sys/class/net/${target.hostVeth}`)))
      return { reason: `its host interface ${target.hostVeth} was deleted`, processExited: false };
    return undefined;
  };
  const tick = async () => {
    if (stopped) return;
    const found = await check();
    if (stopped) return;
    if (found) {
      settle(found);
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
      const found = await check();
      if (found) settle(found);
      return found;
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

/**
 * The host process of one VM (QEMU, Firecracker or its jailer): started as our child with
 * its output going to the session's console pipe (capped on disk: console-pipe.ts), watched,
 * and stopped; and, after a crash of the
 * orchestrator, found again by its command line and killed.
 */
import { spawn } from 'node:child_process';
import type { Duplex } from 'node:stream';
import { readdir, readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { isProcessAlive, processStartTime, waitForExit } from '../../host/process-watch.js';
import { withWriter, type ConsolePipe } from '../console-pipe.js';

export interface VmExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Not our child (a VMM in a pid namespace of its own): its exit status is unknown. */
  notOurChild?: boolean;
}

export interface VmProcess {
  pid: number;
  /** Settles when the process has exited, for whatever reason. */
  exited: Promise<VmExit>;
  isAlive(): boolean;
  /** True once stop() was called: an exit after that is not a crash. */
  readonly stopping: boolean;
  /** Marks the exit that follows as asked for (a graceful stop through the VM's own API). */
  markStopping(): void;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once the process is gone. Idempotent. */
  stop(graceMs?: number): Promise<void>;
}

const STOP_GRACE_MS = 3_000;
const KILL_WAIT_MS = 5_000;

/**
 * Runs `command args...` with stdout and stderr written to the session's console pipe: the
 * serial console and the VMM's own error messages end up in one capped log, in order.
 *
 * detached: the VM gets its own process group, so a Ctrl-C meant for the orchestrator does
 * not kill every VM behind its back; the orchestrator destroys them itself on SIGINT/SIGTERM.
 */
export function spawnLogged(command: string, args: readonly string[], consolePipe: ConsolePipe, name = command, fds: readonly number[] = []): VmProcess {
  return spawnWith(command, args, consolePipe, name, false, fds);
}

/**
 * As spawnLogged, and the child gets a socket of ours as its fd 3 (`stream`): a VM resumed from
 * disk reads its state from it (`-incoming fd:3`, qemu/disk-pause.ts).
 */
export function spawnLoggedWithStream(
  command: string,
  args: readonly string[],
  consolePipe: ConsolePipe,
  name = command,
  fds: readonly number[] = [],
): VmProcess & { stream: Duplex } {
  return spawnWith(command, args, consolePipe, name, true, fds) as VmProcess & { stream: Duplex };
}

function spawnWith(
  command: string,
  args: readonly string[],
  consolePipe: ConsolePipe,
  name: string,
  stream: boolean,
  fds: readonly number[],
): VmProcess & { stream?: Duplex } {
  // The child has its own copy of the write end; ours is closed once it is spawned. fd 3 is
  // the stream (or nothing), `fds` are 4, 5... (the caller closes its own copies).
  const extraStdio = stream || fds.length > 0 ? [stream ? ('pipe' as const) : ('ignore' as const), ...fds] : [];
  const child = withWriter(consolePipe, (fd) => spawn(command, args, { stdio: ['ignore', fd, fd, ...extraStdio], detached: true }));
  child.unref();
  const extra = stream ? (child.stdio[3] as Duplex | null) : null;
  // A VMM that dies while it is fed is an error of the feed, not of the orchestrator.
  extra?.on('error', () => undefined);
  const exited = new Promise<VmExit>((resolve) => {
    child.on('exit', (code, signal) => resolve({ code, signal }));
    child.on('error', () => resolve({ code: null, signal: null }));
  });
  const vm = stoppableProcess(child.pid ?? -1, exited, (signal) => child.kill(signal), name);
  return extra ? Object.assign(vm, { stream: extra }) : vm;
}

/**
 * A VmProcess over a process we can signal, child of ours or not: `exited` settles once it
 * is gone; `stop()` asks with SIGTERM and SIGKILLs it after the grace period.
 */
export function stoppableProcess(pid: number, exited: Promise<VmExit>, signal: (signal: NodeJS.Signals) => void, name: string): VmProcess {
  let alive = true;
  let stopping = false;
  let stopped: Promise<void> | undefined;
  const gone = exited.then((exit) => {
    alive = false;
    return exit;
  });
  return {
    pid,
    exited: gone,
    isAlive: () => alive,
    get stopping() {
      return stopping;
    },
    markStopping() {
      stopping = true;
    },
    stop(graceMs = STOP_GRACE_MS) {
      stopping = true;
      stopped ??= (async () => {
        if (!alive) return;
        signal('SIGTERM');
        if (await settlesWithin(gone, graceMs)) return;
        signal('SIGKILL');
        if (!(await settlesWithin(gone, KILL_WAIT_MS))) throw new Error(`${name} (pid ${pid}) is still alive after SIGKILL`);
      })();
      return stopped;
    },
  };
}

/** `ip netns exec <netns> binary argv...` (it execs the binary, so the pid is the binary's own). */
export function netnsArgv(netns: string, binary: string, argv: readonly string[]): string[] {
  return ['netns', 'exec', netns, binary, ...argv];
}

/** Runs `binary argv...` inside the network namespace `netns` (`ip netns exec` execs it, so the pid is the binary's own). */
export function spawnInNetns(netns: string, binary: string, argv: readonly string[], consolePipe: ConsolePipe, fds: readonly number[] = []): VmProcess {
  return spawnLogged('ip', netnsArgv(netns, binary, argv), consolePipe, binary, fds);
}

export async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  const timer = sleep(ms).then(() => false);
  return Promise.race([promise.then(() => true), timer]);
}

export interface VmProcessInfo {
  pid: number;
  startTime: string;
  sessionId: string;
}

/**
 * Our VM processes on the host, alive, recognised by `sessionIdOf` from their command lines:
 * after a crash of the orchestrator they are no one's children.
 */
export async function findVmProcesses(sessionIdOf: (argv: readonly string[]) => string | undefined): Promise<VmProcessInfo[]> {
  const found: VmProcessInfo[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    const argv = await readFile(`/proc/${pid}/cmdline`, 'utf8').then(
      (text) => text.split('\0'),
      () => [],
    );
    const sessionId = sessionIdOf(argv);
    const startTime = sessionId ? processStartTime(pid) : undefined;
    if (sessionId && startTime) found.push({ pid, startTime, sessionId });
  }
  return found;
}

/** Stops a VM process that is not our child (reclaim): SIGTERM, then SIGKILL. */
export async function killOrphan(info: VmProcessInfo, name: string): Promise<void> {
  if (!(await isProcessAlive(info.pid, info.startTime))) return;
  signal(info.pid, 'SIGTERM');
  if (await waitForExit(info.pid, info.startTime, STOP_GRACE_MS)) return;
  signal(info.pid, 'SIGKILL');
  if (!(await waitForExit(info.pid, info.startTime, KILL_WAIT_MS))) throw new Error(`${name} (pid ${info.pid}) is still alive after SIGKILL`);
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}

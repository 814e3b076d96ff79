/**
 * The QEMU process of one VM: started inside the session's network namespace (so that it
 * can open the TAP device there), watched as our child, and stopped.
 *
 * Stopping is SIGTERM, a short wait, then SIGKILL. A clean shutdown of the guest is not
 * attempted: microvm has no power button the guest would act on (sandbox-init has no ACPI
 * daemon), and its state is thrown away anyway (the disk is a per-session copy-on-write
 * layer). On SIGTERM QEMU stops the VM and exits at once, closing its disks properly.
 */
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { readdir, readFile, stat } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ResourceNames } from '../../network/names.js';
import { isProcessAlive, processStartTime, waitForExit } from '../container/process-watch.js';

export interface QemuExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface QemuProcess {
  pid: number;
  /** Settles when the process has exited, for whatever reason. */
  exited: Promise<QemuExit>;
  isAlive(): boolean;
  /** True once stop() was called: an exit after that is not a crash. */
  readonly stopping: boolean;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once the process is gone. Idempotent. */
  stop(graceMs?: number): Promise<void>;
}

const STOP_GRACE_MS = 3_000;
const KILL_WAIT_MS = 5_000;

/**
 * Runs `binary argv...` in the network namespace `netns` (`ip netns exec` execs it, so the
 * pid is QEMU's own). stdout and stderr are appended to `logPath`: the serial console and
 * QEMU's own error messages end up in one file, in order.
 *
 * detached: QEMU gets its own process group, so a Ctrl-C meant for the orchestrator does not
 * kill every VM behind its back; the orchestrator destroys them itself on SIGINT/SIGTERM.
 */
export function spawnInNetns(netns: string, binary: string, argv: readonly string[], logPath: string): QemuProcess {
  const log = openSync(logPath, 'a', 0o600);
  let child;
  try {
    child = spawn('ip', ['netns', 'exec', netns, binary, ...argv], { stdio: ['ignore', log, log], detached: true });
  } finally {
    closeSync(log); // the child has its own copy
  }
  child.unref();
  let alive = true;
  let stopping = false;
  const exited = new Promise<QemuExit>((resolve) => {
    child.on('exit', (code, signal) => {
      alive = false;
      resolve({ code, signal });
    });
    child.on('error', () => {
      alive = false;
      resolve({ code: null, signal: null });
    });
  });
  const pid = child.pid ?? -1;
  let stopped: Promise<void> | undefined;
  return {
    pid,
    exited,
    isAlive: () => alive,
    get stopping() {
      return stopping;
    },
    stop(graceMs = STOP_GRACE_MS) {
      stopping = true;
      stopped ??= (async () => {
        if (!alive) return;
        child.kill('SIGTERM');
        if (await settlesWithin(exited, graceMs)) return;
        child.kill('SIGKILL');
        if (!(await settlesWithin(exited, KILL_WAIT_MS))) throw new Error(`qemu (pid ${pid}) is still alive after SIGKILL`);
      })();
      return stopped;
    },
  };
}

async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  const timer = sleep(ms).then(() => false);
  return Promise.race([promise.then(() => true), timer]);
}

/** Resolves when QEMU has written its pidfile (it is up), or rejects if it exits first. */
export async function waitForPidFile(pidFile: string, vm: QemuProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!vm.isAlive()) throw new Error('qemu exited while starting');
    if (await stat(pidFile).then((s) => s.size > 0, () => false)) return;
    await sleep(20);
  }
  throw new Error(`qemu did not start within ${timeoutMs} ms`);
}

export interface QemuProcessInfo {
  pid: number;
  startTime: string;
  sessionId: string;
}

/**
 * Our QEMU processes on the host, alive, found by the `-name guest=<prefix><id>,...` option
 * in their command lines: after a crash of the orchestrator they are no one's children.
 */
export async function findQemuProcesses(names: ResourceNames): Promise<QemuProcessInfo[]> {
  const found: QemuProcessInfo[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    const argv = await readFile(`/proc/${pid}/cmdline`, 'utf8').then((text) => text.split('\0'), () => []);
    const sessionId = sessionIdOfQemu(argv, names);
    const startTime = sessionId ? processStartTime(pid) : undefined;
    if (sessionId && startTime) found.push({ pid, startTime, sessionId });
  }
  return found;
}

/** The session id of a QEMU command line of ours, or undefined for any other process. */
export function sessionIdOfQemu(argv: readonly string[], names: ResourceNames): string | undefined {
  if (!argv[0] || !/qemu-system/.test(argv[0])) return undefined;
  const at = argv.indexOf('-name');
  const value = at >= 0 ? argv[at + 1] : undefined;
  const guest = value && /^guest=([^,]+)/.exec(value)?.[1];
  return guest ? names.sessionIdOf(guest) : undefined;
}

/** Stops a QEMU process that is not our child (reclaim): SIGTERM, then SIGKILL. */
export async function killOrphan(info: QemuProcessInfo): Promise<void> {
  if (!(await isProcessAlive(info.pid, info.startTime))) return;
  signal(info.pid, 'SIGTERM');
  if (await waitForExit(info.pid, info.startTime, STOP_GRACE_MS)) return;
  signal(info.pid, 'SIGKILL');
  if (!(await waitForExit(info.pid, info.startTime, KILL_WAIT_MS))) throw new Error(`qemu (pid ${info.pid}) is still alive after SIGKILL`);
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}

import { readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { cgroupThreads, freezeCgroup, thawCgroup, type FreezerLayout } from '../../host/freezer.js';
import { processStartTime } from '../../host/process-watch.js';

/**
 * A container's processes around a criu dump and restore (docs/pause.md#containers-and-criu).
 *
 * Stopped jobs (a Ctrl+Z in a terminal, a `kill -STOP`): criu seizes a stopped task by asking
 * the kernel to move it into a trace stop, and waits for that move, which a task of a frozen
 * cgroup never makes: with one in the guest every dump hung (criu in D state in ptrace_attach)
 * until runc's timeout ended it, and the container with it. So, with the cgroup frozen (no guest
 * code runs), the dump's caller continues them (SIGCONT), records their pids in the images, and
 * after a dump that leaves the container running stops them again before the thaw: they never
 * run meanwhile.
 *
 * The restore (criu's `leave-stopped`) leaves every process stopped, so that none runs before
 * the container's namespaces have their limits again (namespace-limits.ts: a restored user
 * namespace starts with none, and its processes' inotify counts roll up into host root's, which
 * every sandbox shares); then continueRestored lets them go, but for the recorded jobs, which
 * stay stopped.
 *
 * A vfork parent (a shell's loop vforks each command) cannot be seized until its child has
 * exec'd, and criu stops the child first: freezeForDump picks a moment without one.
 */

/** criu's restore option that leaves every restored process stopped. */
export const RESTORE_STOPPED = 'leave-stopped';

/** Beside criu's images: the container's pids (as its own namespace numbers them) of the jobs stopped when it was dumped. */
const STOPPED_FILE = 'stopped-jobs.json';
/** A list of pids: anything bigger is not ours. */
const MAX_STOPPED_FILE_BYTES = 64 * 1024;

interface ContainerProcess {
  /** The host's pid. */
  pid: number;
  /** Its pid in the container's namespace (criu's numbering). */
  guestPid: number | undefined;
}

/** How often a freeze is tried again while a task waits for its vfork child (the wait is an exec long). */
const VFORK_TRIES = 20;

/**
 * Freezes the container's cgroup for a dump at a moment when none of its tasks waits for a
 * child it vforked (a shell's loop vforks each command it runs): criu stops that child before
 * its exec, and the parent, which stops only once the child has exec'd, then holds the dump
 * until criu's timeout ("Unseizable non-zombie ..., state D"). Such a wait lasts an exec, so
 * the cgroup is thawed a moment and frozen again. Returns the frozen container's scan; throws,
 * thawed, when a task still waits after every try.
 */
export async function freezeForDump(cgroup: string, layout: FreezerLayout): Promise<FrozenScan> {
  for (let attempt = 1; ; attempt++) {
    await freezeCgroup(cgroup, layout);
    let scan: FrozenScan;
    try {
      scan = await scanFrozen(await cgroupThreads(cgroup, layout));
    } catch (err) {
      await thawCgroup(cgroup, layout);
      throw err;
    }
    if (scan.inVfork.length === 0) return scan;
    await thawCgroup(cgroup, layout);
    if (attempt === VFORK_TRIES) {
      const guestPid = guestPidOf(await readFile(`/proc/${scan.inVfork[0]}/status`, 'utf8').catch(() => ''));
      throw new Error(
        `its process ${guestPid ?? '(gone)'} waits for a child it vforked, which has not started its program (criu cannot save a process then): try again`,
      );
    }
    await sleep(attempt * 5);
  }
}

/** A frozen container's threads as a dump must know them (scanFrozen). */
export interface FrozenScan {
  /** Host pids of the processes with a thread in a job-control stop. */
  stopped: number[];
  /** Host pids of the processes with a thread waiting for a child it vforked to run its program. */
  inVfork: number[];
}

/**
 * What each thread of a frozen container (`threads`: the cgroup's, freezer.ts cgroupThreads)
 * waits in, from its kernel stack: every task of a frozen cgroup reads `D` in /proc's state,
 * but its stack still says where it sleeps (a stopped one in do_signal_stop, a vfork parent at
 * the top of kernel_clone, a frozen running one in __refrigerator).
 */
export async function scanFrozen(threads: readonly number[]): Promise<FrozenScan> {
  const stopped = new Set<number>();
  const inVfork = new Set<number>();
  for (const tid of threads) {
    const stack = await readFile(`/proc/${tid}/stack`, 'utf8').catch(() => '');
    const where = /\bdo_signal_stop\b/.test(stack) ? stopped : /^\[<\w+>\] kernel_clone\b/.test(stack) ? inVfork : undefined;
    if (!where) continue;
    const tgid = /^Tgid:\s+(\d+)/m.exec(await readFile(`/proc/${tid}/status`, 'utf8').catch(() => ''))?.[1];
    if (tgid) where.add(Number(tgid));
  }
  return { stopped: [...stopped], inVfork: [...inVfork] };
}

/**
 * With the container's cgroup frozen: continues its stopped jobs (they run no code until the
 * thaw) and records them in `images`. Returns them, for stopAgain.
 */
export async function releaseStoppedJobs(stoppedPids: readonly number[], images: string): Promise<ReleasedJob[]> {
  const stopped: Array<{ pid: number; guestPid: number }> = [];
  for (const pid of stoppedPids) {
    const guestPid = guestPidOf(await readFile(`/proc/${pid}/status`, 'utf8').catch(() => ''));
    if (guestPid !== undefined) stopped.push({ pid, guestPid });
  }
  await writeFile(path.join(images, STOPPED_FILE), JSON.stringify(stopped.map((p) => p.guestPid)), { mode: 0o644 });
  const released: ReleasedJob[] = [];
  for (const job of stopped) {
    const startTime = processStartTime(job.pid);
    if (startTime && signal(job.pid, 'SIGCONT')) released.push({ pid: job.pid, startTime });
  }
  return released;
}

/** A job released for a dump: its host pid, and its start time (a pid is reused once its process is gone). */
export interface ReleasedJob {
  pid: number;
  startTime: string;
}

/**
 * The released jobs stopped again (the cgroup still frozen: none of them has run). One whose
 * process is gone meanwhile (a dump that ended the container after all) is left alone: its
 * pid may be another process's.
 */
export function stopAgain(jobs: readonly ReleasedJob[]): void {
  for (const job of jobs) if (processStartTime(job.pid) === job.startTime) signal(job.pid, 'SIGSTOP');
}

/**
 * Lets a container restored stopped run: SIGCONT to each of its processes but the jobs that
 * were stopped when it was dumped. Nothing of the guest can fork or exit meanwhile: all of it
 * is stopped. Returns how many were let go.
 */
export async function continueRestored(initPid: number, images: string): Promise<number> {
  const jobs = await recordedJobs(images);
  let continued = 0;
  for (const p of await containerProcesses(initPid)) {
    if (p.guestPid !== undefined && jobs.has(p.guestPid)) continue;
    if (signal(p.pid, 'SIGCONT')) continued++;
  }
  return continued;
}

async function recordedJobs(images: string): Promise<Set<number>> {
  const text = await readFile(path.join(images, STOPPED_FILE), 'utf8').catch(() => '[]');
  if (text.length > MAX_STOPPED_FILE_BYTES) return new Set();
  let list: unknown;
  try {
    list = JSON.parse(text);
  } catch {
    return new Set();
  }
  return new Set(Array.isArray(list) ? list.filter((n): n is number => Number.isSafeInteger(n)) : []);
}

/**
 * Every process of the container's pid namespace: the init's descendants (an orphan there is
 * the init's child), walked over each thread's children. The caller holds them still (frozen
 * or stopped), so the walk is of one moment.
 */
async function containerProcesses(initPid: number): Promise<ContainerProcess[]> {
  const found: ContainerProcess[] = [];
  const seen = new Set<number>();
  const queue = [initPid];
  for (let pid = queue.shift(); pid !== undefined; pid = queue.shift()) {
    if (seen.has(pid)) continue;
    seen.add(pid);
    const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
    if (!status) continue; // gone
    const threads = await readdir(`/proc/${pid}/task`).catch(() => [] as string[]);
    found.push({ pid, guestPid: guestPidOf(status) });
    for (const tid of threads) {
      const children = await readFile(`/proc/${pid}/task/${tid}/children`, 'utf8').catch(() => '');
      for (const child of children.split(/\s+/)) if (/^\d+$/.test(child)) queue.push(Number(child));
    }
  }
  return found;
}

/** A process's pid in the container's namespace, from its /proc status: NSpid lists ours, then the container's (the namespace runc made from ours). */
function guestPidOf(status: string): number | undefined {
  const inside = /^NSpid:\s+\d+\s+(\d+)/m.exec(status)?.[1];
  return inside === undefined ? undefined : Number(inside);
}

function signal(pid: number, name: NodeJS.Signals): boolean {
  try {
    process.kill(pid, name);
    return true;
  } catch {
    return false; // gone (killed from outside meanwhile)
  }
}

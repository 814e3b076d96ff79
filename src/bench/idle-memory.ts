import { readFile } from 'node:fs/promises';
import type { ResourceNames } from '../network/names.js';
import { cgroupPids } from './cpu.js';

export interface IdleMemory {
  sessions: number;
  /** The figure: mean container cgroup usage plus the orchestrator's RSS growth, per session. */
  perSessionMiB: number;
  /** Mean memory charged to a session's container cgroup. */
  cgroupMiB: number;
  /** The orchestrator's own RSS growth (connections, channels, buffers), per session. */
  orchestratorMiB: number;
  /** For comparison: mean PSS of a session's processes (shared pages split among sharers). */
  pssMiB: number;
  /** Where the PSS goes: mean per session by program, largest first. */
  processes: Array<{ name: string; pssMiB: number }>;
}

const MiB = 1024 * 1024;

/**
 * Host memory per idle session on the container runtime. Method: for each idle session,
 * the memory charged to its container's cgroup (cgroup v1 memory.usage_in_bytes, or v2
 * memory.current): every process in the sandbox (Xvfb, openbox, xterm, sshd, the guest
 * helpers), their tmpfs files (/tmp, /dev/shm, /run) and the page cache they brought
 * in, kernel memory included. To that is added the orchestrator's RSS growth divided by the
 * number of sessions (each session holds an SSH connection, channels and a frame buffer on
 * the host). runc leaves no process behind per container, and the overlay's upper dir is on
 * disk, so nothing else grows per session. The cgroup figure charges the page cache of the
 * shared image to the first container that read it, so averaged over many sessions it is
 * fair and slightly pessimistic (that cache is reclaimable). The PSS of the sandbox's
 * processes (shared pages split among the sessions that map them) is reported beside it.
 */
export async function measureIdleMemory(names: ResourceNames, sessionIds: string[], rssBefore: number): Promise<IdleMemory> {
  let cgroupBytes = 0;
  let pssBytes = 0;
  const byProgram = new Map<string, number>();
  for (const id of sessionIds) {
    const group = names.cgroup(id);
    cgroupBytes += await cgroupUsage(group);
    for (const pid of await cgroupPids(group)) {
      const bytes = await pss(pid);
      pssBytes += bytes;
      const name = await programName(pid);
      byProgram.set(name, (byProgram.get(name) ?? 0) + bytes);
    }
  }
  const n = Math.max(1, sessionIds.length);
  const orchestratorBytes = Math.max(0, process.memoryUsage.rss() - rssBefore) / n;
  const cgroupMiB = cgroupBytes / n / MiB;
  const orchestratorMiB = orchestratorBytes / MiB;
  const processes = [...byProgram].map(([name, bytes]) => ({ name, pssMiB: bytes / n / MiB })).sort((a, b) => b.pssMiB - a.pssMiB);
  return { sessions: sessionIds.length, perSessionMiB: cgroupMiB + orchestratorMiB, cgroupMiB, orchestratorMiB, pssMiB: pssBytes / n / MiB, processes };
}

/** A short name for a process: its program, or the helper a python3 runs, or sshd's role. */
async function programName(pid: number): Promise<string> {
  try {
    const argv = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0').filter(Boolean);
    const first = argv[0] ?? '?';
    if (first.startsWith('sshd:')) return first.includes('[listener]') ? 'sshd (listener)' : 'sshd (connection)';
    if (/python3/.test(first))
      return (
        argv
          .find((a) => a.includes('sbx-'))
          ?.split('/')
          .pop() ?? 'python3'
      );
    return first.split('/').pop() ?? first;
  } catch {
    return 'gone';
  }
}

async function cgroupUsage(group: string): Promise<number> {
  const v1 = `/sys/fs/cgroup/memory${group}/memory.usage_in_bytes`;
  const v2 = `/sys/fs/cgroup${group}/memory.current`;
  try {
    return Number((await readFile(v1, 'utf8')).trim());
  } catch {
    return Number((await readFile(v2, 'utf8')).trim());
  }
}

async function pss(pid: number): Promise<number> {
  try {
    const text = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8');
    const kb = /^Pss:\s+(\d+) kB/m.exec(text)?.[1];
    return kb ? Number(kb) * 1024 : 0;
  } catch {
    return 0; // gone meanwhile
  }
}

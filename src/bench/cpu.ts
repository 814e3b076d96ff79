import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { ResourceNames } from '../network/names.js';

/** Clock ticks per second of /proc/<pid>/stat's times (100 on every Linux we know). */
const TICKS_PER_SECOND = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

/**
 * CPU seconds (user + system) spent so far by the processes of a session's container whose
 * command line matches one of `patterns`, read from the host's /proc (runc containers'
 * processes are host processes). Processes that exit meanwhile are not counted, so measure
 * long-lived ones (the capture helper and the sshd process serving its channel).
 */
export async function sessionProcessCpu(names: ResourceNames, id: string, patterns: RegExp[]): Promise<{ seconds: number; pids: number[] }> {
  let seconds = 0;
  const pids: number[] = [];
  for (const pid of await cgroupPids(names.cgroup(id))) {
    try {
      const cmdline = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).replace(/\0/g, ' ').trim();
      if (!patterns.some((p) => p.test(cmdline))) continue;
      seconds += processCpuSeconds(await readFile(`/proc/${pid}/stat`, 'utf8'));
      pids.push(pid);
    } catch {
      // gone meanwhile
    }
  }
  return { seconds, pids };
}

/** utime + stime of a /proc/<pid>/stat line, in seconds. */
export function processCpuSeconds(stat: string): number {
  // The command name (field 2) is in parentheses and may hold spaces: count after it.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
}

/** This process's CPU seconds so far (every thread: event loop, libuv pool, sharp's). */
export function ownCpuSeconds(): number {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1e6;
}

export async function cgroupPids(group: string): Promise<number[]> {
  const v1 = `/sys/fs/cgroup/memory${group}/cgroup.procs`;
  const file = existsSync(v1) ? v1 : `/sys/fs/cgroup${group}/cgroup.procs`;
  return (await readFile(file, 'utf8')).split('\n').filter(Boolean).map(Number);
}

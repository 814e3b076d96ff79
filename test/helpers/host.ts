import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import type { ResourceNames } from '../../src/network/names.js';
import { run } from '../../src/util/exec.js';

/** What the host holds for one session: every kind of resource a sandbox takes. */
export interface HostTrace {
  netns: boolean;
  veth: boolean;
  mounts: string[];
  container: boolean;
  processes: number[];
  sessionDir: boolean;
}

export async function hostTrace(names: ResourceNames, sessionId: string, sessionDir: string): Promise<HostTrace> {
  const name = names.netns(sessionId);
  const netns = (await run(['ip', 'netns', 'list'])).stdout.split('\n').some((l) => l.split(' ')[0] === name);
  const veth = (await run(['ip', 'link', 'show', name], { allowFailure: true })).exitCode === 0;
  const mounts = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').filter((l) => l.includes(sessionDir));
  const container = existsSync(`${names.runcRoot}/${names.container(sessionId)}`);
  return { netns, veth, mounts, container, processes: await processesInNetns(name), sessionDir: existsSync(sessionDir) };
}

/** Host pids whose network namespace is the sandbox's (inode comparison, no netns needed). */
async function processesInNetns(name: string): Promise<number[]> {
  const nsPath = `/var/run/netns/${name}`;
  if (!existsSync(nsPath)) return [];
  const { stdout } = await run(['stat', '-L', '-c', '%i', nsPath]);
  const inode = stdout.trim();
  const pids: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const res = await run(['readlink', `/proc/${entry}/ns/net`], { allowFailure: true });
    if (res.stdout.trim() === `net:[${inode}]`) pids.push(Number(entry));
  }
  return pids;
}

/** The pids of all processes whose command line mentions the session (runc, its init). */
export async function processesMentioning(text: string): Promise<number[]> {
  const pids: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cmdline = (await readFile(`/proc/${entry}/cmdline`, 'utf8')).replace(/\0/g, ' ');
      if (cmdline.includes(text)) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CGROUP_ROOT } from '../../host/cgroups.js';
import { freezeCgroup, thawCgroup, type FreezerLayout } from '../../host/freezer.js';
import type { TcpEndpoint } from '../../transport/endpoint.js';
import { presentedHostKey } from '../../transport/host-key-probe.js';

/** A restored guest's sshd re-execs in a few ms; a loaded host, more. */
const RELOAD_TIMEOUT_MS = 15_000;

/**
 * A fork's guest sshd holds its source's host key in memory (OpenSSH 9.2's listener hands its
 * keys to each connection's process) and reads its key files again only when SIGHUP makes it
 * re-exec itself. The host sends that signal to the container init's children named sshd (all
 * of them the guest's own processes, whatever they are) with the cgroup frozen, so that none
 * can exit and leave its pid to a host process before the signal; then waits until the guest's
 * port presents `hostKey` (the fork's, as the session layer pins it).
 */
export async function reloadGuestSshd(initPid: number, cgroup: string, freezer: FreezerLayout, endpoint: TcpEndpoint, hostKey: Buffer): Promise<void> {
  const procs = path.join(CGROUP_ROOT, freezer === 'v1' ? 'freezer' : '', cgroup, 'cgroup.procs');
  await freezeCgroup(cgroup, freezer);
  try {
    const inside = new Set((await readFile(procs, 'utf8')).split('\n').filter(Boolean).map(Number));
    const children = (await readFile(`/proc/${initPid}/task/${initPid}/children`, 'utf8')).split(/\s+/).filter(Boolean).map(Number);
    for (const pid of children) {
      if (!inside.has(pid) || (await readFile(`/proc/${pid}/comm`, 'utf8').catch(() => '')).trim() !== 'sshd') continue;
      process.kill(pid, 'SIGHUP');
    }
  } finally {
    await thawCgroup(cgroup, freezer);
  }
  const deadline = Date.now() + RELOAD_TIMEOUT_MS;
  for (;;) {
    const presented = await presentedHostKey(endpoint.host, endpoint.port, Math.max(1_000, deadline - Date.now()));
    if (presented?.equals(hostKey)) return;
    if (Date.now() > deadline) throw new Error("the fork's guest sshd did not take its own host key (it still presents another, or none)");
    await sleep(50);
  }
}

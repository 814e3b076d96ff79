import { rm, rmdir } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import { deleteLink, deleteNetns } from '../network/netns.js';
import { unmount } from '../host/mounts.js';
import { isProcessAlive, waitForExit } from '../host/process-watch.js';
import { removeCgroupDir } from '../host/cgroups.js';
import { RESOURCE_KINDS, type ResourceKind } from '../runtimes/runtime.js';
import { run } from '../util/exec.js';
import { removeSessionDir, type CountKeptDir } from './session-dir.js';

/**
 * The ledger: each host resource a session takes is written to the store *before* it is
 * taken, by kind and by its own name:
 *   process    `<pid>@<start time>` (a recycled pid is never mistaken for it)
 *   container  `<runc root>/<container id>`
 *   mount      the mount point;   disk  a file;   jail  a directory;   cgroup  a cgroup dir
 *   netns      its name;          veth  the host's end;   key-dir  the session dir
 *   id-range   `<first host id>:<count>` (a container's user namespace; see store.leaseIdRange)
 * A crash at any moment therefore leaves a record of everything that may exist, under the
 * names it was given then: start-up reconciliation reclaims by the ledger first (even if the
 * resource prefix or another setting changed since), and by our naming prefix second.
 */

/** The order of reclaiming: processes, then what they held, then the network, then the keys. */
const ORDER = new Map(RESOURCE_KINDS.map((kind, i) => [kind, i]));

export async function reclaimRecorded(entries: ReadonlyArray<{ kind: ResourceKind; name: string }>, log: Logger, countKept?: CountKeptDir): Promise<boolean> {
  const sorted = [...entries].sort(
    (a, b) => (ORDER.get(a.kind) ?? 99) - (ORDER.get(b.kind) ?? 99) || b.name.length - a.name.length, // deeper mounts first
  );
  let complete = true;
  for (const entry of sorted) {
    try {
      await reclaim(entry.kind, entry.name, log, countKept);
    } catch (err) {
      complete = false;
      log.error({ err, kind: entry.kind, name: entry.name }, 'could not reclaim a recorded resource; remove it by hand');
    }
  }
  return complete;
}

async function reclaim(kind: ResourceKind, name: string, log: Logger, countKept?: CountKeptDir): Promise<void> {
  switch (kind) {
    case 'process': {
      const [pid, startTime] = name.split('@');
      if (!pid || !startTime || !(await isProcessAlive(Number(pid), startTime))) return;
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {
        return; // gone meanwhile
      }
      if (!(await waitForExit(Number(pid), startTime, 10_000))) throw new Error(`pid ${pid} is still alive after SIGKILL`);
      return;
    }
    case 'container': {
      const res = await run(['runc', '--root', path.dirname(name), 'delete', '--force', path.basename(name)], { allowFailure: true, timeoutMs: 15_000 });
      if (res.exitCode !== 0 && !/not exist|not found/i.test(res.stderr)) throw new Error(res.stderr.trim());
      return;
    }
    case 'mount':
      await unmount(name);
      // A mount point outside the session dir (a container's rootfs) goes with its mount.
      await rmdir(name).catch(() => undefined);
      return;
    case 'disk':
      return rm(name, { force: true });
    case 'jail':
    case 'key-dir':
      // Never through a mount: a view of the shared image left mounted (its unmount above
      // failed) keeps the directory on disk, logged and counted, rather than emptied.
      return removeSessionDir(name, log, countKept);
    case 'cgroup':
      return removeCgroupDir(name);
    case 'netns':
      return deleteNetns(name);
    case 'veth':
      return deleteLink(name);
    case 'id-range':
      // Nothing to undo on the host: the range is free once the processes and mounts that
      // used it (reclaimed before it, by the order above) are gone.
    // falls through
    case 'vm-user':
      // A lease lives in the pool's memory, gone with the process that held it; the VMM
      // that ran under it is the 'process' entry, killed above. Nothing is left to free.
      return;
  }
}

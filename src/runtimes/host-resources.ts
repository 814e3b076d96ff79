import { rm, rmdir } from 'node:fs/promises';
import { removeCgroupDir } from '../host/cgroups.js';
import { unmount } from '../host/mounts.js';
import { isProcessAlive, waitForExit } from '../host/process-watch.js';
import type { ResourceKindEntry } from './entry.js';

/**
 * The kinds of host resource more than one runtime records on the ledger, each reclaimed one
 * way whichever runtime took it. A runtime lists those it uses in its entry's `resources`
 * (by these very objects: the registry refuses two reclaimers for one kind).
 */

/** `<pid>@<start time>` (a recycled pid is never mistaken for it): a container's init or a VMM. */
export const PROCESS: ResourceKindEntry = {
  stage: 'processes',
  async reclaim(name) {
    const [pid, startTime] = name.split('@');
    if (!pid || !startTime || !(await isProcessAlive(Number(pid), startTime))) return;
    try {
      process.kill(Number(pid), 'SIGKILL');
    } catch {
      return; // gone meanwhile
    }
    if (!(await waitForExit(Number(pid), startTime, 10_000))) throw new Error(`pid ${pid} is still alive after SIGKILL`);
  },
};

/** A mount point. */
export const MOUNT: ResourceKindEntry = {
  stage: 'mounts',
  async reclaim(name) {
    await unmount(name);
    // A mount point outside the session dir (a container's rootfs) goes with its mount.
    await rmdir(name).catch(() => undefined);
  },
};

/** A file (a sandbox's disk). */
export const DISK: ResourceKindEntry = {
  stage: 'files',
  reclaim: (name) => rm(name, { force: true }),
};

/** A cgroup directory, removed once its processes are gone. */
export const CGROUP: ResourceKindEntry = {
  stage: 'cgroups',
  reclaim: (name) => removeCgroupDir(name),
};

import { rmdir } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';

// cgroup helpers shared by the VM runtimes (their jail cgroups) and the session layer's
// ledger (which removes the cgroups a crashed run left behind).

export const CGROUP_ROOT = '/sys/fs/cgroup';

/**
 * Removes one cgroup directory once its processes are gone. A cgroup emptied a moment ago
 * can still be busy for a few milliseconds, so EBUSY is retried. A missing one is fine.
 */
export async function removeCgroupDir(dir: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await rmdir(dir);
      return;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') return;
      if (code !== 'EBUSY' || attempt >= 50) throw err;
      await sleep(20);
    }
  }
}

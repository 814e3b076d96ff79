import { readdir, rmdir } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { CgroupVersion } from './jailer-args.js';

const CGROUP_ROOT = '/sys/fs/cgroup';

/**
 * The cgroup directories the jailer made for one VM: `<root>/<parent>/<id>` on cgroup v2,
 * and that path under every controller's hierarchy on v1.
 */
export async function jailCgroupDirs(version: CgroupVersion, parent: string, id: string, root = CGROUP_ROOT): Promise<string[]> {
  if (version === 2) return [path.join(root, parent, id)];
  const controllers = await readdir(root).catch(() => [] as string[]);
  return controllers.map((controller) => path.join(root, controller, parent, id));
}

/** Removes a VM's cgroups once its processes are gone (the jailer never does). Idempotent. */
export async function removeJailCgroups(version: CgroupVersion, parent: string, id: string, root = CGROUP_ROOT): Promise<void> {
  for (const dir of await jailCgroupDirs(version, parent, id, root)) await removeCgroupDir(dir);
}

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

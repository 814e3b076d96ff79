import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { CGROUP_ROOT, removeCgroupDir } from '../../../host/cgroups.js';
import type { CgroupVersion } from './jailer-args.js';

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

import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { CGROUP_ROOT, removeCgroupDir } from '../../host/cgroups.js';

/**
 * The cgroups of one VM, shared by the VM runtimes: Firecracker's jailer makes them from
 * cgroupSettings, QEMU's vm-cgroup.ts writes the same settings itself.
 */

export type CgroupVersion = 1 | 2;

export function hostCgroupVersion(): CgroupVersion {
  return existsSync('/sys/fs/cgroup/cgroup.controllers') ? 2 : 1;
}

/** Guest memory is not all a VM uses: the VMM, its device threads and page tables need room too. */
export const VMM_MEMORY_OVERHEAD_MIB = 128;

export interface VmLimits {
  /** Guest memory; the cgroup limit adds VMM_MEMORY_OVERHEAD_MIB so the VMM is not OOM-killed. */
  memoryMiB: number;
  /** CPU time as a number of whole CPUs (a CFS quota of `vcpus` x the period). */
  vcpus: number;
  /** Threads of the VMM process (VMM, API, vCPUs, I/O). */
  pidsMax?: number;
}

const CFS_PERIOD_US = 100_000;

/** `<file>=<value>` settings for `--cgroup`, in the files of the given cgroup version. */
export function cgroupSettings(version: CgroupVersion, limits: VmLimits): string[] {
  if (!Number.isInteger(limits.memoryMiB) || limits.memoryMiB < 1) throw new Error(`invalid memory limit ${limits.memoryMiB} MiB`);
  if (!(limits.vcpus > 0)) throw new Error(`invalid CPU limit ${limits.vcpus}`);
  const memoryBytes = (limits.memoryMiB + VMM_MEMORY_OVERHEAD_MIB) * 1024 * 1024;
  const quotaUs = Math.round(limits.vcpus * CFS_PERIOD_US);
  const settings =
    version === 2
      ? [`memory.max=${memoryBytes}`, `cpu.max=${quotaUs} ${CFS_PERIOD_US}`]
      : [`memory.limit_in_bytes=${memoryBytes}`, `cpu.cfs_period_us=${CFS_PERIOD_US}`, `cpu.cfs_quota_us=${quotaUs}`];
  if (limits.pidsMax !== undefined) settings.push(`pids.max=${limits.pidsMax}`);
  return settings;
}

/**
 * The cgroup directories made for one VM: `<root>/<parent>/<id>` on cgroup v2,
 * and that path under every controller's hierarchy on v1.
 */
export async function vmCgroupDirs(version: CgroupVersion, parent: string, id: string, root = CGROUP_ROOT): Promise<string[]> {
  if (version === 2) return [path.join(root, parent, id)];
  const controllers = await readdir(root).catch(() => [] as string[]);
  return controllers.map((controller) => path.join(root, controller, parent, id));
}

/** Removes a VM's cgroups once its processes are gone (the jailer never does). Idempotent. */
export async function removeVmCgroups(version: CgroupVersion, parent: string, id: string, root = CGROUP_ROOT): Promise<void> {
  for (const dir of await vmCgroupDirs(version, parent, id, root)) await removeCgroupDir(dir);
}

import { appendFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { cgroupSettings, removeVmCgroups, type CgroupVersion, type VmLimits } from './cgroups.js';
import type { RecordResource } from '../runtime.js';

const CGROUP_ROOT = '/sys/fs/cgroup';

/** The controllers a VMM's cgroup limits. */
const CONTROLLERS = ['memory', 'cpu', 'pids'] as const;

/**
 * A VMM's own cgroup with memory, CPU and pids limits, for a VMM we start ourselves (QEMU;
 * the Firecracker jailer makes its own, with the same settings: jailer-args.ts). It sits
 * under the orchestrator's parent (`<root>/<parent>/<name>` on cgroup v2, that path under
 * each controller on v1), beside the containers' and the jails', so that a crash leaves it
 * where start-up reconciliation looks (it is also recorded in the ledger).
 *
 * Made before the VMM starts, the VMM is moved in right after it is spawned (before it has
 * allocated its guest's memory: that happens once its options are parsed), and its threads
 * follow it there. Removed once the VMM is gone (a cgroup with a process in it cannot go).
 */
export class VmCgroup {
  private constructor(
    readonly version: CgroupVersion,
    readonly parent: string,
    readonly name: string,
    /** The directories made, one per controller on v1. */
    readonly dirs: readonly string[],
    private readonly root: string,
  ) {}

  /** Makes the cgroup and writes its limits; each directory is recorded before it is made. */
  static async create(
    opts: { version: CgroupVersion; parent: string; name: string; limits: VmLimits; record?: RecordResource },
    root = CGROUP_ROOT,
  ): Promise<VmCgroup> {
    const { version, parent, name, limits } = opts;
    if (!/^[a-z0-9-]{1,64}$/.test(parent) || !/^[a-z0-9-]{1,64}$/.test(name)) throw new Error(`invalid cgroup name ${parent}/${name}`);
    const settings = cgroupSettings(version, limits);
    const dirOf = (controller: string) => (version === 2 ? path.join(root, parent, name) : path.join(root, controller, parent, name));
    const dirs = [...new Set(CONTROLLERS.map(dirOf))];
    const cgroup = new VmCgroup(version, parent, name, dirs, root);
    if (version === 2) await enableControllers(root, parent);
    for (const dir of dirs) {
      opts.record?.('cgroup', dir);
      await mkdir(dir, { recursive: true });
    }
    try {
      for (const setting of settings) {
        const [file, value] = splitSetting(setting);
        await writeFile(path.join(dirOf(file.split('.')[0] as string), file), value);
      }
    } catch (err) {
      await cgroup.remove();
      throw err;
    }
    return cgroup;
  }

  /** Moves a process (with all its threads) into the cgroup. */
  async add(pid: number): Promise<void> {
    for (const dir of this.dirs) await writeFile(path.join(dir, 'cgroup.procs'), String(pid));
  }

  /** Removes it once its processes are gone; idempotent. */
  async remove(): Promise<void> {
    await removeVmCgroups(this.version, this.parent, this.name, this.root);
  }
}

function splitSetting(setting: string): [string, string] {
  const at = setting.indexOf('=');
  return [setting.slice(0, at), setting.slice(at + 1)];
}

/**
 * On cgroup v2 a child has a controller only if its parent delegates it: memory, cpu and
 * pids are switched on for the root's children and for our parent (which is made here).
 */
async function enableControllers(root: string, parent: string): Promise<void> {
  const parentDir = path.join(root, parent);
  await mkdir(parentDir, { recursive: true });
  for (const dir of [root, parentDir]) {
    const enabled = (await readFile(path.join(dir, 'cgroup.subtree_control'), 'utf8')).split(/\s+/);
    const missing = CONTROLLERS.filter((c) => !enabled.includes(c));
    if (missing.length > 0) await appendFile(path.join(dir, 'cgroup.subtree_control'), missing.map((c) => `+${c}`).join(' '));
  }
}

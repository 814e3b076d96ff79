import path from 'node:path';
import { cgroupSettings, type CgroupVersion, type VmLimits } from '../../vm/cgroups.js';
import { assertJailId } from './jail-id.js';

/** The API socket inside the chroot; the jailer's and Firecracker's documented default. */
export const JAILED_API_SOCKET = '/run/firecracker.socket';

export interface JailerOptions {
  jailerBin: string;
  /** The Firecracker binary; the jailer insists its file name contains "firecracker". */
  firecrackerBin: string;
  /** See jail-id.ts. */
  id: string;
  /** Unprivileged ids Firecracker drops to; never root, or the jail protects nothing. */
  uid: number;
  gid: number;
  chrootBaseDir: string;
  /** Name of the session's network namespace (made with `ip netns add`). */
  netnsName: string;
  cgroupVersion: CgroupVersion;
  /** Groups every VM's cgroup under one parent; the jailer's default is the exec file's name. */
  parentCgroup?: string;
  limits: VmLimits;
  /** RLIMIT_NOFILE of the VMM; the jailer's default is 2048. */
  maxOpenFiles?: number;
}

/**
 * The jailer's command line, as an argument vector (no shell): it builds the chroot, joins
 * the session's network namespace, places the process in its own cgroup with our limits,
 * drops to uid/gid and execs Firecracker with `--api-sock`.
 *
 * `--new-pid-ns`: Firecracker runs as the init of a pid namespace of its own, so it sees no
 * host process and anything it forks dies with it. The jailer then clones it, writes its
 * pid to `<jail root>/<exec name>.pid` and exits: the runtime watches that pid
 * (vmm/pid-ns-vmm.ts). Not `--daemonize`: the VMM keeps the jailer's stdout and stderr,
 * the console log file we give it.
 */
export function jailerArgv(options: JailerOptions): string[] {
  assertJailId(options.id);
  const execName = path.basename(options.firecrackerBin);
  if (!execName.includes('firecracker')) {
    throw new Error(`the jailer only runs a binary whose file name contains "firecracker"; got ${options.firecrackerBin}`);
  }
  for (const [what, file] of [
    ['jailer binary', options.jailerBin],
    ['firecracker binary', options.firecrackerBin],
    ['chroot base dir', options.chrootBaseDir],
  ] as const) {
    if (!path.isAbsolute(file)) throw new Error(`the ${what} must be an absolute path, got ${file}`);
  }
  for (const [what, value] of [
    ['uid', options.uid],
    ['gid', options.gid],
  ] as const) {
    if (!Number.isInteger(value) || value <= 0) {
      throw new Error(`the jailer ${what} must be a positive integer (not root, or the jail protects nothing); got ${value}`);
    }
  }
  if (!/^[A-Za-z0-9_.-]{1,64}$/.test(options.netnsName)) throw new Error(`invalid network namespace name "${options.netnsName}"`);

  const argv = [
    options.jailerBin,
    '--id',
    options.id,
    '--exec-file',
    options.firecrackerBin,
    '--uid',
    String(options.uid),
    '--gid',
    String(options.gid),
    '--chroot-base-dir',
    options.chrootBaseDir,
    '--netns',
    `/var/run/netns/${options.netnsName}`,
    '--cgroup-version',
    String(options.cgroupVersion),
  ];
  if (options.parentCgroup) argv.push('--parent-cgroup', options.parentCgroup);
  for (const setting of cgroupSettings(options.cgroupVersion, options.limits)) argv.push('--cgroup', setting);
  if (options.maxOpenFiles) argv.push('--resource-limit', `no-file=${options.maxOpenFiles}`);
  argv.push('--new-pid-ns');
  // Everything after `--` goes to Firecracker; the jailer adds `--id` itself.
  argv.push('--', '--api-sock', JAILED_API_SOCKET);
  return argv;
}

/** Where the jailer writes Firecracker's pid (--new-pid-ns): `<jail root>/<exec file name>.pid`. */
export function vmmPidFile(jailRootDir: string, firecrackerBin: string): string {
  return path.join(jailRootDir, `${path.basename(firecrackerBin)}.pid`);
}

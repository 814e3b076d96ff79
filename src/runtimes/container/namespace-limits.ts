import { readFile, writeFile } from 'node:fs/promises';
import type { Logger } from 'pino';
import type { ContainerSettings } from './settings.js';
import { run } from '../../util/exec.js';
import { blockIoAvailable } from './block-io.js';
import { MAX_GUEST_UIDS } from './guest-uids.js';

/**
 * Per-sandbox kernel limits that live in namespaces rather than in cgroups.
 *
 * inotify: instances and watches are counted per (user namespace, uid), and every count is
 * also charged, level by level up the user-namespace tree, to the uid that created each
 * namespace in its parent. runc runs as host root, so every sandbox's counts roll up into
 * host root's, checked against fs.inotify.max_user_{instances,watches}; a new user
 * namespace's own limits start at "unlimited". So a uid range of its own is not enough: each
 * sandbox's namespace gets its own limits here (written from inside it: the user.* sysctls
 * are per user namespace, and host root holds CAP_SYS_RESOURCE over its children), and the
 * host's limits are raised to cover every sandbox at its limit (raiseHostInotifyLimits).
 */
export async function limitUserNamespace(initPid: number, settings: ContainerSettings): Promise<void> {
  await run(['nsenter', `--target=${initPid}`, '--user', '--', 'sysctl', '-q', '-w', ...userNamespaceSysctls(settings)]);
}

type InotifyLimits = Pick<ContainerSettings, 'inotifyInstances' | 'inotifyWatches'>;

function userNamespaceSysctls(settings: InotifyLimits, factor = 1): string[] {
  return [
    `user.max_inotify_instances=${settings.inotifyInstances * factor}`,
    `user.max_inotify_watches=${settings.inotifyWatches * factor}`,
    // The profile already refuses new namespaces; this holds even if a rule were lifted.
    'user.max_user_namespaces=0',
  ];
}

/**
 * The same limits as an OCI createRuntime hook, for a container whose namespaces runc (or criu
 * through it) makes while the host cannot step in: a restore, where runc runs it once criu has
 * made the user namespace and before it remakes a single file descriptor; and a template's build
 * step (`runc run`). criu remakes every
 * inotify instance and watch it restores as the guest's root, so there the limits are
 * `factor` times a uid's (every uid's count at the dump, at most: MAX_GUEST_UIDS); a guest
 * holding more is not restored. The hook reads the namespace's pid from the state runc gives
 * it on stdin; its script holds nothing but our own numbers.
 */
export function userNamespaceHook(settings: InotifyLimits, factor: number): { path: string; args: string[]; env: string[]; timeout: number } {
  const sysctls = userNamespaceSysctls(settings, factor).join(' ');
  const script = `pid=$(sed -n 's/.*"pid":\\([0-9][0-9]*\\).*/\\1/p' | head -n 1); [ -n "$pid" ] || exit 1; exec nsenter --target="$pid" --user -- sysctl -q -w ${sysctls}`;
  return { path: '/bin/sh', args: ['sh', '-c', script], env: ['PATH=/usr/sbin:/usr/bin:/sbin:/bin'], timeout: 10 };
}

/**
 * Ports from 22 up are bindable without CAP_NET_BIND_SERVICE in the sandbox's network
 * namespace (only there): its guest programs, the desktop user's too, may serve on the ports
 * a user expects (guest ports, docs/api.md), and sshd needs no privilege for port 22.
 */
export async function allowSshPort(netnsPath: string): Promise<void> {
  await run(['nsenter', `--net=${netnsPath}`, '--', 'sysctl', '-q', '-w', 'net.ipv4.ip_unprivileged_port_start=22']);
}

const HOST_INOTIFY = {
  instances: '/proc/sys/fs/inotify/max_user_instances',
  watches: '/proc/sys/fs/inotify/max_user_watches',
};
/** Left over for the host's own root processes (systemd, udev, the orchestrator) at their limit. */
const HEADROOM = { instances: 1024, watches: 262_144 };

/**
 * The most a sandbox can hold, in uids' limits: each uid it may take (guest-uids.ts) at its
 * limit, and its root once more with what a restore charged to it (userNamespaceHook).
 */
export const SANDBOX_INOTIFY_FACTOR = 2 * MAX_GUEST_UIDS;

/**
 * Raises (never lowers) host root's inotify limits so that `sandboxes` sandboxes each at the
 * most it can hold still leave the headroom to the host: a sandbox meets its own limits first.
 * (Instances and watches are kernel memory charged to the memory cgroup of the sandbox that
 * makes them: a high host limit costs nothing until a sandbox spends its own memory on it.)
 */
export async function raiseHostInotifyLimits(sandboxes: number, settings: ContainerSettings, log: Logger): Promise<void> {
  const wanted = {
    instances: sandboxes * SANDBOX_INOTIFY_FACTOR * settings.inotifyInstances + HEADROOM.instances,
    watches: sandboxes * SANDBOX_INOTIFY_FACTOR * settings.inotifyWatches + HEADROOM.watches,
  };
  for (const key of ['instances', 'watches'] as const) {
    const current = Number((await readFile(HOST_INOTIFY[key], 'utf8')).trim());
    if (current >= wanted[key]) {
      log.info({ sysctl: HOST_INOTIFY[key], value: current, needed: wanted[key] }, 'host inotify limit already covers every sandbox');
      continue;
    }
    await writeFile(HOST_INOTIFY[key], `${wanted[key]}\n`);
    log.warn(
      {
        sysctl: HOST_INOTIFY[key],
        from: current,
        to: wanted[key],
        sandboxes,
        perSandbox: SANDBOX_INOTIFY_FACTOR * (key === 'instances' ? settings.inotifyInstances : settings.inotifyWatches),
      },
      'raised the host inotify limit so that each sandbox meets its own limit first',
    );
  }
}

/** The limits every container sandbox gets, said in the start-up log (and why there is no I/O limit, where there is none). */
export function logSandboxLimits(settings: ContainerSettings, uidBase: number, log: Logger): void {
  const io = blockIoAvailable();
  if (io !== true) log.warn({ reason: io }, 'no I/O limit for container sandboxes: the host has no usable io/blkio cgroup controller');
  else if (settings.ioBytesPerSecond === 0 && settings.ioOpsPerSecond === 0) log.info('no I/O limit for container sandboxes (SBX_IO_BPS=0, SBX_IO_IOPS=0)');
  const { cpus, ioBytesPerSecond, ioOpsPerSecond, idLeaseDir } = settings;
  log.info({ cpus, ioBytesPerSecond, ioOpsPerSecond, uidBase, idLeaseDir }, 'container sandboxes: a user namespace and host id range each, CPU quota, no swap');
}

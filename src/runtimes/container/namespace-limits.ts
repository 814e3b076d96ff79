import { readFile, writeFile } from 'node:fs/promises';
import type { Logger } from 'pino';
import type { ContainerSettings } from './settings.js';
import { run } from '../../util/exec.js';
import { blockIoAvailable } from './block-io.js';

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
  await run([
    'nsenter',
    `--target=${initPid}`,
    '--user',
    '--',
    'sysctl',
    '-q',
    '-w',
    `user.max_inotify_instances=${settings.inotifyInstances}`,
    `user.max_inotify_watches=${settings.inotifyWatches}`,
    // The profile already refuses new namespaces; this holds even if a rule were lifted.
    'user.max_user_namespaces=0',
  ]);
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
 * Raises (never lowers) host root's inotify limits so that `sandboxes` sandboxes each at its
 * own limit still leave the headroom to the host: a sandbox meets its own limit first.
 */
export async function raiseHostInotifyLimits(sandboxes: number, settings: ContainerSettings, log: Logger): Promise<void> {
  const wanted = {
    instances: sandboxes * settings.inotifyInstances + HEADROOM.instances,
    watches: sandboxes * settings.inotifyWatches + HEADROOM.watches,
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
        perSandbox: key === 'instances' ? settings.inotifyInstances : settings.inotifyWatches,
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

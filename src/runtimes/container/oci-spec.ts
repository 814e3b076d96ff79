import type { ContainerSettings } from './settings.js';
import { CONFIG_MOUNT, GUEST_INIT } from '../../guest/contract.js';
import type { SandboxSpec } from '../runtime.js';
import type { IdRange } from './idmapped-mount.js';
import { seccompProfile } from './seccomp.js';

/**
 * What sshd (privilege separation: setuid, setgid, chroot, chown of the pty), the init
 * (setpriv to the desktop user, kill) and Xvfb need; everything else is dropped. No
 * CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_NET_RAW, CAP_MKNOD, CAP_SYS_PTRACE.
 */
export const GUEST_CAPABILITIES = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_FOWNER',
  'CAP_KILL',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_NET_BIND_SERVICE',
  'CAP_SYS_CHROOT',
  'CAP_AUDIT_WRITE',
];

/**
 * The kernel's file systems a confined process sees: its own /proc, a /dev of its own (runc adds
 * only the harmless default devices: null, zero, full, random, urandom, tty), an empty /sys.
 * Shared by the sandboxes and the template builds' containers (templates/build-container.ts).
 */
export const KERNEL_MOUNTS: ReadonlyArray<Record<string, unknown>> = [
  { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
  { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
  { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620', 'gid=5'] },
  { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=268435456'] },
  { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
  // A sysfs, or a bind of the host's /sys, would show the host's devices: the guest gets an
  // empty, read-only /sys (its desktop needs none).
  { destination: '/sys', type: 'tmpfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro', 'mode=555', 'size=4k'] },
];

/** Kernel interfaces hidden from a confined process (as Docker does). */
export const MASKED_PATHS: readonly string[] = [
  '/proc/acpi',
  '/proc/asound',
  '/proc/kcore',
  '/proc/keys',
  '/proc/latency_stats',
  '/proc/timer_list',
  '/proc/timer_stats',
  '/proc/sched_debug',
  '/proc/scsi',
  '/sys/firmware',
  '/sys/devices/virtual/powercap',
];
/** Kernel interfaces a confined process may read but never write (the host's sysctls among them). */
export const READONLY_PATHS: readonly string[] = ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'];

/** Where the container's pieces are on the host, as container-runtime.ts prepared them. */
export interface ContainerLayout {
  /** The overlay mount: the guest's /. */
  rootfs: string;
  /** The session's config dir as the guest must see it (an idmapped view: host root is guest root). */
  configView: string;
  cgroupsPath: string;
  /** The host ids of the guest's ids 0.. (its user namespace). */
  ids: IdRange;
  /** Volumes: their idmapped views on the host and where the guest sees them (volume-mounts.ts). */
  volumes?: ReadonlyArray<{ view: string; path: string; readOnly: boolean }>;
  /** The uids its processes may take (guest-uids.ts). */
  guestUids: readonly number[];
  /** major:minor of the sandbox's disk (its loop device), for the I/O limit. */
  disk?: { major: number; minor: number };
}

/** CFS period: quota is CPUs times this. */
const CPU_PERIOD_US = 100_000;

/** The runtime-spec (OCI 1.0) config.json of one sandbox container. */
export function ociSpec(spec: SandboxSpec, layout: ContainerLayout, settings: ContainerSettings): Record<string, unknown> {
  const caps = GUEST_CAPABILITIES;
  const memory = spec.memoryMiB * 1024 * 1024;
  const idMap = [{ containerID: 0, hostID: layout.ids.first, size: layout.ids.size }];
  const throttle = (rate: number) => (layout.disk && rate > 0 ? [{ ...layout.disk, rate }] : undefined);
  return {
    ociVersion: '1.0.2',
    root: { path: layout.rootfs, readonly: false },
    hostname: spec.hostname,
    process: {
      terminal: false,
      user: { uid: 0, gid: 0 },
      args: [GUEST_INIT],
      env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'container=sbx'],
      cwd: '/',
      capabilities: { bounding: caps, effective: caps, permitted: caps },
      // Within the host's own hard limit (raising it would need CAP_SYS_RESOURCE).
      rlimits: [{ type: 'RLIMIT_NOFILE', hard: 4096, soft: 4096 }],
      noNewPrivileges: true,
      oomScoreAdj: 500,
    },
    mounts: [
      ...KERNEL_MOUNTS,
      { destination: '/run', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=755', 'size=65536k'] },
      { destination: '/tmp', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=1777', 'size=536870912'] },
      { destination: CONFIG_MOUNT, type: 'bind', source: layout.configView, options: ['rbind', 'ro', 'nosuid', 'nodev', 'noexec'] },
      ...(layout.volumes ?? []).map((v) => ({
        destination: v.path,
        type: 'bind',
        source: v.view,
        options: ['rbind', v.readOnly ? 'ro' : 'rw', 'nosuid', 'nodev'],
      })),
    ],
    linux: {
      namespaces: [
        { type: 'pid' },
        // A namespace of its own, owned by its user namespace: with a NIC, the host moves the
        // sandbox's eth0 into it after \`runc create\` (container-runtime.ts).
        { type: 'network' },
        { type: 'ipc' },
        { type: 'uts' },
        { type: 'mount' },
        { type: 'cgroup' },
        // Guest root is host uid ids.first, guest uid 1000 is ids.first + 1000: ids no host
        // user has and no other sandbox shares.
        { type: 'user' },
      ],
      uidMappings: idMap,
      gidMappings: idMap,
      cgroupsPath: layout.cgroupsPath,
      resources: {
        // swap = limit: memory plus swap may not exceed memory, i.e. no swap at all.
        memory: { limit: memory, swap: memory },
        cpu: { quota: Math.round(settings.cpus * CPU_PERIOD_US), period: CPU_PERIOD_US },
        pids: { limit: spec.pidsLimit },
        devices: [{ allow: false, access: 'rwm' }],
        blockIO: {
          throttleReadBpsDevice: throttle(settings.ioBytesPerSecond),
          throttleWriteBpsDevice: throttle(settings.ioBytesPerSecond),
          throttleReadIOPSDevice: throttle(settings.ioOpsPerSecond),
          throttleWriteIOPSDevice: throttle(settings.ioOpsPerSecond),
        },
      },
      seccomp: seccompProfile(layout.guestUids),
      maskedPaths: MASKED_PATHS,
      readonlyPaths: READONLY_PATHS,
    },
  };
}

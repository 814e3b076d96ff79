import { CONFIG_MOUNT, GUEST_INIT } from '../../guest/contract.js';
import type { SandboxSpec } from '../runtime.js';
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

/** The runtime-spec (OCI 1.0) config.json of one sandbox container. */
export function ociSpec(spec: SandboxSpec, rootfs: string, cgroupsPath: string): Record<string, unknown> {
  const caps = GUEST_CAPABILITIES;
  return {
    ociVersion: '1.0.2',
    root: { path: rootfs, readonly: false },
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
      { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
      { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620', 'gid=5'] },
      { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=268435456'] },
      { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
      { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
      { destination: '/run', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=755', 'size=65536k'] },
      { destination: '/tmp', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=1777', 'size=536870912'] },
      { destination: CONFIG_MOUNT, type: 'bind', source: spec.configDir, options: ['rbind', 'ro', 'nosuid', 'nodev', 'noexec'] },
    ],
    linux: {
      namespaces: [
        { type: 'pid' },
        { type: 'network', path: spec.network.netnsPath },
        { type: 'ipc' },
        { type: 'uts' },
        { type: 'mount' },
        { type: 'cgroup' },
      ],
      cgroupsPath,
      resources: {
        memory: { limit: spec.memoryMiB * 1024 * 1024 },
        pids: { limit: spec.pidsLimit },
        devices: [{ allow: false, access: 'rwm' }],
      },
      seccomp: seccompProfile(),
      maskedPaths: [
        '/proc/acpi', '/proc/asound', '/proc/kcore', '/proc/keys', '/proc/latency_stats', '/proc/timer_list',
        '/proc/timer_stats', '/proc/sched_debug', '/proc/scsi', '/sys/firmware', '/sys/devices/virtual/powercap',
      ],
      readonlyPaths: ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'],
    },
  };
}

import { existsSync } from 'node:fs';
import { transportChoiceFromEnv, type TransportChoice } from '../../transport/settings.js';
import { envInt, envNonNegative, envString, positive, type Env } from '../../util/env.js';

/** How the container runtime confines each sandbox. Read from the environment (containerSettingsFromEnv). */
export interface ContainerSettings {
  /**
   * SBX_CONTAINER_UID_BASE: the first host uid/gid of the id ranges. Each sandbox gets
   * ID_RANGE_SIZE ids of its own from here (guest uid u is host uid
   * base + slot * ID_RANGE_SIZE + u): well above the ids of real users and of other tools'
   * subordinate ranges (/etc/subuid usually starts at 100000 with 65536 ids per user).
   * Unset: derived from the resource prefix (200000 for "sbx-", a block of its own for
   * another, id-leases.ts hostIdBase); either way each range is also leased host-wide.
   */
  uidBase?: number;
  /** Where ranges are leased host-wide (default /run/sbx-id-ranges, id-leases.ts): one directory for every orchestrator on the host. */
  idLeaseDir: string;
  /** SBX_CPUS (default 1): CPUs' worth of time each sandbox may use (a CFS quota; 0.5 = half a CPU). */
  cpus: number;
  /** SBX_IO_BPS (default 100 MiB/s, 0 = no limit): bytes per second each way on the sandbox's disk. */
  ioBytesPerSecond: number;
  /** SBX_IO_IOPS (default 2000, 0 = no limit): operations per second each way on the sandbox's disk. */
  ioOpsPerSecond: number;
  /** SBX_INOTIFY_INSTANCES (default 128): inotify instances each uid of a sandbox may hold. */
  inotifyInstances: number;
  /** SBX_INOTIFY_WATCHES (default 16384): inotify watches each uid of a sandbox may hold. */
  inotifyWatches: number;
  /** SBX_DISK_MIB (default 4096, 64 to 1048576): how much each sandbox may write (writable-layer.ts). */
  diskMiB: number;
  /** RUNC_BIN (default `runc` on PATH): the OCI runtime binary. */
  runcBin: string;
  /** SBX_CRIU (default: the one scripts/setup-criu.sh unpacked, else `criu` on PATH): CRIU, for pauses to disk. */
  criuBin?: string;
  /** SBX_TRANSPORT (default tcp): `unix`, `vsock` and `auto` reach the guest's sshd over a Unix socket (control-socket.ts). */
  transport?: TransportChoice;
}

/** The criu that scripts/setup-criu.sh unpacks where the host has none recent enough (docs/pause.md). */
export const SETUP_CRIU = '/var/lib/sandboxes/criu/bin/criu';

/** Where host-wide id leases live unless settings say otherwise (tmpfs: gone at reboot, like every container). */
export const DEFAULT_ID_LEASE_DIR = '/run/sbx-id-ranges';

/** Ids per sandbox: a full 16-bit range, so every uid and gid a Debian image uses is mapped. */
export const ID_RANGE_SIZE = 65536;
/** Id ranges one orchestrator leases at most (more than its sandboxes can ever be: 64 + a pool of 64). */
export const MAX_ID_RANGES = 1024;

export function containerSettingsFromEnv(env: Env): ContainerSettings {
  const uidBase = env.SBX_CONTAINER_UID_BASE ? envInt('SBX_CONTAINER_UID_BASE', 200_000, env) : undefined;
  // Room for every range below 2^32 - 1 (the kernel's "no id").
  if (uidBase !== undefined && (uidBase < 65536 || uidBase > 2 ** 32 - 1 - MAX_ID_RANGES * ID_RANGE_SIZE)) {
    throw new Error(`SBX_CONTAINER_UID_BASE must be between 65536 and ${2 ** 32 - 1 - MAX_ID_RANGES * ID_RANGE_SIZE}, got ${uidBase}`);
  }
  const cpusText = env.SBX_CPUS || '1';
  const cpus = Number(cpusText);
  if (!Number.isFinite(cpus) || cpus < 0.01 || cpus > 1024) throw new Error(`SBX_CPUS must be a number of CPUs between 0.01 and 1024, got "${cpusText}"`);
  return {
    ...(uidBase !== undefined ? { uidBase } : {}),
    idLeaseDir: DEFAULT_ID_LEASE_DIR,
    cpus,
    ioBytesPerSecond: envNonNegative('SBX_IO_BPS', 100 * 1024 * 1024, env),
    ioOpsPerSecond: envNonNegative('SBX_IO_IOPS', 2000, env),
    inotifyInstances: positive('SBX_INOTIFY_INSTANCES', envInt('SBX_INOTIFY_INSTANCES', 128, env)),
    inotifyWatches: positive('SBX_INOTIFY_WATCHES', envInt('SBX_INOTIFY_WATCHES', 16384, env)),
    diskMiB: diskMiBFromEnv(env),
    runcBin: envString(env, 'RUNC_BIN', 'runc'),
    criuBin: envString(env, 'SBX_CRIU', existsSync(SETUP_CRIU) ? SETUP_CRIU : 'criu'),
    transport: transportChoiceFromEnv(env),
  };
}

function diskMiBFromEnv(env: Env): number {
  const mib = envInt('SBX_DISK_MIB', 4096, env);
  if (mib < 64 || mib > 1024 * 1024) throw new Error(`SBX_DISK_MIB must be between 64 and 1048576, got ${mib}`);
  return mib;
}

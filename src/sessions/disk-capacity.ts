import { readdirSync, statSync, statfsSync, type Dirent } from 'node:fs';
import path from 'node:path';

const MiB = 2 ** 20;
/** The name a runtime's disk-pause state files start with (runtimes/qemu/disk-state.ts). */
export const PAUSE_STATE_PREFIX = 'vm-state';

/**
 * Disk is admitted like memory (capacity.ts): every session is promised its writable disk
 * (a container's SBX_DISK_MIB layer, a VM's root disk) and the most its recordings and
 * trajectory may add, and a create is refused unless the state directory's filesystem can
 * keep every promise made so far, this one too, and still leave the reserve.
 *
 * The writable disks are sparse: they take the host's blocks only as the guest writes, up to
 * their size. So a session's outstanding promise is its size minus what its files already
 * hold (that part already shows in the free space), measured when a create asks.
 */
export interface DiskLimits {
  /** Free space a create must leave on the state directory's filesystem (SBX_DISK_RESERVE_MIB). */
  reserveMiB: number;
  /** What a session's recordings and trajectory may add (SBX_RECORDING_MAX_BYTES + SBX_TRAJECTORY_MAX_SESSION_BYTES). */
  artifactsMiB: number;
}

export interface DiskCapacity {
  limits: DiskLimits;
  /** Free space on the state directory's filesystem for an unprivileged writer, MiB (undefined: unknown, not checked). */
  freeMiB(): number | undefined;
}

/** The state directory's free space (statfs: blocks available to unprivileged writers), synchronously. */
export function stateDirFreeMiB(stateDir: string): () => number | undefined {
  return () => {
    try {
      const stats = statfsSync(stateDir);
      return (stats.bavail * stats.bsize) / MiB;
    } catch {
      return undefined;
    }
  };
}

/**
 * The host blocks a session's own files hold (its writable layer, its VM disk, console log):
 * the regular files directly in its directory, by allocated blocks, not apparent size (they
 * are sparse). Not recursive: nothing below is followed, so no mount under the directory
 * (the image view, the overlay) is ever walked. A file that vanished counts 0.
 */
export function sessionFilesMiB(sessionDir: string): number {
  let bytes = 0;
  let entries: Dirent[];
  try {
    entries = readdirSync(sessionDir, { withFileTypes: true });
  } catch {
    return 0;
  }
  for (const entry of entries) {
    // A disk pause's state (vm-state.gz, and its .partial while written) is no part of the
    // session's disk promise: counted there, it would free promised room for others to take.
    if (!entry.isFile() || entry.name.startsWith(PAUSE_STATE_PREFIX)) continue;
    try {
      bytes += statSync(path.join(sessionDir, entry.name)).blocks * 512;
    } catch {
      // removed meanwhile
    }
  }
  return bytes / MiB;
}

/** One session's promise: its disk and artifacts, and what its files already hold. */
export class DiskPromise {
  private usedMiB: () => number = () => 0;

  constructor(readonly promisedMiB: number) {}

  /** Where the session's files are, once it has an id. */
  measure(usedMiB: () => number): void {
    this.usedMiB = usedMiB;
  }

  /** What it may still take of the host. */
  outstandingMiB(): number {
    return Math.max(0, this.promisedMiB - this.usedMiB());
  }
}

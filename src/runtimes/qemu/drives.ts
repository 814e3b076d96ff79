/**
 * QEMU's writable drives, given to it as descriptors (docs/pause.md). QEMU reopens a writable
 * drive by its path when a migration hands it over (read-only) and when a resumed VM takes it
 * back (read-write), as the VM's user by then, which cannot enter the session dir or the
 * volumes' directory (0700, root's): "bdrv_inactivate_all() failed", EACCES. So the orchestrator
 * opens each one and QEMU names it /proc/self/fd/<n>, which it can always reopen (its own
 * descriptor; the file is its user's, 0600, while it runs): fd 4 the root disk, 5, 6, ... each
 * writable volume in the order of the session's list. A read-only drive is opened by path
 * (QEMU is still root then) and never reopened.
 */
import { closeSync, constants, openSync } from 'node:fs';
import path from 'node:path';
import type { SandboxVolume } from '../runtime.js';

export const ROOT_DISK_FD = 4;

function inQemu(fd: number): string {
  return `/proc/self/fd/${fd}`;
}

export const ROOT_DISK_IN_QEMU = inQemu(ROOT_DISK_FD);

/** The volumes as QEMU's command line names them: a writable one by its descriptor, a read-only one by its path. */
export function volumesInQemu(volumes: readonly SandboxVolume[]): Array<{ file: string; readOnly: boolean }> {
  let next = ROOT_DISK_FD + 1;
  return volumes.map((v) => ({ file: v.readOnly ? v.file : inQemu(next++), readOnly: v.readOnly }));
}

/** The files opened for QEMU's descriptors 5, 6, ...: the writable volumes, in order. */
export function writableVolumeFiles(volumes: readonly SandboxVolume[]): string[] {
  return volumes.filter((v) => !v.readOnly).map((v) => v.file);
}

/**
 * Runs `use` (a spawn) with the root disk and `volumeFiles` open read-write, in descriptor
 * order, and closes our copies after (a failed open closes those opened before it).
 */
export function withDrivesOpen<T>(rootDisk: string, volumeFiles: readonly string[], use: (fds: number[]) => T): T {
  const fds: number[] = [];
  try {
    for (const file of [rootDisk, ...volumeFiles]) {
      if (!path.isAbsolute(file)) throw new Error(`a drive's file must be an absolute path: ${file}`);
      fds.push(openSync(file, constants.O_RDWR | constants.O_NOFOLLOW));
    }
    return use(fds);
  } finally {
    for (const fd of fds) closeSync(fd);
  }
}

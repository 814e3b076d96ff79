import { createHash } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { GUEST_GID, GUEST_UID } from '../guest/contract.js';
import { run } from '../util/exec.js';

/**
 * A volume's data: an ext4 file system in a sparse file of exactly its size, under
 * <stateDir>/volumes/<tenant hash>/<name>.ext4. The file is the cap: a guest that fills the
 * volume gets ENOSPC in its own file system, and the host gives it at most sizeMiB of disk
 * (no reserved blocks, so guest root cannot go past it either). The tenant's directory is
 * named by a hash, so a tenant's name never becomes a path; a volume's name is checked
 * (volume-names.ts) before it is joined.
 *
 * Its root directory belongs to the guest's desktop user (uid 1000, as every guest sees it:
 * containers mount it through their id range's idmapped view), so the user can write it
 * from its first session.
 */
export function volumeFile(dir: string, tenant: string, name: string): string {
  return path.join(dir, tenantDir(tenant), `${name}.ext4`);
}

function tenantDir(tenant: string): string {
  return createHash('sha256').update(tenant).digest('hex').slice(0, 32);
}

/** Makes the file system (sparse: a few MiB written whatever its size), atomically: a crash leaves a temp file or a whole volume. */
export async function makeVolumeFile(file: string, sizeMiB: number): Promise<void> {
  await mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
  const temp = `${file}.${process.pid}.tmp`;
  try {
    await run(['truncate', '-s', `${sizeMiB}M`, temp]);
    // A journal (the data outlives sessions and crashes); lazy inits and no discard keep it sparse.
    await run([
      'mkfs.ext4',
      '-q',
      '-F',
      '-m',
      '0',
      '-E',
      `nodiscard,lazy_itable_init=1,lazy_journal_init=1,root_owner=${GUEST_UID}:${GUEST_GID}`,
      '-L',
      'sbx-volume',
      temp,
    ]);
    await rename(temp, file);
  } finally {
    await rm(temp, { force: true });
  }
}

/** The bytes of disk a volume's file holds now (its blocks, not its size). */
export function allocatedBytes(file: string): number {
  try {
    return statSync(file).blocks * 512;
  } catch {
    return 0;
  }
}

/**
 * A volume a VM's kernel has written holds whatever that guest made of its blocks: loop-mounted
 * on the host, a crafted ext4 image would be an attack on the host's kernel. Such a volume is
 * marked (a file beside it, made before the VM starts) and stays a VM volume: the container
 * runtime refuses to loop-mount it (docs/volumes.md).
 */
export function guestWrittenMark(file: string): string {
  return `${file}.vm-written`;
}

export async function markGuestWritten(file: string): Promise<void> {
  await writeFile(guestWrittenMark(file), 'written by a VM: never loop-mounted on the host\n', { mode: 0o600 });
}

export function isGuestWritten(file: string): boolean {
  return existsSync(guestWrittenMark(file));
}

import { chmod, chown, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { writeVolumeTable, type VolumeDrive } from '../../guest/config-drive.js';
import { markGuestWritten } from '../../volumes/volume-files.js';
import type { ResourceKindEntry } from '../entry.js';
import type { CleanupStack } from '../../util/cleanup-stack.js';
import type { RecordResource, SandboxVolume } from '../runtime.js';

/**
 * A VM's volumes (docs/volumes.md), before its config drive is built: each writable one marked
 * as written by a guest kernel (never loop-mounted on the host again), and the table that
 * tells sandbox-init which disk to mount where, read-only or not (`drive` says how the guest
 * finds the i-th volume's disk: QEMU's serial, Firecracker's order).
 */
export async function prepareVmVolumes(configDir: string, volumes: readonly SandboxVolume[], drive: (index: number) => VolumeDrive): Promise<void> {
  for (const volume of volumes) if (!volume.readOnly) await markGuestWritten(volume.file);
  await writeVolumeTable(
    configDir,
    volumes.map((v, i) => ({ path: v.path, readOnly: v.readOnly, drive: drive(i) })),
  );
}

/** Gives volume files a jailed VMM owned back to root, 0600 (a missing one is gone already). */
export async function returnVolumes(volumes: ReadonlyArray<{ file: string }>): Promise<void> {
  for (const volume of volumes) {
    await chown(volume.file, 0, 0).catch(ignoreMissing);
    await chmod(volume.file, 0o600).catch(ignoreMissing);
  }
}

/**
 * A volume a jail was given (its file, chowned to the jail's uid): given back to root by
 * start-up reconciliation when a crash left it so, after the VMM is killed.
 */
export const VOLUME_OWNER: ResourceKindEntry = { stage: 'files', reclaim: (file) => returnVolumes([{ file }]) };

/** Where a session's volumes are listed (its dir, root's): an orchestrator restarted since its start finds them there. */
const VOLUME_LIST = 'vm-volumes.json';

interface ListedVolume {
  file: string;
  readOnly: boolean;
}

/**
 * Before its volumes are handed to a jail: lists them in the session dir, so that a resume from
 * disk can hand them over again and the release of a session adopted after a restart (paused to
 * disk or running) gives them back too.
 */
export async function listVolumes(sessionDir: string, volumes: readonly SandboxVolume[]): Promise<void> {
  const listed: ListedVolume[] = volumes.map((v) => ({ file: v.file, readOnly: v.readOnly }));
  await writeFile(path.join(sessionDir, VOLUME_LIST), JSON.stringify(listed), { mode: 0o600 });
}

/**
 * Before a VMM is handed the session's volumes: listed in the session dir and the ledger, so
 * that they are root's again after, by this cleanup, or after a restart by the runtime's
 * reclaim (the list) or the ledger's (a session not adopted).
 */
export async function lendVolumes(sessionDir: string, volumes: readonly SandboxVolume[], cleanup: CleanupStack, record?: RecordResource): Promise<void> {
  if (volumes.length === 0) return;
  await listVolumes(sessionDir, volumes);
  for (const volume of volumes) record?.('volume-owner', volume.file);
  await cleanup.push('volume owners', () => returnVolumes(volumes));
}

/** The volumes listed in the session dir (none listed, or the dir gone: none). */
async function listedVolumes(sessionDir: string): Promise<ListedVolume[]> {
  const text = await readFile(path.join(sessionDir, VOLUME_LIST), 'utf8').catch(() => '[]');
  let listed: unknown;
  try {
    listed = JSON.parse(text);
  } catch {
    return []; // not ours
  }
  if (!Array.isArray(listed)) return [];
  return listed.filter((v): v is ListedVolume => {
    const entry = v as Partial<ListedVolume> | null;
    return typeof entry?.file === 'string' && path.isAbsolute(entry.file) && typeof entry.readOnly === 'boolean';
  });
}

/** Gives back the volumes listed in the session dir. */
export async function returnListedVolumes(sessionDir: string): Promise<void> {
  await returnVolumes(await listedVolumes(sessionDir));
}

/**
 * Before a jailed VMM opens the listed volumes again (a resume from disk): each handed over as
 * the start did (jailer/apply-chroot.ts), writable ones the jail's 0600, read-only ones root's
 * 0444. Another session reading the same read-only volume may have ended since, and its
 * release gave the file back to root, 0600: the jail could not open it.
 */
export async function grantListedVolumes(sessionDir: string, jail: { uid: number; gid: number }): Promise<void> {
  await grantVolumes(await listedVolumes(sessionDir), jail);
}

/** Writable volumes made the VM user's (0600), read-only ones root's (0444). */
export async function grantVolumes(volumes: ReadonlyArray<{ file: string; readOnly: boolean }>, vmUser: { uid: number; gid: number }): Promise<void> {
  for (const volume of volumes) {
    await chown(volume.file, volume.readOnly ? 0 : vmUser.uid, volume.readOnly ? 0 : vmUser.gid);
    await chmod(volume.file, volume.readOnly ? 0o444 : 0o600);
  }
}

function ignoreMissing(err: NodeJS.ErrnoException): void {
  if (err.code !== 'ENOENT') throw err;
}

import { chmod, chown, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { writeVolumeTable, type VolumeDrive } from '../../guest/config-drive.js';
import { markGuestWritten } from '../../volumes/volume-files.js';
import type { ResourceKindEntry } from '../entry.js';
import type { SandboxVolume } from '../runtime.js';

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

/** Where a session's volume files are listed (its dir, root's): an orchestrator restarted since its start finds them there. */
const VOLUME_LIST = 'vm-volumes.json';

/**
 * Before its volumes are handed to a jail: lists their files in the session dir, so that the
 * release of a session adopted after a restart (paused to disk or running) gives them back too.
 */
export async function listVolumes(sessionDir: string, volumes: readonly SandboxVolume[]): Promise<void> {
  await writeFile(path.join(sessionDir, VOLUME_LIST), JSON.stringify(volumes.map((v) => v.file)), { mode: 0o600 });
}

/** Gives back the volumes listed in the session dir (none listed, or the dir gone: nothing to do). */
export async function returnListedVolumes(sessionDir: string): Promise<void> {
  const text = await readFile(path.join(sessionDir, VOLUME_LIST), 'utf8').catch(() => '[]');
  let files: unknown;
  try {
    files = JSON.parse(text);
  } catch {
    return; // not ours
  }
  if (!Array.isArray(files)) return;
  await returnVolumes(files.filter((f): f is string => typeof f === 'string' && path.isAbsolute(f)).map((file) => ({ file })));
}

function ignoreMissing(err: NodeJS.ErrnoException): void {
  if (err.code !== 'ENOENT') throw err;
}

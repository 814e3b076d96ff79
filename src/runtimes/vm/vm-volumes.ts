import { chmod, chown } from 'node:fs/promises';
import { writeVolumeTable, type VolumeDrive } from '../../guest/config-drive.js';
import { markGuestWritten } from '../../volumes/volume-files.js';
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
export async function returnVolumes(volumes: readonly SandboxVolume[]): Promise<void> {
  for (const volume of volumes) {
    await chown(volume.file, 0, 0).catch(ignoreMissing);
    await chmod(volume.file, 0o600).catch(ignoreMissing);
  }
}

function ignoreMissing(err: NodeJS.ErrnoException): void {
  if (err.code !== 'ENOENT') throw err;
}

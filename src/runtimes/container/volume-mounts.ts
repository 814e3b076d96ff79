import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { OrchestratorError } from '../../errors.js';
import { unmountAll } from '../../host/mounts.js';
import { isGuestWritten } from '../../volumes/volume-files.js';
import type { CleanupStack } from '../../util/cleanup-stack.js';
import { run } from '../../util/exec.js';
import type { RecordResource, SandboxVolume } from '../runtime.js';
import { mountIdmapped, type IdRange } from './idmapped-mount.js';

/** A volume ready to be bound into the container: its idmapped view on the host. */
export interface VolumeView {
  view: string;
  path: string;
  readOnly: boolean;
}

/** Where a session's volume is loop-mounted, and where its idmapped view is, under the session dir. */
export function volumeMountPoints(sessionDir: string, name: string): { raw: string; view: string } {
  return { raw: path.join(sessionDir, 'volumes', name), view: path.join(sessionDir, 'volume-views', name) };
}

/**
 * Mounts a container's volumes (docs/volumes.md): each image file loop-mounted on the host
 * under the session dir (0700: only root reaches it; nosuid, nodev), then seen through an
 * idmapped view (idmapped-mount.ts) in the sandbox's id range, so that a file the volume
 * holds as uid u is the guest's uid u whichever range the session got: the data on disk is
 * in guest ids and moves between sessions unchanged. A read-only volume is read-only at both
 * mounts (and its journal is not replayed: `noload`). The views go into the container as
 * bind mounts (oci-spec.ts). Each release is pushed before its mount is made, views first.
 *
 * Both mounts live under the session dir, so a crash that leaves them is reclaimed with it
 * (reclaim unmounts everything there); the loop devices go with their last unmount (autoclear).
 */
export async function mountVolumes(
  sessionDir: string,
  volumes: readonly SandboxVolume[],
  ids: IdRange,
  cleanup: CleanupStack,
  record: RecordResource,
): Promise<VolumeView[]> {
  const views: VolumeView[] = [];
  for (const volume of volumes) {
    refuseVmWritten(volume); // before anything is taken
    const { raw, view } = volumeMountPoints(sessionDir, volume.name);
    record('mount', raw);
    record('mount', view);
    await cleanup.push(`volume ${volume.name}`, () => unmountAll([view, raw]));
    await mountVolume(sessionDir, volume, ids);
    views.push({ view, path: volume.path, readOnly: volume.readOnly });
  }
  return views;
}

/** One volume's two mounts (at a start, or again after a host reboot: remount.ts); the caller releases them. */
export async function mountVolume(sessionDir: string, volume: Pick<SandboxVolume, 'name' | 'file' | 'readOnly'>, ids: IdRange): Promise<void> {
  refuseVmWritten(volume);
  const { raw, view } = volumeMountPoints(sessionDir, volume.name);
  await mkdir(raw, { recursive: true, mode: 0o700 });
  const options = ['loop', 'noatime', 'nodev', 'nosuid', 'noinit_itable', ...(volume.readOnly ? ['ro', 'noload'] : [])];
  await run(['mount', '-t', 'ext4', '-o', options.join(','), '--', volume.file, raw]);
  await mountIdmapped(ids, [{ source: raw, target: view }], { writable: !volume.readOnly });
}

function refuseVmWritten(volume: Pick<SandboxVolume, 'name' | 'file'>): void {
  if (isGuestWritten(volume.file)) {
    throw new OrchestratorError(
      'volumes_unavailable',
      `volumes: ${volume.name} was written by a VM's kernel and is never loop-mounted on the host: mount it in a VM session (docs/volumes.md)`,
    );
  }
}

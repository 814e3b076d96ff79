import { mkdir, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { run } from '../../util/exec.js';

/**
 * The disk a container sandbox may write: its overlay's upper layer lives on an ext4
 * filesystem of its own (a sparse file, loop-mounted), SBX_DISK_MIB large. A guest that
 * fills it gets "No space left on device" inside its sandbox; the host's disk, the other
 * sessions and the orchestrator never notice. (A tmpfs would be simpler, but its pages count
 * against the sandbox's memory limit: a full disk would end in the OOM killer, not ENOSPC.)
 *
 * An empty filesystem of each size is made once next to the image and copied sparsely per
 * session (~2 MB, a few ms), so a create does not pay for mkfs. The size is a setting
 * (ContainerSettings.diskMiB, settings.ts).
 *
 * The file is the cap: a loop device never grows its file, so the host gives a session at
 * most this size, and admission promises it against the host's free space
 * (sessions/disk-capacity.ts), so that all the sparse files together cannot outgrow the disk.
 */

const building = new Map<string, Promise<string>>();

/** The empty ext4 of `mib` MiB for this image, made on first use. */
export function layerTemplate(imageDir: string, mib: number): Promise<string> {
  const file = path.join(imageDir, `writable-layer-${mib}m.ext4`);
  let made = building.get(file);
  if (!made) {
    made = makeTemplate(file, mib);
    building.set(file, made);
    made.catch(() => building.delete(file));
  }
  return made;
}

async function makeTemplate(file: string, mib: number): Promise<string> {
  if (
    await stat(file).then(
      (s) => s.isFile(),
      () => false,
    )
  )
    return file;
  const temp = `${file}.${process.pid}.tmp`;
  try {
    await run(['truncate', '-s', `${mib}M`, temp]);
    // No journal (the layer dies with its session), no reserved blocks, no discard at mkfs.
    await run(['mkfs.ext4', '-q', '-F', '-O', '^has_journal', '-m', '0', '-E', 'nodiscard', '-L', 'sbx-layer', temp]);
    await rename(temp, file);
  } finally {
    await rm(temp, { force: true });
  }
  return file;
}

/** Copies the empty layer for one session and mounts it at `target` (a loop device, freed at unmount). */
export async function mountWritableLayer(template: string, file: string, target: string): Promise<void> {
  await run(['cp', '--sparse=always', '--', template, file]);
  await mountLayerFile(file, target);
}

/** Mounts a session's layer file at `target` (at its start, or again after a host reboot: remount.ts). */
export async function mountLayerFile(file: string, target: string): Promise<void> {
  await mkdir(target, { recursive: true, mode: 0o755 });
  await run(['mount', '-t', 'ext4', '-o', 'loop,noatime,nodev,nosuid', file, target]);
}

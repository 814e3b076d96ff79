/**
 * The per-session config drive of the VM runtimes (qemu, and Firecracker next): a small ext4
 * image of the session's config directory (authorized_keys, the pinned host key, sandbox.env;
 * see contract.ts), made with `mkfs.ext4 -d`, attached read-only as the VM's second virtio
 * disk (/dev/vdb), and mounted by sandbox-init at CONFIG_MOUNT. A container gets the same
 * directory as a read-only bind mount instead, so every runtime's guest reads the same files.
 *
 * mkfs.ext4 -d copies owners and modes as they are: authorized_keys stays owned by the guest
 * user (uid 1000) with mode 0600, and the host key root's with 0600, as sshd's StrictModes
 * requires. The image itself is 0600: it holds the host's private key.
 */
import { stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { run } from '../util/exec.js';
import { CONFIG_FILES } from './contract.js';
import { createImageFile, mkfsExt4Argv } from './image/ext4-image.js';

/** 4 MiB: a few KiB of files, and the smallest size at which ext4 is comfortable. */
export const CONFIG_DRIVE_BYTES = 4 * 1024 * 1024;
export const CONFIG_DRIVE_LABEL = 'sbx-config';

export function configDriveArgv(configDir: string, imagePath: string): string[] {
  // No journal: the guest mounts it read-only.
  return mkfsExt4Argv({ source: configDir, image: imagePath, sizeBytes: CONFIG_DRIVE_BYTES, label: CONFIG_DRIVE_LABEL, journal: false });
}

/** Builds the config drive image of `configDir` at `imagePath` (about 10 ms). */
export async function buildConfigDrive(configDir: string, imagePath: string): Promise<void> {
  if (!(await stat(configDir)).isDirectory()) throw new Error(`config dir ${configDir} is not a directory`);
  await createImageFile(imagePath, 0o600);
  await run(configDriveArgv(configDir, imagePath), { timeoutMs: 30_000 });
}

/**
 * How a VM's guest finds a volume's disk: by the serial QEMU gives it (`sbx-vol-<i>`), or as
 * the n-th virtio disk (Firecracker's disks carry no serial of ours; vda is the root, vdb the
 * config drive, so volumes start at vdc).
 */
export type VolumeDrive = { serial: string } | { disk: string };

const DRIVE_SERIAL = /^sbx-vol-[0-9]{1,2}$/;
const DRIVE_DISK = /^vd[c-z]$/;
/** What sandbox-init accepts as a volume path (volume-names.ts checked it already: this is the same rule, as data). */
const GUEST_PATH = /^(\/[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})+$/;

/** The virtio disk a VM's i-th volume is when the disks are told apart by order (Firecracker). */
export function volumeDiskName(index: number): string {
  const name = `vd${String.fromCharCode('c'.charCodeAt(0) + index)}`;
  if (!Number.isInteger(index) || index < 0 || !DRIVE_DISK.test(name)) throw new Error(`no virtio disk name for volume ${index}`);
  return name;
}

/** The volume table's text: a line per volume, `<drive> <rw|ro> <path>`, nothing that is not checked. */
export function volumeTable(volumes: ReadonlyArray<{ path: string; readOnly: boolean; drive: VolumeDrive }>): string {
  return volumes
    .map(({ path: at, readOnly, drive }) => {
      const id = 'serial' in drive ? `serial:${drive.serial}` : `disk:${drive.disk}`;
      const ok = 'serial' in drive ? DRIVE_SERIAL.test(drive.serial) : DRIVE_DISK.test(drive.disk);
      if (!ok || !GUEST_PATH.test(at) || at.length > 256) throw new Error(`bad volume for the guest: ${id} at ${JSON.stringify(at)}`);
      return `${id} ${readOnly ? 'ro' : 'rw'} ${at}\n`;
    })
    .join('');
}

/** Writes the volume table into the config dir (before buildConfigDrive); none when there are no volumes. */
export async function writeVolumeTable(configDir: string, volumes: ReadonlyArray<{ path: string; readOnly: boolean; drive: VolumeDrive }>): Promise<void> {
  if (volumes.length === 0) return;
  await writeFile(path.join(configDir, CONFIG_FILES.volumes), volumeTable(volumes), { mode: 0o644 });
}

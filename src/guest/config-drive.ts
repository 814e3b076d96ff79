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
import { stat } from 'node:fs/promises';
import { run } from '../util/exec.js';
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

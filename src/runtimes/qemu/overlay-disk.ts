import { chmod } from 'node:fs/promises';
import { run } from '../../util/exec.js';

/**
 * The VM's writable root disk: a qcow2 file in the session dir whose backing file is the
 * image's shared, read-only rootfs.ext4. The guest's writes land in the qcow2 (it grows from
 * ~200 KiB as the guest writes) and vanish with the session; the base is never written
 * (QEMU opens a backing file read-only). Making one takes a few milliseconds, whatever the
 * size of the base.
 */
export function overlayArgv(qemuImg: string, base: string, overlay: string): string[] {
  // -F: the backing file's format, stated rather than probed (probing a raw file is unsafe).
  return [qemuImg, 'create', '-q', '-f', 'qcow2', '-F', 'raw', '-b', base, overlay];
}

export async function createOverlay(qemuImg: string, base: string, overlay: string): Promise<void> {
  await run(overlayArgv(qemuImg, base, overlay), { timeoutMs: 30_000 });
  await chmod(overlay, 0o600);
}

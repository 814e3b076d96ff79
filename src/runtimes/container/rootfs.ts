import { rmdir } from 'node:fs/promises';
import { unmount } from '../../host/mounts.js';

/** Waits for every promise; then throws the first failure, if any. */
export async function allSettledOrThrow(promises: Array<Promise<unknown>>): Promise<void> {
  const failed = (await Promise.allSettled(promises)).find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
}

/** Unmounts a container's root filesystem and removes its mount point; idempotent. */
export async function removeRootfs(rootfs: string): Promise<void> {
  await unmount(rootfs);
  await rmdir(rootfs).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'ENOENT') throw err;
  });
}

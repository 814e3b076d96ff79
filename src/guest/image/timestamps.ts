/**
 * Drops the sub-second part of every modification time in a tree.
 *
 * Why: mkfs.ext4 -d (e2fsprogs 1.47.0, Debian 12) copies modification times in whole
 * seconds only, and fontconfig judges its cache by the font directories' mtimes to the
 * nanosecond. In the ext4 image every system font cache was therefore stale, and each
 * desktop program rebuilt it in the user's home at boot: openbox spent ~12 s of CPU on it
 * under TCG, and the first window took 20+ s to appear. With whole-second times in the tree
 * (and the cache rebuilt after), the directory, the ext4 image and the cache all agree.
 */
import { lstat, lutimes, readdir } from 'node:fs/promises';
import { join } from 'node:path';

/** Returns how many entries were changed. Never follows symlinks or leaves the tree. */
export async function truncateTimestamps(root: string): Promise<number> {
  let changed = 0;
  const visit = async (path: string): Promise<void> => {
    const stats = await lstat(path, { bigint: true });
    // mtime only: that is what caches compare (access times change as the tree is read).
    if (stats.mtimeNs % 1_000_000_000n !== 0n) {
      await lutimes(path, Number(stats.atimeNs / 1_000_000_000n), Number(stats.mtimeNs / 1_000_000_000n));
      changed++;
    }
    if (!stats.isDirectory()) return;
    for (const entry of await readdir(path)) await visit(join(path, entry));
    // Changing the children's times does not change the directory's own mtime.
  };
  await visit(root);
  return changed;
}

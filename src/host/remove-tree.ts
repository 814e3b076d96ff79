import { lstat, readdir, realpath, rmdir, unlink } from 'node:fs/promises';
import path from 'node:path';
import { mountsUnder } from './mounts.js';

/**
 * A directory that was to be removed is left on disk because something is still mounted at
 * or below it. Whoever asked for the removal logs it and counts it; the mount and the
 * directory are left exactly as they are, for a later attempt or a person to look at.
 */
export class StillMountedError extends Error {
  constructor(
    readonly dir: string,
    readonly mounts: readonly string[],
  ) {
    super(
      `${dir} was left on disk: ${mounts.join(', ')} ${mounts.length === 1 ? 'is' : 'are'} still mounted in it; ` +
        'find what holds it (`fuser -vm <mount>`), unmount it, then remove the directory',
    );
    this.name = 'StillMountedError';
  }
}

/**
 * Removes a directory tree that has nothing mounted in it, and never follows a mount out of
 * it. A session directory holds idmapped views of shared data (the image's rootfs); a
 * recursive delete that walked into one while it was still mounted would delete, or try to
 * delete, what every other session uses. So:
 *  - the mount table (/proc/self/mountinfo) is read first. If anything is mounted at or
 *    below the directory, the mount points and the directories above them are left, the
 *    rest is removed (a session's keys do not outlive it because a view is busy), and
 *    StillMountedError says what is left;
 *  - the walk itself then stays on the directory's filesystem: a directory on another
 *    device (a mount made since) is not entered, and the removal stops there.
 * A bind or idmapped mount of the same filesystem has the same device number, which is why
 * the mount table is the first check, not the second. Missing: nothing to do.
 */
export async function removeTreeOnOneMount(dir: string): Promise<void> {
  let real: string;
  try {
    real = await realpath(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  const mounted = await mountsUnder(real);
  const top = await lstat(real);
  if (mounted.length > 0) {
    if (!mounted.includes(real)) await removeAround(dir, real, top.dev, mounted);
    throw new StillMountedError(dir, mounted);
  }
  if (!top.isDirectory()) {
    await unlink(real);
    return;
  }
  await removeEntry(dir, real, top.dev);
}

/** Removes everything in `dir` but the mount points below it and the directories on the way to them. */
async function removeAround(top: string, dir: string, dev: number, mounted: readonly string[]): Promise<void> {
  for (const name of await readdir(dir)) {
    const entry = path.join(dir, name);
    if (mounted.includes(entry)) continue; // never entered
    if (mounted.some((m) => m.startsWith(entry + '/'))) await removeAround(top, entry, dev, mounted);
    else await removeEntry(top, entry, dev);
  }
}

async function removeEntry(top: string, entry: string, dev: number): Promise<void> {
  let stats;
  try {
    stats = await lstat(entry);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  if (!stats.isDirectory()) {
    await unlink(entry).catch(ignoreMissing);
    return;
  }
  if (stats.dev !== dev) throw new StillMountedError(top, [entry]);
  for (const name of await readdir(entry)) await removeEntry(top, path.join(entry, name), dev);
  await rmdir(entry).catch(ignoreMissing);
}

function ignoreMissing(err: NodeJS.ErrnoException): void {
  if (err.code !== 'ENOENT') throw err;
}

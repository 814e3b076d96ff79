import { open, rename, rm } from 'node:fs/promises';
import path from 'node:path';

/** What writeDurably writes to first: a file of this name beside the target is never whole. */
export const PARTIAL_SUFFIX = '.partial';

/** Flushes a file, or a directory's entries (after a rename in it), to the disk. */
export async function fsyncPath(file: string): Promise<void> {
  const handle = await open(file, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Writes `file` whole or not at all, across a crash: `write` fills `<file>.partial`, which is
 * fsync'd and renamed over `file`, then the directory is fsync'd. On any failure (the disk
 * full) the partial file is removed and the error thrown.
 */
export async function writeDurably(file: string, write: (partial: string) => Promise<void>): Promise<void> {
  const partial = `${file}${PARTIAL_SUFFIX}`;
  try {
    await write(partial);
    await fsyncPath(partial);
    await rename(partial, file);
    await fsyncPath(path.dirname(file));
  } catch (err) {
    await rm(partial, { force: true });
    throw err;
  }
}

/**
 * ext4 filesystem images made from a directory with `mkfs.ext4 -d`: no loop device, no
 * mount, so nothing can be left mounted on the host, and owners, modes, links, device nodes
 * and extended attributes are copied as they are in the directory.
 */
import { open } from 'node:fs/promises';

const MiB = 1024 * 1024;

export interface Ext4ImageOptions {
  /** The directory whose contents become the filesystem's root. */
  source: string;
  /** The image file (created or overwritten). */
  image: string;
  sizeBytes: number;
  /** Filesystem label, e.g. "sbx-root" (at most 16 bytes). */
  label: string;
  /** A journal costs space and writes; a read-only drive needs none. */
  journal: boolean;
}

/** The mkfs.ext4 argument vector (pure: tested without running it). */
export function mkfsExt4Argv(opts: Ext4ImageOptions): string[] {
  if (Buffer.byteLength(opts.label) > 16) throw new Error(`ext4 label "${opts.label}" is longer than 16 bytes`);
  return [
    'mkfs.ext4',
    '-F', // it is a regular file, not a block device: do not ask
    '-q',
    '-t',
    'ext4',
    '-L',
    opts.label,
    // No blocks reserved for root: in a sandbox, root and the user share one disk.
    '-m',
    '0',
    ...(opts.journal ? [] : ['-O', '^has_journal']),
    '-d',
    opts.source,
    opts.image,
    `${Math.ceil(opts.sizeBytes / 1024)}k`,
  ];
}

/**
 * The size of a root filesystem image: what the tree uses, plus a quarter for ext4's own
 * metadata (inode tables, directories, block rounding of many small files), plus free space
 * for the sandbox, rounded up to 64 MiB. The file is sparse, so unused space costs nothing.
 */
export function rootImageSize(usedBytes: number, headroomMiB: number): number {
  const raw = usedBytes * 1.25 + headroomMiB * MiB;
  return Math.ceil(raw / (64 * MiB)) * 64 * MiB;
}

/**
 * Creates (or empties) the image file with the given mode before mkfs.ext4 fills it: mkfs
 * would create it with the umask's mode, and a config drive holds a private host key.
 */
export async function createImageFile(path: string, mode: number): Promise<void> {
  const handle = await open(path, 'w', mode);
  try {
    await handle.chmod(mode);
  } finally {
    await handle.close();
  }
}

/**
 * A writer for the cpio "newc" format, the only archive format the Linux kernel unpacks as an
 * initramfs. Written here rather than shelling out to cpio(1): the initrd is a handful of
 * entries, the format is 30 lines, and building it in memory makes the archive reproducible
 * (fixed inode numbers, owners and times) and testable without root or host tools.
 *
 * Format (see the kernel's Documentation/driver-api/early-userspace/buffer-format.rst):
 * each entry is "070701", thirteen 8-digit hex fields, the NUL-terminated name padded to a
 * multiple of 4 bytes (counting the 110-byte header), then the data padded the same way.
 * The archive ends with an entry named "TRAILER!!!".
 */

export type CpioEntry =
  | { type: 'dir'; path: string; mode: number }
  | { type: 'file'; path: string; mode: number; data: Buffer }
  | { type: 'symlink'; path: string; target: string }
  | { type: 'chardev'; path: string; mode: number; major: number; minor: number };

const S_IFDIR = 0o040000;
const S_IFREG = 0o100000;
const S_IFLNK = 0o120000;
const S_IFCHR = 0o020000;
const TRAILER = 'TRAILER!!!';

/** Entries are written in the given order; a directory must come before what it holds. */
export function cpioArchive(entries: readonly CpioEntry[]): Buffer {
  const parts: Buffer[] = [];
  let inode = 1;
  for (const entry of entries) {
    const name = entry.path.replace(/^\/+/, '');
    if (!name || name.split('/').includes('..')) throw new Error(`cpio: bad path "${entry.path}"`);
    parts.push(...record(inode++, name, entry));
  }
  parts.push(...record(0, TRAILER, { type: 'file', path: TRAILER, mode: 0, data: Buffer.alloc(0) }));
  return Buffer.concat(parts);
}

function record(inode: number, name: string, entry: CpioEntry, nlink = entry.type === 'dir' ? 2 : 1): Buffer[] {
  const data = entry.type === 'file' ? entry.data : entry.type === 'symlink' ? Buffer.from(entry.target, 'utf8') : Buffer.alloc(0);
  const mode =
    entry.type === 'dir'
      ? S_IFDIR | entry.mode
      : entry.type === 'file'
        ? S_IFREG | entry.mode
        : entry.type === 'symlink'
          ? S_IFLNK | 0o777
          : S_IFCHR | entry.mode;
  const rdev = entry.type === 'chardev' ? [entry.major, entry.minor] : [0, 0];
  const nameBytes = Buffer.from(name + '\0', 'utf8');
  const fields = [
    inode,
    mode,
    0, // uid: root
    0, // gid: root
    nlink,
    0, // mtime: fixed, so that the same inputs give the same bytes
    data.length,
    0, // devmajor
    0, // devminor
    rdev[0] as number,
    rdev[1] as number,
    nameBytes.length,
    0, // check: unused by newc (only "crc" format uses it)
  ];
  const header = Buffer.from('070701' + fields.map(hex8).join(''), 'ascii');
  return [header, nameBytes, padding(header.length + nameBytes.length), data, padding(data.length)];
}

function hex8(value: number): string {
  if (!Number.isInteger(value) || value < 0 || value > 0xffffffff) throw new Error(`cpio: field out of range: ${value}`);
  return value.toString(16).padStart(8, '0');
}

function padding(length: number): Buffer {
  return Buffer.alloc((4 - (length % 4)) % 4);
}

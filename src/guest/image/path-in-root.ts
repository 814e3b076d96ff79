import { lstat, readlink } from 'node:fs/promises';
import { posix } from 'node:path';

/** Symbolic links followed before a path is given up on (Linux's own limit is 40). */
const MAX_LINKS = 40;

/**
 * Where a guest path lands in a rootfs on the host, following symbolic links as the guest
 * would see them: an absolute target starts again at the rootfs, never at the host's root,
 * and `..` never climbs above it. An image's links are the guest's (Debian's libreoffice
 * links share/registry to /etc/libreoffice/registry); followed by the host they would name
 * host files. Undefined when a component is missing or there are too many links.
 */
export async function pathInRoot(rootfs: string, guestPath: string): Promise<string | undefined> {
  const pending = guestPath.split('/').filter(Boolean);
  const resolved: string[] = [];
  let links = 0;
  while (pending.length > 0) {
    const part = pending.shift() as string;
    if (part === '.') continue;
    if (part === '..') {
      resolved.pop();
      continue;
    }
    const here = posix.join(rootfs, ...resolved, part);
    const info = await lstat(here).catch(() => undefined);
    if (!info) return undefined;
    if (!info.isSymbolicLink()) {
      resolved.push(part);
      continue;
    }
    if (++links > MAX_LINKS) return undefined;
    const target = await readlink(here);
    if (target.startsWith('/')) resolved.length = 0;
    pending.unshift(...target.split('/').filter(Boolean));
  }
  return posix.join(rootfs, ...resolved);
}

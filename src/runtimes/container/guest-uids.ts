import { lstat, readFile, realpath } from 'node:fs/promises';
import path from 'node:path';
import { GUEST_UID } from '../../guest/contract.js';

/**
 * The uids a container's processes may take (docs/security/containers.md#inotify): those its
 * image's /etc/passwd names, at most MAX_GUEST_UIDS, root, the desktop user and nobody first.
 *
 * Why: the kernel limits inotify instances and watches per uid of the sandbox's user namespace,
 * and charges the sum to host root, which every sandbox shares. A guest root free to take any
 * uid of its range took the limit once per uid, 128 x 40 uids, and host root had none left
 * (every other sandbox, and the host's own services, got EMFILE). The seccomp profile allows
 * set*uid only to these, and the host's limits are raised to cover every sandbox at its limit
 * for each of them (namespace-limits.ts).
 */
export const MAX_GUEST_UIDS = 32;

/** Debian's first uid for a package's system user (below: the base system's static ones). */
const FIRST_DYNAMIC_UID = 100;
/** nobody, which daemons drop to. */
const NOBODY = 65534;
/** An image's /etc/passwd is a few KiB; a template's build is as hostile as a guest, so more is not read. */
const MAX_PASSWD_BYTES = 256 * 1024;

const cache = new Map<string, Promise<number[]>>();

/** The uids of the image at `imageRootfs` (a built image does not change: read once per image). */
export function guestUidsOf(imageRootfs: string): Promise<number[]> {
  let uids = cache.get(imageRootfs);
  if (!uids) {
    uids = readGuestUids(imageRootfs);
    cache.set(imageRootfs, uids);
    uids.catch(() => cache.delete(imageRootfs)); // read again next time
  }
  return uids;
}

async function readGuestUids(imageRootfs: string): Promise<number[]> {
  return chooseGuestUids(await readPasswd(imageRootfs));
}

/**
 * Root, the desktop user and nobody; then the uids `passwd` names in its order, those of
 * packages' daemons (from 100: sshd, messagebus, ...) before Debian's static ones (games,
 * news, uucp: never a process's); each once, at most MAX_GUEST_UIDS.
 */
export function chooseGuestUids(passwd: string): number[] {
  const named: number[] = [];
  for (const line of passwd.split('\n')) {
    const uid = line.split(':')[2];
    if (uid !== undefined && /^\d{1,5}$/.test(uid) && Number(uid) <= NOBODY) named.push(Number(uid));
  }
  const daemons = named.filter((uid) => uid >= FIRST_DYNAMIC_UID);
  const statics = named.filter((uid) => uid < FIRST_DYNAMIC_UID);
  return [...new Set([0, GUEST_UID, NOBODY, ...daemons, ...statics])].slice(0, MAX_GUEST_UIDS);
}

/** The image's /etc/passwd, never through a link out of its root (a template could plant one); '' if it has none. */
async function readPasswd(imageRootfs: string): Promise<string> {
  const root = await realpath(imageRootfs);
  const file = await realpath(path.join(root, 'etc', 'passwd')).catch(() => undefined);
  if (!file?.startsWith(root + path.sep)) return '';
  const info = await lstat(file);
  if (!info.isFile() || info.size > MAX_PASSWD_BYTES) return '';
  return readFile(file, 'utf8');
}

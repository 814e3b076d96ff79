import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import os from 'node:os';
import { run } from '../../util/exec.js';

/** The host ids a sandbox's user namespace maps guest ids 0..size-1 onto. */
export interface IdRange {
  /** The host uid (and gid) of guest root. */
  first: number;
  size: number;
}

const PYTHON = '/usr/bin/python3';

/** Why idmapped overlay layers cannot be made on this host, if they cannot. */
export function idmappedMountsUnavailable(release = os.release()): string | undefined {
  const [major = 0, minor = 0] = release.split(/[.-]/).map(Number);
  if (major < 5 || (major === 5 && minor < 19)) {
    return `its sandboxes' user namespaces need Linux >= 5.19 (overlayfs over idmapped mounts); this kernel is ${release}`;
  }
  if (!existsSync(PYTHON)) return `${PYTHON} was not found (it makes the idmapped mounts): install it with \`apt-get install python3\``;
  return undefined;
}

/**
 * Makes `source` visible at `target`, read-only, with its owners shifted into an id range: a file the
 * host sees as uid u is seen through `target` as uid first + u (an idmapped mount,
 * mount_setattr(MOUNT_ATTR_IDMAP), Linux >= 5.12; overlayfs accepts one as a lower layer
 * from 5.19). Nothing is copied or chowned: the shared image rootfs, owned by host 0 and
 * 1000, shows through as the sandbox's own guest root and desktop user, at no cost per file.
 *
 * Neither Debian 12's runc (1.1: idmapped mounts arrive in the OCI spec with 1.2) nor its
 * mount(8) (util-linux 2.38; X-mount.idmap is 2.39) can make one, and Node has no way to
 * call the three system calls: a few lines of Python (ctypes, in Debian's base system) do,
 * ~40 ms for all mounts of a sandbox at once. The mapping is taken from a user namespace
 * made for the purpose by a child that exits once the mounts hold it.
 *
 * Read-only (MOUNT_ATTR_RDONLY, with nosuid and nodev), set in the same mount_setattr as the
 * mapping, so the view is never writable for an instant: it is a view of data every session
 * shares (the image), and nothing writes through it (the overlay only reads its lower
 * layer; the guest's config is written in the config dir itself). A write, delete or rename
 * through it, by anyone on the host, fails with EROFS, so even a recursive delete of a
 * session directory that reached into a view still mounted could not empty the image.
 *
 * `writable`: for a template build's own tree only (templates/build-container.ts), which its
 * steps write as the image's root; still nosuid and nodev.
 */
export async function mountIdmapped(
  range: IdRange,
  mounts: ReadonlyArray<{ source: string; target: string }>,
  options: { writable?: boolean } = {},
): Promise<void> {
  await Promise.all(mounts.map((m) => mkdir(m.target, { recursive: true, mode: 0o755 })));
  const args = mounts.flatMap((m) => [m.source, m.target]);
  // -I -S: nothing from the environment, the user site or site-packages is imported. The
  // script comes on stdin ("-"), so an error names the mounts, not the script.
  await run([PYTHON, '-I', '-S', '-', options.writable ? 'rw' : 'ro', String(range.first), String(range.size), ...args], { input: IDMAP_SCRIPT });
}

/** argv (after "-"): ro|rw first size (source target)... */
const IDMAP_SCRIPT = String.raw`
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SYS_open_tree, SYS_move_mount, SYS_mount_setattr = 428, 429, 442
AT_FDCWD, AT_EMPTY_PATH = -100, 0x1000
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 1, 0o2000000
MOVE_MOUNT_F_EMPTY_PATH, MOUNT_ATTR_IDMAP, CLONE_NEWUSER = 4, 0x00100000, 0x10000000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 0x1, 0x2, 0x4

class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

def check(result, what):
    if result < 0:
        sys.stderr.write("%s: %s\n" % (what, os.strerror(ctypes.get_errno())))
        sys.exit(1)
    return result

readonly = sys.argv.pop(1) != "rw"
first, size = int(sys.argv[1]), int(sys.argv[2])
ready_r, ready_w = os.pipe()
done_r, done_w = os.pipe()
child = os.fork()
if child == 0:
    os.close(ready_r); os.close(done_w)
    ok = libc.unshare(CLONE_NEWUSER) == 0
    os.write(ready_w, b"1" if ok else b"0")
    os.read(done_r, 1)
    os._exit(0)
os.close(ready_w); os.close(done_r)
try:
    if os.read(ready_r, 1) != b"1":
        sys.stderr.write("unshare(CLONE_NEWUSER) failed\n"); sys.exit(1)
    for name in ("uid_map", "gid_map"):
        with open("/proc/%d/%s" % (child, name), "w") as f:
            f.write("0 %d %d\n" % (first, size))
    userns = os.open("/proc/%d/ns/user" % child, os.O_RDONLY | os.O_CLOEXEC)
finally:
    os.close(done_w)
    os.waitpid(child, 0)
attr = MountAttr(MOUNT_ATTR_IDMAP | (MOUNT_ATTR_RDONLY if readonly else 0) | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, userns)
args = sys.argv[3:]
for source, target in zip(args[0::2], args[1::2]):
    fd = check(libc.syscall(SYS_open_tree, AT_FDCWD, source.encode(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC), "open_tree " + source)
    check(libc.syscall(SYS_mount_setattr, fd, b"", AT_EMPTY_PATH, ctypes.byref(attr), ctypes.sizeof(attr)), "mount_setattr " + source)
    check(libc.syscall(SYS_move_mount, fd, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH), "move_mount " + target)
    os.close(fd)
`;

import path from 'node:path';
import type { SnapshotFiles } from '../boot/snapshot-steps.js';
import { assertUnixSocketPath } from '../unix-socket-path.js';
import { assertJailId } from './jail-id.js';
import { JAILED_API_SOCKET } from './jailer-args.js';

/**
 * How a file gets into the chroot. Firecracker, jailed, can open nothing outside it.
 * - `link`: a hard link to a shared, read-only file (kernel, initrd, the snapshot base's
 *   snapshot). Costs nothing; it needs the source on the same filesystem as the chroot base,
 *   so whoever applies the layout falls back to a copy on EXDEV.
 * - `copy`: the session's own writable rootfs, made straight inside the chroot (a reflink
 *   where the filesystem can, `cp --reflink=auto`), and owned by the jail's uid:gid, since
 *   Firecracker needs read and write access to it.
 * - `share`: a session's volume, hard-linked and never copied (a copy would lose its writes):
 *   on another filesystem than the chroot base, the start fails saying so.
 */
export type PlacementMethod = 'link' | 'copy' | 'share';

export interface ChrootFile {
  /** Where the file is on the host now. */
  source: string;
  /** Where it must be put: a host path inside the chroot. */
  target: string;
  method: PlacementMethod;
  /** Whether the jailed Firecracker writes to it (then it must own it). */
  writable: boolean;
  /**
   * Whether the jail's uid:gid must own it: the files it writes, and the session's config
   * drive, which holds the session's host key and so is readable by its owner only.
   */
  ownedByJail: boolean;
}

export interface ChrootInputs {
  chrootBaseDir: string;
  firecrackerBin: string;
  id: string;
  kernel: string;
  initrd?: string;
  /** What the session's rootfs is copied from: the image's ext4 for a cold boot, or the snapshot base's disk as it was snapshotted. */
  rootfsSource: string;
  /** The session's config drive, built in its session dir. */
  configDrive: string;
  /** The snapshot base's files (host paths), when this VM is restored from it. */
  restoreFrom?: SnapshotFiles;
  /** The session's volumes' files (host paths), in the order of its list. */
  volumes?: ReadonlyArray<{ file: string; readOnly: boolean }>;
}

export interface ChrootLayout {
  /** `<base>/<exec name>/<id>`: the jailer makes it; removing it on destroy is ours to do. */
  jailDir: string;
  /** `<jailDir>/root`: `/` as the jailed Firecracker sees it. */
  rootDir: string;
  /** Directories to make inside the chroot, owned by the jail's uid:gid, before Firecracker starts. */
  directories: string[];
  files: ChrootFile[];
  /** The API socket from the host (for the client) and inside the jail (for `--api-sock`). */
  apiSocket: { hostPath: string; jailPath: string };
  /** The vsock socket from the host (to connect to the guest) and inside the jail (for the API). */
  vsockSocket: { hostPath: string; jailPath: string };
  /**
   * Snapshot files: where a base VM writes its snapshot (`jailPaths`, given to
   * `PUT /snapshot/create`) and where the host then finds them (`hostPaths`); for a restore,
   * where the snapshot base's files are linked in (`jailPaths`, given to `PUT /snapshot/load`).
   */
  snapshot: { hostPaths: SnapshotFiles; jailPaths: SnapshotFiles };
  /** The paths to give the Firecracker API: all inside the jail. */
  vmPaths: VmPaths;
}

/** The files a VM boots from and its vsock socket, as the Firecracker API is given them. */
export interface VmPaths {
  kernelImagePath: string;
  initrdPath?: string;
  rootfsPath: string;
  configDrivePath: string;
  vsockUdsPath: string;
  volumePaths: Array<{ path: string; readOnly: boolean }>;
}

/**
 * Fixed names inside every chroot. They must not vary between VMs: a snapshot records the
 * paths of its drives and vsock socket, and a clone restored in its own chroot finds its own
 * copies at the very same paths. That is what makes one snapshot base serve every session.
 */
const IN_JAIL = {
  kernel: '/vmlinux',
  initrd: '/initrd.img',
  rootfs: '/rootfs.ext4',
  configDrive: '/config.ext4',
  vsock: '/run/vsock.sock',
  snapshotState: '/snapshot/vmstate',
  snapshotMemory: '/snapshot/memory',
  volumes: '/volumes',
} as const;

/** The vsock socket inside every jail (a resume from disk gives it again: `vsock_override`). */
export const JAILED_VSOCK_SOCKET = IN_JAIL.vsock;

/** The vsock socket of the jail in `jailDir`, as the host sees it. */
export function jailedVsockSocket(jailDir: string): string {
  return path.join(jailDir, 'root', IN_JAIL.vsock);
}

/**
 * Where everything goes in a VM's chroot, and the paths Firecracker must then be given.
 * Pure: applying it (mkdir, link, copy, chown) is the runtime's job, and so is removing
 * `jailDir` on destroy. Throws if a socket path would be too long to use.
 */
export function chrootLayout(inputs: ChrootInputs): ChrootLayout {
  assertJailId(inputs.id);
  if (!path.isAbsolute(inputs.chrootBaseDir)) throw new Error(`the chroot base dir must be absolute, got ${inputs.chrootBaseDir}`);
  const jailDir = path.join(inputs.chrootBaseDir, path.basename(inputs.firecrackerBin), inputs.id);
  const rootDir = path.join(jailDir, 'root');
  const hostPath = (jailPath: string) => path.join(rootDir, jailPath);

  const apiSocket = { hostPath: hostPath(JAILED_API_SOCKET), jailPath: JAILED_API_SOCKET };
  const vsockSocket = { hostPath: hostPath(IN_JAIL.vsock), jailPath: IN_JAIL.vsock };
  // The host connects to these through the chroot, so the long (host) form is the one that must fit.
  assertUnixSocketPath(apiSocket.hostPath, 'the jailed Firecracker API socket');
  assertUnixSocketPath(vsockSocket.hostPath, 'the jailed vsock socket');

  const files: ChrootFile[] = [
    { source: inputs.kernel, target: hostPath(IN_JAIL.kernel), method: 'link', writable: false, ownedByJail: false },
    ...(inputs.initrd ? [{ source: inputs.initrd, target: hostPath(IN_JAIL.initrd), method: 'link' as const, writable: false, ownedByJail: false }] : []),
    { source: inputs.rootfsSource, target: hostPath(IN_JAIL.rootfs), method: 'copy', writable: true, ownedByJail: true },
    { source: inputs.configDrive, target: hostPath(IN_JAIL.configDrive), method: 'link', writable: false, ownedByJail: true },
  ];
  // Owned by the jail while the VM runs (Firecracker opens them as its uid); the runtime gives them back to root after.
  const volumePaths = (inputs.volumes ?? []).map((v, i) => ({ path: `${IN_JAIL.volumes}/vol${i}.ext4`, readOnly: v.readOnly }));
  (inputs.volumes ?? []).forEach((v, i) =>
    files.push({ source: v.file, target: hostPath(volumePaths[i]?.path as string), method: 'share', writable: !v.readOnly, ownedByJail: !v.readOnly }),
  );
  const snapshot = {
    hostPaths: { snapshotPath: hostPath(IN_JAIL.snapshotState), memFilePath: hostPath(IN_JAIL.snapshotMemory) },
    jailPaths: { snapshotPath: IN_JAIL.snapshotState, memFilePath: IN_JAIL.snapshotMemory },
  };
  if (inputs.restoreFrom) {
    files.push(
      // Shared by every clone of the snapshot base: readable by the jails' group, owned by root.
      { source: inputs.restoreFrom.snapshotPath, target: snapshot.hostPaths.snapshotPath, method: 'link', writable: false, ownedByJail: false },
      { source: inputs.restoreFrom.memFilePath, target: snapshot.hostPaths.memFilePath, method: 'link', writable: false, ownedByJail: false },
    );
  }

  return {
    jailDir,
    rootDir,
    // /run for the API and vsock sockets, /snapshot for a snapshot base's files.
    directories: [hostPath('/run'), hostPath('/snapshot'), ...(volumePaths.length > 0 ? [hostPath(IN_JAIL.volumes)] : [])],
    files,
    apiSocket,
    vsockSocket,
    snapshot,
    vmPaths: {
      kernelImagePath: IN_JAIL.kernel,
      ...(inputs.initrd ? { initrdPath: IN_JAIL.initrd } : {}),
      rootfsPath: IN_JAIL.rootfs,
      configDrivePath: IN_JAIL.configDrive,
      vsockUdsPath: IN_JAIL.vsock,
      volumePaths,
    },
  };
}

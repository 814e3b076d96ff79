import { chmod, chown, lstat, mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { GuestImage } from '../../../guest/image/builder.js';
import type { SnapshotFiles } from '../boot/snapshot-steps.js';
import type { SnapshotBaseAddress } from './clone-rotation.js';

/** Bumped when what a snapshot base holds changes: an older snapshot base is then built anew. */
const SNAPSHOT_BASE_FORMAT = 3;
const MANIFEST = 'template.json';

/**
 * A snapshot base, kept next to its guest image (it is only valid for that image):
 * `<image dir>/firecracker-template-<w>x<h>/` holds the VM state and memory files, the root
 * disk as it was when the VM was paused (a clone's disk must match the memory it resumes),
 * and the snapshot base's keys, which a clone carries until it is rotated (clone-rotation.ts).
 */
export interface SnapshotBase {
  dir: string;
  files: SnapshotFiles;
  rootfs: string;
  keys: { clientPrivateKey: string; hostPublicKey: string };
  screen: { width: number; height: number };
  /** The address the snapshot base booted with, which its clones wake up with (tcp). */
  address: SnapshotBaseAddress;
  /** tcp: it has a NIC, and so have its clones; vsock: neither has one, they are reached over vsock. */
  transport: SnapshotBaseTransport;
}

export type SnapshotBaseTransport = 'tcp' | 'vsock';

interface Manifest {
  format: number;
  imageHash: string;
  screen: { width: number; height: number };
  keys: { clientPrivateKey: string; hostPublicKey: string };
  address: SnapshotBaseAddress;
  transport: SnapshotBaseTransport;
}

export function snapshotBaseDir(image: GuestImage, screen: { width: number; height: number }, transport: SnapshotBaseTransport = 'tcp'): string {
  return path.join(image.dir, `firecracker-template-${transport === 'vsock' ? 'vsock-' : ''}${screen.width}x${screen.height}`);
}

function describe(dir: string, manifest: Manifest): SnapshotBase {
  return {
    dir,
    files: { snapshotPath: path.join(dir, 'vmstate'), memFilePath: path.join(dir, 'memory') },
    rootfs: path.join(dir, 'rootfs.ext4'),
    keys: manifest.keys,
    screen: manifest.screen,
    address: manifest.address,
    transport: manifest.transport,
  };
}

/** The snapshot base in `dir`, if it was completed for this image in the current format. */
export async function loadSnapshotBase(dir: string, image: GuestImage, transport: SnapshotBaseTransport = 'tcp'): Promise<SnapshotBase | undefined> {
  let manifest: Manifest;
  try {
    manifest = JSON.parse(await readFile(path.join(dir, MANIFEST), 'utf8')) as Manifest;
  } catch {
    return undefined;
  }
  if (manifest.format !== SNAPSHOT_BASE_FORMAT || manifest.imageHash !== image.hash || manifest.transport !== transport) return undefined;
  const snapshotBase = describe(dir, manifest);
  for (const file of [snapshotBase.files.snapshotPath, snapshotBase.files.memFilePath, snapshotBase.rootfs]) {
    if (
      !(await stat(file).then(
        (s) => s.isFile(),
        () => false,
      ))
    )
      return undefined;
  }
  return snapshotBase;
}

/**
 * Moves a paused base VM's files into `dir`, all or nothing (a temporary directory
 * renamed at the end). Every VM runs under a uid/gid of its own, so no group can stand for
 * "the jails": the files are root's and mode 0644, and what keeps them from anyone else is
 * the way to them. `dir` is root's alone (0700); a clone reaches them through the hard
 * links in its own jail, whose root only its own uid can enter (0750). The memory
 * file holds the snapshot base's host key, which every clone replaces at rotation.
 */
export async function saveSnapshotBase(
  dir: string,
  image: GuestImage,
  parts: {
    files: SnapshotFiles;
    rootfs: string;
    keys: Manifest['keys'];
    screen: Manifest['screen'];
    address: SnapshotBaseAddress;
    transport: SnapshotBaseTransport;
  },
): Promise<SnapshotBase> {
  const building = `${dir}.building`;
  await rm(building, { recursive: true, force: true });
  await mkdir(building, { mode: 0o700 });
  await chown(building, 0, 0);
  try {
    const manifest: Manifest = {
      format: SNAPSHOT_BASE_FORMAT,
      imageHash: image.hash,
      screen: parts.screen,
      keys: parts.keys,
      address: parts.address,
      transport: parts.transport,
    };
    const target = describe(building, manifest);
    for (const [from, to] of [
      [parts.files.snapshotPath, target.files.snapshotPath],
      [parts.files.memFilePath, target.files.memFilePath],
      [parts.rootfs, target.rootfs],
    ] as const) {
      await rename(from, to);
      // Made in the template VM's jail, by its user: a link there would have the chown and
      // chmod below make whatever it names root's and world-readable. Only a regular file is
      // kept (in `building`, root's alone, nothing can swap it any more).
      if (!(await lstat(to)).isFile()) throw new Error(`the snapshot base's ${path.basename(to)} is not a regular file: not what Firecracker writes`);
      await chown(to, 0, 0);
      await chmod(to, 0o644);
    }
    // The snapshot base's private client key opens nothing but sbx-rekey on a clone not yet rotated.
    await writeFile(path.join(building, MANIFEST), JSON.stringify(manifest, null, 2), { mode: 0o600 });
    await rm(dir, { recursive: true, force: true });
    await rename(building, dir);
    return describe(dir, manifest);
  } catch (err) {
    await rm(building, { recursive: true, force: true });
    throw err;
  }
}

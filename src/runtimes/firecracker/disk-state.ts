/**
 * The files of a Firecracker VM paused to disk (docs/pause.md), and the order they are
 * written in so that a crash leaves the old state (the VM, paused in memory) or the new one
 * (a whole snapshot), never a half-written one that is trusted:
 *
 * - the snapshot's two files (`PUT /snapshot/create`): the microVM state and the guest
 *   memory, where the VMM can write them (in its jail's `/snapshot`, or the session dir
 *   unjailed). Their names are ours, never a client's, and not the snapshot base's
 *   (`/snapshot/vmstate`, `/snapshot/memory`: a clone's jail holds links to those).
 * - `fc-paused.json` in the session dir (root's, 0700): the marker. Written (temp, fsync,
 *   rename, fsync of the dir) only once both snapshot files are whole and fsync'd; without it
 *   the snapshot files are leftovers and are removed.
 */
import { constants } from 'node:fs';
import { open, readFile, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fsyncPath, PARTIAL_SUFFIX, writeDurably } from '../../host/fsync.js';
import type { ConsoleLogLimits } from '../console-log.js';
import type { SnapshotFiles } from './boot/snapshot-steps.js';
import { removeInJail } from './jailer/jail-files.js';

const MARKER_FILE = 'fc-paused.json';
/** A marker is a few numbers: anything bigger is not one of ours. */
const MAX_MARKER_BYTES = 16 * 1024;
/** Inside the jail (the chroot's `/snapshot`, the jail's own): the paths the VMM is given. */
const IN_JAIL: SnapshotFiles = { snapshotPath: '/snapshot/paused-vmstate', memFilePath: '/snapshot/paused-memory' };

/** Where a session's pause files are: as the VMM is given them, and as the host reaches them. */
export interface PauseFiles {
  vmPaths: SnapshotFiles;
  hostPaths: SnapshotFiles;
  /** The jail's root (the VM user's: removals in it follow no link), or undefined unjailed. */
  jailRoot: string | undefined;
}

/** `jailRoot`: the jail's `<jail>/root`, or undefined for a VMM run unjailed (its files in the session dir). */
export function pauseFilesOf(sessionDir: string, jailRoot: string | undefined): PauseFiles {
  if (jailRoot === undefined) {
    const unjailed = { snapshotPath: path.join(sessionDir, 'paused-vmstate'), memFilePath: path.join(sessionDir, 'paused-memory') };
    return { vmPaths: unjailed, hostPaths: unjailed, jailRoot };
  }
  return {
    vmPaths: IN_JAIL,
    hostPaths: { snapshotPath: path.join(jailRoot, IN_JAIL.snapshotPath), memFilePath: path.join(jailRoot, IN_JAIL.memFilePath) },
    jailRoot,
  };
}

/** What a resume needs to start the VMM again, and what the pause wrote. */
export interface PauseMarker {
  /** Whether the VM ran jailed (then `user` is the jail's uid/gid, which its TAP belongs to). */
  jailed: boolean;
  user?: { uid: number; gid: number };
  /** The guest's memory and vCPUs (`GET /machine-config` at the pause): the jail's cgroup limits again. */
  memoryMiB: number;
  vcpus: number;
  /** The session's console log limits, and where a crash's log is kept (its console is read again by the resume). */
  consoleLog: ConsoleLogLimits;
  logsDir: string;
  /** The snapshot files' size on disk (allocated blocks: the memory file is sparse). */
  bytes: number;
  /** When the snapshot was written (ISO 8601). */
  since: string;
}

export async function writeMarker(sessionDir: string, marker: PauseMarker): Promise<void> {
  await writeDurably(path.join(sessionDir, MARKER_FILE), (partial) => writeFile(partial, JSON.stringify(marker), { mode: 0o600 }));
}

/** The marker, if a whole one is there (a malformed one is not ours: undefined, as none). */
export async function readMarker(sessionDir: string): Promise<PauseMarker | undefined> {
  const file = path.join(sessionDir, MARKER_FILE);
  const info = await stat(file).catch(() => undefined);
  if (!info?.isFile() || info.size > MAX_MARKER_BYTES) return undefined;
  const parsed = JSON.parse(await readFile(file, 'utf8').catch(() => 'null')) as Partial<PauseMarker> | null;
  if (!parsed || typeof parsed.jailed !== 'boolean' || typeof parsed.since !== 'string') return undefined;
  const log = parsed.consoleLog;
  const numbers = [parsed.memoryMiB, parsed.vcpus, parsed.bytes, log?.maxBytes, log?.keptMaxCount, log?.keptMaxBytes];
  if (typeof parsed.logsDir !== 'string' || !numbers.every((n) => typeof n === 'number' && Number.isInteger(n) && n >= 0)) return undefined;
  const user = parsed.user;
  if (parsed.jailed && !(user && Number.isInteger(user.uid) && Number.isInteger(user.gid) && user.uid > 0 && user.gid > 0)) return undefined;
  return parsed as PauseMarker;
}

/**
 * Removes the marker (first: from then on nothing trusts the snapshot) and the snapshot files.
 * `markerToo` false: only a pause's leftovers (no whole marker: a pause killed half-way).
 */
export async function removePauseFiles(sessionDir: string, files: PauseFiles, markerToo: boolean): Promise<void> {
  const marker = path.join(sessionDir, MARKER_FILE);
  await rm(`${marker}${PARTIAL_SUFFIX}`, { force: true });
  if (markerToo) {
    await rm(marker, { force: true });
    await fsyncPath(sessionDir);
  }
  if (files.jailRoot === undefined) {
    await rm(files.hostPaths.snapshotPath, { force: true });
    await rm(files.hostPaths.memFilePath, { force: true });
    return;
  }
  await removeInJail(files.jailRoot, files.vmPaths.snapshotPath);
  await removeInJail(files.jailRoot, files.vmPaths.memFilePath);
}

/** fsyncs the snapshot files (Firecracker writes them, it does not sync them) and answers their size on disk. */
export async function syncedSize(files: SnapshotFiles): Promise<number> {
  let bytes = 0;
  for (const file of [files.snapshotPath, files.memFilePath]) {
    // Written by the VMM, in its jail: not a link, and never a FIFO an open would wait on for good.
    const handle = await open(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    try {
      if (!(await handle.stat()).isFile()) throw new Error(`${file} is not a regular file: not a snapshot Firecracker wrote`);
      await handle.sync();
      // Allocated blocks, not the apparent size: a guest's untouched memory is a hole in the file.
      bytes += (await handle.stat()).blocks * 512;
    } finally {
      await handle.close();
    }
  }
  return bytes;
}

/** The most a pause to disk of a VM of `memoryMiB` writes, MiB: the memory file (its guest's size) and the state file. */
export function pauseStateMaxMiB(memoryMiB: number): number {
  return memoryMiB + 32;
}

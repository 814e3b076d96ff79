/**
 * Snapshots of a running Firecracker session for forks (docs/snapshots.md): the VM is paused
 * (`PATCH /vm Paused`), its memory and device state written by `PUT /snapshot/create` (Full)
 * into its jail, its rootfs copied (sparse) while it stays paused, so that disk and memory are
 * of one moment, and then it runs on (`PATCH /vm Resumed`), on failure too.
 *
 * A snapshot's files (in <stateDir>/snapshots/<id>, root's 0700; nothing of them is named by a
 * client): `vmstate` and `memory` (moved out of the jail, root's and 0644: a fork's jail reaches
 * them through hard links, as a clone does its snapshot base's), `rootfs.ext4` (root's, 0600: a
 * fork's jail gets a copy) and `fork.json` last (the source's address, its host public key and
 * its rekey key: what a fork needs to reach and re-key the restored guest, snapshot/fork.ts).
 */
import { chmod, chown, lstat, readFile, rename } from 'node:fs/promises';
import path from 'node:path';
import { readSessionKeys } from '../../../transport/ssh-keys.js';
import { run } from '../../../util/exec.js';
import { gatewayOf, REKEY_KEY_FILE, writeForkInfo } from '../../qemu/snapshot.js';
import type { PauseTarget } from '../../runtime.js';
import { FirecrackerClient, SNAPSHOT_CALL_TIMEOUT_MS } from '../api/client.js';
import type { SnapshotFiles } from '../boot/snapshot-steps.js';
import { syncedSize } from '../disk-state.js';
import { removeInJail } from '../jailer/jail-files.js';
import { JAILED_API_SOCKET } from '../jailer/jailer-args.js';

/**
 * Where the VMM writes a fork snapshot: at its jail's root (its own, so only the last component
 * can be a link, which the move out does not follow and the check after refuses); not the
 * pause's names (`/snapshot/paused-*`) nor a snapshot base's (`/snapshot/vmstate`, `/snapshot/memory`).
 */
export const FORK_SNAPSHOT_IN_JAIL: SnapshotFiles = { snapshotPath: '/fork-vmstate', memFilePath: '/fork-memory' };
/** The rootfs in every jail (chroot-layout.ts). */
const ROOTFS_IN_JAIL = 'rootfs.ext4';
const COPY_TIMEOUT_MS = 180_000;

/** A snapshot's files, as a fork's jail layout takes them (the state and memory linked, the rootfs copied). */
export function forkSnapshotFiles(dir: string): { files: SnapshotFiles; rootfs: string } {
  return { files: { snapshotPath: path.join(dir, 'vmstate'), memFilePath: path.join(dir, 'memory') }, rootfs: path.join(dir, ROOTFS_IN_JAIL) };
}

export interface SessionSnapshotDeps {
  /** The session's jail root (`<jails>/<prefix><id>/root`); undefined unjailed, which cannot be forked. */
  jailRoot: string | undefined;
}

/** Saves the VM's memory, state and disk into `dir`; the VM runs on, on failure too. */
export async function saveFirecrackerSnapshot(deps: SessionSnapshotDeps, target: PauseTarget, dir: string): Promise<void> {
  const { sessionId, sessionDir, endpoint } = target;
  const jailRoot = deps.jailRoot;
  if (jailRoot === undefined) throw new Error('an unjailed Firecracker VM cannot be forked (a fork finds its disks at the jail paths its snapshot names)');
  if (!endpoint || !('host' in endpoint) || (endpoint.transport ?? 'tcp') !== 'tcp') {
    throw new Error(`session ${sessionId} is not reached over TCP: a fork could not be re-addressed`);
  }
  const keys = await readSessionKeys(sessionDir, path.join(sessionDir, 'config'));
  const rekeyPrivateKey = await readFile(path.join(sessionDir, REKEY_KEY_FILE), 'utf8').catch(() => {
    throw new Error('the session was started without a rekey key (by an older orchestrator): it cannot be forked');
  });
  const api = new FirecrackerClient(path.join(jailRoot, JAILED_API_SOCKET));
  const inJail = (file: string) => path.join(jailRoot, file);
  const saved = forkSnapshotFiles(dir);
  let memoryMiB: number;
  try {
    if ((await api.getInstanceInfo()).state !== 'Running') throw new Error('the VM is not running (paused?): resume it first');
    memoryMiB = (await api.getMachineConfig()).mem_size_mib;
    await removeForkFiles(jailRoot);
    await api.patchVm({ state: 'Paused' });
    try {
      await api.putSnapshotCreate(
        { snapshot_type: 'Full', snapshot_path: FORK_SNAPSHOT_IN_JAIL.snapshotPath, mem_file_path: FORK_SNAPSHOT_IN_JAIL.memFilePath },
        { timeoutMs: SNAPSHOT_CALL_TIMEOUT_MS },
      );
      // Regular files only (opened without following a link), synced: Firecracker does not sync them.
      await syncedSize({ snapshotPath: inJail(FORK_SNAPSHOT_IN_JAIL.snapshotPath), memFilePath: inJail(FORK_SNAPSHOT_IN_JAIL.memFilePath) });
      // Still paused, its drives flushed by the snapshot: the rootfs is what the memory saw.
      await run(['cp', '--sparse=always', '--no-dereference', '--', inJail(ROOTFS_IN_JAIL), saved.rootfs], { timeoutMs: COPY_TIMEOUT_MS });
    } finally {
      await api.patchVm({ state: 'Resumed' }).catch(() => undefined);
    }
    await takeOwnership(saved.rootfs, 0o600);
    await moveOutOfJail(inJail(FORK_SNAPSHOT_IN_JAIL.snapshotPath), saved.files.snapshotPath);
    await moveOutOfJail(inJail(FORK_SNAPSHOT_IN_JAIL.memFilePath), saved.files.memFilePath);
  } catch (err) {
    throw new Error(`the VM could not be snapshotted, so it goes on running: ${(err as Error).message}`, { cause: err });
  } finally {
    api.close();
    await removeForkFiles(jailRoot).catch(() => undefined);
  }
  await writeForkInfo(dir, {
    memoryMiB,
    address: { guest: endpoint.host, gateway: gatewayOf(endpoint.host), prefixLength: 30 },
    hostPublicKey: keys.hostPublicKey,
    rekeyPrivateKey,
  });
}

/** What a snapshot left in the jail (a failed one, or one killed half-way). */
export async function removeForkFiles(jailRoot: string): Promise<void> {
  await removeInJail(jailRoot, FORK_SNAPSHOT_IN_JAIL.snapshotPath);
  await removeInJail(jailRoot, FORK_SNAPSHOT_IN_JAIL.memFilePath);
}

/** Moves a file the VMM wrote out of its jail into the snapshot (a copy across filesystems), root's and readable by a fork's jail. */
async function moveOutOfJail(from: string, to: string): Promise<void> {
  await rename(from, to).catch(async (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EXDEV') throw err;
    await run(['cp', '--sparse=always', '--no-dereference', '--', from, to], { timeoutMs: COPY_TIMEOUT_MS });
  });
  await takeOwnership(to, 0o644);
}

/** Made in the VM's jail, by its user: only a regular file is kept (a link would have chown and chmod act on what it names). */
async function takeOwnership(file: string, mode: number): Promise<void> {
  if (!(await lstat(file)).isFile()) throw new Error(`the snapshot's ${path.basename(file)} is not a regular file: not what Firecracker writes`);
  await chown(file, 0, 0);
  await chmod(file, mode);
}

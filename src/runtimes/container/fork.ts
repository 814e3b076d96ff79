import { chmod, copyFile, lchown, link, lstat, mkdir, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { GUEST_SSH_PORT } from '../../guest/contract.js';
import type { FreezerLayout } from '../../host/freezer.js';
import type { TcpEndpoint } from '../../transport/endpoint.js';
import { publicKeyBlob, readSessionKeys } from '../../transport/ssh-keys.js';
import { run } from '../../util/exec.js';
import type { ConsolePipe } from '../console-pipe.js';
import { newMachineId } from '../firecracker/ssh-keys/key-rotation.js';
import { rewriteForFork } from './criu-images.js';
import { restoreFromImages, type CheckpointDeps, type RestoredInit } from './criu-run.js';
import type { IdRange } from './idmapped-mount.js';
import type { SandboxSpec } from '../runtime.js';
import { reloadGuestSshd } from './sshd-reload.js';
import type { ContainerSnapshot } from './snapshot.js';
import { mountLayerFile } from './writable-layer.js';

/**
 * A fork of a container (docs/snapshots.md#containers): a new session's container restored
 * from a snapshot (snapshot.ts) instead of started, with everything of its own:
 *
 * - its disk: the snapshot's layer copied, its files' owners moved from the source's host id
 *   range to the fork's (the guest's ids stay what they were), and a new /etc/machine-id;
 * - its keys: its /sandbox/config is its own config dir's view, bound by its own bundle: the
 *   guest's sshd reads its authorized keys there at each login, and its host key once SIGHUP
 *   makes it re-exec (sshd-reload.ts), before anything connects to it;
 * - its user namespace in the fork's range and its hostname (criu's images rewritten in a copy
 *   of the fork's own: criu-images.ts), and its address (its eth0, moved in as at a resume).
 */

/** Copies the snapshot's disk for the session and mounts it, its owners moved into the session's range. */
export async function forkLayer(snapshotDir: string, layerFile: string, layer: string, from: IdRange, to: IdRange): Promise<void> {
  await run(['cp', '--sparse=always', '--', path.join(snapshotDir, 'layer.ext4'), layerFile]);
  await mountLayerFile(layerFile, layer);
  await shiftOwners(layer, from, to);
}

/**
 * Moves every owner (uid and gid) in `from` to the same place in `to`, down the tree from
 * `root`, without following a link. Nothing of the guest runs while it is done (a fork's disk
 * before its restore), so nothing changes under it. A chown takes set-user-ID and set-group-ID
 * bits (and file capabilities) away: the bits are set again.
 */
export async function shiftOwners(root: string, from: IdRange, to: IdRange): Promise<void> {
  if (from.first === to.first) return;
  const shift = (id: number) => (id >= from.first && id < from.first + from.size ? id - from.first + to.first : id);
  const visit = async (file: string): Promise<void> => {
    const st = await lstat(file);
    const [uid, gid] = [shift(st.uid), shift(st.gid)];
    if (uid !== st.uid || gid !== st.gid) {
      await lchown(file, uid, gid);
      if (!st.isSymbolicLink() && (st.mode & 0o6000) !== 0) await chmod(file, st.mode & 0o7777);
    }
    if (st.isDirectory()) for (const name of await readdir(file)) await visit(path.join(file, name));
  };
  await visit(root);
}

/**
 * A machine id of the fork's own (machine-id(5)), written into its root before it runs: a new
 * file (O_EXCL, never through a link the guest left) renamed over /etc/machine-id, guest root's.
 */
export async function writeMachineId(rootfs: string, ids: IdRange): Promise<void> {
  const etc = path.join(rootfs, 'etc');
  if (!(await lstat(etc)).isDirectory()) throw new Error("the snapshot's etc directory is a link (or not a directory): it is not forked");
  const temp = path.join(etc, `.machine-id.sbx-${randomBytes(6).toString('hex')}`);
  await writeFile(temp, `${newMachineId()}\n`, { mode: 0o444, flag: 'wx' });
  await lchown(temp, ids.first, ids.first);
  await rename(temp, path.join(etc, 'machine-id'));
}

export interface ForkRestore {
  spec: SandboxSpec;
  snapshotDir: string;
  snapshot: ContainerSnapshot;
  /** The fork's own id range (its bundle's). */
  ids: IdRange;
  consolePipe: ConsolePipe;
  freezer: FreezerLayout;
}

/**
 * Restores the fork's container from the snapshot's images (a copy of its own, rewritten) and
 * has its sshd take the fork's host key; its init (told to `restored` as soon as it runs), reached at the returned address.
 */
export async function restoreFork(
  deps: CheckpointDeps,
  fork: ForkRestore,
  restored: (init: RestoredInit) => void,
): Promise<{ init: RestoredInit; endpoint: TcpEndpoint }> {
  const { sessionId, sessionDir, network, hostname } = fork.spec;
  if (network.attachment === 'none') throw new Error('a fork is reached at its address: its guest listens where its source did');
  const images = path.join(sessionDir, 'fork-images');
  await rm(images, { recursive: true, force: true });
  // Reached by the restored user namespace through the restore's bind only (the session dir is 0700).
  await mkdir(images, { mode: 0o755 });
  let init: RestoredInit;
  try {
    const source = path.join(fork.snapshotDir, 'checkpoint');
    for (const name of await readdir(source)) {
      // Links (the images are read, never written, by a restore), or copies across file systems.
      await link(path.join(source, name), path.join(images, name)).catch(async (err: NodeJS.ErrnoException) => {
        if (err.code !== 'EXDEV') throw err;
        await copyFile(path.join(source, name), path.join(images, name));
      });
    }
    await rewriteForFork(images, fork.snapshot.ids, fork.ids, hostname);
    init = await restoreFromImages(deps, { sessionId, sessionDir, images, consoleKey: fork.snapshot.consoleKey, consolePipe: fork.consolePipe, network });
  } finally {
    await rm(images, { recursive: true, force: true });
  }
  restored(init); // the caller's cleanup waits for it from here on
  const endpoint = { host: network.lease.guest, port: GUEST_SSH_PORT };
  const keys = await readSessionKeys(sessionDir, fork.spec.configDir);
  await reloadGuestSshd(init.pid, deps.names.cgroup(sessionId), fork.freezer, endpoint, publicKeyBlob(keys.hostPublicKey));
  return { init, endpoint };
}

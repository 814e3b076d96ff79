/**
 * A fork of a Firecracker session's snapshot (docs/snapshots.md): a fresh VMM in the new
 * session's own jail, which holds hard links to the snapshot's state and memory (read only: a
 * File memory backend is mapped copy-on-write) and its own copy of the snapshot's rootfs, at
 * the paths the snapshot names; `PUT /snapshot/load` with the new session's TAP and vsock
 * socket, then the resume (boot/snapshot-steps.ts, as a clone of a snapshot base or a resume
 * from disk). The guest wakes up as the source was, its keys and address: it is re-keyed and
 * moved before start returns, by the rotation a QEMU fork has (../../qemu/fork.ts: the
 * source's address reached inside the fork's netns, the source's rekey key, sbx-rekey; the
 * fork's own host key, client key, rekey key, hostname and machine id, its lease; the old keys
 * seen refused). Its NIC keeps the source's MAC (Firecracker's virtio-net has no control queue
 * to change it; alone in its netns, nothing else has it), as a clone keeps its base's.
 */
import { appendFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { AttachedNetwork } from '../../../network/netns.js';
import { generateClientKey, readSessionKeys } from '../../../transport/ssh-keys.js';
import { startAndRekeyFork } from '../../qemu/fork.js';
import { readForkInfo, REKEY_KEY_FILE, type ForkInfo } from '../../qemu/snapshot.js';
import type { SandboxSpec } from '../../runtime.js';
import type { FirecrackerClient } from '../api/client.js';
import { snapshotRestoreSteps, type SnapshotFiles } from '../boot/snapshot-steps.js';
import { runSteps } from '../boot/steps.js';
import { rekeyLine, ROOT_AUTHORIZED_KEYS } from './base-config.js';
import { forkSnapshotFiles } from './session-snapshot.js';

/** What a fork's jail is made from: the snapshot's rootfs (copied in) and its state and memory (linked), plus what its fork.json says. */
export interface ForkSource {
  info: ForkInfo;
  rootfs: string;
  files: SnapshotFiles;
}

/** Reads a snapshot for a fork and checks it can be one of this runtime's (jailed, with a NIC, the same memory). */
export async function forkSourceOf(spec: SandboxSpec, jailed: boolean): Promise<ForkSource | undefined> {
  if (!spec.snapshot) return undefined;
  if (!jailed) throw new Error('an unjailed Firecracker runtime cannot start forks (a fork finds its disks at the jail paths its snapshot names)');
  if (spec.network.attachment === 'none') throw new Error('a fork of a Firecracker session needs a NIC: its guest is moved to its own address');
  if ((spec.volumes?.length ?? 0) > 0) throw new Error('a fork mounts no volumes');
  const info = await readForkInfo(spec.snapshot.dir);
  if (info.memoryMiB !== spec.memoryMiB) throw new Error(`the snapshot's VM has ${info.memoryMiB} MiB of memory, this fork ${spec.memoryMiB} MiB`);
  return { info, ...forkSnapshotFiles(spec.snapshot.dir) };
}

export interface ForkRestore {
  spec: SandboxSpec;
  source: ForkSource;
  client: FirecrackerClient;
  network: AttachedNetwork & { tapInterface: string };
  /** The snapshot files as the jailed VMM sees them (the jail layout's `snapshot.jailPaths`) and its vsock socket. */
  jailPaths: SnapshotFiles;
  vsockUdsPath: string;
  /** The fork's root_authorized_keys line (writeRekeyKey). */
  rootAuthorizedKeys: string;
  connectTimeoutMs: number;
  /** Called once the VM is loaded and let run (from then it is stopped as a running VM). */
  onStarted(): void;
}

/** Loads the snapshot into the fresh VMM, lets it run, and re-keys and re-addresses its guest; throws unless all of it held. */
export async function restoreFork(fork: ForkRestore): Promise<void> {
  const { spec, network } = fork;
  await startAndRekeyFork({
    netns: network.netns,
    sessionDir: spec.sessionDir,
    info: fork.source.info,
    keys: await readSessionKeys(spec.sessionDir, spec.configDir),
    lease: network.lease,
    hostname: spec.hostname,
    rootAuthorizedKeys: fork.rootAuthorizedKeys,
    connectTimeoutMs: fork.connectTimeoutMs,
    start: async () => {
      await runSteps(
        snapshotRestoreSteps({ files: fork.jailPaths, tapName: network.tapInterface, vsockUdsPath: fork.vsockUdsPath, advanceClock: true }),
        fork.client,
      );
      fork.onStarted();
      spec.step?.('snapshot loaded');
    },
  });
  spec.step?.('fork re-keyed');
}

/**
 * The session's rekey key (docs/snapshots.md), as a QEMU session's: root may log in with it to
 * run sbx-rekey only, so that a snapshot of the session can be forked. Its private half stays
 * in the session dir (a snapshot copies it into fork.json); the line is appended to the config
 * dir's root_authorized_keys (a snapshot base's own root key may be there already) and answered,
 * for a clone's or a fork's rotation to write into its guest.
 */
export async function writeRekeyKey(spec: Pick<SandboxSpec, 'sessionId' | 'sessionDir' | 'configDir'>): Promise<string> {
  const key = generateClientKey(`rekey-${spec.sessionId}`);
  await writeFile(path.join(spec.sessionDir, REKEY_KEY_FILE), key.private, { mode: 0o600 });
  await appendFile(path.join(spec.configDir, ROOT_AUTHORIZED_KEYS), rekeyLine(key.public), { mode: 0o600 });
  return rekeyLine(key.public);
}

/**
 * Snapshots of a running QEMU VM for forks (docs/snapshots.md). The same live migration as a
 * pause to disk (disk-pause.ts: a `unix:` socket the orchestrator listens on, streamed and
 * capped into a gzip'd state file), but into the snapshot's directory, and the VM goes on:
 * once the migration has completed, QEMU has stopped the VM and flushed and let go of its
 * disks, so the root disk's layer is copied then, consistent with the memory, and `cont`
 * takes the disks back and lets the VM run (it was stopped for the migration's last pass and
 * the copy).
 *
 * A snapshot's files (in <stateDir>/snapshots/<id>, root's 0700; nothing of them is named by
 * a client): vm-state.gz, root.qcow2 (the layer over the image's ext4, which stays its
 * backing file), and fork.json with the rekey key (what a fork needs to reach and re-key the
 * restored guest: fork.ts).
 */
import { appendFile, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { processStartTime } from '../../host/process-watch.js';
import { generateClientKey, readSessionKeys } from '../../transport/ssh-keys.js';
import { rekeyLine, ROOT_AUTHORIZED_KEYS } from '../firecracker/snapshot/base-config.js';
import { run } from '../../util/exec.js';
import type { PauseTarget, SandboxSpec } from '../runtime.js';
import { listenFor, maxStateBytes, migrationEnd } from './disk-pause.js';
import { memoryMiBOf, readRecipe, runAsOf } from './disk-state.js';
import { qmp, qmpSocketOf, qmpStatus } from './qmp.js';

const SNAPSHOT_MIGRATION_TIMEOUT_MS = 180_000;
const MAX_BANDWIDTH_BYTES = 64 * 2 ** 30;
/** The VM is stopped at once for the last pass: a snapshot is of one moment, and the copy of its disk follows. */
const DOWNTIME_LIMIT_MS = 10;
const CONVERGE_MS = 500;
const FORK_FILE = 'fork.json';
/** The session's own rekey key (qemu-runtime.ts writes it at start), and the snapshot's copy of it. */
export const REKEY_KEY_FILE = 'rekey_ed25519';
const MAX_FORK_FILE_BYTES = 16 * 1024;

/**
 * The session's rekey key (docs/snapshots.md): root may log in with it to run sbx-rekey only, so that a fork of
 * a snapshot of it gets its own keys. Its private half stays in the session dir (a snapshot copies it).
 */
export async function writeRekeyKey(spec: Pick<SandboxSpec, 'sessionId' | 'sessionDir' | 'configDir'>): Promise<string> {
  const key = generateClientKey(`rekey-${spec.sessionId}`);
  await writeFile(path.join(spec.sessionDir, REKEY_KEY_FILE), key.private, { mode: 0o600 });
  // Appended: a caller may have given the VM a root key of its own already (a Firecracker snapshot base booted here, in a test).
  await appendFile(path.join(spec.configDir, ROOT_AUTHORIZED_KEYS), rekeyLine(key.public), { mode: 0o600 });
  return rekeyLine(key.public);
}

/** What a fork needs besides the state and the disk: where the guest wakes up, and the keys it wakes up with. */
export interface ForkInfo {
  memoryMiB: number;
  /** The source session's address: the restored guest answers there until it is moved. */
  address: { guest: string; gateway: string; prefixLength: number };
  /** The host key the restored guest presents (the source session's). */
  hostPublicKey: string;
  /** The key root may log in with to run sbx-rekey in the restored guest (the source's rekey key). */
  rekeyPrivateKey: string;
}

export interface SnapshotDeps {
  /** Where migration sockets are made (disk-pause.ts). */
  socketRoot: string;
}

/** Saves the VM's memory and disk into `dir`; the VM runs on. On failure too, it runs on. */
export async function saveSnapshot(deps: SnapshotDeps, target: PauseTarget, dir: string): Promise<void> {
  const { sessionId, sessionDir, pid, endpoint } = target;
  const recipe = await readRecipe(sessionDir);
  const owner = runAsOf(recipe.argv);
  if (!owner || pid <= 0 || !processStartTime(pid)) throw new Error(`the VM's QEMU (pid ${pid}) is not running, or was not started as its own user`);
  if (!endpoint || !('host' in endpoint) || (endpoint.transport ?? 'tcp') !== 'tcp') {
    throw new Error(`session ${sessionId} is not reached over TCP: a fork could not be re-addressed`);
  }
  const keys = await readSessionKeys(sessionDir, path.join(sessionDir, 'config'));
  const rekeyPrivateKey = await readFile(path.join(sessionDir, REKEY_KEY_FILE), 'utf8').catch(() => {
    throw new Error('the session was started without a rekey key (by an older orchestrator): it cannot be forked');
  });
  const qmpSocket = qmpSocketOf(sessionDir);
  if ((await qmpStatus(qmpSocket)) !== 'running') throw new Error('the VM is not running (paused?): resume it first');
  const socketDir = path.join(deps.socketRoot, sessionId);
  const listener = await listenFor(socketDir, owner);
  try {
    await qmp(qmpSocket, [
      { execute: 'migrate-set-parameters', arguments: { 'max-bandwidth': MAX_BANDWIDTH_BYTES, 'downtime-limit': DOWNTIME_LIMIT_MS } },
      { execute: 'migrate', arguments: { uri: `unix:${listener.socketPath}` } },
    ]);
    const saved = listener.saved(dir, maxStateBytes(recipe.argv));
    const ended = migrationEnd(qmpSocket, SNAPSHOT_MIGRATION_TIMEOUT_MS, CONVERGE_MS).catch((err: unknown) => {
      listener.close();
      throw err;
    });
    const [file, migration] = await Promise.allSettled([saved, ended]);
    if (file.status === 'rejected') throw file.reason;
    if (migration.status === 'rejected') throw migration.reason;
    // Stopped, its disks flushed and let go: the layer is what the memory saw.
    await run(['cp', '--sparse=always', path.join(sessionDir, 'root.qcow2'), path.join(dir, 'root.qcow2')], { timeoutMs: 120_000 });
  } catch (err) {
    listener.close();
    await qmp(qmpSocket, [{ execute: 'migrate_cancel' }]).catch(() => undefined);
    await migrationEnd(qmpSocket, 10_000).catch(() => undefined);
    throw new Error(`the VM could not be snapshotted, so it goes on running: ${(err as Error).message}`, { cause: err });
  } finally {
    listener.close();
    await run(['rm', '-rf', '--', socketDir], { allowFailure: true });
    // After a completed migration `cont` takes the disks back (QEMU reactivates them) and runs the VM.
    await qmp(qmpSocket, [{ execute: 'cont' }]).catch(() => undefined);
  }
  const info: ForkInfo = {
    memoryMiB: memoryMiBOf(recipe.argv),
    address: { guest: endpoint.host, gateway: gatewayOf(endpoint.host), prefixLength: 30 },
    hostPublicKey: keys.hostPublicKey,
    rekeyPrivateKey,
  };
  await writeForkInfo(dir, info);
}

/** Writes a snapshot's fork.json (last: a snapshot is whole once it is there). The Firecracker runtime's snapshots write it too. */
export async function writeForkInfo(dir: string, info: ForkInfo): Promise<void> {
  await writeFile(path.join(dir, FORK_FILE), JSON.stringify(info), { mode: 0o600 });
}

/** A snapshot's fork.json, checked (it is ours, root's, but read back as data). */
export async function readForkInfo(dir: string): Promise<ForkInfo> {
  const file = path.join(dir, FORK_FILE);
  if ((await stat(file)).size > MAX_FORK_FILE_BYTES) throw new Error(`${file} is too big to be a snapshot's fork file`);
  const parsed = JSON.parse(await readFile(file, 'utf8')) as Partial<ForkInfo>;
  const { memoryMiB, address, hostPublicKey, rekeyPrivateKey } = parsed;
  if (typeof memoryMiB !== 'number' || !address || typeof hostPublicKey !== 'string' || typeof rekeyPrivateKey !== 'string') {
    throw new Error(`${file} is not a snapshot's fork file`);
  }
  const ipv4 = /^\d{1,3}(\.\d{1,3}){3}$/;
  if (!ipv4.test(address.guest) || !ipv4.test(address.gateway) || address.prefixLength !== 30) throw new Error(`${file} has no usable address`);
  return { memoryMiB, address, hostPublicKey, rekeyPrivateKey };
}

/** Copies the snapshot's disk layer to a fork's root disk (sparse, as the layer is). */
export async function copySnapshotDisk(dir: string, rootDisk: string): Promise<void> {
  await run(['cp', '--sparse=always', '-f', path.join(dir, 'root.qcow2'), rootDisk], { timeoutMs: 120_000 });
}

/** The host's end of a guest's /30 (address-pool.ts: .1 the gateway, .2 the guest). */
export function gatewayOf(guest: string): string {
  const parts = guest.split('.').map(Number);
  parts[3] = (parts[3] ?? 1) - 1;
  return parts.join('.');
}

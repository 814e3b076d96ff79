/**
 * A fork's start (docs/snapshots.md): a new QEMU, with the new session's own disks, TAP and
 * config drive, loads a snapshot's state instead of booting (`-S -incoming fd:3`, as a resume
 * from disk does), and runs; the guest then wakes up as the snapshot's source was: its keys,
 * its address. Before the session layer connects, the guest is re-keyed by the same rotation
 * as a Firecracker clone (../firecracker/ssh-keys/key-rotation.ts, the guest's sbx-rekey): the
 * source's rekey key logs in as root (only to sbx-rekey), writes the session's own host key,
 * client key and a rekey key of its own, gives it the session's hostname and a new machine id,
 * reloads sshd, moves eth0 to the session's lease and MAC, and the old keys are then seen refused.
 *
 * Reaching the guest at the source's address: it sits in the fork's own netns, where nothing
 * else has that address (the source's is in the source's netns, and in the host's routes); so
 * the gateway address goes onto the netns's bridge for the rotation, and the first connection
 * is made from inside the netns, by a small forwarder on a Unix socket in the session dir.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import { GUEST_SSH_PORT } from '../../guest/contract.js';
import type { AddressLease } from '../../network/address-pool.js';
import { NETNS_BRIDGE } from '../../network/netns.js';
import type { SessionKeys } from '../../transport/ssh-keys.js';
import { run } from '../../util/exec.js';
import { GUEST_KEY_PATHS, newMachineId, rotateKeysAfterRestore, rotationSteps } from '../firecracker/ssh-keys/key-rotation.js';
import { SshRotationTransport } from '../firecracker/ssh-keys/ssh-rotation-transport.js';
import type { VmProcess } from '../vm/vm-process.js';
import { maxStateBytes, untilLoaded } from './disk-pause.js';
import { loadState } from './disk-state.js';
import type { ForkInfo } from './snapshot.js';

const LOAD_TIMEOUT_MS = 180_000;
const FORWARDER_READY_MS = 15_000;
/** Attempts at the session's login while sshd reloads and the guest moves (100 ms apart): a TCG guest is slow. */
const RECONNECT_ATTEMPTS = 150;

/** Feeds the snapshot's state into a QEMU started with `-S -incoming fd:3`, until it has loaded it (stopped). */
export async function loadForkState(vm: VmProcess, stream: Duplex, snapshotDir: string, qmpSocket: string, argv: readonly string[]): Promise<void> {
  const feeding = loadState(snapshotDir, stream, maxStateBytes(argv));
  feeding.catch(() => undefined); // a QEMU that fails reads no more: its own exit says why
  await untilLoaded(qmpSocket, vm, LOAD_TIMEOUT_MS);
  await feeding;
}

export interface ForkRekey {
  netns: string;
  sessionDir: string;
  info: ForkInfo;
  /** The new session's keys (its config dir's). */
  keys: SessionKeys;
  lease: AddressLease;
  /**
   * The session's hostname (sbx-<id>, as a cold boot's) and its NIC's MAC (its QEMU command
   * line's; absent: the guest keeps its own, as a Firecracker fork does).
   */
  hostname: string;
  mac?: string;
  /** The fork's own root_authorized_keys line (its rekey key, tied to sbx-rekey). */
  rootAuthorizedKeys: string;
  /** How long one SSH login to the guest may take (its boot timeout's share: a TCG guest under load is slow). */
  connectTimeoutMs: number;
  /** Lets the loaded VM run (`cont`), once the guest can be reached. */
  start(): Promise<void>;
  /** Ends a named step of the create (SandboxSpec.step): the rotation's phases are marked. */
  step?: (name: string) => void;
}

/** Runs the loaded VM and re-keys and re-addresses its guest; throws (KeyRotationError) unless all of it held. */
export async function startAndRekeyFork(fork: ForkRekey): Promise<void> {
  const { netns, info, lease } = fork;
  const gatewayCidr = `${info.address.gateway}/${info.address.prefixLength}`;
  await run(['ip', '-n', netns, 'addr', 'add', gatewayCidr, 'dev', NETNS_BRIDGE]);
  const forwarder = await startForwarder(netns, path.join(fork.sessionDir, 'rekey.sock'), info.address.guest).catch(async (err: unknown) => {
    await run(['ip', '-n', netns, 'addr', 'del', gatewayCidr, 'dev', NETNS_BRIDGE], { allowFailure: true });
    throw err;
  });
  try {
    await fork.start();
    const transport = new SshRotationTransport({
      baseEndpoint: { transport: 'unix', path: forwarder.socketPath },
      sessionEndpoint: { host: lease.guest, port: GUEST_SSH_PORT },
      baseClientPrivateKey: info.rekeyPrivateKey,
      baseHostPublicKey: info.hostPublicKey,
      network: { address: `${lease.guest}/${lease.prefixLength}`, gateway: lease.gateway, ...(fork.mac ? { mac: fork.mac } : {}) },
      // The rotation reached the guest from this netns, through the bridge holding the gateway's address: the guest
      // knows the gateway at the bridge's MAC. Its move (0.3 s after this answer) changes its MAC, which flushes that,
      // and it asks again; at its source's own address (its lease reused) the gateway is the same, and the bridge would
      // still answer, taking the session's replies for ~30 s. So the bridge gives the address back now.
      afterNetwork: () => run(['ip', '-n', netns, 'addr', 'del', gatewayCidr, 'dev', NETNS_BRIDGE], { allowFailure: true }).then(() => undefined),
      connectTimeoutMs: fork.connectTimeoutMs,
    });
    const connection = await rotateKeysAfterRestore(transport, {
      snapshotBase: { clientPrivateKey: info.rekeyPrivateKey, hostPublicKey: info.hostPublicKey },
      session: fork.keys,
      paths: GUEST_KEY_PATHS,
      rootAuthorizedKeys: fork.rootAuthorizedKeys,
      identity: { hostname: fork.hostname, machineId: newMachineId() },
      reconnectAttempts: RECONNECT_ATTEMPTS,
      onPhase: rotationSteps(fork.step, 'fork: route, forwarder and cont'),
    });
    // The session layer opens its own connection, as for a cold boot.
    await connection.close();
  } finally {
    forwarder.stop();
    await run(['ip', '-n', netns, 'addr', 'del', gatewayCidr, 'dev', NETNS_BRIDGE], { allowFailure: true });
  }
}

/**
 * Node's own forwarder, run inside the netns (`ip netns exec`): it listens on `socketPath` (in
 * the session dir, root's 0700) and joins each connection to the guest's sshd. Its arguments are
 * ours (a path and an address); it ends when its stdin closes, so it dies with the orchestrator.
 */
const FORWARDER_SOURCE = `
const net = require('node:net');
const [, socketPath, host, port] = process.argv;
const server = net.createServer((client) => {
  const upstream = net.connect({ host, port: Number(port) });
  for (const [a, b] of [[client, upstream], [upstream, client]]) {
    a.on('error', () => b.destroy());
    a.on('close', () => b.destroy());
    a.pipe(b);
  }
});
server.on('error', (err) => { process.stderr.write(String(err) + '\\n'); process.exit(1); });
server.listen(socketPath, () => process.stdout.write('ready\\n'));
process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();
`;

async function startForwarder(netns: string, socketPath: string, guest: string): Promise<{ socketPath: string; stop(): void }> {
  await run(['rm', '-f', '--', socketPath]);
  const child = spawn('ip', ['netns', 'exec', netns, process.execPath, '-e', FORWARDER_SOURCE, socketPath, guest, String(GUEST_SSH_PORT)], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  for (const stream of [child.stdin, child.stdout, child.stderr]) stream.on('error', () => undefined);
  child.on('error', () => undefined);
  const stop = () => {
    child.stdin.end();
    child.kill('SIGTERM');
  };
  let said = '';
  child.stderr.on('data', (chunk: Buffer) => {
    if (said.length < 2048) said += chunk.toString('utf8');
  });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => fail(`the fork's forwarder did not start within ${FORWARDER_READY_MS} ms`), FORWARDER_READY_MS);
    const fail = (why: string) => {
      clearTimeout(timer);
      stop();
      reject(new Error(`${why}${said ? `: ${said.trim()}` : ''}`));
    };
    child.stdout.once('data', () => {
      clearTimeout(timer);
      resolve();
    });
    child.once('exit', (code) => fail(`the fork's forwarder exited (${code})`));
  });
  return { socketPath, stop };
}

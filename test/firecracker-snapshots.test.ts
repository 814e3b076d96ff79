import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { GUEST_USER } from '../src/guest/contract.js';
import type { GuestImage } from '../src/guest/image/builder.js';
import { AddressPool } from '../src/network/address-pool.js';
import type { FirecrackerRuntime } from '../src/runtimes/firecracker/firecracker-runtime.js';
import type { RunningSandbox } from '../src/runtimes/runtime.js';
import { keyFingerprint, publicKeyBlob } from '../src/transport/ssh-keys.js';
import { guestTransport, HostKeyMismatchError, SshAuthenticationError, type GuestTransport } from '../src/transport/index.js';
import { CleanupStack } from '../src/util/cleanup-stack.js';
import { guestSh } from './helpers/guest.js';
import { guestIdentity, type GuestIdentity } from './helpers/guest-identity.js';
import { connectWhenUp as connectWhenUpIn, newRuntime, prepareSession as prepareSessionIn } from './helpers/firecracker/disk-pause-session.js';
import { builtImage, emulatorWorkspace } from './helpers/firecracker/emulator-workspace.js';
import { TEST_PREFIX, TEST_SUBNET } from './helpers/orchestrator.js';
import { FirecrackerClient } from '../src/runtimes/firecracker/api/client.js';
import { JAILED_API_SOCKET } from '../src/runtimes/firecracker/jailer/jailer-args.js';

const SNAPSHOT_CHILD = fileURLToPath(new URL('./helpers/firecracker/snapshot-child.ts', import.meta.url));

/**
 * Snapshots and forks of a Firecracker session (src/runtimes/firecracker/snapshot/session-snapshot.ts,
 * fork.ts), jailed, against the contract emulator with its guest under QEMU (TCG): a session
 * writes a file and is snapshotted (it runs on); two forks start from the snapshot, and each is
 * a session of its own (client key, host key on the wire, address, hostname, machine id, disk),
 * with the source's keys refused. One source and two forks: TCG is slow.
 */
const workspace = emulatorWorkspace('fc-snap-', ['FAKE_FIRECRACKER_GUEST']);
const pool = new AddressPool(TEST_SUBNET);
const FILE = `/home/${GUEST_USER}/before-snapshot`;
let image: GuestImage;

type Session = Awaited<ReturnType<typeof prepareSessionIn>>;

interface Started {
  session: Session;
  sandbox: RunningSandbox;
  guest: GuestTransport;
  identity: GuestIdentity;
}

/** A login at `address` with a client key and a pinned host key: what sshd answers. */
async function loginOutcome(address: string, username: string, privateKey: string, hostPublicKey: string): Promise<string> {
  const connection = guestTransport({ endpoint: { host: address, port: 22 }, username, privateKey, pinnedHostKey: publicKeyBlob(hostPublicKey) });
  try {
    await connection.open(30_000);
    return 'accepted';
  } catch (err) {
    if (err instanceof HostKeyMismatchError) return 'host-key-mismatch';
    if (err instanceof SshAuthenticationError) return 'auth-refused';
    return `unreachable: ${(err as Error).message}`;
  } finally {
    connection.close();
  }
}

describe('firecracker snapshots and forks, with a guest (QEMU under TCG behind the emulator)', () => {
  let runtime: FirecrackerRuntime;
  const cleanup = new CleanupStack();
  const guests: GuestTransport[] = [];
  let source: Started;
  let snapshotDir: string;
  const forks: Started[] = [];
  let snapshotAtFirst: string[];
  /** The snapshot's files, their size and when each was last written. */
  const snapshotStat = async () =>
    Promise.all(
      (await readdir(snapshotDir)).sort().map(async (file) => {
        const info = await stat(path.join(snapshotDir, file));
        return `${file} ${info.size} ${info.mtimeMs} ${info.mode.toString(8)}`;
      }),
    );

  const prepareSession = () => prepareSessionIn(runtime, workspace.workDir, pool, cleanup, image);
  const connect = async (session: Session, withinMs: number) => {
    const guest = await connectWhenUpIn(workspace.workDir, session.sessionId, session.lease.guest, withinMs);
    guests.push(guest);
    return guest;
  };
  const sh = async (guest: GuestTransport, script: string) => {
    const res = await guestSh(guest, script);
    assert.equal(res.exitCode, 0, `${script}: ${res.stderr.toString('utf8')}`);
    return res.text.trim();
  };
  const identityOf = (guest: GuestTransport) => guestIdentity((_id, command) => sh(guest, command), '');
  const hostPublicKeyOf = async (session: Session) => (await readFile(path.join(session.configDir, 'ssh_host_ed25519_key.pub'), 'utf8')).trim();
  const clientPublicKeyOf = async (session: Session) => (await readFile(path.join(session.sessionDir, 'id_ed25519.pub'), 'utf8').catch(() => '')).trim();

  before(async () => {
    image = await builtImage();
    process.env.FAKE_FIRECRACKER_GUEST = 'qemu';
    runtime = newRuntime(workspace.workDir);
  });
  after(async () => {
    for (const guest of guests) guest.close();
    await cleanup.run();
  });

  it('snapshots a running session that wrote a file: the VM runs on, the snapshot is whole, nothing is left in its jail', async (t) => {
    const session = await prepareSession();
    const started = Date.now();
    const sandbox = await runtime.start(session.spec, cleanup);
    const guest = await connect(session, 150_000);
    t.diagnostic(`source cold boot to SSH: ${Date.now() - started} ms`);
    await sh(guest, `echo written-before > ${FILE} && sync`);
    source = { session, sandbox, guest, identity: await identityOf(guest) };
    assert.ok(existsSync(path.join(session.sessionDir, 'rekey_ed25519')), 'the session was booted with a rekey key');

    snapshotDir = path.join(workspace.workDir, 'snapshots', 'snap-0000000000000001');
    await mkdir(snapshotDir, { recursive: true, mode: 0o700 });
    await chmod(snapshotDir, 0o700);
    const taken = Date.now();
    await runtime.snapshot(
      { sessionId: session.sessionId, sessionDir: session.sessionDir, pid: sandbox.pid, endpoint: { host: session.lease.guest, port: 22 } },
      snapshotDir,
    );
    t.diagnostic(`snapshot: ${Date.now() - taken} ms`);
    assert.deepEqual((await readdir(snapshotDir)).sort(), ['fork.json', 'memory', 'rootfs.ext4', 'vmstate']);
    for (const file of ['memory', 'rootfs.ext4', 'vmstate']) {
      const info = await stat(path.join(snapshotDir, file));
      assert.equal(info.uid, 0, `${file} is root's`);
      assert.equal(info.mode & 0o022, 0, `${file} is writable by root only`);
    }
    for (const file of ['fork-vmstate', 'fork-memory']) assert.equal(existsSync(path.join(session.jailRoot, file)), false, `${file} is gone from the jail`);
    snapshotAtFirst = await snapshotStat();
    // It runs on: the same connection answers, and it writes after the snapshot.
    assert.equal(sandbox.isAlive(), true);
    await sh(guest, `echo source-after > /home/${GUEST_USER}/source-after && sync`);
  });

  it('two forks start from it, each a session of its own, each seeing the file, neither the source’s nor the other’s later writes', async (t) => {
    const sessions = [await prepareSession(), await prepareSession()];
    for (const session of sessions) {
      const created = Date.now();
      const sandbox = await runtime.start({ ...session.spec, snapshot: { id: 'snap-0000000000000001', dir: snapshotDir } }, cleanup);
      const ready = Date.now() - created;
      // Ready when start returns: the session's keys and pinned host key let us in at its own address at once.
      const guest = await connect(session, 5_000);
      t.diagnostic(`fork ${session.sessionId}: create to ready ${ready} ms, to SSH ${Date.now() - created} ms`);
      forks.push({ session, sandbox, guest, identity: await identityOf(guest) });
    }
    const all = [source, ...forks];
    // Each its own copy of the disk: not the snapshot's file, not the other's.
    const disks = await Promise.all([source, ...forks].map((s) => stat(path.join(s.session.jailRoot, 'rootfs.ext4'))));
    disks.push(await stat(path.join(snapshotDir, 'rootfs.ext4')));
    assert.equal(new Set(disks.map((d) => d.ino)).size, disks.length, 'no two share a rootfs');
    assert.ok(
      disks.every((d) => d.nlink === 1),
      'no rootfs is a link of another',
    );
    for (const fork of forks) {
      const { identity, session } = fork;
      assert.equal(identity.clientKey, await clientPublicKeyOf(session), "the guest trusts the fork's own client key, and only it");
      assert.equal(identity.hostKey, keyFingerprint(await hostPublicKeyOf(session)), 'the host key on the wire is the one the fork pins');
      assert.equal(identity.address, `${session.lease.guest}/${session.lease.prefixLength}`, 'its own address');
      assert.equal(identity.hostname, `sbx-${session.sessionId}`, 'its own hostname');
      assert.match(identity.machineId, /^[0-9a-f]{32}$/);
      // Read from its disk, not from the page cache its memory came with (O_DIRECT): its disk is the snapshot's.
      assert.equal(await sh(fork.guest, `dd if=${FILE} iflag=direct bs=4096 status=none`), 'written-before', 'the file written before the snapshot');
      assert.equal(await sh(fork.guest, `test -e /home/${GUEST_USER}/source-after && echo yes || echo no`), 'no', "not the source's later write");
    }
    for (const field of ['clientKey', 'hostKey', 'address', 'hostname', 'machineId'] as const) {
      assert.equal(new Set(all.map((s) => s.identity[field])).size, all.length, `no two share a ${field}: ${all.map((s) => s.identity[field]).join(', ')}`);
    }
    const [a, b] = forks as [Started, Started];
    await sh(a.guest, `echo fork-a > /home/${GUEST_USER}/fork-a && sync`);
    await sh(b.guest, `echo fork-b > /home/${GUEST_USER}/fork-b && sync`);
    assert.equal(await sh(a.guest, `test -e /home/${GUEST_USER}/fork-b && echo yes || echo no`), 'no', "a fork does not see the other's write");
    assert.equal(await sh(b.guest, `test -e /home/${GUEST_USER}/fork-a && echo yes || echo no`), 'no', "a fork does not see the other's write");
    assert.equal(
      await sh(source.guest, `ls /home/${GUEST_USER}/fork-a /home/${GUEST_USER}/fork-b 2>/dev/null | wc -l`),
      '0',
      "the source sees neither fork's write",
    );
  });

  it("the source's keys are refused by each fork; the snapshot is unchanged", async () => {
    const sourceClient = await readFile(path.join(source.session.sessionDir, 'id_ed25519'), 'utf8');
    const sourceRekey = await readFile(path.join(source.session.sessionDir, 'rekey_ed25519'), 'utf8');
    const sourceHost = await hostPublicKeyOf(source.session);
    assert.equal(forks.length, 2, 'both forks started');
    for (const fork of forks) {
      const address = fork.session.lease.guest;
      const forkHost = await hostPublicKeyOf(fork.session);
      const forkClient = await readFile(path.join(fork.session.sessionDir, 'id_ed25519'), 'utf8');
      assert.equal(await loginOutcome(address, GUEST_USER, sourceClient, forkHost), 'auth-refused', "the source's client key");
      assert.equal(await loginOutcome(address, 'root', sourceRekey, forkHost), 'auth-refused', "the source's rekey key");
      assert.equal(await loginOutcome(address, GUEST_USER, forkClient, sourceHost), 'host-key-mismatch', "the source's host key is not presented");
      // Its own rekey key (sbx-rekey only) is let in instead: a fork can be snapshotted and forked in turn.
      const forkRekey = await readFile(path.join(fork.session.sessionDir, 'rekey_ed25519'), 'utf8');
      assert.equal(await loginOutcome(address, 'root', forkRekey, forkHost), 'accepted', "the fork's own rekey key");
    }
    // The source goes on with its own keys.
    assert.equal(await loginOutcome(source.session.lease.guest, GUEST_USER, sourceClient, sourceHost), 'accepted');
    assert.deepEqual(await snapshotStat(), snapshotAtFirst, 'the snapshot is as it was');
  });

  it('a kill -9 of the orchestrator while a snapshot is written: no snapshot, and a restart finds its VM running, its jail without the half-written files', async (t) => {
    const { session, sandbox, guest } = source;
    const dir = path.join(workspace.workDir, 'snapshots', 'snap-0000000000000002');
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const inJail = (file: string) => path.join(session.jailRoot, file);
    // The orchestrator that takes the snapshot is a process of its own, killed once the VMM writes the memory.
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', SNAPSHOT_CHILD, workspace.workDir, session.sessionId, session.sessionDir, String(sandbox.pid), session.lease.guest, dir],
      { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, SBX_RESOURCE_PREFIX: TEST_PREFIX } },
    );
    const exited = once(child, 'exit');
    for (const deadline = Date.now() + 120_000; !existsSync(inJail('fork-memory')) && Date.now() < deadline;) await sleep(20);
    assert.ok(existsSync(inJail('fork-memory')), 'the VMM began to write the memory');
    child.kill('SIGKILL');
    await exited;
    // The VMM finishes the call it was given, paused, as Firecracker does: then a restart's runtime adopts it.
    const api = new FirecrackerClient(path.join(session.jailRoot, JAILED_API_SOCKET));
    try {
      for (const deadline = Date.now() + 120_000; ; await sleep(200)) {
        const info = await api.getInstanceInfo({ timeoutMs: 5_000 }).catch(() => undefined);
        if (info?.state === 'Paused' || Date.now() > deadline) break;
      }
      const restarted = newRuntime(workspace.workDir);
      const target = { sessionId: session.sessionId, sessionDir: session.sessionDir, pid: sandbox.pid, endpoint: { host: session.lease.guest, port: 22 } };
      const adopted = await restarted.adopt(session.sessionId, session.sessionDir, target.endpoint);
      assert.ok(adopted, 'its VM is adopted');
      for (const file of ['fork-vmstate', 'fork-memory']) assert.equal(existsSync(inJail(file)), false, `${file} is gone from the jail`);
      // As the session layer's adoption does for a sandbox it finds frozen (sessions/adopt.ts).
      assert.equal(await restarted.isPaused?.(target), true, 'the killed snapshot left the VM paused');
      await restarted.resume?.(target, 'memory');
      assert.equal((await api.getInstanceInfo()).state, 'Running');
      assert.equal(await sh(guest, 'echo runs-on'), 'runs-on', 'the same connection answers');
      assert.equal(existsSync(path.join(dir, 'fork.json')), false, 'no snapshot: its record is written last');
      t.diagnostic(`left in the snapshot dir: ${(await readdir(dir)).join(' ') || 'nothing'}`);
    } finally {
      api.close();
    }
  });
});

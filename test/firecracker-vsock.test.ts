/**
 * Firecracker sessions over hybrid vsock (SBX_TRANSPORT=vsock, issue 23), against the
 * stand-ins of test/helpers/firecracker/bin (the contract server, held to the v1.16.1 spec,
 * and a jailer that does for real what can be checked here): there is no KVM on these
 * machines, so no guest answers behind the vsock socket. What is real: the jail, its uid,
 * the network namespaces, the socket Firecracker binds (the stand-in binds it where the API
 * says, as the jail's uid), the hard link the runtime dials, the CONNECT handshake and SSH
 * over it up to the guest's first byte.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { chown, mkdir, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import type { GuestImage } from '../src/guest/image/builder.js';
import { AddressPool } from '../src/network/address-pool.js';
import { ResourceNames } from '../src/network/names.js';
import { createSandboxNetwork, type SandboxNetwork } from '../src/network/netns.js';
import { FirecrackerRuntime } from '../src/runtimes/firecracker/firecracker-runtime.js';
import { firecrackerSettingsFromEnv, type FirecrackerSettings } from '../src/runtimes/firecracker/settings.js';
import type { RunningSandbox } from '../src/runtimes/runtime.js';
import { newSessionId } from '../src/sessions/session.js';
import { dialHybridVsock } from '../src/transport/endpoint.js';
import { guestTransport, type GuestEndpoint } from '../src/transport/index.js';
import { generateSessionKeys, publicKeyBlob, writeSessionKeys } from '../src/transport/ssh-keys.js';
import { snapshotBaseDir, saveSnapshotBase } from '../src/runtimes/firecracker/snapshot/base-store.js';
import { snapshotBaseAddress, type CloneRotation } from '../src/runtimes/firecracker/snapshot/clone-rotation.js';
import { CleanupStack } from '../src/util/cleanup-stack.js';
import { run } from '../src/util/exec.js';
import { COLD_BOOT_CALLS } from './helpers/firecracker/calls.js';
import { processesMentioning } from './helpers/host.js';
import { emulatorHost, emulatorWorkspace, type Recorded } from './helpers/firecracker/emulator-workspace.js';
import { startTestOrchestrator, TEST_PREFIX, TEST_SUBNET, type TestOrchestrator } from './helpers/orchestrator.js';

const NAMES = new ResourceNames(TEST_PREFIX);
/** A cold boot without a NIC: the same calls but the network interface. */
const VSOCK_BOOT_CALLS = ['GET /', ...COLD_BOOT_CALLS.filter((call) => !call.startsWith('PUT /network-interfaces'))];

const workspace = emulatorWorkspace('fc-vsock-', ['FAKE_FIRECRACKER_VSOCK']);
let image: GuestImage;
const pool = new AddressPool(TEST_SUBNET);

before(async () => {
  // No guest boots behind the stand-in: an image of placeholder files is all the runtime opens.
  const dir = path.join(workspace.workDir, 'image');
  await mkdir(dir);
  image = {
    hash: 'vsockstandin0000',
    dir,
    rootfs: path.join(dir, 'rootfs'),
    ext4: path.join(dir, 'rootfs.ext4'),
    kernel: path.join(dir, 'vmlinux'),
    initrd: path.join(dir, 'initrd.img'),
  };
  for (const file of [image.ext4, image.kernel, image.initrd]) await writeFile(file, 'placeholder\n', { mode: 0o644 });
});

function settings(env: Record<string, string>, overrides: Partial<FirecrackerSettings> = {}): FirecrackerSettings {
  return {
    ...firecrackerSettingsFromEnv(env),
    chrootBaseDir: path.join(workspace.workDir, 'jails'),
    vcpus: 1,
    kernel: image.kernel,
    initrd: image.initrd,
    ...overrides,
  };
}

/** What the session layer makes before the runtime starts: keys, config dir, and a NIC only with egress. */
async function prepareSession(runtime: FirecrackerRuntime, cleanup: CleanupStack, withNic = false) {
  const sessionId = newSessionId();
  const sessionDir = path.join(workspace.workDir, sessionId);
  const configDir = path.join(sessionDir, 'config');
  const keys = generateSessionKeys(sessionId);
  await writeSessionKeys(sessionDir, configDir, keys);
  const vmUser = await runtime.leaseVmUser?.(cleanup);
  let network: SandboxNetwork = { attachment: 'none' };
  if (withNic) {
    const lease = pool.lease();
    await cleanup.push('lease', () => pool.release(lease.index));
    network = await createSandboxNetwork(NAMES, sessionId, lease, cleanup, 'tap', vmUser);
  }
  const spec = {
    sessionId,
    image,
    sessionDir,
    configDir,
    hostname: `sbx-${sessionId}`,
    network,
    memoryMiB: 256,
    pidsLimit: 256,
    logsDir: path.join(workspace.workDir, 'logs'),
    vmUser,
  };
  return { sessionId, sessionDir, keys, spec };
}

const acceptedCalls = (recorded: Recorded[]) => recorded.filter((r) => r.call && (r.status ?? 500) < 300).map((r) => r.call);
const bodyOf = (recorded: Recorded[], call: string) => recorded.find((r) => r.call === call && (r.status ?? 500) < 300)?.body;

/** The interfaces of a process's network namespace, as the process sees them. */
async function interfacesOf(pid: number): Promise<string[]> {
  const dev = await readFile(`/proc/${pid}/net/dev`, 'utf8');
  return dev
    .split('\n')
    .slice(2)
    .map((line) => line.split(':')[0]?.trim() ?? '')
    .filter(Boolean);
}

/** Starts a VM with FAKE_FIRECRACKER_VSOCK set for its stand-in (read when its process starts). */
async function startWith(
  runtime: FirecrackerRuntime,
  spec: Parameters<FirecrackerRuntime['start']>[0],
  cleanup: CleanupStack,
  behaviour?: string,
): Promise<RunningSandbox> {
  if (behaviour) process.env.FAKE_FIRECRACKER_VSOCK = behaviour;
  else delete process.env.FAKE_FIRECRACKER_VSOCK;
  try {
    return await runtime.start(spec, cleanup);
  } finally {
    delete process.env.FAKE_FIRECRACKER_VSOCK;
  }
}

describe('firecracker over hybrid vsock (SBX_TRANSPORT=vsock), jailed, against the stand-in', () => {
  let runtime: FirecrackerRuntime;
  let cleanup: CleanupStack;
  let session: Awaited<ReturnType<typeof prepareSession>>;
  let vm: RunningSandbox;
  before(() => {
    runtime = FirecrackerRuntime.forHost(NAMES, settings({ SBX_TRANSPORT: 'vsock' }), emulatorHost(true));
  });

  it('says vsock for SBX_TRANSPORT=vsock, unix and auto, and TCP by default', () => {
    assert.equal(runtime.capabilities.controlTransport, 'vsock');
    for (const choice of ['unix', 'auto']) {
      assert.equal(FirecrackerRuntime.forHost(NAMES, settings({ SBX_TRANSPORT: choice }), emulatorHost(true)).capabilities.controlTransport, 'vsock', choice);
    }
    assert.equal(FirecrackerRuntime.forHost(NAMES, settings({}), emulatorHost(true)).capabilities.controlTransport, 'tcp');
  });

  it('a VM without egress: PUT /vsock with the jail socket, no network interface, its VMM in a namespace with only lo', async () => {
    cleanup = new CleanupStack();
    session = await prepareSession(runtime, cleanup);
    vm = await startWith(runtime, session.spec, cleanup);
    const recorded = await workspace.records(session.sessionId);
    assert.deepEqual(acceptedCalls(recorded), VSOCK_BOOT_CALLS, 'no PUT /network-interfaces');
    assert.deepEqual(
      recorded.filter((r) => r.fault),
      [],
      'every call spec-valid and accepted',
    );
    assert.deepEqual(bodyOf(recorded, 'PUT /vsock'), { guest_cid: 3, uds_path: '/run/vsock.sock' });
    assert.deepEqual(await interfacesOf(vm.pid), ['lo'], 'the VMM sees no interface but lo');
    assert.equal(recorded[0]?.process?.netns, `net:[${(await stat(`/var/run/netns/${NAMES.netns(session.sessionId)}`)).ino}]`, 'a namespace of its own');
    const links = (await run(['ip', '-o', 'link', 'show'])).stdout;
    assert.ok(!links.includes(NAMES.hostVeth(session.sessionId)), 'no veth on the host');
  });

  it('reports the hybrid-vsock endpoint: port 22 on a link, in the session dir, to the socket Firecracker bound in the jail', async () => {
    const linked = path.join(session.sessionDir, 'vsock.sock');
    assert.deepEqual(vm.endpoint, { transport: 'hybrid-vsock', path: linked, port: 22 });
    const jailSocket = path.join(workspace.workDir, 'jails', 'firecracker', `${TEST_PREFIX}${session.sessionId}`, 'root', 'run', 'vsock.sock');
    const [a, b] = [await stat(linked), await stat(jailSocket)];
    assert.ok(a.isSocket(), 'a socket');
    assert.equal(a.ino, b.ino, 'the very socket the jailed VMM bound');
    assert.equal(b.uid, session.spec.vmUser?.uid, "bound by the jail's own uid");
    // The stand-in answers as Firecracker does when nothing listens in the guest: it hangs up.
    await assert.rejects(dialHybridVsock(vm.endpoint as never, 2_000), /closed during the CONNECT handshake/);
    assert.deepEqual(
      (await workspace.records(session.sessionId)).filter((r) => r.vsockConnect).map((r) => r.vsockConnect),
      ['CONNECT 22'],
      "the host asked for sshd's port",
    );
  });

  it('a restarted orchestrator adopts the VM at the same endpoint (no address: found by its socket)', async () => {
    const restarted = FirecrackerRuntime.forHost(NAMES, settings({ SBX_TRANSPORT: 'vsock' }), emulatorHost(true));
    const adopted = await restarted.adopt(session.sessionId, session.sessionDir, undefined);
    assert.ok(adopted, 'found alive');
    assert.deepEqual(adopted.sandbox.endpoint, vm.endpoint);
    assert.equal(adopted.sandbox.pid, vm.pid);
    // Without its socket there is nothing to reach it by: not adopted (the caller reclaims it).
    const elsewhere = path.join(workspace.workDir, 'not-a-session');
    await rm(path.join(session.sessionDir, 'vsock.sock'));
    await rm(path.join(workspace.workDir, 'jails', 'firecracker', `${TEST_PREFIX}${session.sessionId}`, 'root', 'run', 'vsock.sock'));
    assert.equal(await restarted.adopt(session.sessionId, elsewhere, undefined), undefined);
  });

  it('destroys it: VMM, jail, its namespace and the socket link are gone', async () => {
    const netns = `/var/run/netns/${NAMES.netns(session.sessionId)}`;
    assert.ok(existsSync(netns));
    await cleanup.run();
    await vm.exited;
    assert.equal(existsSync(netns), false, 'netns removed');
    assert.equal(existsSync(path.join(workspace.workDir, 'jails', 'firecracker', `${TEST_PREFIX}${session.sessionId}`)), false, 'jail removed');
    assert.deepEqual(await processesMentioning(`${TEST_PREFIX}${session.sessionId}`), []);
    await cleanup.run(); // idempotent
  });

  it('a VM with egress still gets its NIC and is reached over TCP', async () => {
    const nic = new CleanupStack();
    try {
      const s = await prepareSession(runtime, nic, true);
      const started = await startWith(runtime, s.spec, nic);
      assert.deepEqual(acceptedCalls(await workspace.records(s.sessionId)), ['GET /', ...COLD_BOOT_CALLS]);
      assert.equal(started.endpoint.transport ?? 'tcp', 'tcp');
    } finally {
      await nic.run();
    }
  });

  it('a VM refused by a TCP-only runtime: no NIC needs SBX_TRANSPORT=vsock, said before anything starts', async () => {
    const tcpOnly = FirecrackerRuntime.forHost(NAMES, settings({}), emulatorHost(true));
    const refused = new CleanupStack();
    try {
      const s = await prepareSession(tcpOnly, refused);
      await assert.rejects(tcpOnly.start(s.spec, refused), /without a NIC is reached over vsock only: SBX_TRANSPORT=vsock/);
    } finally {
      await refused.run();
    }
  });
});

describe('firecracker over hybrid vsock: a guest that answers wrongly fails its own session only, in bounded time', () => {
  it('garbage instead of OK, OK then no SSH, and silence: each connection fails with its reason; the other VMs run on', async () => {
    const runtime = FirecrackerRuntime.forHost(NAMES, settings({ SBX_TRANSPORT: 'vsock' }), emulatorHost(true));
    const cleanup = new CleanupStack();
    const cases = [
      { behaviour: 'garbage', reason: /unexpected answer to CONNECT: "HELLO from a confused multiplexer"/ },
      { behaviour: 'ok-garbage', reason: /Timed out while waiting for handshake/ },
      { behaviour: 'silent', reason: /no answer to CONNECT within \d+ ms/ },
    ];
    try {
      const vms = [];
      for (const c of cases) {
        const s = await prepareSession(runtime, cleanup);
        vms.push({ ...c, s, vm: await startWith(runtime, s.spec, cleanup, c.behaviour) });
      }
      const OPEN_TIMEOUT_MS = 3_000;
      const started = performance.now();
      // All at once, as sessions booting side by side: each fails on its own.
      const outcomes = await Promise.all(
        vms.map(async ({ s, vm }) => {
          const connection = guestTransport({
            endpoint: vm.endpoint as GuestEndpoint,
            username: 'user',
            privateKey: s.keys.clientPrivateKey,
            pinnedHostKey: publicKeyBlob(s.keys.hostPublicKey),
          });
          const t0 = performance.now();
          const error = await connection
            .open(OPEN_TIMEOUT_MS, () => vm.isAlive())
            .then(
              () => undefined,
              (err: Error) => err,
            );
          connection.close();
          return { error, ms: performance.now() - t0 };
        }),
      );
      for (const [i, { behaviour, reason, vm }] of vms.entries()) {
        const { error, ms } = outcomes[i] as (typeof outcomes)[number];
        assert.ok(error, `${behaviour}: not connected`);
        assert.match(error.message, /^SSH to vsock:.*vsock\.sock:22 .*did not finish within 3000 ms/, `${behaviour}: names the endpoint`);
        assert.match(error.message, reason, `${behaviour}: says why (${error.message})`);
        assert.ok(ms < OPEN_TIMEOUT_MS + 1_500, `${behaviour}: bounded (${Math.round(ms)} ms)`);
        assert.equal(vm.isAlive(), true, `${behaviour}: its VMM (and the others) still run`);
      }
      assert.ok(performance.now() - started < OPEN_TIMEOUT_MS + 2_000, 'side by side, not one after another');
    } finally {
      await cleanup.run();
    }
  });
});

describe('snapshot clones over vsock (the warm path), against the stand-in', () => {
  it("red team: a snapshot base whose memory file is a link (the template VM's user made it) is refused; the file it names is left as it was", async () => {
    const parts = path.join(workspace.workDir, 'hostile-base-parts');
    await mkdir(parts);
    const victim = path.join(workspace.workDir, 'victim-secret');
    await writeFile(victim, 'secret\n', { mode: 0o600 });
    await chown(victim, 4242, 4242);
    const files = { snapshotPath: path.join(parts, 'vmstate'), memFilePath: path.join(parts, 'memory') };
    await writeFile(files.snapshotPath, '{}');
    await symlink(victim, files.memFilePath);
    await writeFile(path.join(parts, 'rootfs.ext4'), 'placeholder\n');
    const keys = generateSessionKeys('hostile-base');
    const screen = { width: 640, height: 480 };
    const dir = snapshotBaseDir(image, screen, 'vsock');
    await assert.rejects(
      saveSnapshotBase(dir, image, {
        files,
        rootfs: path.join(parts, 'rootfs.ext4'),
        keys: { clientPrivateKey: keys.clientPrivateKey, hostPublicKey: keys.hostPublicKey },
        screen,
        address: snapshotBaseAddress(TEST_PREFIX),
        transport: 'vsock',
      }),
      /memory is not a regular file/,
    );
    const after = await stat(victim);
    assert.deepEqual(
      { mode: after.mode & 0o777, uid: after.uid, gid: after.gid },
      { mode: 0o600, uid: 4242, gid: 4242 },
      "made root's and world-readable through the link",
    );
    assert.equal(existsSync(dir), false, 'no snapshot base kept');
  });

  it('a session without egress is restored from a NIC-less snapshot base (vsock_override, no network_overrides) and rotated over its own socket; one with egress boots cold', async () => {
    // A snapshot base as a vsock runtime leaves it (building one needs a guest, which the stand-in has not).
    const parts = path.join(workspace.workDir, 'base-parts');
    await mkdir(parts);
    const files = { snapshotPath: path.join(parts, 'vmstate'), memFilePath: path.join(parts, 'memory') };
    await writeFile(files.snapshotPath, '{}');
    await writeFile(files.memFilePath, Buffer.alloc(4096));
    await writeFile(path.join(parts, 'rootfs.ext4'), 'placeholder\n');
    const baseKeys = generateSessionKeys('base');
    const screen = { width: 1024, height: 768 };
    await saveSnapshotBase(snapshotBaseDir(image, screen, 'vsock'), image, {
      files,
      rootfs: path.join(parts, 'rootfs.ext4'),
      keys: { clientPrivateKey: baseKeys.clientPrivateKey, hostPublicKey: baseKeys.hostPublicKey },
      screen,
      address: snapshotBaseAddress(TEST_PREFIX),
      transport: 'vsock',
    });
    const rotations: CloneRotation[] = [];
    const runtime = FirecrackerRuntime.forHost(
      NAMES,
      settings({ SBX_TRANSPORT: 'vsock' }, { snapshots: true }),
      emulatorHost(true),
      async (r) => void rotations.push(r),
    );
    const lines: string[] = [];
    await runtime.prepare(image, { display: 99, pidsLimit: 400 }, (line) => lines.push(line));
    assert.deepEqual(lines, [], 'the vsock snapshot base is loaded, not built');
    const cleanup = new CleanupStack();
    try {
      const s = await prepareSession(runtime, cleanup);
      const vm = await startWith(runtime, { ...s.spec, screen }, cleanup);
      const recorded = await workspace.records(s.sessionId);
      assert.deepEqual(acceptedCalls(recorded), ['GET /', 'PUT /snapshot/load', 'PATCH /vm']);
      assert.deepEqual(bodyOf(recorded, 'PUT /snapshot/load'), {
        snapshot_path: '/snapshot/vmstate',
        mem_backend: { backend_type: 'File', backend_path: '/snapshot/memory' },
        vsock_override: { uds_path: '/run/vsock.sock' },
        resume_vm: false,
        clock_realtime: true,
      });
      assert.deepEqual(vm.endpoint, { transport: 'hybrid-vsock', path: path.join(s.sessionDir, 'vsock.sock'), port: 22 });
      assert.equal(rotations.length, 1, 'rotated once, before it is handed out');
      const [rotation] = rotations as [CloneRotation];
      assert.ok('endpoint' in rotation, 'over vsock, not at an address');
      assert.deepEqual(rotation.endpoint, vm.endpoint, "over the clone's own socket");
      assert.equal(rotation.session.clientPrivateKey, s.keys.clientPrivateKey, "to the session's keys");
      assert.equal(rotation.snapshotBase.clientPrivateKey, baseKeys.clientPrivateKey);
      assert.deepEqual(await interfacesOf(vm.pid), ['lo']);
      // A session with egress has a NIC, which a NIC-less snapshot cannot gain: it boots cold.
      const withNic = await prepareSession(runtime, cleanup, true);
      await startWith(runtime, { ...withNic.spec, screen }, cleanup);
      assert.deepEqual(acceptedCalls(await workspace.records(withNic.sessionId)), ['GET /', ...COLD_BOOT_CALLS]);
    } finally {
      await cleanup.run();
    }
  });
});

describe('red team: a jailed VMM that puts a link to another host socket where its vsock socket should be', () => {
  it('the host never dials it: the start fails saying the path is no socket, and the host socket sees no connection', async (t) => {
    // A socket of the host the jail could name but never reach (root's, outside the jail).
    const victimPath = path.join(workspace.workDir, 'victim.sock');
    let connections = 0;
    const victim = net.createServer((conn) => {
      connections++;
      conn.destroy();
    });
    await new Promise<void>((resolve) => victim.listen(victimPath, resolve));
    const runtime = FirecrackerRuntime.forHost(NAMES, settings({ SBX_TRANSPORT: 'vsock' }), emulatorHost(true));
    const cleanup = new CleanupStack();
    try {
      const s = await prepareSession(runtime, cleanup);
      const started = performance.now();
      await assert.rejects(startWith(runtime, s.spec, cleanup, `symlink:${victimPath}`), /vsock path .*\/run\/vsock\.sock is not a socket/);
      t.diagnostic(`refused in ${Math.round(performance.now() - started)} ms (a whole start, stand-in VMM included; load ${os.loadavg()[0]?.toFixed(1)})`);
      await cleanup.run();
      assert.equal(connections, 0, 'nothing connected to the host socket');
      assert.deepEqual(await processesMentioning(`${TEST_PREFIX}${s.sessionId}`), [], 'the VM is gone');
    } finally {
      await cleanup.run();
      victim.close();
    }
  });
});

describe('firecracker over hybrid vsock, unjailed (development hosts)', () => {
  it('binds the socket in the session dir and reports it as the endpoint; no NIC, a namespace with only lo', async () => {
    const runtime = FirecrackerRuntime.forHost(NAMES, settings({ SBX_TRANSPORT: 'vsock', SBX_FC_JAILER: 'off' }), emulatorHost(false));
    const cleanup = new CleanupStack();
    try {
      const s = await prepareSession(runtime, cleanup);
      const vm = await startWith(runtime, s.spec, cleanup);
      const recorded = await workspace.records(s.sessionId);
      assert.deepEqual(acceptedCalls(recorded), VSOCK_BOOT_CALLS);
      const socket = path.join(s.sessionDir, 'vsock.sock');
      assert.equal(bodyOf(recorded, 'PUT /vsock')?.uds_path, socket);
      assert.deepEqual(vm.endpoint, { transport: 'hybrid-vsock', path: socket, port: 22 });
      assert.deepEqual(await interfacesOf(vm.pid), ['lo']);
      const adopted = await FirecrackerRuntime.forHost(NAMES, settings({ SBX_TRANSPORT: 'vsock', SBX_FC_JAILER: 'off' }), emulatorHost(false)).adopt(
        s.sessionId,
        s.sessionDir,
        undefined,
      );
      assert.deepEqual(adopted?.sandbox.endpoint, vm.endpoint);
    } finally {
      await cleanup.run();
    }
  });
});

/**
 * Through the orchestrator: an HTTP create, the session layer (no lease, no NIC), the guest's
 * settings on its config drive, the runtime and SSH over the vsock endpoint. The stand-in has
 * no guest, so the session cannot become ready: what is checked is what is set up for the
 * guest, and how the create fails when the far end of the vsock answers garbage. The runtime
 * boots placeholder files instead of the template's disk (a copy of gigabytes that nothing
 * would read).
 */
describe('firecracker over hybrid vsock through the orchestrator (stand-in)', () => {
  let orch: TestOrchestrator;
  /** The orchestrator's log: a 5xx answers the gist, the log has the reason. */
  const logged: string[] = [];
  before(async () => {
    const real = FirecrackerRuntime.forHost(NAMES, settings({ SBX_TRANSPORT: 'vsock' }, { bootTimeoutMs: 4_000 }), emulatorHost(true));
    const runtime: FirecrackerRuntime = Object.create(real) as FirecrackerRuntime;
    runtime.start = (spec, cleanup) => real.start({ ...spec, image }, cleanup);
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        logged.push(chunk.toString());
        done();
      },
    });
    orch = await startTestOrchestrator({ bootTimeoutMs: 4_000 }, false, { runtime, reason: 'the vsock test' }, pino({ level: 'warn' }, sink));
  });
  after(async () => {
    await orch?.stop();
  });

  it('a create without egress: the guest is told vsock, no address; a garbage answer fails it within its boot timeout, saying why', async () => {
    process.env.FAKE_FIRECRACKER_VSOCK = 'garbage';
    const jails = path.join(workspace.workDir, 'jails', 'firecracker');
    const before = new Set(await readdir(jails).catch(() => [] as string[]));
    const started = performance.now();
    const creating = orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
    // The config drive, as the guest will mount it, read while the session boots.
    let settingsText = '';
    for (let i = 0; i < 100 && !settingsText; i++) {
      const jail = (await readdir(jails).catch(() => [] as string[])).find((name) => !before.has(name));
      const drive = jail && path.join(jails, jail, 'root', 'config.ext4');
      if (drive && existsSync(drive)) settingsText = (await run(['debugfs', '-R', 'cat /sandbox.env', drive], { allowFailure: true })).stdout;
      if (!settingsText) await sleep(50);
    }
    const res = await creating;
    delete process.env.FAKE_FIRECRACKER_VSOCK;
    const elapsed = performance.now() - started;
    assert.match(settingsText, /^SANDBOX_TRANSPORT=vsock$/m, settingsText);
    assert.match(settingsText, /^SANDBOX_ADDRESS=$/m, 'no address');
    assert.match(settingsText, /^SANDBOX_NET_CONFIGURE=0$/m, 'no eth0 to wait for');
    assert.equal(res.statusCode, 503, res.body);
    // The client gets the gist (no host paths); the log has the reason.
    assert.match(res.json().error.message, /^sandbox failed to start: SSH to vsock:<path> did not finish within \d+ ms/);
    assert.match(logged.join(''), /SSH to vsock:[^ ]*vsock\.sock:22 \(last error: [^)]*unexpected answer to CONNECT: \\"HELLO from a confused multiplexer\\"/);
    assert.ok(elapsed < 4_000 + 5_000, `bounded by the boot timeout (${Math.round(elapsed)} ms)`);
    assert.equal((await orch.server.inject({ method: 'GET', url: '/healthz' })).statusCode, 200, 'the orchestrator serves on');
  });
});

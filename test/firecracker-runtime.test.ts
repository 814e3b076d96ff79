import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, open, readFile, readlink, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { pino } from 'pino';
import { after, before, describe, it } from 'node:test';
import type { GuestImage } from '../src/guest/image/builder.js';
import { AddressPool } from '../src/network/address-pool.js';
import { ResourceNames } from '../src/network/names.js';
import type { AttachedNetwork } from '../src/network/netns.js';
import { macFromIPv4 } from '../src/runtimes/firecracker/boot/guest-identity.js';
import { FirecrackerRuntime } from '../src/runtimes/firecracker/firecracker-runtime.js';
import { findOnPath, kvmUnavailable } from '../src/runtimes/firecracker/host/host-check.js';
import { hostCgroupVersion, vmCgroupDirs } from '../src/runtimes/vm/cgroups.js';
import { ensureVmlinux } from '../src/runtimes/firecracker/kernel/vmlinux.js';
import { RUNTIMES } from '../src/runtimes/registered.js';
import { snapshotBaseAddress, type CloneRotation } from '../src/runtimes/firecracker/snapshot/clone-rotation.js';
import { firecrackerSettingsFromEnv, type FirecrackerSettings } from '../src/runtimes/firecracker/settings.js';
import type { RunningSandbox, Runtime } from '../src/runtimes/runtime.js';
import type { GuestTransport } from '../src/transport/index.js';
import { CleanupStack } from '../src/util/cleanup-stack.js';
import { run } from '../src/util/exec.js';
import { guestWrittenMark, makeVolumeFile, volumeFile } from '../src/volumes/volume-files.js';
import { connectToGuest, guestAddress, guestSh } from './helpers/guest.js';
import { COLD_BOOT_CALLS as BOOT_SEQUENCE } from './helpers/firecracker/calls.js';
import { processesMentioning, processesMentioningAfterExit } from './helpers/host.js';
import { kvmRunsGuests } from './helpers/kvm-probe.js';
import { builtImage, emulatorHost, emulatorWorkspace, sessionBase, type Recorded } from './helpers/firecracker/emulator-workspace.js';
import { startTestOrchestrator, TEST_PREFIX, TEST_SUBNET, type TestOrchestrator } from './helpers/orchestrator.js';
import { assertClickArrives, assertScreenshotSize } from './helpers/desktop-checks.js';
import { startXevSlowly } from './helpers/xev.js';

/**
 * The Firecracker runtime itself (start, destroy, reclaim), run where KVM is missing against
 * stand-ins for the two binaries (test/helpers/firecracker/bin): a `firecracker` that is the
 * contract server (every request held to the v1.16.1 spec and its state machine) and checks
 * on the host what Firecracker checks there, and a `jailer` that takes the jailer's command
 * line and does for real what can be checked here: cgroups, the network namespace, the uid
 * and gid. Network namespaces, TAP devices, the chroot, ownership and cgroups are all real.
 */
const BIN = path.join(import.meta.dirname, 'helpers/firecracker/bin');
const NAMES = new ResourceNames(TEST_PREFIX);
/** A template's guest as the orchestrator's settings say: not display 99, so a template that ignored them would not come up. */
const TEMPLATE_GUEST = { display: 98, pidsLimit: 400 };
/** What the runtime sends a fresh VMM: a wait until its API answers, then the boot sequence. */
const COLD_BOOT_CALLS = ['GET /', ...BOOT_SEQUENCE];

const workspace = emulatorWorkspace('fc-rt-');
let image: GuestImage;
const pool = new AddressPool(TEST_SUBNET);

before(async () => {
  image = await builtImage();
});

function settings(overrides: Partial<FirecrackerSettings> = {}): FirecrackerSettings {
  return { ...firecrackerSettingsFromEnv({}), chrootBaseDir: path.join(workspace.workDir, 'jails'), vcpus: 1, ...overrides };
}

/** What the session layer makes before a runtime starts: keys, config dir, netns with TAP. */
async function prepareSession(runtime: FirecrackerRuntime, cleanup: CleanupStack, screen = { width: 1024, height: 768 }) {
  const { sessionId, sessionDir, spec } = await sessionBase(runtime, workspace.workDir, pool, cleanup, image, screen);
  return { sessionId, sessionDir, spec };
}

const acceptedCalls = (recorded: Recorded[]) => recorded.filter((r) => r.call && (r.status ?? 500) < 300).map((r) => r.call);
const bodyOf = (recorded: Recorded[], call: string) => recorded.find((r) => r.call === call && (r.status ?? 500) < 300)?.body;

async function netnsInode(network: AttachedNetwork): Promise<string> {
  return `net:[${(await stat(network.netnsPath)).ino}]`;
}

async function tapDetails(network: AttachedNetwork): Promise<string> {
  return (await run(['ip', '-d', '-n', network.netns, 'link', 'show', 'tap0'], { allowFailure: true })).stdout;
}

describe('the firecracker runtime, jailed, against the contract emulator', () => {
  let runtime: FirecrackerRuntime;
  let jailsDir: string;
  before(() => {
    runtime = FirecrackerRuntime.forHost(NAMES, settings(), emulatorHost(true));
    jailsDir = path.join(workspace.workDir, 'jails');
  });
  let cleanup: CleanupStack;
  let session: Awaited<ReturnType<typeof prepareSession>>;
  let sandbox: RunningSandbox;

  it('boots with exactly the spec-valid cold-boot sequence, jailed as an unprivileged user in the session netns', async () => {
    cleanup = new CleanupStack();
    session = await prepareSession(runtime, cleanup);
    sandbox = await runtime.start(session.spec, cleanup);
    const recorded = await workspace.records(session.sessionId);
    assert.deepEqual(acceptedCalls(recorded), COLD_BOOT_CALLS);
    assert.equal(bodyOf(recorded, 'PUT /actions')?.action_type, 'InstanceStart');
    assert.deepEqual(
      recorded.filter((r) => r.fault),
      [],
      'no request was refused',
    );
    const proc = recorded[0]?.process;
    assert.ok(proc);
    // --new-pid-ns: Firecracker is the init of a pid namespace of its own; the pid the
    // runtime watches is that same process as the host sees it (the jailer wrote it).
    assert.equal(proc.pid, 1, 'Firecracker is pid 1 of its own pid namespace');
    assert.match(await readFile(`/proc/${sandbox.pid}/status`, 'utf8'), new RegExp(`^NSpid:\\s+${sandbox.pid}\\s+1$`, 'm'));
    assert.notEqual(await readlink(`/proc/${sandbox.pid}/ns/pid`), await readlink('/proc/self/ns/pid'));
    const vmUid = session.spec.vmUser?.uid ?? -1;
    assert.ok(runtime.users.contains(vmUid) && vmUid !== 65534, `a uid of its own from the pool, got ${vmUid}`);
    assert.equal(proc.uid, vmUid);
    assert.equal(proc.gid, vmUid);
    assert.equal(proc.netns, await netnsInode(session.spec.network), 'Firecracker runs in the session netns');
    assert.deepEqual(proc.argv.slice(0, 4), ['--id', `${TEST_PREFIX}${session.sessionId}`, '--api-sock', '/run/firecracker.socket']);
    // Paths are the fixed in-jail ones; the NIC is the TAP with the MAC derived from the lease.
    assert.deepEqual(bodyOf(recorded, 'PUT /drives/rootfs'), { drive_id: 'rootfs', path_on_host: '/rootfs.ext4', is_root_device: true, is_read_only: false });
    assert.deepEqual(bodyOf(recorded, 'PUT /drives/config'), { drive_id: 'config', path_on_host: '/config.ext4', is_root_device: false, is_read_only: true });
    assert.deepEqual(bodyOf(recorded, 'PUT /network-interfaces/eth0'), {
      iface_id: 'eth0',
      host_dev_name: 'tap0',
      guest_mac: macFromIPv4(session.spec.network.lease.guest),
    });
    assert.equal(bodyOf(recorded, 'PUT /machine-config')?.mem_size_mib, 512);
    assert.equal(bodyOf(recorded, 'PUT /boot-source')?.kernel_image_path, '/vmlinux');
  });

  it('lays out the chroot: shared kernel hard-linked, the disk of the jail (0600) and its config drive (0400), TAP owned by it too', async () => {
    const root = path.join(jailsDir, 'firecracker', `${TEST_PREFIX}${session.sessionId}`, 'root');
    const vmlinux = await stat(path.join(root, 'vmlinux'));
    assert.equal(vmlinux.ino, (await stat(path.join(image.dir, 'vmlinux'))).ino, 'the unpacked kernel is shared, not copied');
    // The disk it writes is 0600, the config drive it only reads (is_read_only) 0400: both the jail's.
    for (const [file, mode] of [
      ['rootfs.ext4', 0o600],
      ['config.ext4', 0o400],
    ] as const) {
      const s = await stat(path.join(root, file));
      assert.equal(s.uid, session.spec.vmUser?.uid, file);
      assert.equal(s.mode & 0o777, mode, file);
    }
    const vmUid = session.spec.vmUser?.uid;
    assert.match(await tapDetails(session.spec.network), new RegExp(`user ${vmUid} group ${vmUid}`));
  });

  it('pauses in memory (PATCH /vm Paused, then Resumed), and says it is paused (GET /) for a restart to adopt it', async () => {
    const target = { sessionId: session.sessionId, sessionDir: session.sessionDir, pid: sandbox.pid };
    // As the session layer sees it: the optional pause methods of a Runtime.
    const vm: Runtime = runtime;
    assert.deepEqual(vm.pauseModes?.(), ['memory', 'disk']);
    assert.equal(vm.pauseUnavailable?.('disk'), undefined);
    assert.equal(await vm.isPaused?.(target), false);
    assert.deepEqual(await vm.pause?.(target, 'memory'), { bytes: 0 });
    assert.equal(await vm.isPaused?.(target), true);
    await vm.resume?.(target, 'memory');
    assert.equal(await vm.isPaused?.(target), false);
    const recorded = await workspace.records(session.sessionId);
    const patches = recorded.filter((r) => r.call === 'PATCH /vm' && (r.status ?? 500) < 300).map((r) => r.body);
    assert.deepEqual(patches, [{ state: 'Paused' }, { state: 'Resumed' }], 'spec-valid bodies, accepted');
    assert.deepEqual(
      recorded.filter((r) => r.fault),
      [],
      'no request was refused',
    );
  });

  it('puts the VMM in its own cgroup with the memory and CPU limits', async () => {
    const dirs = (await vmCgroupDirs(hostCgroupVersion(), TEST_PREFIX.slice(0, -1), `${TEST_PREFIX}${session.sessionId}`)).filter((d) => existsSync(d));
    assert.ok(dirs.length > 0, 'the jail made cgroups');
    const memoryFile = dirs.map((d) => path.join(d, hostCgroupVersion() === 2 ? 'memory.max' : 'memory.limit_in_bytes')).find((f) => existsSync(f));
    assert.ok(memoryFile);
    assert.equal(Number((await readFile(memoryFile, 'utf8')).trim()), (512 + 128) * 1024 * 1024);
    const procs = await readFile(path.join(path.dirname(memoryFile), 'cgroup.procs'), 'utf8');
    assert.ok(procs.split('\n').includes(String(sandbox.pid)), 'the VMM is inside');
  });

  it('a second VM gets another uid of its own, which it gives back when it goes', async () => {
    const second = new CleanupStack();
    const other = await prepareSession(runtime, second);
    try {
      const vm = await runtime.start(other.spec, second);
      const proc = (await workspace.records(other.sessionId))[0]?.process;
      assert.ok(other.spec.vmUser && session.spec.vmUser);
      assert.notEqual(other.spec.vmUser.uid, session.spec.vmUser.uid, 'two VMs never share a uid');
      assert.equal(proc?.uid, other.spec.vmUser.uid);
      assert.match(await readFile(`/proc/${vm.pid}/status`, 'utf8'), new RegExp(`^Uid:\\s+${other.spec.vmUser.uid}\\s`, 'm'));
      assert.equal(runtime.users.inUse, 2);
    } finally {
      await second.run();
      await rm(other.sessionDir, { recursive: true, force: true });
    }
    assert.equal(runtime.users.inUse, 1, 'its uid went back to the pool');
  });

  it('destroys gracefully: Ctrl-Alt-Del, the VMM exits by itself; jail, cgroups, TAP and netns are gone', async () => {
    const jailDir = path.join(jailsDir, 'firecracker', `${TEST_PREFIX}${session.sessionId}`);
    const cgroups = await vmCgroupDirs(hostCgroupVersion(), TEST_PREFIX.slice(0, -1), `${TEST_PREFIX}${session.sessionId}`);
    await cleanup.run();
    const exit = await sandbox.exited;
    // Not our child (a pid namespace of its own): no exit code, but no kill either.
    assert.doesNotMatch(exit.reason, /killed/, `the VMM exited by itself after the guest powered off (${exit.reason})`);
    assert.match(exit.reason, /pid namespace of its own/);
    assert.ok(acceptedCalls(await workspace.records(session.sessionId)).includes('PUT /actions'));
    assert.equal(bodyOf((await workspace.records(session.sessionId)).slice(-1), 'PUT /actions')?.action_type, 'SendCtrlAltDel');
    assert.equal(existsSync(jailDir), false, 'jail removed');
    assert.deepEqual(
      cgroups.filter((d) => existsSync(d)),
      [],
      'cgroups removed',
    );
    assert.equal(existsSync(session.spec.network.netnsPath), false, 'netns removed');
    assert.deepEqual(await processesMentioning(`${TEST_PREFIX}${session.sessionId}`), []);
    await cleanup.run(); // idempotent
  });

  it("volumes: a drive each, hard-linked into the jail (the jail's while it runs, root's after), read-only when asked; the guest told which disk is which", async () => {
    const vols = new CleanupStack();
    const s = await prepareSession(runtime, vols);
    const [rw, ro] = [path.join(workspace.workDir, 'vol-rw.ext4'), path.join(workspace.workDir, 'vol-ro.ext4')];
    await makeVolumeFile(rw, 16);
    await makeVolumeFile(ro, 16);
    const volumes = [
      { name: 'a', file: rw, path: '/data', readOnly: false },
      { name: 'b', file: ro, path: '/home/user/ref', readOnly: true },
    ];
    try {
      await runtime.start({ ...s.spec, volumes }, vols);
      const recorded = await workspace.records(s.sessionId);
      assert.deepEqual(
        recorded.filter((r) => r.fault),
        [],
        'every drive spec-valid and openable by the jail',
      );
      assert.deepEqual(bodyOf(recorded, 'PUT /drives/vol0'), {
        drive_id: 'vol0',
        path_on_host: '/volumes/vol0.ext4',
        is_root_device: false,
        is_read_only: false,
      });
      assert.deepEqual(bodyOf(recorded, 'PUT /drives/vol1'), {
        drive_id: 'vol1',
        path_on_host: '/volumes/vol1.ext4',
        is_root_device: false,
        is_read_only: true,
      });
      const root = path.join(jailsDir, 'firecracker', `${TEST_PREFIX}${s.sessionId}`, 'root');
      // The writable one is the jail's; the read-only one root's and read-only for all: the
      // jail's user can read it, but neither write it nor (not its owner) chmod it writable.
      for (const [file, inJail, owner, mode] of [
        [rw, 'vol0.ext4', s.spec.vmUser?.uid, 0o600],
        [ro, 'vol1.ext4', 0, 0o444],
      ] as const) {
        const linked = await stat(path.join(root, 'volumes', inJail));
        assert.equal(linked.ino, (await stat(file)).ino, 'the volume itself, never a copy');
        assert.deepEqual([linked.uid, linked.mode & 0o777], [owner, mode], inJail);
      }
      assert.equal(await readFile(path.join(s.spec.configDir, 'volumes'), 'utf8'), 'disk:vdc rw /data\ndisk:vdd ro /home/user/ref\n');
      assert.equal(existsSync(guestWrittenMark(rw)), true, 'a volume a VM may write is marked: never loop-mounted on the host again');
      assert.equal(existsSync(guestWrittenMark(ro)), false);
    } finally {
      await vols.run();
    }
    for (const file of [rw, ro]) {
      const after = await stat(file);
      assert.deepEqual([after.uid, after.mode & 0o777], [0, 0o600], `${file} is root's again`);
    }
  });

  it('a call Firecracker refuses (no TAP) fails the start naming the step and the fault, and frees everything', async () => {
    const failing = new CleanupStack();
    const s = await prepareSession(runtime, failing);
    await run(['ip', '-n', s.spec.network.netns, 'link', 'delete', 'tap0']);
    await assert.rejects(runtime.start(s.spec, failing), /step "network-interface" failed: .*Open tap device failed: tap0 does not exist/s);
    const recorded = await workspace.records(s.sessionId);
    assert.ok(!acceptedCalls(recorded).includes('PUT /actions'), 'never started');
    await failing.run();
    assert.equal(existsSync(path.join(jailsDir, 'firecracker', `${TEST_PREFIX}${s.sessionId}`)), false);
    assert.deepEqual(await processesMentioning(`${TEST_PREFIX}${s.sessionId}`), []);
    assert.ok(existsSync(path.join(workspace.workDir, 'logs', `${s.sessionId}.console.log`)), 'the console log is kept for the failure');
  });

  it('after an orchestrator crash, list() finds the VM and reclaim() kills it, removes its jail and cgroups and gives its volume back to root', async () => {
    const abandoned = new CleanupStack();
    const s = await prepareSession(runtime, abandoned);
    const volume = path.join(workspace.workDir, 'vol-orphan.ext4');
    await makeVolumeFile(volume, 16);
    const recorded: string[] = [];
    const record = (kind: string, name: string) => void recorded.push(`${kind}:${name}`);
    const vm = await runtime.start({ ...s.spec, volumes: [{ name: 'o', file: volume, path: '/data', readOnly: false }], record }, abandoned);
    try {
      assert.equal((await stat(volume)).uid, s.spec.vmUser?.uid, "the volume is the jail's while the VM runs");
      const jailDir = path.join(jailsDir, 'firecracker', `${TEST_PREFIX}${s.sessionId}`);
      const cgroups = (await vmCgroupDirs(hostCgroupVersion(), TEST_PREFIX.slice(0, -1), `${TEST_PREFIX}${s.sessionId}`)).filter((d) => existsSync(d));
      assert.ok(existsSync(jailDir) && cgroups.length > 0, 'the orphan has its jail and cgroups');
      assert.ok(existsSync(`/proc/${vm.pid}`), 'and its VMM runs');
      // A new orchestrator (a new runtime object) knows nothing of it but the names.
      const restarted = FirecrackerRuntime.forHost(NAMES, settings(), emulatorHost(true));
      assert.ok((await restarted.list()).includes(s.sessionId));
      await restarted.reclaim(s.sessionId, s.sessionDir);
      const exit = await vm.exited;
      assert.equal(existsSync(`/proc/${vm.pid}`), false, `the orphan VMM (pid ${vm.pid}) is gone: ${exit.reason}`);
      assert.deepEqual(await processesMentioning(`${TEST_PREFIX}${s.sessionId}`), []);
      assert.equal(existsSync(jailDir), false, 'jail removed');
      assert.deepEqual(
        cgroups.filter((d) => existsSync(d)),
        [],
        'cgroups removed',
      );
      assert.equal((await restarted.list()).includes(s.sessionId), false);
      assert.equal((await tapDetails(s.spec.network)).trim(), '', 'TAP removed');
      // The crashed run's cleanup never gave the volume back: the session dir's list did.
      const returned = await stat(volume);
      assert.deepEqual([returned.uid, returned.gid, returned.mode & 0o777], [0, 0, 0o600], "the volume is root's again");
      // And the ledger names it, for a start-up reconciliation that finds no session dir.
      assert.ok(recorded.includes(`volume-owner:${volume}`), recorded.join(' '));
      await run(['chown', `${s.spec.vmUser?.uid}:${s.spec.vmUser?.gid}`, volume]);
      await RUNTIMES.resourceKind('volume-owner')?.reclaim(volume, { log: pino({ level: 'silent' }), removeDir: async () => undefined });
      assert.equal((await stat(volume)).uid, 0, "the ledger's reclaimer gives it back too");
    } finally {
      await abandoned.run(); // the rest (netns, lease) as the reconciler would
    }
  });
});

describe('the firecracker runtime, unjailed (development hosts)', () => {
  it('runs Firecracker as root in the session netns with host paths in the session dir, and cleans up', async () => {
    const runtime = FirecrackerRuntime.forHost(NAMES, settings({ jailer: 'off' }), emulatorHost(false));
    assert.equal(runtime.leaseVmUser, undefined, 'unjailed: no uid of its own (it runs as root, development only)');
    const cleanup = new CleanupStack();
    const s = await prepareSession(runtime, cleanup);
    const vm = await runtime.start(s.spec, cleanup);
    const recorded = await workspace.records(s.sessionId);
    assert.deepEqual(acceptedCalls(recorded), COLD_BOOT_CALLS);
    assert.equal(recorded[0]?.process?.uid, 0);
    assert.equal(recorded[0]?.process?.netns, await netnsInode(s.spec.network));
    assert.equal(bodyOf(recorded, 'PUT /drives/rootfs')?.path_on_host, path.join(s.sessionDir, 'rootfs.ext4'));
    assert.equal(bodyOf(recorded, 'PUT /vsock')?.uds_path, path.join(s.sessionDir, 'vsock.sock'));
    await cleanup.run();
    assert.equal((await vm.exited).code, 0);
    assert.equal(existsSync(path.join(s.sessionDir, 'rootfs.ext4')), false);
    await rm(s.sessionDir, { recursive: true, force: true });
  });
});

/** Where the end-to-end session mounts its volume. */
const VOLUME_MOUNT = '/home/user/work_data';

/**
 * The whole path through the orchestrator: HTTP create (with a volume), the runtime, SSH with
 * the pinned host key, screenshot, a click, a pause to disk and its resume, destroy. Run on a real microVM where KVM and the binaries
 * exist; everywhere, on the emulator with FAKE_FIRECRACKER_GUEST=qemu, which boots the VM
 * the runtime configured (its unpacked vmlinux, raw root copy, config drive, TAP owned by the
 * jail's user, opened by a QEMU running as that user) under QEMU's microvm.
 */
function endToEnd(title: string, skip: string | false, runtimeFor: () => Promise<FirecrackerRuntime>) {
  describe(title, { skip }, () => {
    let orch: TestOrchestrator;
    let runtime: FirecrackerRuntime;
    let id: string;
    let guest: GuestTransport;
    before(async () => {
      runtime = await runtimeFor();
      orch = await startTestOrchestrator({}, false, { runtime, reason: title });
    });
    after(async () => {
      guest?.close();
      await orch?.stop();
      delete process.env.FAKE_FIRECRACKER_GUEST;
    });

    it('creates a session over HTTP (201) that is ready with the requested screen', async (t) => {
      const volume = await orch.server.inject({ method: 'POST', url: '/v1/volumes', payload: { name: 'work', sizeMiB: 32 } });
      assert.equal(volume.statusCode, 201, volume.body);
      const started = Date.now();
      const res = await orch.server.inject({
        method: 'POST',
        url: '/v1/sessions',
        payload: { width: 800, height: 600, volumes: [{ name: 'work', path: VOLUME_MOUNT }] },
      });
      assert.equal(res.statusCode, 201, res.body);
      t.diagnostic(`create-to-ready: ${Date.now() - started} ms`);
      id = res.json().id;
      assert.equal(res.json().runtime, 'firecracker');
    });

    it('is the microVM the runtime configured: image kernel, root=/dev/vda rw appended, config drive, MAC from the lease', async () => {
      const address = await guestAddress(orch.names, id);
      guest = await connectToGuest(orch.stateDir, id, address);
      const facts = (await guestSh(guest, 'uname -r; cat /proc/cmdline; grep -E " / | /sandbox/config " /proc/mounts; cat /sys/class/net/eth0/address')).text;
      const manifest = JSON.parse(await readFile(path.join(orch.image.dir, 'manifest.json'), 'utf8')) as { vm: { kernelRelease: string } };
      assert.match(facts, new RegExp(`^${manifest.vm.kernelRelease.replace(/\./g, '\\.')}$`, 'm'));
      assert.match(facts, /console=ttyS0 reboot=k panic=1 pci=off quiet init=\/sbin\/sandbox-init root=\/dev\/vda rw/);
      assert.match(facts, /^\/dev\/vda \/ ext4 rw/m);
      // The config drive (/dev/vdb) is read at boot into a tmpfs: a snapshot clone can be rekeyed.
      assert.match(facts, /^config \/sandbox\/config tmpfs rw/m);
      assert.match(facts, new RegExp(`^${macFromIPv4(address)}$`, 'm'));
    });

    it('screenshots and clicks', async () => {
      await assertScreenshotSize(orch, id, { width: 800, height: 600 });
      await startXevSlowly(guest, 800, 600);
      await assertClickArrives(orch, id, guest);
    });

    it('pauses to disk over HTTP (its VMM gone) and resumes the same guest: its desktop, SSH and volume answer', async (t) => {
      guest.close();
      const address = await guestAddress(orch.names, id);
      await guestSh((guest = await connectToGuest(orch.stateDir, id, address)), `echo kept > /dev/shm/mark; echo on-the-volume > ${VOLUME_MOUNT}/note`);
      guest.close();
      let started = Date.now();
      const paused = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/pause`, payload: { mode: 'disk' } });
      t.diagnostic(`pause to disk over HTTP: ${Date.now() - started} ms, ${paused.json().paused?.bytes} bytes`);
      assert.equal(paused.statusCode, 200, paused.body);
      assert.equal(paused.json().paused.mode, 'disk');
      assert.ok(paused.json().paused.bytes > 0);
      // The VMM is gone when the pause answers; the emulator's guest QEMU dies with it (its
      // pdeathsig), a moment later under load.
      assert.deepEqual(await processesMentioningAfterExit(`${TEST_PREFIX}${id}`), [], 'no VMM while paused to disk');
      started = Date.now();
      const resumed = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/resume` });
      t.diagnostic(`resume from disk over HTTP: ${Date.now() - started} ms`);
      assert.equal(resumed.statusCode, 200, resumed.body);
      assert.equal(resumed.json().state, 'ready');
      await assertScreenshotSize(orch, id, { width: 800, height: 600 });
      guest = await connectToGuest(orch.stateDir, id, address);
      assert.equal((await guestSh(guest, 'cat /dev/shm/mark')).text.trim(), 'kept', "the guest's memory came back");
      assert.equal((await guestSh(guest, `cat ${VOLUME_MOUNT}/note`)).text.trim(), 'on-the-volume', 'and its volume');
    });

    it('is destroyed without a trace: no VMM, jail, cgroup, netns or key dir', async () => {
      guest.close();
      const jailDir = path.join(settingsOf(runtime).chrootBaseDir, 'firecracker', `${TEST_PREFIX}${id}`);
      if (runtime.host.jailerBin) assert.ok(existsSync(jailDir));
      const res = await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}` });
      assert.equal(res.json().state, 'destroyed');
      assert.equal(existsSync(jailDir), false);
      assert.equal(existsSync(path.join(orch.stateDir, id)), false, 'key dir gone');
      assert.equal(existsSync(`/var/run/netns/${orch.names.netns(id)}`), false);
      assert.deepEqual(await processesMentioning(`${TEST_PREFIX}${id}`), []);
      const volume = await stat(volumeFile(path.join(orch.stateDir, 'volumes'), 'local', 'work'));
      assert.deepEqual([volume.uid, volume.mode & 0o777], [0, 0o600], "its volume is root's again");
    });
  });
}

const settingsByRuntime = new WeakMap<FirecrackerRuntime, FirecrackerSettings>();
function settingsOf(runtime: FirecrackerRuntime): FirecrackerSettings {
  return settingsByRuntime.get(runtime) as FirecrackerSettings;
}

endToEnd('end to end on the contract emulator booting the configured VM under QEMU (TCG)', false, async () => {
  process.env.FAKE_FIRECRACKER_GUEST = 'qemu';
  const s = settings({ vcpus: 2, bootTimeoutMs: 150_000 });
  const runtime = FirecrackerRuntime.forHost(NAMES, s, emulatorHost(true));
  settingsByRuntime.set(runtime, s);
  return runtime;
});

const realFirecracker =
  kvmUnavailable() ??
  (process.env.FIRECRACKER_BIN || findOnPath('firecracker') ? false : 'no firecracker binary: set FIRECRACKER_BIN (and JAILER_BIN) or put them on PATH');
endToEnd('end to end on a real Firecracker microVM (KVM)', realFirecracker, async () => {
  const s = { ...firecrackerSettingsFromEnv(process.env), chrootBaseDir: path.join(workspace.workDir, 'jails-real') };
  const runtime = await FirecrackerRuntime.create(NAMES, s);
  settingsByRuntime.set(runtime, s);
  return runtime;
});

describe('the firecracker runtime: host checks, selection and the kernel', () => {
  it('refuses a host without KVM or binaries, naming each problem and its fix', async () => {
    const noBinaries = {
      ...firecrackerSettingsFromEnv({}),
      firecrackerBin: '/nonexistent/firecracker',
      jailer: 'on' as const,
      jailerBin: '/nonexistent/jailer',
    };
    await assert.rejects(FirecrackerRuntime.create(NAMES, noBinaries), (err: Error) => {
      assert.match(err.message, /^runtime firecracker is not available here: /);
      assert.match(err.message, /FIRECRACKER_BIN=\/nonexistent\/firecracker is not an executable file/);
      assert.match(err.message, /JAILER_BIN=\/nonexistent\/jailer is not an executable file/);
      const kvm = kvmUnavailable();
      if (kvm) assert.ok(err.message.includes(kvm), 'the KVM problem is named too');
      return true;
    });
  });

  it('refuses to run unjailed unless SBX_FC_JAILER=off says so, naming the fix', async () => {
    for (const jailer of ['auto', 'on'] as const) {
      assert.throws(
        () => FirecrackerRuntime.forHost(NAMES, settings({ jailer }), emulatorHost(false)),
        (err: Error) => {
          assert.match(err.message, /^runtime firecracker is not available here: /);
          assert.match(err.message, /refuses to run unjailed/);
          assert.match(err.message, /JAILER_BIN/);
          assert.match(err.message, /SBX_FC_JAILER=off/);
          return true;
        },
        `SBX_FC_JAILER=${jailer}`,
      );
    }
    // The host check says it as well, when no jailer is found (auto looks on PATH).
    const noJailer = { ...firecrackerSettingsFromEnv({ PATH: '/nonexistent' }), firecrackerBin: path.join(BIN, 'firecracker') };
    await assert.rejects(
      (async () => {
        const saved = process.env.PATH;
        process.env.PATH = '/nonexistent';
        try {
          return await FirecrackerRuntime.create(NAMES, noJailer);
        } finally {
          process.env.PATH = saved;
        }
      })(),
      /no jailer binary.*refuses to run unjailed.*SBX_FC_JAILER=off/,
    );
    assert.ok(
      FirecrackerRuntime.forHost(NAMES, settings({ jailer: 'off' }), emulatorHost(false))
        .describe()
        .includes('NOT jailed'),
    );
  });

  it('checks the version: only the release whose API it speaks', async () => {
    const old = path.join(workspace.workDir, 'old-firecracker');
    await writeFile(old, '#!/bin/sh\necho "Firecracker v1.7.0"\n', { mode: 0o755 });
    const problems = async (bin: string) =>
      FirecrackerRuntime.create(NAMES, { ...firecrackerSettingsFromEnv({}), firecrackerBin: bin, jailer: 'off' }).then(
        () => '',
        (e: Error) => e.message,
      );
    assert.match(await problems(old), /is v1\.7\.0; this build speaks the API of v1\.16\.x: install firecracker and jailer v1\.16\.x/);
    assert.doesNotMatch(await problems(path.join(BIN, 'firecracker')), /--version|speaks the API/, 'the stand-in reports v1.16.1');
  });

  it('auto says why it did not pick firecracker; asking for it fails with the reason', async () => {
    const { RUNTIMES } = await import('../src/runtimes/registered.js');
    const settings = { ...RUNTIMES.settingsFromEnv(process.env), firecracker: firecrackerSettingsFromEnv({}) };
    // The expectation comes from the test's own probes (a KVM guest run, the shell's PATH lookup).
    const kvm = await kvmRunsGuests();
    const binary = process.env.FIRECRACKER_BIN || (await run(['sh', '-c', 'command -v firecracker'], { allowFailure: true })).stdout.trim();
    const picked = await RUNTIMES.select('auto', NAMES, settings);
    if (kvm.works && binary) {
      assert.equal(picked.runtime.name, 'firecracker', `KVM runs guests and ${binary} is there: ${picked.reason}`);
    } else {
      assert.notEqual(picked.runtime.name, 'firecracker', `KVM: ${kvm.detail}; binary: ${binary || 'none'}`);
      assert.match(picked.reason, /firecracker: /);
    }
    if (!kvm.works) await assert.rejects(RUNTIMES.select('firecracker', NAMES, settings), /runtime firecracker is not available here/);
  });

  it('unpacks the image kernel (a bzImage) into the ELF vmlinux Firecracker boots, once', async () => {
    const out = path.join(workspace.workDir, 'vmlinux');
    assert.equal(await ensureVmlinux(image.kernel, out), out);
    const head = Buffer.alloc(4);
    const handle = await open(out, 'r');
    await handle.read(head, 0, 4, 0);
    await handle.close();
    assert.deepEqual([...head], [0x7f, 0x45, 0x4c, 0x46]);
    assert.ok((await stat(out)).size > (await stat(image.kernel)).size, 'larger than the compressed kernel');
    const made = (await stat(out)).mtimeMs;
    assert.equal(await ensureVmlinux(image.kernel, out), out);
    assert.equal((await stat(out)).mtimeMs, made, 'the cached copy is reused');
    assert.equal(await ensureVmlinux(out, path.join(workspace.workDir, 'unused')), out, 'an ELF kernel is booted as it is');
    await assert.rejects(ensureVmlinux(path.join(image.dir, 'manifest.json'), path.join(workspace.workDir, 'x')), /not a bzImage/);
  });
});

describe('snapshots: a template built once, sessions restored from it (contract emulator)', () => {
  let runtime: FirecrackerRuntime;
  let templateImage: GuestImage;
  const templateId = () => `tpl${image.hash.slice(0, 7)}`;
  const dirOf = () => path.join(templateImage.dir, 'firecracker-template-1024x768');

  before(async () => {
    // The template goes next to a stand-in of the image dir, not into the shared image cache.
    templateImage = { ...image, dir: path.join(workspace.workDir, 'image') };
    await mkdir(templateImage.dir);
    runtime = FirecrackerRuntime.forHost(
      NAMES,
      settings({ snapshots: true, vcpus: 2, bootTimeoutMs: 150_000, snapshotBaseMemoryMiB: 768 }),
      emulatorHost(true),
    );
  });
  after(() => {
    delete process.env.FAKE_FIRECRACKER_GUEST;
  });

  it('prepare() boots the template, waits for its desktop, pauses and snapshots it, keeps the files and frees the rest', async () => {
    // The template must really come up (its desktop is awaited): the emulator boots it under QEMU.
    process.env.FAKE_FIRECRACKER_GUEST = 'qemu';
    const lines: string[] = [];
    await runtime.prepare(templateImage, TEMPLATE_GUEST, (line) => lines.push(line));
    delete process.env.FAKE_FIRECRACKER_GUEST;
    assert.match(lines.join('\n'), /template snapshot ready in \d+ ms/, lines.join('\n'));

    const recorded = await workspace.records(templateId());
    assert.deepEqual(acceptedCalls(recorded), [...COLD_BOOT_CALLS, 'PATCH /vm', 'PUT /snapshot/create']);
    assert.deepEqual(bodyOf(recorded, 'PATCH /vm'), { state: 'Paused' });
    assert.deepEqual(bodyOf(recorded, 'PUT /snapshot/create'), {
      snapshot_type: 'Full',
      snapshot_path: '/snapshot/vmstate',
      mem_file_path: '/snapshot/memory',
    });
    for (const file of ['vmstate', 'memory', 'rootfs.ext4']) {
      const s = await stat(path.join(dirOf(), file));
      assert.deepEqual([s.uid, s.gid, s.mode & 0o777], [0, 0, 0o644], file);
    }
    // No group stands for "the jails" any more: the way to the files is what is closed.
    assert.equal((await stat(dirOf())).mode & 0o777, 0o700, "the template dir is root's alone");
    assert.equal((await stat(path.join(dirOf(), 'template.json'))).mode & 0o777, 0o600, 'the template key stays root-only');
    assert.equal(existsSync(path.join(workspace.workDir, 'jails', 'firecracker', `${TEST_PREFIX}${templateId()}`)), false, 'template jail removed');
    assert.equal(existsSync(`/var/run/netns/${TEST_PREFIX}${templateId()}`), false, 'template netns removed');
    assert.deepEqual(await processesMentioning(`${TEST_PREFIX}${templateId()}`), []);
  });

  it('a session of the template screen is restored (load with overrides, resume), and not handed out unless its keys rotate', async () => {
    const cleanup = new CleanupStack();
    const s = await prepareSession(runtime, cleanup);
    // The emulator has no guest behind a restored VM, so the rotation cannot reach it: the
    // start must fail at the rotation's first phase, never hand the clone out.
    await assert.rejects(runtime.start(s.spec, cleanup), /key rotation failed at connect-template/);
    const recorded = await workspace.records(s.sessionId);
    assert.deepEqual(acceptedCalls(recorded), ['GET /', 'PUT /snapshot/load', 'PATCH /vm']);
    assert.deepEqual(bodyOf(recorded, 'PUT /snapshot/load'), {
      snapshot_path: '/snapshot/vmstate',
      mem_backend: { backend_type: 'File', backend_path: '/snapshot/memory' },
      network_overrides: [{ iface_id: 'eth0', host_dev_name: 'tap0' }],
      vsock_override: { uds_path: '/run/vsock.sock' },
      resume_vm: false,
      clock_realtime: true,
    });
    assert.deepEqual(bodyOf(recorded, 'PATCH /vm'), { state: 'Resumed' });
    // The clone's jail shares the template's memory and state, and has its own disk copy.
    const root = path.join(workspace.workDir, 'jails', 'firecracker', `${TEST_PREFIX}${s.sessionId}`, 'root');
    assert.equal((await stat(path.join(root, 'snapshot/memory'))).ino, (await stat(path.join(dirOf(), 'memory'))).ino);
    assert.notEqual((await stat(path.join(root, 'rootfs.ext4'))).ino, (await stat(path.join(dirOf(), 'rootfs.ext4'))).ino);
    await cleanup.run();
    assert.equal(existsSync(root), false);
    const gateway = snapshotBaseAddress(TEST_PREFIX).gateway.replace(/\./g, '\\.');
    assert.doesNotMatch((await run(['ip', '-o', 'addr'])).stdout, new RegExp(`inet ${gateway}/`), 'no route to the template address is left');
  });

  it('a restored session whose keys rotate is handed out on its own address, running, and stops cleanly', async () => {
    // The emulator has no guest behind a restored VM, so the rotation itself (tested on a real
    // guest in firecracker-rotation.test.ts) is stood in for by one that succeeds: what is
    // checked here is the runtime's success path around it.
    const rotations: CloneRotation[] = [];
    const rotating = FirecrackerRuntime.forHost(
      NAMES,
      settings({ snapshots: true, vcpus: 2, bootTimeoutMs: 150_000, snapshotBaseMemoryMiB: 768 }),
      emulatorHost(true),
      async (rotation) => void rotations.push(rotation),
    );
    const lines: string[] = [];
    await rotating.prepare(templateImage, TEMPLATE_GUEST, (line) => lines.push(line));
    assert.deepEqual(lines, [], 'the template built above is loaded');
    const cleanup = new CleanupStack();
    const s = await prepareSession(rotating, cleanup);
    const vm = await rotating.start(s.spec, cleanup);
    // A failed check must not leave the VM behind (its jail, netns and VMM would hold the run).
    try {
      assert.deepEqual(acceptedCalls(await workspace.records(s.sessionId)), ['GET /', 'PUT /snapshot/load', 'PATCH /vm']);
      assert.equal(rotations.length, 1, 'rotated once, after the resume');
      const [rotation] = rotations as [CloneRotation];
      assert.ok('at' in rotation, 'a clone with a NIC is rotated over TCP');
      assert.deepEqual(rotation.at, snapshotBaseAddress(TEST_PREFIX), "reached at its template's address");
      assert.equal(rotation.hostInterface, s.spec.network.hostInterface);
      assert.deepEqual(rotation.lease, s.spec.network.lease, "moved to the session's lease");
      assert.equal(rotation.session.clientPrivateKey, await readFile(path.join(s.sessionDir, 'id_ed25519'), 'utf8'), "with the session's own keys");
      assert.notEqual(rotation.snapshotBase.clientPrivateKey, rotation.session.clientPrivateKey);
      assert.equal(rotation.hostname, s.spec.hostname, "given the session's own hostname (and a machine id)");
      // Handed out: the session's address, the VMM running.
      assert.deepEqual(vm.endpoint, { host: s.spec.network.lease.guest, port: 22 });
      assert.equal(vm.isAlive(), true);
    } finally {
      await cleanup.run();
    }
    await vm.exited;
    assert.equal(vm.isAlive(), false);
    assert.equal(existsSync(path.join(workspace.workDir, 'jails', 'firecracker', `${TEST_PREFIX}${s.sessionId}`)), false, 'its jail is gone');
  });

  it('a session of another screen size boots cold', async () => {
    const cleanup = new CleanupStack();
    const s = await prepareSession(runtime, cleanup, { width: 800, height: 600 });
    await runtime.start(s.spec, cleanup);
    assert.deepEqual(acceptedCalls(await workspace.records(s.sessionId)), COLD_BOOT_CALLS);
    await cleanup.run();
  });

  it('a second prepare() loads the template instead of building it', async () => {
    const again = FirecrackerRuntime.forHost(NAMES, settings({ snapshots: true }), emulatorHost(true));
    const lines: string[] = [];
    await again.prepare(templateImage, TEMPLATE_GUEST, (line) => lines.push(line));
    assert.deepEqual(lines, []);
  });
});

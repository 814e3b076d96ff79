import assert from 'node:assert/strict';
import { existsSync, statSync } from 'node:fs';
import { rmdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import type { GuestImage } from '../src/guest/image/builder.js';
import { processStartTime } from '../src/host/process-watch.js';
import { AddressPool } from '../src/network/address-pool.js';
import { netnsExists } from '../src/network/netns.js';
import { jailId } from '../src/runtimes/firecracker/jailer/jail-id.js';
import type { SandboxVolume } from '../src/runtimes/runtime.js';
import { hostCgroupVersion, vmCgroupDirs } from '../src/runtimes/vm/cgroups.js';
import { returnVolumes } from '../src/runtimes/vm/vm-volumes.js';
import { adoptSession } from '../src/sessions/adopt.js';
import type { Session } from '../src/sessions/session.js';
import type { SessionRecord } from '../src/sessions/session-record.js';
import type { GuestTransport } from '../src/transport/index.js';
import { CleanupStack } from '../src/util/cleanup-stack.js';
import { run } from '../src/util/exec.js';
import { makeVolumeFile } from '../src/volumes/volume-files.js';
import { guestSh } from './helpers/guest.js';
import { processesMentioning, processesMentioningAfterExit } from './helpers/host.js';
import { accepted, callsByProcess, connectWhenUp, ended, NAMES, newRuntime, prepareSession } from './helpers/firecracker/disk-pause-session.js';
import { builtImage, emulatorWorkspace } from './helpers/firecracker/emulator-workspace.js';
import { TEST_PREFIX, TEST_SUBNET } from './helpers/orchestrator.js';

/**
 * Pause to disk of a jailed Firecracker VM with volumes, and across a host reboot, against the
 * contract emulator (its guest under QEMU TCG: one boot serves the whole file). A file written
 * on the writable volume before the pause reads back in the guest after a restarted runtime
 * resumed it, and a new write works; the read-only volume reads on, though another reader's
 * end gave its file back to root while paused. Paused again, the host "reboots" (the
 * orchestrator gone, the netns with its TAP and the VM's cgroups taken) and the session layer's
 * adoption makes the network again: the resume loads the snapshot in it and the counter in the
 * guest's memory goes on. At the end the volumes are root's again and nothing of it is left.
 */
const MOUNT = '/home/user/work_data';
const REF = '/home/user/ref';
const COUNTER = '/dev/shm/counter';

const workspace = emulatorWorkspace('fc-dpv-', ['FAKE_FIRECRACKER_GUEST']);
const pool = new AddressPool(TEST_SUBNET);

/** The counter's shell and its count: the same process after a resume, not a cold boot's. */
async function counterOf(guest: GuestTransport): Promise<{ pid: number; count: number }> {
  const [pid, count] = (await guestSh(guest, `cat ${COUNTER}`)).text.trim().split(' ').map(Number);
  return { pid: pid ?? 0, count: count ?? 0 };
}

/** What the guest says, trimmed; a command that fails fails the test. */
async function sh(guest: GuestTransport, command: string): Promise<string> {
  const result = await guestSh(guest, command);
  assert.equal(result.exitCode, 0, `${command}: ${result.text}${result.stderr.toString('utf8')}`);
  return result.text.trim();
}

/** A file of the volume read from its image on the host, without mounting it (debugfs). */
async function onVolume(file: string, name: string): Promise<string> {
  return (await run(['debugfs', '-R', `cat /${name}`, file])).stdout.trim();
}

describe('firecracker pause to disk of a session with a volume, and across a host reboot', () => {
  let image: GuestImage;
  /** What the session layer made for it (lease, uid, network), and what the first runtime's start pushed. */
  const held = new CleanupStack();
  const boot = new CleanupStack();
  let session: Awaited<ReturnType<typeof prepareSession>>;
  let volume: string;
  /** A volume mounted read-only, which other sessions may read at the same time. */
  let shared: string;
  let guest: GuestTransport | undefined;
  let address: string;
  /** The VMM running now (a resume from disk starts another), and the runtime that started it. */
  let vmmPid: number;
  let runtime: ReturnType<typeof newRuntime>;
  let beforeReboot: { pid: number; count: number };
  /** The session as the restart after the reboot adopted it: its cleanup is its release. */
  let adopted: Session | undefined;

  before(async () => {
    process.env.FAKE_FIRECRACKER_GUEST = 'qemu';
    image = await builtImage();
    volume = path.join(workspace.workDir, 'volumes', 'data.ext4'); // beside the jails: hard-linked into them
    await makeVolumeFile(volume, 32);
    shared = path.join(workspace.workDir, 'volumes', 'ref.ext4');
    await makeVolumeFile(shared, 16);
    const readme = path.join(workspace.workDir, 'readme');
    await writeFile(readme, 'shared-reference\n', { mode: 0o644 });
    await run(['debugfs', '-w', '-R', `write ${readme} readme`, shared]);
  });
  after(async () => {
    guest?.close();
    await adopted?.cleanup.run();
    await boot.run();
    await held.run();
  });

  const target = (pid: number) => ({ sessionId: session.sessionId, sessionDir: session.sessionDir, pid, endpoint: { host: address, port: 22 } });

  it("writes a file on its volume, synced, and pauses to disk: the VMM gone, the volume still linked in the jail, the jail's", async (t) => {
    runtime = newRuntime(workspace.workDir);
    session = await prepareSession(runtime, workspace.workDir, pool, held, image);
    const volumes: SandboxVolume[] = [
      { name: 'data', file: volume, path: MOUNT, readOnly: false },
      { name: 'ref', file: shared, path: REF, readOnly: true },
    ];
    const sandbox = await runtime.start({ ...session.spec, volumes }, boot);
    vmmPid = sandbox.pid;
    address = session.spec.network.lease.guest;
    guest = await connectWhenUp(workspace.workDir, session.sessionId, address, 150_000);
    // Mounted from its drive (the disk after the config drive), writable.
    assert.match(await sh(guest, `findmnt -n -o SOURCE,FSTYPE,OPTIONS --target ${MOUNT}`), /^\/dev\/vdc\s+ext4\s+rw,/);
    assert.match(await sh(guest, `findmnt -n -o SOURCE,OPTIONS --target ${REF}`), /^\/dev\/vdd\s+ro,/);
    assert.equal(await sh(guest, `echo before-the-pause > ${MOUNT}/note && sync && cat ${MOUNT}/note`), 'before-the-pause');
    assert.equal(await sh(guest, `cat ${REF}/readme`), 'shared-reference');
    // A counter in the guest's memory only (/dev/shm): a cold boot would lose it.
    const loop = `i=0; while :; do i=$((i+1)); echo "$$ $i" > ${COUNTER}.new && mv ${COUNTER}.new ${COUNTER}; sleep 0.1; done`;
    await guestSh(guest, `setsid nohup sh -c '${loop}' >/dev/null 2>&1 < /dev/null &`);
    await sleep(1500);
    guest.close();
    guest = undefined;
    const vmmStart = processStartTime(vmmPid);
    const started = Date.now();
    const paused = await runtime.pause?.(target(vmmPid), 'disk');
    t.diagnostic(`pause to disk: ${Date.now() - started} ms, ${paused?.bytes} bytes`);
    assert.ok(paused && paused.bytes > 0);
    assert.equal(await ended(vmmPid, vmmStart), true, 'the VMM is gone');
    assert.deepEqual(await processesMentioningAfterExit(`${TEST_PREFIX}${session.sessionId}`), [], "the guest's QEMU went with it");
    // The snapshot names the drive at its path in the jail: the volume stays linked there, and the
    // jail's (the next VMM opens it as the jail's uid), until the session ends.
    const linked = await stat(path.join(session.jailRoot, 'volumes', 'vol0.ext4'));
    assert.equal(linked.ino, (await stat(volume)).ino, 'the volume itself, linked in the jail');
    assert.deepEqual([linked.uid, linked.mode & 0o777], [session.spec.vmUser?.uid, 0o600]);
  });

  it('a restarted runtime resumes it: the file written before the pause reads back, a new write works, the shared read-only volume reads on', async (t) => {
    // The orchestrator restarted: a new runtime, the first one's releases never run.
    runtime = newRuntime(workspace.workDir);
    const onDisk = await runtime.adoptPaused?.(session.sessionId, session.sessionDir);
    assert.ok(onDisk, 'adopted as paused on disk');
    // Meanwhile another session that read the shared volume ended: its release gave the file back to root (0600).
    await returnVolumes([{ file: shared }]);
    const started = Date.now();
    const resumed = await runtime.resume?.(target(0), 'disk');
    assert.ok(resumed);
    vmmPid = resumed.sandbox.pid;
    guest = await connectWhenUp(workspace.workDir, session.sessionId, address, 30_000);
    t.diagnostic(`resume from disk to SSH: ${Date.now() - started} ms`);
    assert.equal(await sh(guest, `cat ${MOUNT}/note`), 'before-the-pause');
    assert.equal(await sh(guest, `cat ${REF}/readme`), 'shared-reference', 'the shared volume, read-only, reads on');
    assert.match(await sh(guest, `findmnt -n -o OPTIONS --target ${MOUNT}`), /^rw,/, 'still mounted writable');
    assert.equal(await sh(guest, `echo after-the-resume > ${MOUNT}/note2 && sync && cat ${MOUNT}/note2`), 'after-the-resume');
    assert.equal(await sh(guest, `ls ${MOUNT} | grep -c note`), '2');
    const [, load] = await callsByProcess(workspace, session.sessionId);
    assert.deepEqual(
      accepted(load ?? []).map((r) => r.call),
      ['GET /', 'PUT /snapshot/load', 'PATCH /vm'],
      'the snapshot loaded in a fresh VMM, no boot',
    );
    assert.ok((await counterOf(guest)).count > 5, "the counter kept its value in the guest's memory");
    guest.close();
    guest = undefined;
  });

  it('survives a host reboot while paused to disk: its netns and TAP made again by the adoption, the snapshot loaded, the counter goes on', async (t) => {
    // Paused again by the restarted orchestrator, which the reboot then takes.
    guest = await connectWhenUp(workspace.workDir, session.sessionId, address, 30_000);
    beforeReboot = await counterOf(guest);
    guest.close();
    guest = undefined;
    const vmmStart = processStartTime(vmmPid);
    assert.ok((await runtime.pause?.(target(vmmPid), 'disk'))?.bytes);
    assert.equal(await ended(vmmPid, vmmStart), true);
    assert.deepEqual(await processesMentioningAfterExit(`${TEST_PREFIX}${session.sessionId}`), []);

    // The reboot: what the kernel and /run held goes (the netns with its veth and TAP, the VM's
    // cgroups); the disk keeps the session dir, the jail with its snapshot, rootfs and volume link.
    const netns = NAMES.netns(session.sessionId);
    await run(['ip', 'netns', 'delete', netns]);
    const cgroupVersion = hostCgroupVersion();
    const cgroups = await vmCgroupDirs(cgroupVersion, TEST_PREFIX.slice(0, -1), jailId(TEST_PREFIX, session.sessionId));
    for (const dir of cgroups) await rmdir(dir).catch(() => undefined); // empty: its VMM is gone
    assert.equal(await netnsExists(netns), false);
    // The kernel ends a deleted netns in the background, and its veth's host end with it: a
    // reboot leaves neither, so the restart is played once both are gone.
    const hostVeth = path.join('/sys/class/net', NAMES.hostVeth(session.sessionId));
    for (let waited = 0; existsSync(hostVeth) && waited < 100; waited++) await sleep(100);
    assert.equal(existsSync(hostVeth), false, 'the host end of its veth went with the netns');
    assert.deepEqual(
      cgroups.filter((dir) => existsSync(dir)),
      [],
      'the cgroups are gone',
    );

    // The orchestrator starts again: the session layer adopts it paused to disk (sessions/adopt.ts).
    const restarted = newRuntime(workspace.workDir);
    const adoptedAt = Date.now();
    adopted = await adoptSession(storedRecord(session.sessionId, session.lease.index), {
      stateDir: workspace.workDir,
      names: NAMES,
      runtime: restarted,
      pool: new AddressPool(TEST_SUBNET),
      display: 99,
      settle: { maxMs: 1000, intervalMs: 100 },
      log: pino({ level: process.env.SBX_TEST_LOG_LEVEL || 'silent' }),
    });
    assert.ok(adopted, 'adopted');
    assert.deepEqual([adopted.record.state, adopted.record.paused?.mode], ['paused', 'disk']);
    assert.equal(await netnsExists(netns), true, 'its netns made again');
    const tapOwner = (await run(['ip', 'netns', 'exec', netns, 'cat', '/sys/class/net/tap0/owner'])).stdout.trim();
    assert.equal(Number(tapOwner), session.spec.vmUser?.uid, "its TAP made again, the VM's own uid's");

    const resumed = await restarted.resume?.(target(0), 'disk');
    assert.ok(resumed);
    // As the session layer keeps it (host-sandboxes.ts): its release is the session's.
    await adopted.cleanup.replace(`resumed sandbox ${session.sessionId}`, () => resumed.release());
    vmmPid = resumed.sandbox.pid;
    const processes = await callsByProcess(workspace, session.sessionId);
    assert.equal(processes.length, 3, 'a third VMM: the boot, the first resume, this one');
    assert.deepEqual(
      accepted(processes[2] ?? []).map((r) => r.call),
      ['GET /', 'PUT /snapshot/load', 'PATCH /vm'],
      'the snapshot loaded, no boot',
    );
    const started = (await workspace.records(session.sessionId)).filter((r) => r.process).at(-1)?.process;
    assert.equal(started?.netns, `net:[${statSync(`/var/run/netns/${netns}`).ino}]`, 'the VMM runs in the netns made again');
    assert.ok(
      cgroups.some((dir) => existsSync(dir)),
      'its cgroup made again',
    );
    guest = await connectWhenUp(workspace.workDir, session.sessionId, address, 30_000);
    t.diagnostic(`adoption to SSH after the reboot: ${Date.now() - adoptedAt} ms`);
    const now = await counterOf(guest);
    assert.equal(now.pid, beforeReboot.pid, 'the same process counts');
    assert.ok(now.count >= beforeReboot.count, `not from zero (${beforeReboot.count} -> ${now.count})`);
    await sleep(1000);
    assert.ok((await counterOf(guest)).count > now.count, 'and goes on counting');
    assert.equal(await sh(guest, `cat ${MOUNT}/note ${MOUNT}/note2`), 'before-the-pause\nafter-the-resume', 'the volume, as it was');
  });

  it("ends without a trace: the volume root's again with both files on it, no jail, netns, cgroup, process or session dir", async () => {
    guest?.close();
    guest = undefined;
    const session_ = adopted as Session;
    adopted = undefined;
    // The session's release, as the restarted orchestrator runs it (the first runtime's never ran).
    await session_.cleanup.run();
    for (const file of [volume, shared]) {
      const after = await stat(file);
      assert.deepEqual([after.uid, after.gid, after.mode & 0o777], [0, 0, 0o600], `${file} is root's again`);
    }
    assert.equal(await onVolume(volume, 'note'), 'before-the-pause');
    assert.equal(await onVolume(volume, 'note2'), 'after-the-resume');
    assert.equal(existsSync(path.dirname(session.jailRoot)), false, 'the jail is gone');
    assert.equal(await netnsExists(NAMES.netns(session.sessionId)), false, 'the netns is gone');
    assert.equal(existsSync(session.sessionDir), false, 'the session dir is gone');
    const cgroups = await vmCgroupDirs(hostCgroupVersion(), TEST_PREFIX.slice(0, -1), jailId(TEST_PREFIX, session.sessionId));
    assert.deepEqual(
      cgroups.filter((dir) => existsSync(dir)),
      [],
    );
    assert.deepEqual(await processesMentioning(`${TEST_PREFIX}${session.sessionId}`), []);
  });
});

/** What the store held for the session when the orchestrator went: paused to disk, its address, its volume. */
function storedRecord(id: string, addressIndex: number): SessionRecord {
  const now = new Date().toISOString();
  return {
    id,
    tenant: 'local',
    state: 'paused',
    runtime: 'firecracker',
    template: 'minimal',
    width: 800,
    height: 600,
    modelWidth: 800,
    modelHeight: 600,
    toolVersion: 'computer_20250124',
    screenshotFormat: 'png',
    screenshotQuality: null,
    timeoutSeconds: 600,
    maxLifetimeSeconds: 3600,
    metadata: {},
    createdAt: now,
    updatedAt: now,
    expiresAt: now,
    egress: false,
    addressIndex,
    transport: 'tcp',
    error: null,
    pooled: false,
    endReason: null,
    paused: { mode: 'disk', since: now, bytes: 1 },
    pausedMs: 0,
    pausedRetentionSeconds: 3600,
    onIdle: 'destroy',
    autoResume: true,
    volumes: [{ name: 'data', path: MOUNT, readOnly: false }],
  };
}

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { GuestImage } from '../src/guest/image/builder.js';
import { processStartTime } from '../src/host/process-watch.js';
import { AddressPool } from '../src/network/address-pool.js';
import { FirecrackerClient } from '../src/runtimes/firecracker/api/client.js';
import { writeMarker } from '../src/runtimes/firecracker/disk-state.js';
import type { FirecrackerRuntime } from '../src/runtimes/firecracker/firecracker-runtime.js';
import { DEFAULT_CONSOLE_LOG_LIMITS } from '../src/runtimes/console-log.js';
import type { Runtime } from '../src/runtimes/runtime.js';
import type { GuestTransport } from '../src/transport/index.js';
import { CleanupStack } from '../src/util/cleanup-stack.js';
import { guestSh } from './helpers/guest.js';
import { processesMentioningAfterExit } from './helpers/host.js';
import {
  accepted,
  callsByProcess as callsByProcessIn,
  connectWhenUp as connectWhenUpIn,
  ended,
  newRuntime as newRuntimeIn,
  prepareSession as prepareSessionIn,
} from './helpers/firecracker/disk-pause-session.js';
import { builtImage, emulatorWorkspace, type Recorded } from './helpers/firecracker/emulator-workspace.js';
import { TEST_PREFIX, TEST_SUBNET } from './helpers/orchestrator.js';

/**
 * Pause to disk of a Firecracker VM (src/runtimes/firecracker/disk-pause.ts), jailed, against
 * the contract emulator: with FAKE_FIRECRACKER_GUEST=qemu it runs the configured guest under
 * QEMU (TCG), `snapshot/create` saves that guest (its migration stream in the memory file) and
 * `snapshot/load` in a fresh VMM starts it again from it. What a user sees is checked: a
 * counter in the guest's memory goes on from where it stopped, after the VMM was gone and the
 * runtime was made anew (a restart), and every body sent is held to the v1.16.1 spec.
 */
const COUNTER = '/dev/shm/counter';

const workspace = emulatorWorkspace('fc-dp-', ['FAKE_FIRECRACKER_GUEST']);
let image: GuestImage;
const pool = new AddressPool(TEST_SUBNET);

before(async () => {
  image = await builtImage();
});

const newRuntime = (jailed = true) => newRuntimeIn(workspace.workDir, jailed);
const prepareSession = (runtime: FirecrackerRuntime, cleanup: CleanupStack) => prepareSessionIn(runtime, workspace.workDir, pool, cleanup, image);

const callsByProcess = (sessionId: string) => callsByProcessIn(workspace, sessionId);
const bodyOfCall = (calls: Recorded[], call: string) => accepted(calls).find((r) => r.call === call)?.body;

const connectWhenUp = (sessionId: string, address: string, withinMs: number) => connectWhenUpIn(workspace.workDir, sessionId, address, withinMs);

async function counterOf(guest: GuestTransport): Promise<number> {
  return Number((await guestSh(guest, `cat ${COUNTER}`)).text.trim());
}

describe('firecracker pause to disk, with a guest (QEMU under TCG behind the emulator)', () => {
  let runtime: FirecrackerRuntime;
  let cleanup: CleanupStack;
  let session: Awaited<ReturnType<typeof prepareSession>>;
  let guest: GuestTransport | undefined;
  let address: string;
  let counted: number;
  before(() => {
    process.env.FAKE_FIRECRACKER_GUEST = 'qemu';
    runtime = newRuntime();
  });
  after(async () => {
    delete process.env.FAKE_FIRECRACKER_GUEST; // the next describe's VMs have no guest
    guest?.close();
    await cleanup?.run();
  });

  it('pauses a running guest to disk: its VMM gone (no RAM held), snapshot and marker on disk, spec-valid calls', async (t) => {
    cleanup = new CleanupStack();
    session = await prepareSession(runtime, cleanup);
    const sandbox = await runtime.start(session.spec, cleanup);
    const vmmStart = processStartTime(sandbox.pid);
    address = session.spec.network.lease.guest;
    guest = await connectWhenUp(session.sessionId, address, 150_000);
    // A counter that lives in the guest's memory only (/dev/shm): a cold boot would lose it.
    await guestSh(guest, `nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > ${COUNTER}; sleep 0.1; done' >/dev/null 2>&1 &`);
    await sleep(1500);
    guest.close();
    guest = undefined;
    const vm: Runtime = runtime;
    const started = Date.now();
    const result = await vm.pause?.({ sessionId: session.sessionId, sessionDir: session.sessionDir, pid: sandbox.pid }, 'disk');
    t.diagnostic(`pause to disk: ${Date.now() - started} ms, ${result?.bytes} bytes on disk`);
    assert.ok(result && result.bytes > 0 && result.bytes <= (vm.pauseStateMaxMiB?.(512) ?? 0) * 2 ** 20, `bytes ${result?.bytes}`);
    assert.equal(await ended(sandbox.pid, vmmStart), true, 'the VMM is gone');
    // The emulator's guest QEMU dies with it (its pdeathsig), a moment later under load.
    assert.deepEqual(await processesMentioningAfterExit(`${TEST_PREFIX}${session.sessionId}`), [], 'no process of the session is left (QEMU went with it)');
    assert.ok(existsSync(path.join(session.sessionDir, 'fc-paused.json')), 'the marker');
    for (const file of ['paused-vmstate', 'paused-memory']) assert.ok(existsSync(path.join(session.jailRoot, 'snapshot', file)), file);
    const [boot] = await callsByProcess(session.sessionId);
    assert.ok(boot);
    assert.deepEqual(
      boot.filter((r) => r.fault),
      [],
      'no request was refused',
    );
    const pauseCalls = accepted(boot).slice(-4);
    assert.deepEqual(
      pauseCalls.map((r) => [r.call, r.body]),
      [
        ['GET /machine-config', undefined],
        ['GET /', undefined],
        ['PATCH /vm', { state: 'Paused' }],
        ['PUT /snapshot/create', { snapshot_type: 'Full', snapshot_path: '/snapshot/paused-vmstate', mem_file_path: '/snapshot/paused-memory' }],
      ],
    );
  });

  it('a restarted runtime adopts it paused on disk; the resume loads it in a fresh VMM and the counter goes on from where it stopped', async (t) => {
    const restarted = newRuntime();
    const onDisk = await restarted.adoptPaused?.(session.sessionId, session.sessionDir);
    assert.ok(onDisk, 'adopted as paused on disk');
    assert.ok(onDisk.bytes > 0);
    assert.deepEqual(onDisk.vmUser, { uid: session.spec.vmUser?.uid, gid: session.spec.vmUser?.gid }, "the VM's own uid, held again");
    assert.equal(restarted.users.inUse, 1);
    const target = { sessionId: session.sessionId, sessionDir: session.sessionDir, pid: 0, endpoint: { host: address, port: 22 } };
    const started = Date.now();
    const resumed = await restarted.resume?.(target, 'disk');
    t.diagnostic(`resume from disk (load, resume): ${Date.now() - started} ms`);
    assert.ok(resumed, 'a new sandbox');
    await cleanup.push('adopted', () => onDisk.release());
    await cleanup.push('resumed', () => resumed.release());
    assert.ok(processStartTime(resumed.sandbox.pid), 'a new VMM runs');
    // The same guest: the session's keys and pinned host key let us in, no re-key.
    guest = await connectWhenUp(session.sessionId, address, 30_000);
    t.diagnostic(`resume to SSH: ${Date.now() - started} ms`);
    counted = await counterOf(guest);
    assert.ok(counted > 5, `the counter kept its value in the guest's memory (${counted}), not a cold boot's`);
    await sleep(1000);
    assert.ok((await counterOf(guest)) > counted, 'and goes on counting');
    assert.equal(existsSync(path.join(session.sessionDir, 'fc-paused.json')), false, 'the marker is gone');
    for (const file of ['paused-vmstate', 'paused-memory']) assert.equal(existsSync(path.join(session.jailRoot, 'snapshot', file)), false, `${file} is gone`);
    const processes = await callsByProcess(session.sessionId);
    assert.equal(processes.length, 2, 'a second VMM process');
    const load = processes[1] ?? [];
    assert.deepEqual(
      load.filter((r) => r.fault),
      [],
      'no request was refused',
    );
    assert.deepEqual(
      accepted(load).map((r) => [r.call, r.body]),
      [
        ['GET /', undefined],
        [
          'PUT /snapshot/load',
          {
            snapshot_path: '/snapshot/paused-vmstate',
            mem_backend: { backend_type: 'File', backend_path: '/snapshot/paused-memory' },
            vsock_override: { uds_path: '/run/vsock.sock' },
            resume_vm: false,
            clock_realtime: true,
          },
        ],
        ['PATCH /vm', { state: 'Resumed' }],
      ],
    );
    // The resume is no new session: the adopted session's release frees its uid, jail, netns.
    assert.equal(await restarted.adoptPaused?.(session.sessionId, session.sessionDir), undefined, 'nothing paused on disk any more');
  });
});

/** A pause's work up to its marker, as a pause killed right after writing it left it (the VMM still there). */
async function snapshotWithMarker(session: Awaited<ReturnType<typeof prepareSession>>): Promise<void> {
  const api = new FirecrackerClient(path.join(session.jailRoot, 'run/firecracker.socket'));
  await api.patchVm({ state: 'Paused' });
  await api.putSnapshotCreate({ snapshot_type: 'Full', snapshot_path: '/snapshot/paused-vmstate', mem_file_path: '/snapshot/paused-memory' });
  api.close();
  const vmUser = session.spec.vmUser as { uid: number; gid: number };
  await writeMarker(session.sessionDir, {
    jailed: true,
    user: { uid: vmUser.uid, gid: vmUser.gid },
    memoryMiB: 512,
    vcpus: 2,
    consoleLog: DEFAULT_CONSOLE_LOG_LIMITS,
    logsDir: session.spec.logsDir,
    bytes: 4096,
    since: new Date().toISOString(),
  });
}

describe('firecracker pause to disk killed half-way, and unjailed (no guest)', () => {
  it('a pause killed after the snapshot but before the marker: the running VM is trusted, the half-written files removed', async () => {
    delete process.env.FAKE_FIRECRACKER_GUEST;
    const runtime = newRuntime();
    const cleanup = new CleanupStack();
    try {
      const session = await prepareSession(runtime, cleanup);
      const sandbox = await runtime.start(session.spec, cleanup);
      // What a pause does up to the marker, then the orchestrator is gone (kill -9): the VMM is paused,
      // the snapshot files are there, the marker is not (a temp file of it, at most).
      const api = new FirecrackerClient(path.join(session.jailRoot, 'run/firecracker.socket'));
      await api.patchVm({ state: 'Paused' });
      await api.putSnapshotCreate({ snapshot_type: 'Full', snapshot_path: '/snapshot/paused-vmstate', mem_file_path: '/snapshot/paused-memory' });
      api.close();
      await writeFile(path.join(session.sessionDir, 'fc-paused.json.partial'), '{"jailed":tr');
      const restarted = newRuntime();
      assert.equal(await restarted.adoptPaused?.(session.sessionId, session.sessionDir), undefined, 'no whole marker: not paused on disk');
      for (const file of ['snapshot/paused-vmstate', 'snapshot/paused-memory'])
        assert.equal(existsSync(path.join(session.jailRoot, file)), false, `${file} removed`);
      assert.equal(existsSync(path.join(session.sessionDir, 'fc-paused.json.partial')), false, 'the temp marker removed');
      // The VM is the truth: adopted alive, found paused in memory (adopt.ts then lets it run).
      const adopted = await restarted.adopt(session.sessionId, session.sessionDir, { host: session.spec.network.lease.guest, port: 22 });
      assert.equal(adopted?.sandbox.pid, sandbox.pid, 'the same VMM');
      const target = { sessionId: session.sessionId, sessionDir: session.sessionDir, pid: sandbox.pid };
      assert.equal(await restarted.isPaused?.(target), true);
      await restarted.resume?.(target, 'memory');
      assert.equal(await restarted.isPaused?.(target), false);
    } finally {
      await cleanup.run();
    }
  });

  it('a pause killed after the marker, before its VMM ended: the snapshot is trusted, the VMM found is stopped, and the resume loads it', async () => {
    const runtime = newRuntime();
    const cleanup = new CleanupStack();
    try {
      const session = await prepareSession(runtime, cleanup);
      const sandbox = await runtime.start(session.spec, cleanup);
      const vmmStart = processStartTime(sandbox.pid);
      await snapshotWithMarker(session);
      const restarted = newRuntime();
      const onDisk = await restarted.adoptPaused?.(session.sessionId, session.sessionDir);
      assert.ok(onDisk, 'a whole marker: paused on disk');
      assert.equal(await ended(sandbox.pid, vmmStart), true, 'the VMM that had not run since the snapshot is stopped');
      const resumed = await restarted.resume?.(
        { sessionId: session.sessionId, sessionDir: session.sessionDir, pid: 0, endpoint: { host: session.spec.network.lease.guest, port: 22 } },
        'disk',
      );
      assert.ok(resumed);
      await cleanup.push('resumed', () => resumed.release());
      const [, load] = await callsByProcess(session.sessionId);
      assert.deepEqual(
        accepted(load ?? []).map((r) => r.call),
        ['GET /', 'PUT /snapshot/load', 'PATCH /vm'],
      );
      assert.equal(existsSync(path.join(session.sessionDir, 'fc-paused.json')), false);
    } finally {
      await cleanup.run();
    }
  });

  it('red team: links a VMM out of its guest put in its jail are removed as links by the resume, never followed', async () => {
    const runtime = newRuntime();
    const cleanup = new CleanupStack();
    // The host's files the links point at: a directory with a file in it, and a file.
    const victimDir = path.join(workspace.workDir, 'victim-dir');
    await mkdir(victimDir, { recursive: true });
    await writeFile(path.join(victimDir, 'keep'), "the host's\n");
    const victimFile = path.join(workspace.workDir, 'victim-file');
    await writeFile(victimFile, "the host's\n");
    try {
      const session = await prepareSession(runtime, cleanup);
      await runtime.start(session.spec, cleanup);
      await snapshotWithMarker(session);
      const restarted = newRuntime();
      assert.ok(await restarted.adoptPaused?.(session.sessionId, session.sessionDir));
      // As the jail's user could: its /dev and the VMM's binary replaced by links to the host's files.
      await rm(path.join(session.jailRoot, 'dev'), { recursive: true, force: true });
      await symlink(victimDir, path.join(session.jailRoot, 'dev'));
      await rm(path.join(session.jailRoot, 'firecracker'), { force: true });
      await symlink(victimFile, path.join(session.jailRoot, 'firecracker'));
      const resumed = await restarted
        .resume?.(
          { sessionId: session.sessionId, sessionDir: session.sessionDir, pid: 0, endpoint: { host: session.spec.network.lease.guest, port: 22 } },
          'disk',
        )
        .catch((err: unknown) => err as Error);
      if (resumed && !(resumed instanceof Error)) await cleanup.push('resumed', () => resumed.release());
      assert.equal(
        await readFile(path.join(victimDir, 'keep'), 'utf8').catch(() => 'gone'),
        "the host's\n",
        'a file behind the link to a directory is still there',
      );
      assert.equal(await readFile(victimFile, 'utf8').catch(() => 'gone'), "the host's\n", 'the file behind the link is still there');
      assert.ok(resumed && !(resumed instanceof Error), `resumed all the same (${resumed instanceof Error ? resumed.message : 'no answer'})`);
    } finally {
      await cleanup.run();
    }
  });

  it('unjailed (development hosts): the snapshot in the session dir, a fresh VMM loads it', async () => {
    const runtime = newRuntime(false);
    const cleanup = new CleanupStack();
    try {
      const session = await prepareSession(runtime, cleanup);
      const sandbox = await runtime.start(session.spec, cleanup);
      const vmmStart = processStartTime(sandbox.pid);
      const target = { sessionId: session.sessionId, sessionDir: session.sessionDir, pid: sandbox.pid, endpoint: sandbox.endpoint };
      const paused = await runtime.pause?.(target, 'disk');
      assert.ok(paused && paused.bytes > 0);
      assert.equal(await ended(sandbox.pid, vmmStart), true, 'the VMM is gone');
      const files = { snapshot_path: path.join(session.sessionDir, 'paused-vmstate'), mem_file_path: path.join(session.sessionDir, 'paused-memory') };
      const [boot] = await callsByProcess(session.sessionId);
      assert.deepEqual(accepted(boot ?? []).at(-1)?.body, { snapshot_type: 'Full', ...files });
      const resumed = await runtime.resume?.(target, 'disk');
      assert.ok(resumed);
      await cleanup.push('resumed', () => resumed.release());
      const [, load] = await callsByProcess(session.sessionId);
      assert.deepEqual(
        (load ?? []).filter((r) => r.fault),
        [],
      );
      assert.deepEqual(bodyOfCall(load ?? [], 'PUT /snapshot/load'), {
        snapshot_path: files.snapshot_path,
        mem_backend: { backend_type: 'File', backend_path: files.mem_file_path },
        vsock_override: { uds_path: path.join(session.sessionDir, 'vsock.sock') },
        resume_vm: false,
        clock_realtime: true,
      });
      for (const file of [...Object.values(files), path.join(session.sessionDir, 'fc-paused.json')]) assert.equal(existsSync(file), false, `${file} is gone`);
    } finally {
      await cleanup.run();
    }
  });
});

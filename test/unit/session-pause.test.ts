/**
 * Pause and resume over the fake runtime (test/helpers/fake-runtime.ts): the state machine of
 * sessions/pause.ts, its clocks (idle pause, retention, lifetime counting running time only),
 * its 409s, and adoption of a paused session by a restart. The real freeze is covered by
 * test/pause.test.ts.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { HostCapacityError, PauseModeUnavailableError, PauseStateError, SessionPausedError } from '../../src/errors.js';
import { CapacityGate } from '../../src/sessions/capacity.js';
import { SessionStore } from '../../src/sessions/store.js';
import { lifetimeEnd } from '../../src/sessions/timeouts.js';
import { FakeRuntime } from '../helpers/fake-runtime.js';
import type { FakeTransport } from '../helpers/fake-transport.js';
import { fakeManager, until, type FakeRig } from '../helpers/fake-manager.js';

let dir: string;
before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-unit-pause-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

function rig(options: Parameters<typeof fakeManager>[2] = {}): Promise<FakeRig> {
  return fakeManager(dir, { prefix: 'unp-', subnet: '10.252.0.0/24' }, options);
}

describe('unit: pause and resume', () => {
  it('pauses (auto picks memory here), says so in the view and the store, and resumes to a new desktop', async () => {
    const r = await rig();
    const view = await r.manager.create({}, { tenant: 'alpha' });
    const before = r.manager.registry.find(view.id)?.computer;
    const paused = await r.manager.pause(view.id);
    assert.equal(paused.state, 'paused');
    assert.equal(paused.paused?.mode, 'memory');
    assert.equal(paused.paused?.bytes, 0);
    assert.equal(r.store.get(view.id)?.state, 'paused');
    assert.equal(r.store.get(view.id)?.paused?.mode, 'memory');
    assert.equal(r.runtime.sandboxes.get(view.id)?.paused, true, 'the sandbox is frozen');
    assert.ok(r.manager.registry.find(view.id)?.keepalivesHeld, 'its connection is kept, its keepalives held while the guest is frozen');
    await assert.rejects(() => r.manager.screenshot(view.id), SessionPausedError);
    await assert.rejects(
      () => r.manager.pause(view.id),
      (err: PauseStateError) => err.code === 'session_already_paused',
    );
    await sleep(60);
    const resumed = await r.manager.resume(view.id);
    assert.equal(resumed.state, 'ready');
    assert.equal(resumed.paused, null);
    assert.equal(r.runtime.sandboxes.get(view.id)?.paused, false);
    const session = r.manager.registry.find(view.id);
    // The fake connection never answers, as one dropped during a long pause: a new one is attached.
    assert.ok(session?.computer && session.computer !== before, 'a new desktop was attached');
    assert.equal(session.keepalivesHeld, undefined);
    assert.ok((session?.record.pausedMs ?? 0) >= 50, 'the paused time is counted');
    assert.equal(
      lifetimeEnd(session.record),
      Date.parse(session.record.createdAt) + 3600_000 + session.record.pausedMs,
      'the lifetime counts running time only',
    );
    assert.equal(r.store.get(view.id)?.pausedMs, session.record.pausedMs);
    await assert.rejects(
      () => r.manager.resume(view.id),
      (err: PauseStateError) => err.code === 'session_not_paused',
    );
    await r.manager.shutdown();
  });

  it('a mode the runtime does not do is 409 saying why; a failed pause leaves the session running', async () => {
    const r = await rig();
    const view = await r.manager.create();
    await assert.rejects(
      () => r.manager.pause(view.id, 'disk'),
      (err: PauseModeUnavailableError) => err.code === 'pause_mode_unavailable' && /disk/.test(err.message),
    );
    r.runtime.pauseError = new Error('the freezer is stuck');
    await assert.rejects(() => r.manager.pause(view.id, 'memory'), /could not be paused.*freezer is stuck/);
    assert.equal(r.manager.get(view.id).state, 'ready');
    assert.ok(r.manager.registry.find(view.id)?.computer, 'attached again');
    r.runtime.pauseError = undefined;
    r.runtime.modes = ['memory', 'disk'];
    assert.equal((await r.manager.pause(view.id, 'auto')).paused?.mode, 'disk', 'auto picks disk where the runtime does it');
    await r.manager.shutdown();
  });

  it('to disk: the sandbox process ending is no crash; the resume watches the new one; a destroy does not resume it', async () => {
    const r = await rig();
    r.runtime.modes = ['memory', 'disk'];
    const view = await r.manager.create();
    const first = r.runtime.sandboxes.get(view.id);
    const paused = await r.manager.pause(view.id, 'disk');
    assert.deepEqual([paused.state, paused.paused?.mode, paused.paused?.bytes], ['paused', 'disk', 1234]);
    assert.equal(first?.running, false, 'its process ended');
    await sleep(100);
    assert.equal(r.manager.get(view.id).state, 'paused', 'the deliberate exit is not a crash');
    const resumed = await r.manager.resume(view.id);
    assert.equal(resumed.state, 'ready');
    const second = r.runtime.sandboxes.get(view.id);
    assert.ok(second && second !== first && r.manager.registry.find(view.id)?.sandbox === second, "a new sandbox is the session's");
    second.exit('the resumed VM crashed');
    await until('a crash of the resumed sandbox fails its session', () => r.manager.get(view.id).state === 'failed', 3_000);
    assert.match(r.manager.get(view.id).error ?? '', /resumed VM crashed/);
    assert.equal(second.releases, 1, 'the resumed sandbox is released');
    // Paused to disk, then destroyed: not started again to be destroyed.
    const other = await r.manager.create();
    await r.manager.pause(other.id, 'disk');
    await r.manager.destroy(other.id);
    assert.equal(r.manager.get(other.id).state, 'destroyed');
    assert.equal(r.runtime.sandboxes.get(other.id)?.running, false);
    assert.equal(r.runtime.sandboxes.get(other.id)?.paused, true, 'no resume before the destroy');
    await r.manager.shutdown();
  });

  it('a session with volumes is not paused to disk: "disk" is a 409 saying why, "auto" pauses it in memory', async () => {
    const r = await rig();
    r.runtime.modes = ['memory', 'disk'];
    const view = await r.manager.create();
    const session = r.manager.registry.find(view.id);
    assert.ok(session);
    session.record.volumes = [{ name: 'work', path: '/data', readOnly: false }];
    await assert.rejects(
      () => r.manager.pause(view.id, 'disk'),
      (err: PauseModeUnavailableError) => err.code === 'pause_mode_unavailable' && /volumes/.test(err.message),
    );
    assert.equal(r.manager.get(view.id).state, 'ready');
    const paused = await r.manager.pause(view.id);
    assert.equal(paused.paused?.mode, 'memory');
    await r.manager.shutdown();
  });

  it('a runtime that pauses volumes to disk (Firecracker): "disk" and "auto" go to disk, the guest synced first; a destroy then asks the stopped guest nothing', async () => {
    const r = await rig();
    r.runtime.modes = ['memory', 'disk'];
    r.runtime.volumesToDisk = true;
    const view = await r.manager.create();
    const session = r.manager.registry.find(view.id);
    assert.ok(session);
    session.record.volumes = [{ name: 'work', path: '/data', readOnly: false }];
    const attachments = [{ name: 'work', path: '/data', readOnly: false, file: '/nonexistent/work.ext4' }];
    session.volumes = { tenant: 'local', holder: view.id, mounts: session.record.volumes, attachments, release: () => undefined };
    // The fake connection up, as a running guest's: what the session layer asks of it is kept.
    const up = () => {
      const connection = session.connection as FakeTransport;
      Object.defineProperty(connection, 'isConnected', { get: () => true });
      return connection;
    };
    let connection = up();
    assert.equal((await r.manager.pause(view.id, 'disk')).paused?.mode, 'disk');
    assert.deepEqual(connection.asked, ['sync'], "the guest's volumes synced before the pause");
    await r.manager.resume(view.id);
    connection = up(); // the resume's
    assert.equal((await r.manager.pause(view.id)).paused?.mode, 'disk', 'auto: disk');
    assert.deepEqual(connection.asked, ['sync']);
    await r.manager.destroy(view.id);
    assert.deepEqual(connection.asked, ['sync'], 'no sync asked of a guest paused to disk');
    await r.manager.shutdown();
  });

  it("a pause to disk must fit in the disk no session is promised: 'disk' is a 503 host_disk_low saying how much, 'auto' pauses in memory", async () => {
    // 256 MiB sessions: a state of at most 576 MiB. Free: 2,000 MiB, 100 kept, each session promised 600.
    let freeMiB = 2_000;
    const disk = { limits: { reserveMiB: 100, artifactsMiB: 600 }, freeMiB: () => freeMiB };
    const r = await rig({
      capacity: new CapacityGate({ maxSessions: 4, maxSessionsPerTenant: 3, sessionMemoryMiB: 256, memoryReserveMiB: 0 }, () => undefined, disk),
    });
    r.runtime.modes = ['memory', 'disk'];
    const view = await r.manager.create();
    // 2,000 - 100 - 600 = 1,300 MiB of room: it fits.
    assert.equal((await r.manager.pause(view.id, 'disk')).paused?.mode, 'disk');
    await r.manager.resume(view.id);
    freeMiB = 1_200; // 500 MiB of room: a state of 576 does not fit
    await assert.rejects(
      () => r.manager.pause(view.id, 'disk'),
      (err: HostCapacityError) => err.code === 'host_disk_low' && /576 MiB/.test(err.message) && /500 MiB/.test(err.message),
    );
    assert.equal(r.manager.get(view.id).state, 'ready', 'nothing was paused');
    assert.equal((await r.manager.pause(view.id)).paused?.mode, 'memory', 'auto falls back to memory');
    await r.manager.shutdown();
  });

  it('autoResume: a request resumes a paused session first; with autoResume off it is 409 session_paused', async () => {
    const r = await rig();
    const on = await r.manager.create();
    const off = await r.manager.create({ autoResume: false });
    await r.manager.pause(on.id, 'memory');
    await r.manager.pause(off.id, 'memory');
    await r.manager.ensureRunning(on.id);
    assert.equal(r.manager.get(on.id).state, 'ready');
    await assert.rejects(
      () => r.manager.ensureRunning(off.id),
      (err: SessionPausedError) => err.code === 'session_paused',
    );
    assert.equal(r.manager.get(off.id).state, 'paused');
    // Two requests at once resume it once.
    await r.manager.pause(on.id, 'memory');
    await Promise.all([r.manager.ensureRunning(on.id), r.manager.ensureRunning(on.id)]);
    assert.equal(r.manager.get(on.id).state, 'ready');
    await r.manager.shutdown();
  });

  it('onIdle pause: the idle timeout pauses instead of destroying; retention then destroys it', async () => {
    const r = await rig({ pause: { onIdle: 'destroy', autoResume: true, pausedRetentionSeconds: 1 } });
    const view = await r.manager.create({ timeoutSeconds: 1, onIdle: 'pause' });
    assert.equal(view.onIdle, 'pause');
    await until('the idle session is paused', () => r.manager.get(view.id).state === 'paused', 3_000);
    await until('the paused session is destroyed after its retention', () => r.manager.get(view.id).state === 'destroyed', 3_000);
    assert.equal(r.manager.get(view.id).endReason, 'paused_retention');
    assert.equal(r.runtime.sandboxes.get(view.id)?.releases, 1);
    await r.manager.shutdown();
  });

  it('a destroy of a paused session releases everything', async () => {
    const r = await rig();
    const view = await r.manager.create();
    await r.manager.pause(view.id);
    const destroyed = await r.manager.destroy(view.id);
    assert.equal(destroyed.state, 'destroyed');
    assert.equal(r.runtime.sandboxes.get(view.id)?.releases, 1);
    assert.equal(r.manager.leasesInUse, 0);
    await r.manager.shutdown();
  });

  it('a restart adopts a paused session paused, and it resumes', async () => {
    const store = new SessionStore(path.join(dir, 'restart.db'));
    const first = await rig({ store });
    const view = await first.manager.create();
    await first.manager.pause(view.id);
    // The "crash": the sandbox stays (frozen), the next run finds it.
    const sandbox = first.runtime.sandboxes.get(view.id);
    assert.ok(sandbox);
    first.manager.clocks.stop();
    const runtime = new FakeRuntime();
    runtime.leftRunning.set(view.id, sandbox);
    const second = await rig({ store, runtime });
    assert.equal(second.manager.get(view.id).state, 'paused', 'adopted as paused');
    assert.equal(second.manager.registry.find(view.id)?.connection, undefined);
    const resumed = await second.manager.resume(view.id);
    assert.equal(resumed.state, 'ready');
    assert.equal(sandbox.paused, false);
    await second.manager.shutdown();
  });
});

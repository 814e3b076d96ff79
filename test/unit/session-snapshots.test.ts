/**
 * Snapshots and forks over the fake runtime (test/helpers/fake-runtime.ts): what the session
 * layer does around the runtime's snapshot (one at a time, a pause waits for it, the runtime's
 * reason when it cannot) and a create from a snapshot (its template and screen, the snapshot
 * handed to the runtime, the view naming it). The real VM is covered by test/snapshots.test.ts.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { after, before, describe, it } from 'node:test';
import { OrchestratorError } from '../../src/errors.js';
import { SnapshotStore } from '../../src/snapshots/snapshot-store.js';
import { Snapshots } from '../../src/snapshots/snapshots.js';
import { silentLogger } from '../helpers/fake-runtime.js';
import { fakeManager, type FakeRig } from '../helpers/fake-manager.js';

let dir: string;
before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-unit-snapshots-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function rig(): Promise<{ r: FakeRig; snapshots: Snapshots }> {
  const snapshots = new Snapshots({
    store: new SnapshotStore(new Database(':memory:')),
    dir: path.join(dir, `snapshots-${Math.random().toString(36).slice(2)}`),
    settings: { quotaMiB: 100, quotaCount: 10 },
    runtime: 'container',
    log: silentLogger(),
  });
  const r = await fakeManager(dir, { prefix: 'uns-', subnet: '10.252.1.0/24' }, { snapshots });
  snapshots.attach(r.manager.snapshotting);
  return { r, snapshots };
}

function codeOf(err: unknown): string {
  return err instanceof OrchestratorError ? err.code : `not an OrchestratorError: ${String(err)}`;
}

describe('unit: snapshots of sessions', () => {
  it("a runtime that cannot snapshot is a 409 snapshot_unsupported with its reason; another tenant's session a 404", async () => {
    const { r, snapshots } = await rig();
    const view = await r.manager.create({}, { tenant: 'alpha' });
    await assert.rejects(
      snapshots.create('alpha', view.id, {}),
      (err) => codeOf(err) === 'snapshot_unsupported' && /container runtime cannot/.test(String(err)),
    );
    await assert.rejects(snapshots.create('beta', view.id, {}), (err) => codeOf(err) === 'not_found');
    await r.manager.shutdown();
  });

  it('one snapshot at a time; a pause meanwhile is 409 session_busy; the session runs on after it', async () => {
    const { r, snapshots } = await rig();
    const view = await r.manager.create({}, { tenant: 'alpha' });
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => (release = resolve));
    let entered: () => void = () => undefined;
    const saving = new Promise<void>((resolve) => (entered = resolve));
    r.runtime.snapshot = async (_target, into) => {
      entered();
      await writeFile(path.join(into, 'vm-state.gz'), 'state');
      await held;
    };
    const first = snapshots.create('alpha', view.id, { name: 'one' });
    await saving; // the runtime is saving it now (a turn of the event loop is not always enough on a busy host)
    await assert.rejects(snapshots.create('alpha', view.id, {}), (err) => codeOf(err) === 'session_not_ready');
    await assert.rejects(r.manager.pause(view.id, 'memory'), (err) => codeOf(err) === 'session_busy');
    release();
    const made = await first;
    assert.equal(made.name, 'one');
    assert.equal(made.template, 'minimal');
    assert.equal(r.manager.get(view.id).state, 'ready');
    assert.equal(r.manager.registry.find(view.id)?.inFlight, 0);
    await r.manager.shutdown();
  });

  it('a create from a snapshot: the runtime is given its directory, the view names it, the template and screen are its own', async () => {
    const { r, snapshots } = await rig();
    const source = await r.manager.create({ width: 800, height: 600 }, { tenant: 'alpha' });
    r.runtime.snapshot = async (_target, into) => writeFile(path.join(into, 'vm-state.gz'), 'state');
    const made = await snapshots.create('alpha', source.id, {});
    const fork = await r.manager.create({ snapshot: made.id }, { tenant: 'alpha' });
    assert.equal(fork.snapshot, made.id);
    assert.deepEqual(fork.display, { width: 800, height: 600 });
    assert.ok(r.runtime.forkedFrom.get(fork.id)?.endsWith(`/${made.id}`), 'the runtime starts it from the snapshot');
    assert.equal(r.store.get(fork.id)?.snapshot, made.id, 'stored');
    await assert.rejects(r.manager.create({ snapshot: made.id }, { tenant: 'beta' }), (err) => codeOf(err) === 'snapshot_not_found');
    await assert.rejects(r.manager.create({ snapshot: made.id, width: 1024 }, { tenant: 'alpha' }), (err) => codeOf(err) === 'invalid_request');
    // Nothing holds it once the fork has started: it can be deleted, and the fork goes on.
    await snapshots.delete('alpha', made.id);
    assert.equal(r.manager.get(fork.id).state, 'ready');
    await r.manager.shutdown();
  });
});

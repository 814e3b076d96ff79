import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { pino } from 'pino';
import { describe, it } from 'node:test';
import { OrchestratorError } from '../../src/errors.js';
import { checkSnapshotId, checkSnapshotName, checkSnapshotRoom, checkSnapshotSize, newSnapshotId } from '../../src/snapshots/snapshot-names.js';
import { SnapshotStore } from '../../src/snapshots/snapshot-store.js';
import { Snapshots, type SnapshotSessions } from '../../src/snapshots/snapshots.js';
import { forkRequest } from '../../src/sessions/session-fork.js';
import { gatewayOf } from '../../src/runtimes/qemu/snapshot.js';

/** The rules of snapshots that need no sandbox: names, ids, quotas, tenants, and the files' lifetime. */
function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    return err instanceof OrchestratorError ? err.code : 'not an OrchestratorError';
  }
  return undefined;
}

async function codeOfAsync(promise: Promise<unknown>): Promise<string | undefined> {
  try {
    await promise;
  } catch (err) {
    return err instanceof OrchestratorError ? err.code : `not an OrchestratorError: ${(err as Error).message}`;
  }
  return undefined;
}

const SETTINGS = { quotaMiB: 1, quotaCount: 2 };

/** A session layer whose "snapshot" writes `bytes` into the directory it is given. */
function fakeSessions(bytes = 4096, unavailable?: string): SnapshotSessions & { dirs: string[] } {
  const dirs: string[] = [];
  return {
    dirs,
    unavailable: () => unavailable,
    describe: (tenant, sessionId) => {
      if (sessionId !== 'aaaaaaaaaa' || tenant === 'other') throw new OrchestratorError('not_found', `session ${sessionId} does not exist`);
      return { template: 'minimal', runtime: 'qemu', width: 1024, height: 768 };
    },
    snapshot: async (_id, dir) => {
      dirs.push(dir);
      await writeFile(path.join(dir, 'vm-state.gz'), Buffer.alloc(bytes, 1));
    },
  };
}

async function service(sessions = fakeSessions(), settings = SETTINGS) {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-snapshots-'));
  const store = new SnapshotStore(new Database(':memory:'));
  const snapshots = new Snapshots({ store, dir: path.join(dir, 'snapshots'), settings, runtime: 'qemu', log: pino({ level: 'silent' }) });
  snapshots.attach(sessions);
  return { dir, store, snapshots, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

describe('snapshot names and ids', () => {
  it('takes plain names (or none) and refuses anything path-like', () => {
    assert.equal(checkSnapshotName(undefined), null);
    for (const ok of ['base', 'a', 'after-login_2', 'v1.2', 'a'.repeat(63)]) assert.equal(checkSnapshotName(ok), ok);
    for (const bad of ['', '.', '..', '../x', 'a/b', '/abs', '.hidden', '-flag', 'a b', 'a\u0000', 'é', 'a'.repeat(64), 7]) {
      assert.equal(
        codeOf(() => checkSnapshotName(bad)),
        'invalid_request',
        String(bad),
      );
    }
  });

  it('an id is ours: snap- and 16 letters or digits, nothing else is looked up', () => {
    const id = newSnapshotId();
    assert.match(id, /^snap-[a-z0-9]{16}$/);
    assert.equal(checkSnapshotId(id), id);
    for (const bad of ['../../etc/passwd', '/var/lib/x', 'snap-', 'snap-../../aaaaaaaaa', id.toUpperCase(), `${id}/..`, 5]) {
      assert.equal(
        codeOf(() => checkSnapshotId(bad)),
        'invalid_request',
        String(bad),
      );
    }
  });

  it('the quota: a count past SBX_SNAPSHOT_QUOTA_COUNT is a 409, bytes past SBX_SNAPSHOT_QUOTA_MIB a 409 before and a 413 after', () => {
    const mib = 2 ** 20;
    assert.equal(
      codeOf(() => checkSnapshotRoom([{ bytes: 1 }], SETTINGS)),
      undefined,
    );
    assert.equal(
      codeOf(() => checkSnapshotRoom([{ bytes: 1 }, { bytes: 1 }], SETTINGS)),
      'snapshot_quota_exceeded',
    );
    assert.equal(
      codeOf(() => checkSnapshotRoom([{ bytes: mib }], SETTINGS)),
      'snapshot_quota_exceeded',
    );
    assert.equal(
      codeOf(() => checkSnapshotSize([{ bytes: mib / 2 }], mib, SETTINGS)),
      'snapshot_too_large',
    );
    assert.match(
      String(
        (() => {
          try {
            checkSnapshotSize([], 2 * mib, SETTINGS);
          } catch (err) {
            return (err as Error).message;
          }
        })(),
      ),
      /SBX_SNAPSHOT_QUOTA_MIB \(1 MiB\)/,
    );
  });

  it("a guest's gateway is the .1 of its /30", () => {
    assert.equal(gatewayOf('10.241.0.6'), '10.241.0.5');
  });
});

describe('the snapshot service', () => {
  it("creates, lists, gets and deletes a tenant's snapshot; delete frees its files", async () => {
    const sessions = fakeSessions();
    const { snapshots, cleanup } = await service(sessions);
    try {
      const made = await snapshots.create('t1', 'aaaaaaaaaa', { name: 'base' });
      assert.match(made.id, /^snap-/);
      assert.equal(made.name, 'base');
      assert.equal(made.template, 'minimal');
      assert.ok(made.bytes >= 4096, `bytes ${made.bytes}`);
      assert.deepEqual(
        snapshots.list('t1').map((s) => s.id),
        [made.id],
      );
      assert.equal(snapshots.get('t1', made.id).bytes, made.bytes);
      const dir = sessions.dirs[0]!;
      assert.ok(existsSync(path.join(dir, 'vm-state.gz')));
      await snapshots.delete('t1', made.id);
      assert.equal(existsSync(dir), false, 'the files are gone with it');
      assert.deepEqual(snapshots.list('t1'), []);
      assert.equal(await codeOfAsync(snapshots.delete('t1', made.id)), 'snapshot_not_found');
    } finally {
      await cleanup();
    }
  });

  it("another tenant's snapshot is the same 404 as a missing one: not listed, described, forked or deleted", async () => {
    const { snapshots, cleanup } = await service();
    try {
      const made = await snapshots.create('t1', 'aaaaaaaaaa', {});
      assert.deepEqual(snapshots.list('t2'), []);
      assert.equal(
        codeOf(() => snapshots.get('t2', made.id)),
        'snapshot_not_found',
      );
      assert.equal(
        codeOf(() => snapshots.take('t2', made.id)),
        'snapshot_not_found',
      );
      assert.equal(await codeOfAsync(snapshots.delete('t2', made.id)), 'snapshot_not_found');
      assert.equal(snapshots.get('t1', made.id).id, made.id, 'still there for its own tenant');
      // A path is never looked up.
      assert.equal(
        codeOf(() => snapshots.take('t1', '../../etc')),
        'invalid_request',
      );
    } finally {
      await cleanup();
    }
  });

  it('kept after its session has ended: scoped by the tenant stored with it', async () => {
    const { snapshots, cleanup } = await service();
    try {
      const made = await snapshots.create('t1', 'aaaaaaaaaa', {});
      // The fake's session "ends": describe() would now 404, but the snapshot is the tenant's still.
      snapshots.attach({
        ...fakeSessions(),
        describe: () => {
          throw new OrchestratorError('not_found', 'gone');
        },
      });
      assert.equal(snapshots.get('t1', made.id).sessionId, 'aaaaaaaaaa');
      const fork = snapshots.take('t1', made.id);
      assert.equal(fork.record.template, 'minimal');
      fork.release();
    } finally {
      await cleanup();
    }
  });

  it('names are unique per tenant; bad names refused before anything is taken', async () => {
    const sessions = fakeSessions();
    const { snapshots, cleanup } = await service(sessions, { quotaMiB: 100, quotaCount: 10 });
    try {
      await snapshots.create('t1', 'aaaaaaaaaa', { name: 'base' });
      assert.equal(await codeOfAsync(snapshots.create('t1', 'aaaaaaaaaa', { name: 'base' })), 'snapshot_exists');
      assert.equal(await codeOfAsync(snapshots.create('other', 'aaaaaaaaaa', { name: 'base' })), 'not_found', "another tenant's session");
      assert.equal(await codeOfAsync(snapshots.create('t1', 'aaaaaaaaaa', { name: '../x' })), 'invalid_request');
      assert.equal(sessions.dirs.length, 1, 'nothing was saved for the refused ones');
    } finally {
      await cleanup();
    }
  });

  it('quota: the count, and bytes past the quota are refused and the files removed', async () => {
    const sessions = fakeSessions(600 * 1024);
    const { snapshots, cleanup } = await service(sessions);
    try {
      await snapshots.create('t1', 'aaaaaaaaaa', {});
      const code = await codeOfAsync(snapshots.create('t1', 'aaaaaaaaaa', {}));
      assert.equal(code, 'snapshot_too_large');
      assert.equal(existsSync(sessions.dirs[1]!), false, 'the refused snapshot left no files');
      assert.equal(snapshots.list('t1').length, 1);
      // Another tenant has its own quota.
      await snapshots.create('t2', 'aaaaaaaaaa', {});
    } finally {
      await cleanup();
    }
    const small = await service(fakeSessions(1024));
    try {
      await small.snapshots.create('t1', 'aaaaaaaaaa', {});
      await small.snapshots.create('t1', 'aaaaaaaaaa', {});
      assert.equal(await codeOfAsync(small.snapshots.create('t1', 'aaaaaaaaaa', {})), 'snapshot_quota_exceeded');
    } finally {
      await small.cleanup();
    }
  });

  it('a runtime that cannot snapshot is a 409 snapshot_unsupported saying why', async () => {
    const { snapshots, cleanup } = await service(fakeSessions(1024, 'CRIU cannot run here (criu 3.17 on kernel 6.18): it needs 4.2 or newer'));
    try {
      await assert.rejects(
        snapshots.create('t1', 'aaaaaaaaaa', {}),
        (err: OrchestratorError) => err.code === 'snapshot_unsupported' && /CRIU/.test(err.message),
      );
    } finally {
      await cleanup();
    }
  });

  it('a snapshot being forked cannot be deleted; a restart removes a half-made one', async () => {
    const { snapshots, store, dir, cleanup } = await service();
    try {
      const made = await snapshots.create('t1', 'aaaaaaaaaa', {});
      const fork = snapshots.take('t1', made.id);
      assert.equal(await codeOfAsync(snapshots.delete('t1', made.id)), 'snapshot_in_use');
      fork.release();
      fork.release(); // idempotent
      store.insert({ ...store.get('t1', made.id)!, id: 'snap-aaaaaaaaaaaaaaaa', state: 'creating' });
      await writeFile(path.join(dir, 'snapshots', 'stray'), 'x');
      await snapshots.recover();
      assert.equal(store.get('t1', 'snap-aaaaaaaaaaaaaaaa'), undefined);
      assert.equal(existsSync(path.join(dir, 'snapshots', 'stray')), false);
      assert.equal(snapshots.get('t1', made.id).id, made.id);
      // A create while its files are being removed finds no snapshot (not half of its files).
      const deleting = snapshots.delete('t1', made.id);
      assert.equal(
        codeOf(() => snapshots.take('t1', made.id)),
        'snapshot_not_found',
      );
      assert.equal(await codeOfAsync(snapshots.delete('t1', made.id)), 'snapshot_not_found', 'a second delete meanwhile: already gone');
      await deleting;
      assert.equal(existsSync(path.join(dir, 'snapshots', made.id)), false, 'its files are gone');
    } finally {
      await cleanup();
    }
  });
});

describe('a create from a snapshot', () => {
  it("takes the snapshot's template and screen, refuses others and volumes", async () => {
    const { snapshots, cleanup } = await service();
    try {
      const made = await snapshots.create('t1', 'aaaaaaaaaa', {});
      const fork = forkRequest(snapshots, 't1', { snapshot: made.id });
      assert.deepEqual([fork?.options.template, fork?.options.width, fork?.options.height], ['minimal', 1024, 768]);
      fork?.release();
      assert.equal(
        codeOf(() => forkRequest(snapshots, 't1', { snapshot: made.id, template: 'desktop' })),
        'invalid_request',
      );
      assert.equal(
        codeOf(() => forkRequest(snapshots, 't1', { snapshot: made.id, volumes: [{ name: 'v', path: '/data' }] })),
        'invalid_request',
      );
      assert.equal(
        codeOf(() => forkRequest(snapshots, 't2', { snapshot: made.id })),
        'snapshot_not_found',
      );
      assert.equal(forkRequest(snapshots, 't1', {}), undefined);
      // The refused ones hold nothing: it can be deleted.
      await snapshots.delete('t1', made.id);
    } finally {
      await cleanup();
    }
  });
});

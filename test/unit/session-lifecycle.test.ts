/**
 * The session state machine over a fake Runtime (test/helpers/fake-runtime.ts): no root, no
 * sandbox, milliseconds. What runs for real: the manager and its roles (registry, lifecycle,
 * clocks, capacity, warm pool), the SQLite store, the address allocator. What is fake: the
 * runtime and the host steps around it (network, keys, SSH), which the real-sandbox tier
 * covers (lifecycle.test.ts, timeouts.test.ts, warm-pool.test.ts, adoption.test.ts).
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { HostCapacityError, SessionGoneError, SessionStateError, TenantLimitError, UnavailableError } from '../../src/errors.js';
import type { SessionRecord } from '../../src/sessions/session-record.js';
import { SessionStore } from '../../src/sessions/store.js';
import { FAKE_IMAGE, FakeRuntime, FakeSandbox, gate } from '../helpers/fake-runtime.js';
import { fakeManager, until, type FakeRig } from '../helpers/fake-manager.js';
import { httpStatusOf } from '../../src/api/errors.js';

let dir: string;
before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-unit-lifecycle-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

function rig(options: Parameters<typeof fakeManager>[2] = {}): Promise<FakeRig> {
  return fakeManager(dir, { prefix: 'unt-', subnet: '10.251.0.0/24' }, options);
}

/** Nothing held: no live sandbox, no address lease, no capacity slot. */
function assertNothingHeld(r: FakeRig): void {
  assert.deepEqual(
    r.runtime.live.map((s) => s.sessionId),
    [],
    'every sandbox was released',
  );
  assert.equal(r.manager.leasesInUse, 0, 'every address lease was given back');
  assert.deepEqual(r.manager.capacity.usage(), { total: 0, booting: 0, perTenant: {} }, 'every capacity slot was given back');
}

/** A store whose inserts throw while `failing`, as SQLite's do on a full disk; it counts them. */
class InsertFails extends SessionStore {
  failing = true;
  attempts = 0;
  override insert(record: SessionRecord): void {
    if (!this.failing) return super.insert(record);
    this.attempts++;
    throw new Error('database or disk is full');
  }
}

describe('unit: create and destroy', () => {
  for (const transport of ['unix', 'vsock'] as const) {
    it(`a runtime reached over a socket (${transport}): a session without egress takes no address (no NIC), one with egress does (issue 23)`, async () => {
      const r = await rig({ runtime: new FakeRuntime({ controlTransport: transport }) });
      r.metrics.observeSessionNetworks(() => r.manager.list('alpha').map((view) => view.network));
      const isolated = await r.manager.create({}, { tenant: 'alpha' });
      assert.deepEqual(isolated.network, { egress: false, transport, interfaces: ['lo'] });
      assert.equal(r.manager.leasesInUse, 0, 'no address lease');
      assert.equal(r.store.get(isolated.id)?.addressIndex, null);
      assert.equal(r.store.get(isolated.id)?.transport, transport, 'stored, for the view and for adoption');
      const out = await r.manager.create({ network: { egress: true } }, { tenant: 'alpha' });
      assert.deepEqual(out.network, { egress: true, transport: 'tcp', interfaces: ['lo', 'eth0'] });
      assert.equal(r.manager.leasesInUse, 1, 'egress needs its NIC and address');
      const scraped = await r.metrics.registry.metrics();
      assert.match(scraped, new RegExp(`^sandbox_sessions_by_transport\\{transport="${transport}",nic="false"\\} 1$`, 'm'));
      assert.match(scraped, /^sandbox_sessions_by_transport\{transport="tcp",nic="true"\} 1$/m);
      await r.manager.shutdown();
      assertNothingHeld(r);
    });
  }

  it('a runtime reached over TCP: every session has its NIC, as before', async () => {
    const r = await rig();
    const view = await r.manager.create({}, { tenant: 'alpha' });
    assert.deepEqual(view.network, { egress: false, transport: 'tcp', interfaces: ['lo', 'eth0'] });
    assert.equal(r.manager.leasesInUse, 1);
    await r.manager.shutdown();
    assertNothingHeld(r);
  });

  it('a created session is ready and listed; a destroy releases everything, once', async () => {
    const r = await rig();
    const view = await r.manager.create({ width: 800, height: 600 }, { tenant: 'alpha' });
    assert.equal(view.state, 'ready');
    assert.deepEqual(view.display, { width: 800, height: 600 });
    assert.deepEqual(
      r.manager.list('alpha').map((s) => s.id),
      [view.id],
    );
    assert.deepEqual(r.manager.list('beta'), [], 'another tenant does not see it');
    assert.equal(r.manager.tenantOf(view.id), 'alpha');
    assert.equal(r.store.get(view.id)?.state, 'ready', 'the store has it ready');

    const [first, second] = await Promise.all([r.manager.destroy(view.id), r.manager.destroy(view.id)]);
    assert.equal(first.state, 'destroyed');
    assert.equal(second.state, 'destroyed');
    assert.equal(r.runtime.sandboxes.get(view.id)?.releases, 1, 'two concurrent destroys release the sandbox once');
    assert.equal(r.manager.get(view.id).endReason, 'deleted');
    assert.deepEqual(r.manager.list(), []);
    assertNothingHeld(r);
    await r.manager.shutdown();
  });

  it('a destroy during the boot wins: the create fails with 503, nothing is left', async () => {
    const r = await rig();
    r.runtime.startGate = gate();
    const creating = r.manager.create();
    await until('the session is listed as creating', () => r.manager.list().length === 1);
    const [session] = r.manager.list();
    assert.equal(session?.state, 'creating');
    assert.throws(() => r.manager.connection(session?.id ?? ''), SessionStateError, 'a creating session is 409 to its actions');
    let destroyed = false;
    const destroying = r.manager.destroy(session?.id ?? '').finally(() => (destroyed = true));
    await sleep(50);
    assert.equal(destroyed, false, 'the destroy waits for the boot to reach a resting point');
    r.runtime.startGate.open();
    await assert.rejects(creating, (err: unknown) => err instanceof UnavailableError && /destroyed while it was being created/.test(err.message));
    assert.equal((await destroying).state, 'destroyed');
    assertNothingHeld(r);
    await r.manager.shutdown();
  });

  it('a boot that fails marks the session failed and gives back its slot and lease', async () => {
    const r = await rig();
    r.runtime.startError = new Error('no such image');
    await assert.rejects(r.manager.create(), (err: unknown) => err instanceof UnavailableError && /failed to start: no such image/.test(err.message));
    const [failed] = r.manager.list();
    assert.equal(failed?.state, 'failed', 'a failed create stays listed with its error');
    assert.match(failed?.error ?? '', /no such image/);
    assertNothingHeld(r);
    r.runtime.startError = undefined;
    assert.equal((await r.manager.create()).state, 'ready', 'the next create works');
    await r.manager.shutdown();
    assertNothingHeld(r);
  });

  it('a create whose row cannot be stored gives back its address lease (nothing else knows of it) and its slot', async () => {
    const store = new InsertFails(path.join(dir, 'insert-fails.db'));
    const r = await rig({ store, subnet: '10.251.0.0/29' }); // two /30 blocks: two leaks would exhaust it
    for (let i = 0; i < 3; i++) await assert.rejects(r.manager.create({}, { tenant: 'alpha' }), /disk is full/);
    assert.equal(store.attempts, 3);
    assert.equal(r.manager.leasesInUse, 0, 'the lease taken before the insert was given back');
    assert.deepEqual(r.manager.list(), []);
    assertNothingHeld(r);
    store.failing = false;
    assert.equal((await r.manager.create({}, { tenant: 'alpha' })).state, 'ready', 'the subnet still has its blocks');
    await r.manager.shutdown();
    assertNothingHeld(r);
  });

  it('two creates racing for the same placed id: the one whose insert clashes gives back its lease', async () => {
    const r = await rig();
    const owner = { tenant: 'alpha', sessionId: 'placedaaaa' };
    // Both pass the "new on this node" check before either is stored; the second insert hits the primary key.
    const [a, b] = await Promise.allSettled([r.manager.create({}, owner), r.manager.create({}, owner)]);
    assert.deepEqual([a.status, b.status].sort(), ['fulfilled', 'rejected']);
    assert.equal(r.manager.leasesInUse, 1, "only the stored session's lease is held");
    assert.deepEqual(r.manager.capacity.usage().perTenant, { alpha: 1 });
    await r.manager.shutdown();
    assertNothingHeld(r);
  });

  it('a shutdown destroys every session and refuses new creates', async () => {
    const r = await rig();
    const views = await Promise.all([r.manager.create(), r.manager.create()]);
    await r.manager.shutdown();
    for (const view of views) assert.equal(r.manager.get(view.id).endReason, 'shutdown');
    await assert.rejects(r.manager.create(), UnavailableError);
    assertNothingHeld(r);
  });
});

describe('unit: capacity', () => {
  it('the per-tenant and per-host limits hold against concurrent creates, and free up on destroy', async () => {
    const r = await rig();
    const results = await Promise.allSettled([1, 2, 3, 4].map(() => r.manager.create({}, { tenant: 'alpha' })));
    const made = results.filter((x) => x.status === 'fulfilled');
    const refused = results.filter((x): x is PromiseRejectedResult => x.status === 'rejected');
    assert.equal(made.length, 3, 'the tenant gets its 3');
    assert.equal(refused.length, 1);
    assert.ok(refused[0]?.reason instanceof TenantLimitError, '429 for the fourth');
    assert.equal((await r.manager.create({}, { tenant: 'beta' })).state, 'ready', 'another tenant fills the host');
    await assert.rejects(r.manager.create({}, { tenant: 'gamma' }), HostCapacityError, '503: the host is full');
    assert.equal(r.runtime.sandboxes.size, 4, 'a refused create started nothing');
    const first = r.manager.list('alpha')[0];
    await r.manager.destroy(first?.id ?? '');
    assert.equal((await r.manager.create({}, { tenant: 'gamma' })).state, 'ready', 'a destroy frees a place');
    await r.manager.shutdown();
    assertNothingHeld(r);
  });

  it('a create that fails before its session holds the slot gives the slot back', async () => {
    // A /29 has two /30 blocks: the third create finds the subnet exhausted.
    const r = await rig({ subnet: '10.251.0.0/29' });
    await r.manager.create();
    await r.manager.create();
    await assert.rejects(r.manager.create(), /no free addresses left/);
    assert.equal(r.manager.capacity.usage().total, 2, 'the failed create holds no slot');
    await r.manager.shutdown();
    assertNothingHeld(r);
  });

  it('a create refused by the network policy takes nothing', async () => {
    const r = await rig();
    r.host.createsRefused = new UnavailableError('the network policy is not in force');
    await assert.rejects(r.manager.create(), UnavailableError);
    assert.equal(r.runtime.sandboxes.size, 0);
    assert.deepEqual(r.manager.list(), []);
    assertNothingHeld(r);
    await r.manager.shutdown();
  });
});

describe('unit: the clocks', () => {
  it('an idle session is destroyed by the reaper; activity and a busy action hold it off', async () => {
    const r = await rig();
    const busy = await r.manager.create({ timeoutSeconds: 1 });
    const idle = await r.manager.create({ timeoutSeconds: 1 });
    let finish: () => void = () => undefined;
    const work = r.manager.whileBusy(busy.id, () => new Promise<void>((resolve) => (finish = resolve)));
    await until('the idle session is reaped', () => r.manager.get(idle.id).state === 'destroyed', 3_000);
    assert.equal(r.manager.get(idle.id).endReason, 'idle_timeout');
    await sleep(300);
    assert.equal(r.manager.get(busy.id).state, 'ready', 'a session running a long action is not idle');
    finish();
    await work;
    // Its end counts as activity: a full second more.
    await sleep(500);
    assert.equal(r.manager.get(busy.id).state, 'ready');
    await until('the busy session is reaped once idle', () => r.manager.get(busy.id).state === 'destroyed', 3_000);
    assert.equal(r.manager.get(busy.id).endReason, 'idle_timeout');
    assertNothingHeld(r);
    await r.manager.shutdown();
  });

  it('the lifetime ends a session whatever its activity', async () => {
    const r = await rig();
    const view = await r.manager.create({ timeoutSeconds: 60, maxLifetimeSeconds: 1 });
    const keepalives = setInterval(() => {
      if (r.manager.get(view.id).state === 'ready') r.manager.keepalive(view.id);
    }, 50);
    try {
      await until('the session reaches its lifetime', () => r.manager.get(view.id).state === 'destroyed', 3_000);
    } finally {
      clearInterval(keepalives);
    }
    assert.equal(r.manager.get(view.id).endReason, 'max_lifetime');
    assertNothingHeld(r);
    await r.manager.shutdown();
  });
});

describe('unit: a vanished sandbox', () => {
  it('a sandbox that exits marks its session failed: its actions answer 410, a destroy ends it', async () => {
    const r = await rig();
    const view = await r.manager.create();
    r.runtime.sandboxes.get(view.id)?.exit('killed by the OOM killer');
    await until('the session is failed', () => r.manager.get(view.id).state === 'failed');
    assert.match(r.manager.get(view.id).error ?? '', /stopped unexpectedly: killed by the OOM killer/);
    assert.equal(r.manager.get(view.id).endReason, 'failed');
    await assert.rejects(r.manager.screenshot(view.id), (err: unknown) => err instanceof SessionGoneError && httpStatusOf(err.code) === 410);
    assert.throws(() => r.manager.connection(view.id), SessionGoneError);
    assert.deepEqual(
      r.manager.list().map((s) => s.state),
      ['failed'],
      'it stays listed until the client destroys it',
    );
    assertNothingHeld(r);
    assert.equal((await r.manager.destroy(view.id)).state, 'destroyed');
    assert.equal(r.manager.get(view.id).endReason, 'failed', 'why it ended stays');
    assert.deepEqual(r.manager.list(), []);
    await r.manager.shutdown();
  });

  it('a sandbox whose network goes is failed too, and a request that fails meanwhile is told 410', async () => {
    const r = await rig();
    const view = await r.manager.create();
    assert.equal(await r.manager.endedUnderRequest(view.id), undefined, 'a live, well session: the error is a real one');
    r.host.vanish(view.id);
    const answer = await r.manager.endedUnderRequest(view.id);
    assert.ok(answer instanceof SessionGoneError, '410, looked at now');
    await until('the session is failed', () => r.manager.get(view.id).state === 'failed');
    assert.match(r.manager.get(view.id).error ?? '', /sandbox vanished: its network namespace was deleted/);
    assertNothingHeld(r);
    await r.manager.shutdown();
  });
});

describe('unit: the warm pool', () => {
  it("keeps a pool per template; a create takes only its own template's, and boots that image", async () => {
    const tools = { ...FAKE_IMAGE, hash: 'tools' };
    const r = await rig({
      warmPool: {
        sizes: new Map([
          ['minimal', 1],
          ['tools', 1],
        ]),
        shape: { width: 1024, height: 768 },
      },
      templates: { resolve: async (name) => (name === 'tools' ? { name, image: tools } : { name, image: FAKE_IMAGE }) },
    });
    await until(
      'both pools have a sandbox ready',
      () => r.manager.warmPoolStatuses().every((s) => s.ready.length === 1) && r.manager.warmPoolStatuses().length === 2,
    );
    const [minimalPooled] = r.manager.warmPoolStatus('minimal').ready;
    const [toolsPooled] = r.manager.warmPoolStatus('tools').ready;
    assert.equal(r.runtime.sandboxes.get(toolsPooled ?? '')?.imageHash, 'tools', 'the tools pool boots the tools image');

    const view = await r.manager.create({ template: 'tools' }, { tenant: 'alpha' });
    assert.equal(view.id, toolsPooled, "the tools pool's sandbox became the session");
    assert.equal(view.template, 'tools');
    assert.deepEqual(r.manager.warmPoolStatus('minimal').ready, [minimalPooled], 'the minimal pool was not touched');
    const plain = await r.manager.create({}, { tenant: 'alpha' });
    assert.equal(plain.id, minimalPooled, "no template: the default template's pool");
    assert.equal(plain.template, 'minimal');
    const egress = await r.manager.create({ template: 'tools', network: { egress: true } }, { tenant: 'alpha' });
    assert.equal(r.runtime.sandboxes.get(egress.id)?.imageHash, 'tools', 'a cold boot of a template boots its image');
    await r.manager.shutdown();
    assertNothingHeld(r);
  });

  it('a create takes a pooled sandbox; a failed claim destroys it and boots one cold', async () => {
    const r = await rig({ warmPool: { sizes: new Map([['minimal', 1]]), shape: { width: 1024, height: 768 } } });
    await until('the pool has a sandbox ready', () => r.manager.warmPoolStatus().ready.length === 1);
    const [pooledId] = r.manager.warmPoolStatus().ready;
    const warm = await r.manager.create({}, { tenant: 'alpha' });
    assert.equal(warm.id, pooledId, 'the pooled sandbox became the session');
    assert.equal(warm.tenant, 'alpha');

    await until('the pool is refilled', () => r.manager.warmPoolStatus().ready.length === 1);
    const [doomed] = r.manager.warmPoolStatus().ready;
    r.host.claimError = new Error('the guest presented another host key');
    const cold = await r.manager.create({}, { tenant: 'alpha' });
    assert.equal(cold.state, 'ready', 'the client got a session all the same');
    assert.notEqual(cold.id, doomed, 'a cold one');
    assert.deepEqual(r.host.claims.slice(-1), [doomed], 'the claim was tried on the pooled one');
    assert.equal(r.runtime.sandboxes.get(doomed ?? '')?.releases, 1, 'the pooled sandbox that failed its claim is destroyed');
    assert.equal(r.store.get(doomed ?? ''), undefined, 'and forgotten: the client never sees it');
    assert.deepEqual(r.manager.capacity.usage().perTenant, { alpha: 2 }, 'one slot per session, the failed claim took none');

    r.host.claimError = undefined;
    await r.manager.shutdown();
    assertNothingHeld(r);
  });

  it('a pooled sandbox whose row cannot be stored gives back its address lease', async () => {
    const store = new InsertFails(path.join(dir, 'insert-fails-pool.db'));
    const r = await rig({ store, warmPool: { sizes: new Map([['minimal', 1]]), shape: { width: 1024, height: 768 } } });
    await until('the pool tried a boot', () => store.attempts >= 1);
    await sleep(20);
    assert.equal(r.manager.leasesInUse, 0, 'the failed boot holds no lease');
    await r.manager.shutdown();
    assertNothingHeld(r);
  });

  it('a runtime without a live config dir has no pool, and says so', async () => {
    const r = await rig({
      runtime: new FakeRuntime({ configDirIsLive: false }),
      warmPool: { sizes: new Map([['minimal', 2]]), shape: { width: 1024, height: 768 } },
    });
    assert.equal(r.manager.warmPoolStatus().target, 0);
    await assert.rejects(r.manager.resizeWarmPool(1), /there is no warm pool/);
    await r.manager.shutdown();
  });
});

describe('unit: adoption at start-up', () => {
  it('a ready session whose sandbox still runs is adopted; one whose sandbox is gone is reclaimed', async () => {
    const store = new SessionStore(path.join(dir, 'adopt.db'));
    const runtime = new FakeRuntime();
    const earlier = (id: string, addressIndex: number): SessionRecord => {
      const now = new Date().toISOString();
      const record: SessionRecord = {
        id,
        tenant: 'alpha',
        template: 'minimal',
        state: 'ready',
        runtime: 'container',
        width: 1024,
        height: 768,
        modelWidth: 1024,
        modelHeight: 768,
        toolVersion: 'computer_20250124',
        screenshotFormat: 'png',
        screenshotQuality: null,
        timeoutSeconds: 300,
        maxLifetimeSeconds: 3600,
        metadata: {},
        egress: false,
        createdAt: now,
        updatedAt: now,
        expiresAt: new Date(Date.now() + 300_000).toISOString(),
        addressIndex,
        error: null,
        pooled: false,
        endReason: null,
        paused: null,
        pausedMs: 0,
        pausedRetentionSeconds: 604800,
        onIdle: 'destroy',
        autoResume: true,
        volumes: [],
      };
      store.insert(record);
      return record;
    };
    earlier('aliveaaaaa', 0);
    earlier('goneaaaaaa', 1);
    runtime.leftRunning.set('aliveaaaaa', new FakeSandbox('aliveaaaaa'));

    const r = await rig({ store, runtime });
    assert.deepEqual(
      r.manager.list().map((s) => [s.id, s.state]),
      [['aliveaaaaa', 'ready']],
      'the live one is a session again',
    );
    assert.equal(r.manager.connection('aliveaaaaa').endpointLabel, 'unix:/nonexistent/fake-guest.sock', 'ready to act on');
    assert.deepEqual(r.manager.capacity.usage().perTenant, { alpha: 1 }, 'it holds its place');
    assert.deepEqual(r.runtime.reclaimed, ['goneaaaaaa'], 'the other is reclaimed');
    assert.equal(r.manager.get('goneaaaaaa').state, 'destroyed');

    runtime.sandboxes.get('aliveaaaaa')?.exit();
    await until('an adopted session is watched like any other', () => r.manager.get('aliveaaaaa').state === 'failed');
    await r.manager.shutdown();
    assert.equal(r.manager.capacity.usage().total, 0);
  });
});

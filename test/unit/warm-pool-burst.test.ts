/**
 * The warm pool under a burst of creates, and the claim's network policy check (issue 27), over
 * a fake Runtime (test/helpers/fake-runtime.ts): the manager, the lifecycle, the pool, the
 * SQLite store and the address allocator are real; what the real tier covers (keys, SSH, the
 * warm helpers) is faked (test/warm-pool.test.ts has those).
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { UnavailableError } from '../../src/errors.js';
import { CapacityGate } from '../../src/sessions/capacity.js';
import { type ManagerOptions } from '../../src/sessions/manager.js';
import { FakeRuntime } from '../helpers/fake-runtime.js';
import { fakeManager, until, type FakeRig } from '../helpers/fake-manager.js';

const NAMES = { prefix: 'unb-', subnet: '10.251.0.0/24' };

let dir: string;
before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-unit-burst-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A manager with a warm pool of `pool` minimal sandboxes, room for 40 sessions, a slow reaper. */
function rig(pool: number, options: Partial<ManagerOptions> & { runtime?: FakeRuntime } = {}): Promise<FakeRig> {
  return fakeManager(dir, NAMES, {
    capacity: new CapacityGate({ maxSessions: 40, maxSessionsPerTenant: 40, sessionMemoryMiB: 256, memoryReserveMiB: 0 }, () => undefined),
    reaperIntervalMs: 1_000,
    warmPool: { sizes: new Map([['minimal', pool]]), shape: { width: 1024, height: 768 } },
    ...options,
  });
}

describe('unit: the warm pool under a burst', () => {
  it('20 creates at once against a pool of 4: the pooled ones go to one create each, the rest boot cold, the pool refills, no sandbox is handed out twice', async () => {
    const r = await rig(4);
    await until('the pool is full', () => r.manager.warmPoolStatus().ready.length === 4);
    const pooled = new Set(r.manager.warmPoolStatus().ready);
    // Each boot and claim yields to the others (the fake's starts are async), so the burst's
    // creates, the pool's refills and its takes interleave.
    const views = await Promise.all(Array.from({ length: 20 }, (_, i) => r.manager.create({}, { tenant: `t${i % 3}` })));
    const ids = views.map((v) => v.id);
    assert.equal(new Set(ids).size, 20, 'twenty sessions, twenty different sandboxes');
    assert.ok(
      views.every((v) => v.state === 'ready'),
      'every create answered',
    );
    assert.equal(new Set(r.host.claims).size, r.host.claims.length, 'no pooled sandbox was claimed twice');
    for (const id of pooled) assert.ok(ids.includes(id), `pooled sandbox ${id} went to a create`);
    assert.ok(r.host.claims.length >= 4, `every pooled sandbox was claimed (${r.host.claims.length} claims)`);
    // One sandbox per session: no runtime sandbox serves two of them.
    const live = r.runtime.live.map((s) => s.sessionId);
    assert.equal(new Set(live).size, live.length);

    await until('the pool refilled', () => r.manager.warmPoolStatus().ready.length === 4 && r.manager.warmPoolStatus().booting === 0);
    const refilled = r.manager.warmPoolStatus().ready;
    assert.deepEqual(
      refilled.filter((id) => ids.includes(id)),
      [],
      'the refills are new sandboxes, none of them a session',
    );
    // A second wave takes exactly the refills, each once.
    const second = await Promise.all(Array.from({ length: 6 }, () => r.manager.create({}, { tenant: 'late' })));
    const secondIds = second.map((v) => v.id);
    assert.equal(new Set([...ids, ...secondIds]).size, 26);
    for (const id of refilled) assert.ok(secondIds.includes(id), `refill ${id} went to the second wave`);
    assert.equal(new Set(r.host.claims).size, r.host.claims.length, 'still no pooled sandbox claimed twice');
    await r.manager.shutdown();
    assert.deepEqual(r.runtime.live, [], 'every sandbox was released');
  });
});

describe('unit: a warm claim and the network policy check (issue 27)', () => {
  it('a pooled sandbox with a NIC: the check runs beside the claim, and a refusal destroys the claimed sandbox and boots nothing', async () => {
    const r = await rig(1);
    await until('the pool has one', () => r.manager.warmPoolStatus().ready.length === 1);
    const [pooledId] = r.manager.warmPoolStatus().ready;
    r.host.createsRefused = new UnavailableError('the guest network policy is not in force');
    await assert.rejects(r.manager.create({}, { tenant: 'alpha' }), /network policy is not in force/);
    assert.deepEqual(r.host.claims, [pooledId], 'the claim ran beside the check');
    assert.equal(r.runtime.sandboxes.get(pooledId ?? '')?.releases, 1, 'the claimed sandbox was destroyed');
    assert.equal(r.store.get(pooledId ?? ''), undefined, 'and forgotten');
    assert.deepEqual(r.manager.list(), [], 'no session was handed out');
    assert.equal(r.manager.capacity.usage().total, 0, 'its slot was given back');
    await until('the pool refilled', () => r.manager.warmPoolStatus().ready.length === 1 && r.manager.warmPoolStatus().booting === 0);
    assert.equal(r.runtime.sandboxes.size, 2, 'no cold boot: the claimed sandbox and the refill only');
    r.host.createsRefused = undefined;
    await r.manager.shutdown();
  });

  it('a pooled sandbox without a NIC (a socket-reached runtime, no egress) has nothing the policy fences: its claim does not wait for the check', async () => {
    const r = await rig(1, { runtime: new FakeRuntime({ controlTransport: 'unix' }) });
    await until('the pool has one', () => r.manager.warmPoolStatus().ready.length === 1);
    const [pooledId] = r.manager.warmPoolStatus().ready;
    r.host.createsRefused = new UnavailableError('the guest network policy is not in force');
    const view = await r.manager.create({}, { tenant: 'alpha' });
    assert.equal(view.id, pooledId);
    assert.deepEqual(view.network.interfaces, ['lo']);
    // One with egress needs its NIC fenced: refused.
    await assert.rejects(r.manager.create({ network: { egress: true } }, { tenant: 'alpha' }), /network policy is not in force/);
    r.host.createsRefused = undefined;
    await r.manager.shutdown();
  });
});

describe('unit: a warm pool that follows demand within its bounds (SBX_WARM_POOL_MAX)', () => {
  it('grows by one for each create that finds it empty, up to max, and shrinks back to its size once idle', async () => {
    const r = await rig(1, { warmPool: { sizes: new Map([['minimal', 1]]), shape: { width: 1024, height: 768 }, max: 3, idleShrinkMs: 400 } });
    await until('the pool has one', () => r.manager.warmPoolStatus().ready.length === 1);
    const burst = await Promise.all(Array.from({ length: 6 }, () => r.manager.create({}, { tenant: 'alpha' })));
    assert.equal(new Set(burst.map((v) => v.id)).size, 6);
    assert.equal(r.manager.warmPoolStatus().target, 3, 'grown to max by the creates that found it empty, not past it');
    await until('the grown pool filled', () => r.manager.warmPoolStatus().ready.length === 3);
    await until('idle: back to its size', () => r.manager.warmPoolStatus().target === 1 && r.manager.warmPoolStatus().ready.length === 1, 5_000);
    await r.manager.shutdown();
    assert.deepEqual(r.runtime.live, [], 'the sandboxes it gave back were released');
  });

  it('without a max it keeps its size whatever the demand', async () => {
    const r = await rig(1);
    await until('the pool has one', () => r.manager.warmPoolStatus().ready.length === 1);
    await Promise.all(Array.from({ length: 4 }, () => r.manager.create({}, { tenant: 'alpha' })));
    assert.equal(r.manager.warmPoolStatus().target, 1);
    await r.manager.shutdown();
  });
});

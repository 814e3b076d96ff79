/**
 * Session limits per tenant (issue 25, "lifetimes for real work"; src/sessions/tenant-limits.ts):
 * SBX_TENANT_SESSION_LIMITS parsed and refused with the variable, the tenant and the key named;
 * applied at create (a lifetime over a tenant's cap is a 400 naming the field and the cap), on a
 * PATCH, by the reaper (a tenant's short paused retention), and shown in the session view. Over
 * the fake runtime (test/helpers/fake-manager.ts); the gateway's forwarding of the fields over
 * fake nodes (test/helpers/gateway-cluster.ts).
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { InvalidRequestError } from '../../src/errors.js';
import { parseTenantSessionLimits } from '../../src/sessions/tenant-limits.js';
import { fakeManager, until, type FakeRig } from '../helpers/fake-manager.js';
import { MemoryClusterStore } from '../helpers/memory-cluster-store.js';

let dir: string;
before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-unit-tenant-limits-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

function rig(options: Parameters<typeof fakeManager>[2] = {}): Promise<FakeRig> {
  return fakeManager(dir, { prefix: 'unl-', subnet: '10.252.4.0/24' }, options);
}

describe('SBX_TENANT_SESSION_LIMITS', () => {
  it('reads tenant=key:value/key:value, tenants separated by commas', () => {
    const limits = parseTenantSessionLimits(
      ' ci=maxLifetimeSeconds:604800/pausedRetentionSeconds:2592000/onIdle:pause , trial=maxLifetimeSeconds:600/timeoutSeconds:60 ',
    );
    assert.deepEqual(Object.fromEntries(limits), {
      ci: { maxLifetimeSeconds: 604_800, pausedRetentionSeconds: 2_592_000, onIdle: 'pause' },
      trial: { maxLifetimeSeconds: 600, timeoutSeconds: 60 },
    });
    assert.equal(parseTenantSessionLimits('').size, 0);
  });

  it('refuses a bad entry naming the variable, the tenant and the key', () => {
    const cases: Array<[string, RegExp]> = [
      ['ci', /SBX_TENANT_SESSION_LIMITS: "ci" is not tenant=key:value\/key:value \(e\.g\. ci=maxLifetimeSeconds:/],
      ['ci=', /SBX_TENANT_SESSION_LIMITS: "ci=" is not tenant=key:value/],
      ['Big Co=onIdle:pause', /SBX_TENANT_SESSION_LIMITS: "Big Co" is not a tenant name/],
      [
        'ci=maxLifetime:60',
        /SBX_TENANT_SESSION_LIMITS: tenant "ci": "maxLifetime:60" is not key:value with a key of maxLifetimeSeconds, pausedRetentionSeconds/,
      ],
      ['ci=maxLifetimeSeconds:5', /SBX_TENANT_SESSION_LIMITS: tenant "ci": maxLifetimeSeconds must be a whole number of seconds from 10 to 31622400, got "5"$/],
      ['ci=pausedRetentionSeconds:1e3', /SBX_TENANT_SESSION_LIMITS: tenant "ci": pausedRetentionSeconds must be a whole number of seconds from 1 to/],
      ['ci=timeoutSeconds:100000', /SBX_TENANT_SESSION_LIMITS: tenant "ci": timeoutSeconds must be a whole number of seconds from 10 to 86400, got "100000"$/],
      ['ci=maxLifetimeSeconds', /SBX_TENANT_SESSION_LIMITS: tenant "ci": maxLifetimeSeconds must be a whole number of seconds from 10 to 31622400, got ""$/],
      ['ci=onIdle:sleep', /SBX_TENANT_SESSION_LIMITS: tenant "ci": onIdle must be one of destroy, pause, got "sleep"$/],
      ['ci=onIdle:pause/onIdle:destroy', /SBX_TENANT_SESSION_LIMITS: tenant "ci": onIdle is given twice$/],
      ['ci=onIdle:pause,ci=timeoutSeconds:60', /SBX_TENANT_SESSION_LIMITS: tenant "ci" is named twice$/],
    ];
    for (const [text, expected] of cases) assert.throws(() => parseTenantSessionLimits(text), expected, text);
  });
});

describe('session limits per tenant', () => {
  it("a paused session of tenant A is destroyed after A's short retention while tenant B's (the default) stays paused", async () => {
    const r = await rig({ tenantLimits: parseTenantSessionLimits('tenant-a=pausedRetentionSeconds:1') });
    const a = await r.manager.create({}, { tenant: 'tenant-a' });
    const b = await r.manager.create({}, { tenant: 'tenant-b' });
    assert.equal(a.pausedRetentionSeconds, 1);
    assert.equal(b.pausedRetentionSeconds, 7 * 24 * 3600);
    const pausedA = await r.manager.pause(a.id);
    const pausedB = await r.manager.pause(b.id);
    // The view says when each is destroyed unless resumed.
    assert.equal(Date.parse(pausedA.pausedUntil ?? ''), Date.parse(pausedA.paused?.since ?? '') + 1_000);
    assert.equal(Date.parse(pausedB.pausedUntil ?? ''), Date.parse(pausedB.paused?.since ?? '') + 7 * 24 * 3600_000);
    assert.equal(a.pausedUntil, undefined, 'a running session has no retention deadline');
    await until("tenant A's paused session is destroyed", () => r.manager.get(a.id).state === 'destroyed', 4_000);
    assert.equal(r.manager.get(a.id).endReason, 'paused_retention');
    assert.equal(r.runtime.sandboxes.get(a.id)?.releases, 1, 'its state is freed');
    // Several more sweeps of the reaper (every 20 ms): B's stays paused, its sandbox kept.
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(r.manager.get(b.id).state, 'paused');
    assert.equal(r.runtime.sandboxes.get(b.id)?.releases ?? 0, 0);
    // The retention was fixed at create and stored: a restart's adoption keeps it.
    assert.equal(r.store.get(b.id)?.pausedRetentionSeconds, 7 * 24 * 3600);
    assert.equal(r.store.get(a.id)?.pausedRetentionSeconds, 1);
    await r.manager.shutdown();
  });

  it("a create over tenant A's lifetime cap is a 400 naming the field and the cap, while B's passes; A's default is its cap", async () => {
    const r = await rig({ tenantLimits: parseTenantSessionLimits('tenant-a=maxLifetimeSeconds:600,tenant-ci=maxLifetimeSeconds:86400') });
    await assert.rejects(
      () => r.manager.create({ maxLifetimeSeconds: 3600 }, { tenant: 'tenant-a' }),
      (err: Error) =>
        err instanceof InvalidRequestError &&
        err.message === 'maxLifetimeSeconds must be at most 600 (the maximum lifetime of tenant "tenant-a" in SBX_TENANT_SESSION_LIMITS), got 3600',
    );
    assert.equal(r.manager.list().length, 0, 'a refused create takes nothing');
    const b = await r.manager.create({ maxLifetimeSeconds: 3600 }, { tenant: 'tenant-b' });
    assert.equal(b.maxLifetimeSeconds, 3600);
    const a = await r.manager.create({}, { tenant: 'tenant-a' });
    assert.equal(a.maxLifetimeSeconds, 600, "a tenant's cap is its lifetime by default");
    assert.equal(Date.parse(a.lifetimeEndsAt), Date.parse(a.createdAt) + 600_000);
    // A tenant may get more than the orchestrator's maximum; the others may not.
    const ci = await r.manager.create({ maxLifetimeSeconds: 7 * 3600 }, { tenant: 'tenant-ci' });
    assert.equal(ci.maxLifetimeSeconds, 7 * 3600);
    await assert.rejects(
      () => r.manager.create({ maxLifetimeSeconds: 7 * 3600 }, { tenant: 'tenant-b' }),
      /maxLifetimeSeconds must be at most 3600 \(this orchestrator's maximum lifetime\), got 25200/,
    );
    // A PATCH is held to the tenant's cap too.
    await assert.rejects(
      () => Promise.resolve().then(() => r.manager.updateTimeouts(a.id, { maxLifetimeSeconds: 900 })),
      /maxLifetimeSeconds must be at most 600 \(the maximum lifetime of tenant "tenant-a" in SBX_TENANT_SESSION_LIMITS\), got 900/,
    );
    assert.equal(r.manager.updateTimeouts(ci.id, { maxLifetimeSeconds: 86_400 }).maxLifetimeSeconds, 86_400);
    await r.manager.shutdown();
  });

  it("a tenant's idle timeout, onIdle and retention are its sessions' defaults; a create may ask for less retention, not more", async () => {
    const r = await rig({ tenantLimits: parseTenantSessionLimits('tenant-a=timeoutSeconds:60/onIdle:pause/pausedRetentionSeconds:3600') });
    const a = await r.manager.create({}, { tenant: 'tenant-a' });
    assert.deepEqual([a.timeoutSeconds, a.onIdle, a.pausedRetentionSeconds], [60, 'pause', 3600]);
    const b = await r.manager.create({}, { tenant: 'tenant-b' });
    assert.deepEqual([b.timeoutSeconds, b.onIdle, b.pausedRetentionSeconds], [300, 'destroy', 7 * 24 * 3600]);
    const asked = await r.manager.create({ onIdle: 'destroy', pausedRetentionSeconds: 120 }, { tenant: 'tenant-a' });
    assert.deepEqual([asked.onIdle, asked.pausedRetentionSeconds], ['destroy', 120]);
    await assert.rejects(
      () => r.manager.create({ pausedRetentionSeconds: 7200 }, { tenant: 'tenant-a' }),
      /pausedRetentionSeconds must be at most 3600 \(the paused retention of tenant "tenant-a" in SBX_TENANT_SESSION_LIMITS\), got 7200/,
    );
    await r.manager.shutdown();
  });
});

describe('session limits through a gateway', () => {
  it('the gateway forwards the lifetime fields of a create to the node as the client sent them, with its tenant', async () => {
    const { startCluster } = await import('../helpers/gateway-cluster.js');
    const cluster = await startCluster(new MemoryClusterStore(), ['n1']);
    try {
      const asked = { template: 'desktop', maxLifetimeSeconds: 86_400, pausedRetentionSeconds: 600, timeoutSeconds: 120, onIdle: 'pause' };
      const res = await fetch(`${cluster.url}/v1/sessions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${cluster.keyA}`, 'content-type': 'application/json' },
        body: JSON.stringify(asked),
      });
      assert.equal(res.status, 201);
      const created = (await res.json()) as { tenant: string; body: unknown };
      assert.deepEqual(
        created.body,
        { ...asked, record: false },
        'the node gets every field (and the schema default): it applies its own settings for the tenant',
      );
      assert.equal(created.tenant, 'acme');
      const bad = await fetch(`${cluster.url}/v1/sessions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${cluster.keyA}`, 'content-type': 'application/json' },
        body: JSON.stringify({ pausedRetentionSeconds: 0 }),
      });
      assert.equal(bad.status, 400, 'the same schema as a node: a bad value is refused before placement');
      assert.match(((await bad.json()) as { error: { message: string } }).error.message, /pausedRetentionSeconds/);
    } finally {
      await cluster.close();
    }
  });
});

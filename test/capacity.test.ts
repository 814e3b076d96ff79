import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { LightMyRequestResponse } from 'fastify';
import { CapacityGate, defaultMaxSessions } from '../src/sessions/capacity.js';
import { startTestOrchestrator, TEST_PREFIX, type TestOrchestrator } from './helpers/orchestrator.js';
import { prefixedResources } from './helpers/resources.js';

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

function create(orch: TestOrchestrator, headers: Record<string, string> = {}): Promise<LightMyRequestResponse> {
  return orch.server.inject({ method: 'POST', url: '/v1/sessions', headers, payload: {} });
}

/** The refusal: status, Retry-After, a JSON error that says which limit and what to do. */
function assertRefused(res: LightMyRequestResponse, status: 429 | 503, code: string, message: RegExp): void {
  assert.equal(res.statusCode, status, res.body);
  assert.match(String(res.headers['retry-after']), /^\d+$/);
  assert.ok(Number(res.headers['retry-after']) > 0);
  assert.equal(res.json().error.code, code);
  assert.match(res.json().error.message, message);
}

describe('capacity: per-tenant and per-host session limits', () => {
  let orch: TestOrchestrator;
  let keyA: string;
  let keyB: string;

  before(async () => {
    orch = await startTestOrchestrator({ maxSessions: 2, maxSessionsPerTenant: 1 });
    keyA = orch.keys.create('tenant-a').key;
    keyB = orch.keys.create('tenant-b').key;
  });
  after(async () => {
    await orch?.stop();
  });

  it('over the tenant limit: 429 with Retry-After, and nothing half-made stays', async () => {
    const first = await create(orch, bearer(keyA));
    assert.equal(first.statusCode, 201, first.body);
    const before = await prefixedResources(TEST_PREFIX, orch.stateDir);
    assert.equal(before.netns.length, 1);

    const refused = await create(orch, bearer(keyA));
    assertRefused(refused, 429, 'tenant_session_limit', /tenant "tenant-a" has 1 sessions, its limit \(SBX_MAX_SESSIONS_PER_TENANT=1\)/);
    assert.deepEqual(await prefixedResources(TEST_PREFIX, orch.stateDir), before, 'no netns, veth or key dir was taken');
    const listed = (await orch.server.inject({ method: 'GET', url: '/v1/sessions', headers: bearer(keyA) })).json().sessions;
    assert.equal(listed.length, 1, 'no session row for the refused create');
    assert.equal(orch.manager.capacity.usage().total, 1);
  });

  it('over the host limit: 503 with Retry-After, whoever asks', async () => {
    const second = await create(orch, bearer(keyB));
    assert.equal(second.statusCode, 201, second.body);
    const before = await prefixedResources(TEST_PREFIX, orch.stateDir);
    const keyC = orch.keys.create('tenant-c').key;
    assertRefused(await create(orch, bearer(keyC)), 503, 'host_session_limit', /this host runs 2 sessions, its limit \(SBX_MAX_SESSIONS=2\)/);
    assert.deepEqual(await prefixedResources(TEST_PREFIX, orch.stateDir), before);
  });

  it('a destroyed session gives its place back', async () => {
    const mine = (await orch.server.inject({ method: 'GET', url: '/v1/sessions', headers: bearer(keyA) })).json().sessions as Array<{ id: string }>;
    const id = mine[0]?.id as string;
    assert.equal((await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}`, headers: bearer(keyA) })).statusCode, 200);
    const again = await create(orch, bearer(keyA));
    assert.equal(again.statusCode, 201, again.body);
  });
});

describe('capacity: concurrent creates cannot overshoot', () => {
  let orch: TestOrchestrator;
  const N = 2;

  before(async () => {
    orch = await startTestOrchestrator({ maxSessions: N, maxSessionsPerTenant: 10 });
  });
  after(async () => {
    await orch?.stop();
  });

  it(`host limit ${N}: ${N + 3} creates at once give ${N} sessions and ${3} 503s, with nothing left of the refused`, async () => {
    const before = await prefixedResources(TEST_PREFIX, orch.stateDir);
    const answers = await Promise.all(Array.from({ length: N + 3 }, () => create(orch)));
    const made = answers.filter((r) => r.statusCode === 201);
    const refused = answers.filter((r) => r.statusCode !== 201);
    assert.equal(made.length, N, answers.map((r) => `${r.statusCode} ${r.body.slice(0, 120)}`).join('\n'));
    for (const r of refused) assertRefused(r, 503, 'host_session_limit', /SBX_MAX_SESSIONS=2/);
    const after = await prefixedResources(TEST_PREFIX, orch.stateDir);
    assert.equal(after.netns.length - before.netns.length, N);
    assert.equal(after.keyDirs.length - before.keyDirs.length, N);
    for (const r of made) assert.equal((await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${r.json().id}` })).statusCode, 200);
    assert.deepEqual(await prefixedResources(TEST_PREFIX, orch.stateDir), before, 'all gone after the destroys');
    assert.deepEqual(orch.manager.capacity.usage(), { total: 0, booting: 0, perTenant: {} });
  });

  it(`tenant limit ${N}: ${N + 3} creates at once by one tenant give ${N} sessions and 3 429s`, async () => {
    await orch.stop();
    orch = await startTestOrchestrator({ maxSessions: 10, maxSessionsPerTenant: N });
    const key = orch.keys.create('busy').key;
    const answers = await Promise.all(Array.from({ length: N + 3 }, () => create(orch, bearer(key))));
    const made = answers.filter((r) => r.statusCode === 201);
    assert.equal(made.length, N, answers.map((r) => `${r.statusCode} ${r.body.slice(0, 120)}`).join('\n'));
    for (const r of answers.filter((a) => a.statusCode !== 201)) assertRefused(r, 429, 'tenant_session_limit', /tenant "busy"/);
    assert.equal((await prefixedResources(TEST_PREFIX, orch.stateDir)).netns.length, N);
  });
});

describe('capacity: host memory', () => {
  it('refuses a create with 503 when MemAvailable minus the reserve is below the session memory limit', async () => {
    // A reserve larger than any machine's memory: the real MemAvailable can never cover it.
    const orch = await startTestOrchestrator({ memoryReserveMiB: 1024 * 1024 * 1024 });
    try {
      const before = await prefixedResources(TEST_PREFIX, orch.stateDir);
      assertRefused(await create(orch), 503, 'host_memory_low', /not enough memory on this host.*SBX_MEMORY_RESERVE_MIB=.*SBX_MEMORY_MIB/);
      assert.deepEqual(await prefixedResources(TEST_PREFIX, orch.stateDir), before);
      assert.equal(orch.manager.list().length, 0);
    } finally {
      await orch.stop();
    }
  });

  it('counts sandboxes still booting at their full limit, and gives each slot back once', () => {
    let available = 3000;
    const gate = new CapacityGate({ maxSessions: 10, maxSessionsPerTenant: 10, sessionMemoryMiB: 1000, memoryReserveMiB: 500 }, () => available);
    const first = gate.reserve('a'); // 3000 - 500 - 0 >= 1000
    const second = gate.reserve('a'); // 3000 - 500 - 1000 >= 1000
    assert.throws(() => gate.reserve('b'), { category: 'unavailable', code: 'host_memory_low' }); // 3000 - 500 - 2000 < 1000
    // Both up: their use now shows in MemAvailable, so they are no longer counted on top of it.
    first.booted();
    second.booted();
    available = 1400;
    assert.throws(() => gate.reserve('b'), { category: 'unavailable' }, '1400 - 500 < 1000');
    available = 1600;
    const third = gate.reserve('b'); // 1600 - 500 - 0 >= 1000
    assert.throws(() => gate.reserve('c'), { category: 'unavailable' }, 'the third is booting: 1600 - 500 - 1000 < 1000');
    first.release();
    first.release(); // twice: counted once
    second.release();
    third.release();
    assert.deepEqual(gate.usage(), { total: 0, booting: 0, perTenant: {} });
  });

  it('the default host limit comes from memory: total / per-session limit, at least 1, at most 64', () => {
    assert.equal(defaultMaxSessions(1024, 24 * 1024), 24);
    assert.equal(defaultMaxSessions(1024, 512), 1);
    assert.equal(defaultMaxSessions(256, 1024 * 1024), 64);
  });
});

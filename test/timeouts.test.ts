import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { InvalidRequestError, NotFoundError, SandboxClient, type Sandbox, type SessionInfo } from '../src/client/index.js';
import { ResourceNames } from '../src/network/names.js';
import type { SessionRecord } from '../src/sessions/session-record.js';
import { SessionStore } from '../src/sessions/store.js';
import { changedLifetime, expiry, idleDeadline, lifetimeEnd, resolveLifetime } from '../src/sessions/timeouts.js';
import { hostTrace, rememberNetns } from './helpers/host.js';
import { TEST_PREFIX, startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

const NAMES = new ResourceNames(TEST_PREFIX);
const nothingLeft = { netns: false, veth: false, mounts: [], container: false, processes: [], sessionDir: false };
/** The orchestrator maximum in these tests: short, so the lifetime is seen to end. */
const MAX_LIFETIME = 40;

async function waitFor<T>(what: string, check: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const value = await check();
    if (value !== undefined) return value;
    await sleep(200);
  }
  assert.fail(`timed out waiting for ${what}`);
}

describe('session clocks (pure)', () => {
  const createdAt = '2030-01-01T00:00:00.000Z';
  const t0 = Date.parse(createdAt);

  it('caps the idle deadline at the end of the lifetime', () => {
    const record = { createdAt, maxLifetimeSeconds: 60, timeoutSeconds: 30 };
    assert.equal(idleDeadline(record, t0 + 10_000), '2030-01-01T00:00:40.000Z');
    assert.equal(idleDeadline(record, t0 + 50_000), '2030-01-01T00:01:00.000Z');
    assert.equal(lifetimeEnd(record), t0 + 60_000);
  });

  it('refuses a lifetime beyond the maximum, or not ahead of the age, naming the limit', () => {
    assert.equal(resolveLifetime(undefined, 3600), 3600);
    assert.equal(resolveLifetime(600, 3600), 600);
    assert.throws(() => resolveLifetime(3601, 3600), /at most 3600/);
    assert.throws(() => changedLifetime({ createdAt }, 30, 3600, t0 + 45_000), /more than the session's age \(45 s\)/);
    assert.equal(changedLifetime({ createdAt }, 90, 3600, t0 + 45_000), 90);
  });

  it('ends a session at its lifetime even when busy, at its idle deadline only when not', () => {
    const record = { createdAt, maxLifetimeSeconds: 60, expiresAt: '2030-01-01T00:00:30.000Z' };
    assert.equal(expiry(record, t0 + 29_000, false), undefined);
    assert.equal(expiry(record, t0 + 31_000, false), 'idle_timeout');
    assert.equal(expiry(record, t0 + 31_000, true), undefined);
    assert.equal(expiry(record, t0 + 60_000, true), 'max_lifetime');
  });

  it('stores the lifetime and end reason, and gives an older file the columns', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-store-'));
    try {
      const file = path.join(dir, 'old.db');
      // A file as the release before this one made it: no lifetime, no end reason.
      const old = new Database(file);
      old.exec(`CREATE TABLE sessions (id TEXT PRIMARY KEY, state TEXT NOT NULL, runtime TEXT NOT NULL, width INTEGER NOT NULL,
        height INTEGER NOT NULL, timeout_seconds INTEGER NOT NULL, metadata TEXT NOT NULL, created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL, expires_at TEXT NOT NULL, address_index INTEGER, error TEXT)`);
      old.prepare(`INSERT INTO sessions VALUES ('oldone', 'ready', 'container', 1024, 768, 300, '{}', ?, ?, ?, 0, NULL)`).run(createdAt, createdAt, createdAt);
      old.close();
      const store = new SessionStore(file);
      assert.equal(store.get('oldone')?.maxLifetimeSeconds, 3600);
      assert.equal(store.get('oldone')?.endReason, null);
      assert.equal(store.get('oldone')?.tenant, 'local', 'a session from before tenants belongs to the local tenant');
      assert.equal(store.get('oldone')?.screenshotFormat, 'png', 'a session from before screenshot formats takes png');
      assert.equal(store.get('oldone')?.screenshotQuality, null);
      assert.equal(store.get('oldone')?.template, 'minimal', 'a session from before templates booted the minimal image');
      const record: SessionRecord = {
        id: 'newone',
        tenant: 'acme',
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
        maxLifetimeSeconds: 120,
        metadata: {},
        egress: false,
        pooled: false,
        createdAt,
        updatedAt: createdAt,
        expiresAt: createdAt,
        addressIndex: 1,
        error: null,
        endReason: null,
        paused: null,
        pausedMs: 0,
        pausedRetentionSeconds: 604800,
        onIdle: 'destroy',
        autoResume: true,
        volumes: [],
      };
      store.insert(record);
      store.update({ ...record, maxLifetimeSeconds: 240, endReason: 'idle_timeout', state: 'destroyed' });
      const back = store.get('newone');
      assert.equal(back?.maxLifetimeSeconds, 240);
      assert.equal(back?.endReason, 'idle_timeout');
      store.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('idle timeout and maximum lifetime on real sandboxes', () => {
  let orch: TestOrchestrator;
  let client: SandboxClient;
  const made: Sandbox[] = [];

  before(async () => {
    orch = await startTestOrchestrator({ maxLifetimeSeconds: MAX_LIFETIME, defaultTimeoutSeconds: 300 }, true);
    const address = orch.server.server.address();
    assert.ok(address && typeof address === 'object');
    client = new SandboxClient({ baseUrl: `http://127.0.0.1:${address.port}` });
  });
  after(async () => {
    await Promise.allSettled(made.map((s) => s.destroy()));
    await orch?.stop();
  });

  async function create(options: Parameters<SandboxClient['create']>[0]): Promise<Sandbox> {
    const sandbox = await client.create(options);
    made.push(sandbox);
    return sandbox;
  }

  /** The session as GET shows it once it has ended. */
  async function ended(id: string, timeoutMs: number): Promise<SessionInfo> {
    return waitFor(
      `session ${id} to end`,
      async () => {
        const info = await client.get(id);
        return info.state === 'destroyed' ? info : undefined;
      },
      timeoutMs,
    );
  }

  it('refuses a lifetime beyond the orchestrator maximum, and makes nothing', async () => {
    await assert.rejects(client.create({ maxLifetimeSeconds: MAX_LIFETIME + 1 }), (err: unknown) => {
      assert.ok(err instanceof InvalidRequestError);
      assert.match(err.message, new RegExp(`maxLifetimeSeconds must be at most ${MAX_LIFETIME}`));
      return true;
    });
    assert.deepEqual(await client.list(), []);
  });

  it('shows both deadlines; keepalive and PATCH move the idle one, never past the lifetime', async () => {
    const sandbox = await create({ timeoutSeconds: 10 });
    const info = sandbox.info;
    assert.equal(info.maxLifetimeSeconds, MAX_LIFETIME, 'the lifetime defaults to the maximum');
    assert.equal(Date.parse(info.lifetimeEndsAt ?? ''), Date.parse(info.createdAt) + MAX_LIFETIME * 1000);
    assert.ok(Date.parse(info.expiresAt) <= Date.parse(info.createdAt) + 10_000 + 50);

    await sleep(1_100);
    const kept = await sandbox.keepalive();
    assert.ok(Date.parse(kept.expiresAt) >= Date.parse(info.expiresAt) + 1_000, 'keepalive moved the idle deadline');
    assert.equal(kept.timeoutSeconds, 10);

    // A longer idle timeout than the lifetime left: expiresAt stops at the lifetime's end.
    const longer = await sandbox.keepalive(600);
    assert.equal(longer.timeoutSeconds, 600);
    assert.equal(longer.expiresAt, longer.lifetimeEndsAt);

    const patched = await sandbox.setTimeout(20);
    assert.equal(patched.timeoutSeconds, 20);
    assert.ok(Date.parse(patched.expiresAt) < Date.parse(patched.lifetimeEndsAt ?? ''));
    assert.deepEqual((await client.get(sandbox.id)).expiresAt, patched.expiresAt, 'GET shows what PATCH answered');

    // The lifetime can be shortened (ahead of the age) and extended up to the maximum, not past it.
    const shorter = await sandbox.setMaxLifetime(30);
    assert.equal(Date.parse(shorter.lifetimeEndsAt ?? ''), Date.parse(info.createdAt) + 30_000);
    await assert.rejects(sandbox.setMaxLifetime(MAX_LIFETIME + 1), /at most 40/);
    const back = await sandbox.setMaxLifetime(MAX_LIFETIME);
    assert.equal(back.lifetimeEndsAt, info.lifetimeEndsAt);
  });

  it('answers bad timeout requests with a 4xx that names the field', async () => {
    const sandbox = await create({});
    const base = `/v1/sessions/${sandbox.id}`;
    const cases: Array<{ method: 'PATCH' | 'POST'; url: string; payload?: unknown; status: number; message: RegExp }> = [
      { method: 'PATCH', url: base, payload: {}, status: 400, message: /fewer than 1 properties/ },
      { method: 'PATCH', url: base, payload: { timeoutSeconds: 5 }, status: 400, message: /timeoutSeconds must be >= 10/ },
      { method: 'PATCH', url: base, payload: { timeoutSeconds: '60' }, status: 400, message: /timeoutSeconds must be integer/ },
      { method: 'PATCH', url: base, payload: { state: 'destroyed' }, status: 400, message: /additional properties/ },
      { method: 'POST', url: `${base}/keepalive`, payload: { timeoutSeconds: 1e9 }, status: 400, message: /timeoutSeconds must be <= 86400/ },
      { method: 'POST', url: '/v1/sessions/nosuchsess/keepalive', status: 404, message: /does not exist/ },
      { method: 'PATCH', url: '/v1/sessions/nosuchsess', payload: { timeoutSeconds: 60 }, status: 404, message: /does not exist/ },
    ];
    for (const c of cases) {
      const res = await orch.server.inject({ method: c.method, url: c.url, ...(c.payload === undefined ? {} : { payload: c.payload as object }) });
      assert.equal(res.statusCode, c.status, `${c.method} ${c.url} ${JSON.stringify(c.payload)}: ${res.body}`);
      assert.match(res.json().error.message, c.message);
    }
    await assert.rejects(client.keepalive('nosuchsess'), NotFoundError);
    // A keepalive without any body is the plain "still here".
    const bare = await orch.server.inject({ method: 'POST', url: `${base}/keepalive` });
    assert.equal(bare.statusCode, 200, bare.body);
    assert.equal(bare.json().id, sandbox.id);
  });

  it('an idle session ends at its idle timeout, with the reason, and leaves nothing', async () => {
    const sandbox = await create({ timeoutSeconds: 10 });
    // Watch the state on the wall clock (GET is not activity): the deadline the session was
    // created with must find it still ready shortly before, and ended shortly after.
    const deadline = Date.parse((await client.get(sandbox.id)).expiresAt);
    await rememberNetns(NAMES, sandbox.id);
    let lastReady = 0;
    let firstEnded = 0;
    while (Date.now() < deadline + 10_000) {
      const askedAt = Date.now();
      const state = (await client.get(sandbox.id)).state;
      if (state === 'ready') lastReady = askedAt;
      else if (!firstEnded) firstEnded = askedAt;
      if (state === 'destroyed') break;
      await sleep(200);
    }
    assert.ok(lastReady >= deadline - 1_500, `still ready 1.5 s before its idle deadline (last seen ready ${deadline - lastReady} ms before it)`);
    // The reaper looks once a second; a destroy then takes a moment.
    assert.ok(
      firstEnded > 0 && firstEnded <= deadline + 3_000,
      `ending within 3 s of its idle deadline (${firstEnded ? firstEnded - deadline : 'never'} ms after)`,
    );
    const info = await ended(sandbox.id, 10_000);
    assert.equal(info.endReason, 'idle_timeout');
    const lived = Date.parse((await client.get(sandbox.id)).expiresAt) - Date.parse(info.createdAt);
    assert.ok(lived >= 9_000 && lived <= 11_000, `expired after its idle timeout (${lived} ms)`);
    assert.deepEqual(await hostTrace(NAMES, sandbox.id, path.join(orch.stateDir, sandbox.id)), nothingLeft);
    await assert.rejects(sandbox.screenshot(), /destroyed/);
  });

  it('keepalives hold the idle timeout off, but the lifetime ends the session anyway', async () => {
    const sandbox = await create({ timeoutSeconds: 10, maxLifetimeSeconds: 16 });
    await rememberNetns(NAMES, sandbox.id);
    const started = Date.now();
    let last: SessionInfo | undefined;
    while (Date.now() - started < 25_000) {
      try {
        last = await sandbox.keepalive();
      } catch {
        break; // ended: keepalive on a destroyed session is a 409
      }
      await sleep(2_000);
    }
    const info = await ended(sandbox.id, 5_000);
    const endedAfter = Date.now() - Date.parse(info.createdAt);
    assert.equal(info.endReason, 'max_lifetime');
    assert.ok(endedAfter >= 15_000 && endedAfter < 22_000, `ended at its lifetime (${endedAfter} ms), not its idle timeout`);
    assert.ok(last && last.expiresAt === last.lifetimeEndsAt, 'near the end, keepalive could not move expiresAt past the lifetime');
    assert.deepEqual(await hostTrace(NAMES, sandbox.id, path.join(orch.stateDir, sandbox.id)), nothingLeft);
  });

  it('a long upload and a long action are activity: neither session is reaped mid-way', async () => {
    const uploading = await create({ timeoutSeconds: 10 });
    const acting = await create({ timeoutSeconds: 10 });
    // 15 s of upload, a chunk every 250 ms: longer than the idle timeout, never idle.
    const chunks = 60;
    async function* slowly(): AsyncGenerator<Buffer> {
      for (let i = 0; i < chunks; i++) {
        await sleep(250);
        yield Buffer.alloc(16 * 1024, i);
      }
    }
    const [uploaded, waited, bashed] = await Promise.all([
      uploading.upload('/tmp/slow.bin', Readable.from(slowly())),
      acting.wait(12),
      // A companion tool call that outlasts the idle timeout (the route marks the session busy).
      acting.bash('sleep 13; echo done'),
    ]);
    assert.deepEqual(uploaded, { path: '/tmp/slow.bin', size: chunks * 16 * 1024 });
    assert.equal(waited.action, 'wait');
    assert.match(bashed.content[0]?.type === 'text' ? bashed.content[0].text : '', /done/);
    for (const sandbox of [uploading, acting]) {
      const info = await client.get(sandbox.id);
      assert.equal(info.state, 'ready', `${sandbox.id} survived its long request`);
      assert.ok(Date.parse(info.expiresAt) > Date.now() + 5_000, 'the end of the request counted as activity');
    }
    // And once the work stops, the idle timeout applies again.
    assert.equal((await ended(uploading.id, 20_000)).endReason, 'idle_timeout');
  });
});

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { cgroupPids } from '../src/bench/cpu.js';
import { defaultConfig } from '../src/config.js';
import { CONFIG_FILES, GUEST_USER } from '../src/guest/contract.js';
import { ResourceNames, SESSION_ID_PATTERN } from '../src/network/names.js';
import { generateSessionKeys, publicKeyBlob } from '../src/transport/ssh-keys.js';
import { guestTransport, HostKeyMismatchError, SshAuthenticationError } from '../src/transport/index.js';
import { connectToGuest, guestAddress, pngSize } from './helpers/guest.js';
import { filesHolding, hostTrace, privateKeyForms, rememberNetns } from './helpers/host.js';
import { TEST_PREFIX, TEST_SUBNET, startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';
import { runCli, startServe } from './helpers/serve.js';
import { startXev, waitForXev } from './helpers/xev.js';

const NAMES = new ResourceNames(TEST_PREFIX);
const nothingLeft = { netns: false, veth: false, mounts: [], container: false, processes: [], sessionDir: false };

async function waitFor<T>(what: string, check: () => Promise<T | undefined> | T | undefined, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    await sleep(50);
  }
  return assert.fail(`timed out waiting for ${what}`);
}

/** The ids of the pool's ready sandboxes, once it holds `n`. */
function poolReady(orch: TestOrchestrator, n = 1): Promise<string[]> {
  return waitFor(`${n} pooled sandbox(es)`, () => {
    const { ready } = orch.manager.warmPoolStatus();
    return ready.length >= n ? ready : undefined;
  });
}

/** The host's pid of a pooled guest's sshd: of the sandbox's processes, the one its pid file names in the guest's pid namespace. */
async function guestSshdHostPid(sessionId: string): Promise<number> {
  const pids = await cgroupPids(NAMES.cgroup(sessionId));
  assert.ok(pids.length > 0, `the sandbox of ${sessionId} has no processes`);
  const nsPid = (await readFile(`/proc/${pids[0]}/root/run/sshd.pid`, 'utf8')).trim();
  for (const pid of pids) {
    const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
    if (/^NSpid:.*\s(\d+)$/m.exec(status)?.[1] === nsPid) return pid;
  }
  return assert.fail(`no host pid for the guest's sshd (pid ${nsPid} in its namespace)`);
}

async function metrics(orch: TestOrchestrator): Promise<string> {
  return (await orch.server.inject({ method: 'GET', url: '/metrics' })).body;
}

/** Tries to log in to a guest with a key, pinning a host key; resolves to what happened. */
async function tryLogin(address: string, privateKey: string, hostPublicKey: string): Promise<'accepted' | Error> {
  const conn = guestTransport({
    endpoint: { host: address, port: 22 },
    username: GUEST_USER,
    privateKey,
    pinnedHostKey: publicKeyBlob(hostPublicKey.trim()),
  });
  try {
    await conn.open(5_000);
    const who = await conn.exec('id -un');
    assert.equal(who.stdout.toString().trim(), GUEST_USER);
    return 'accepted';
  } catch (err) {
    return err as Error;
  } finally {
    conn.close();
  }
}

describe('the warm pool', () => {
  let orch: TestOrchestrator;
  before(async () => {
    orch = await startTestOrchestrator({ warmPoolSize: 1 });
  });
  after(async () => {
    await orch?.stop();
  });

  let sessionId: string;
  let poolKey: string;
  let hostKey: string;

  it('hands out a booted sandbox as a session like any other, which screenshots and clicks', async () => {
    const [pooledId] = await poolReady(orch);
    assert.ok(pooledId);
    // A pooled sandbox is nobody's session: not listed, not found.
    assert.equal((await orch.server.inject({ method: 'GET', url: `/v1/sessions/${pooledId}` })).statusCode, 404);
    assert.equal((await orch.server.inject({ method: 'GET', url: '/v1/sessions' })).json().sessions.length, 0);
    assert.match(await metrics(orch), /sandbox_sessions_active 0/);
    poolKey = await readFile(path.join(orch.stateDir, pooledId, 'id_ed25519'), 'utf8');
    hostKey = await readFile(path.join(orch.stateDir, pooledId, 'config', CONFIG_FILES.hostKeyPub), 'utf8');

    const before = Date.now();
    const res = await orch.server.inject({
      method: 'POST',
      url: '/v1/sessions',
      payload: {
        width: 1024,
        height: 768,
        timeoutSeconds: 120,
        metadata: { from: 'pool' },
        scaling: { width: 800, height: 600 },
        toolVersion: 'computer_20251124',
      },
    });
    assert.equal(res.statusCode, 201, res.body);
    const view = res.json();
    sessionId = view.id;
    assert.equal(sessionId, pooledId, 'the session is the pooled sandbox');
    assert.equal(view.state, 'ready');
    assert.deepEqual(view.display, { width: 1024, height: 768 });
    assert.deepEqual(view.metadata, { from: 'pool' });
    assert.equal(view.timeoutSeconds, 120);
    assert.deepEqual(view.computerTool, { type: 'computer_20251124', name: 'computer', display_width_px: 800, display_height_px: 600, enable_zoom: true });
    assert.ok(Date.parse(view.createdAt) >= before - 1_000, 'createdAt is the claim, not the boot');
    assert.equal(Date.parse(view.expiresAt) - Date.parse(view.createdAt), 120_000);
    const text = await metrics(orch);
    assert.match(text, /sandbox_session_creates_total\{source="warm"\} 1/);
    assert.match(text, /sandbox_sessions_active 1/);
    assert.equal((await orch.server.inject({ method: 'GET', url: `/v1/sessions/${sessionId}` })).json().state, 'ready');

    const shot = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${sessionId}/screenshot` });
    assert.equal(shot.statusCode, 200);
    assert.deepEqual(pngSize(shot.rawPayload), { width: 1024, height: 768 });

    // A real X client in the guest sees the click (in the model's 800x600 space: scaled up).
    const guest = await connectToGuest(orch.stateDir, sessionId, await guestAddress(orch.names, sessionId));
    try {
      await startXev(guest, 1024, 768);
      const click = await orch.server.inject({
        method: 'POST',
        url: `/v1/sessions/${sessionId}/tools/computer`,
        payload: { action: 'left_click', coordinate: [400, 300] },
      });
      assert.equal(click.statusCode, 200, click.body);
      assert.equal(click.json().is_error, false, click.body);
      const log = await waitForXev(guest, (l) => /ButtonRelease/.test(l));
      assert.match(log, /ButtonPress event[^]*?root:\(512,384\)[^]*?button 1/);
    } finally {
      guest.close();
    }
  });

  it("refuses the pool's key after the claim, lets the session's key in, and refuses another host key", async () => {
    const address = await guestAddress(orch.names, sessionId);
    const refused = await tryLogin(address, poolKey, hostKey);
    assert.ok(refused instanceof SshAuthenticationError, `the pool's key must be refused, got ${String(refused)}`);
    const sessionKey = await readFile(path.join(orch.stateDir, sessionId, 'id_ed25519'), 'utf8');
    assert.notEqual(sessionKey, poolKey, "the pool's private key is gone from the host");
    // Not only overwritten in that file: nowhere in the state dir (session dirs, disk images,
    // the database and its WAL) is there any form of it; the session's own key is (the control).
    assert.deepEqual(await filesHolding(orch.stateDir, privateKeyForms(poolKey)), [], "the pool's private key in the state dir");
    assert.ok(
      (await filesHolding(orch.stateDir, privateKeyForms(sessionKey))).includes(path.join(orch.stateDir, sessionId, 'id_ed25519')),
      'the scan finds a key that is there',
    );
    assert.equal(await tryLogin(address, sessionKey, hostKey), 'accepted');
    const impostor = generateSessionKeys('impostor').hostPublicKey;
    const mismatch = await tryLogin(address, sessionKey, impostor);
    assert.ok(mismatch instanceof HostKeyMismatchError, `a host key other than the pinned one must be refused, got ${String(mismatch)}`);
  });

  it('refills itself after a claim', async () => {
    const [next] = await poolReady(orch);
    assert.ok(next && next !== sessionId, 'a new sandbox took its place');
    assert.match(await metrics(orch), /sandbox_warm_pool_sandboxes\{state="ready",template="minimal"\} 1/);
  });

  it('boots cold for another screen size and leaves the pool alone', async () => {
    const [pooledId] = await poolReady(orch);
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { width: 800, height: 600 } });
    assert.equal(res.statusCode, 201, res.body);
    assert.notEqual(res.json().id, pooledId);
    assert.deepEqual(res.json().display, { width: 800, height: 600 });
    assert.deepEqual(orch.manager.warmPoolStatus().ready, [pooledId]);
    assert.match(await metrics(orch), /sandbox_session_creates_total\{source="cold"\} 1/);
    await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${res.json().id}` });
  });

  it('destroys a pooled sandbox that presents another host key, and boots the session cold', async () => {
    const [pooledId] = await poolReady(orch);
    assert.ok(pooledId);
    await rememberNetns(NAMES, pooledId);
    // The guest's sshd now presents an impostor's host key (written, then sshd reloaded: it
    // keeps the key it started with until then, as sbx-rekey's reload does for a fork).
    const impostor = generateSessionKeys('impostor');
    await writeFile(path.join(orch.stateDir, pooledId, 'config', CONFIG_FILES.hostKey), impostor.hostPrivateKey, { mode: 0o600 });
    const poolKey = await readFile(path.join(orch.stateDir, pooledId, 'id_ed25519'), 'utf8');
    process.kill(await guestSshdHostPid(pooledId), 'SIGHUP');
    // Until sshd listens again with the new key (the pool's own key is still the one it takes).
    const address = await guestAddress(NAMES, pooledId);
    await waitFor(
      'sshd presenting the new key',
      async () => ((await tryLogin(address, poolKey, impostor.hostPublicKey)) === 'accepted' ? true : undefined),
      10_000,
    );
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
    assert.equal(res.statusCode, 201, res.body);
    assert.notEqual(res.json().id, pooledId, 'the impostor was not handed out');
    assert.deepEqual(await hostTrace(NAMES, pooledId, path.join(orch.stateDir, pooledId)), nothingLeft);
    assert.equal((await orch.server.inject({ method: 'GET', url: `/v1/sessions/${pooledId}` })).statusCode, 404);
    // Its ledger rows went with it: left, its host id range stayed taken until a restart.
    const ledger = new Database(path.join(orch.stateDir, 'orchestrator.db'), { readonly: true });
    try {
      assert.deepEqual(ledger.prepare('SELECT kind, name FROM session_resources WHERE session_id = ?').all(pooledId), []);
    } finally {
      ledger.close();
    }
    const text = await metrics(orch);
    assert.match(text, /sandbox_errors_total\{kind="warm_claim"\} 1/);
    assert.match(text, /sandbox_session_creates_total\{source="cold"\} 2/);
    const shot = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${res.json().id}/screenshot` });
    assert.equal(shot.statusCode, 200);
  });
});

// One orchestrator at a time: they share this process's subnet, and two would lease the same
// address blocks.
describe('the warm pool, on an orchestrator of its own', () => {
  it('destroys its sandboxes on shutdown', async () => {
    const sized = await startTestOrchestrator({ warmPoolSize: 2 });
    let ids: string[] = [];
    try {
      ids = await poolReady(sized, 2);
      for (const id of ids) assert.equal((await hostTrace(NAMES, id, path.join(sized.stateDir, id))).container, true);
    } finally {
      await sized.close();
    }
    for (const id of ids) assert.deepEqual(await hostTrace(NAMES, id, path.join(sized.stateDir, id)), nothingLeft);
    await sized.stop();
  });

  it('keeps retrying a refill that fails, with backoff, and keeps serving', async () => {
    // A /29 holds two sandboxes: the third refill fails for want of an address, again and again.
    const tight = await startTestOrchestrator({ warmPoolSize: 3, subnet: TEST_SUBNET.replace('/24', '/29') });
    try {
      await poolReady(tight, 2);
      const failures = async () => Number(/sandbox_warm_pool_refill_failures_total (\d+)/.exec(await metrics(tight))?.[1] ?? 0);
      await waitFor('a failed refill', async () => ((await failures()) >= 1 ? true : undefined), 10_000);
      await sleep(3_500);
      const count = await failures();
      // Without backoff there would be thousands by now; with it (1 s, 2 s, 4 s ...) a handful.
      assert.ok(count >= 2 && count <= 4, `refill failures after 3.5 s: ${count}`);
      assert.equal(tight.manager.warmPoolStatus().ready.length, 2);
      const res = await tight.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
      assert.equal(res.statusCode, 201, res.body);
      assert.equal((await tight.server.inject({ method: 'GET', url: '/healthz' })).statusCode, 200);
    } finally {
      await tight.stop();
    }
  });
});

describe('a warm pool of size 0 (the default)', () => {
  let orch: TestOrchestrator;
  before(async () => {
    orch = await startTestOrchestrator();
  });
  after(async () => {
    await orch?.stop();
  });

  it('boots every session cold and keeps nothing booted in the background', async () => {
    assert.equal(orch.manager.warmPoolStatus().target, 0);
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
    assert.equal(res.statusCode, 201, res.body);
    const { id } = res.json();
    await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}` });
    await sleep(1_500);
    const dirs = (await readdir(orch.stateDir)).filter((name) => SESSION_ID_PATTERN.test(name));
    assert.deepEqual(dirs, [], 'no sandbox boots when the pool is off');
    const text = await metrics(orch);
    assert.match(text, /sandbox_session_creates_total\{source="cold"\} 1/);
    assert.doesNotMatch(text, /sandbox_session_creates_total\{source="warm"\}/);
    assert.match(text, /sandbox_warm_pool_sandboxes\{state="ready",template="minimal"\} 0/);
  });
});

describe('the warm pool across a crash', () => {
  let stateDir: string;
  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-pool-'));
  });
  after(async () => {
    await rm(stateDir, { recursive: true, force: true });
  });

  it('`serve --warm-pool 1` fills it, and a restart after SIGKILL reclaims the pooled sandbox', async () => {
    const serve = await startServe(stateDir, 18091, undefined, ['--warm-pool', '1']);
    let pooledId: string;
    try {
      await waitFor('the pool to fill', async () => {
        const text = await (await fetch(`${serve.url}/metrics`)).text();
        return /sandbox_warm_pool_sandboxes\{state="ready",template="minimal"\} 1/.test(text) ? true : undefined;
      });
      const dirs = (await readdir(stateDir)).filter((name) => SESSION_ID_PATTERN.test(name));
      assert.equal(dirs.length, 1);
      pooledId = dirs[0] as string;
    } finally {
      serve.child.kill('SIGKILL');
      await once(serve.child, 'exit');
    }
    const sessionDir = path.join(stateDir, pooledId);
    const orphan = await hostTrace(NAMES, pooledId, sessionDir);
    assert.ok(orphan.netns && orphan.container && orphan.sessionDir, 'the crash left the pooled sandbox behind');

    const restarted = await startServe(stateDir, 18092);
    try {
      assert.deepEqual(await hostTrace(NAMES, pooledId, sessionDir), nothingLeft);
      // It was never a client's session: after the restart it is not one either.
      assert.equal((await fetch(`${restarted.url}/v1/sessions/${pooledId}`)).status, 404);
    } finally {
      restarted.child.kill('SIGTERM');
      await once(restarted.child, 'exit');
    }
  });
});

describe('warm pool settings', () => {
  it('are read from SBX_WARM_POOL_SIZE and SBX_WARM_POOL_SCREEN, and bad values are refused', async () => {
    const saved = { size: process.env.SBX_WARM_POOL_SIZE, screen: process.env.SBX_WARM_POOL_SCREEN };
    try {
      delete process.env.SBX_WARM_POOL_SIZE;
      delete process.env.SBX_WARM_POOL_SCREEN;
      assert.equal(defaultConfig(process.env).warmPoolSize, 0);
      assert.deepEqual(defaultConfig(process.env).warmPoolScreen, { width: 1024, height: 768 });
      process.env.SBX_WARM_POOL_SIZE = '3';
      process.env.SBX_WARM_POOL_SCREEN = '1280x800';
      assert.equal(defaultConfig(process.env).warmPoolSize, 3);
      assert.deepEqual(defaultConfig(process.env).warmPoolScreen, { width: 1280, height: 800 });
      process.env.SBX_WARM_POOL_SIZE = '-1';
      assert.throws(() => defaultConfig(process.env), /warm pool size must be between 0 and 64/);
      process.env.SBX_WARM_POOL_SIZE = '1';
      process.env.SBX_WARM_POOL_SCREEN = '1280';
      assert.throws(() => defaultConfig(process.env), /SBX_WARM_POOL_SCREEN must look like 1024x768/);
    } finally {
      for (const [name, value] of [
        ['SBX_WARM_POOL_SIZE', saved.size],
        ['SBX_WARM_POOL_SCREEN', saved.screen],
      ] as const) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
    }
    const bad = await runCli(['serve', '--warm-pool', 'lots'], 'http://127.0.0.1:1');
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /--warm-pool.*must be an integer/);
  });
});

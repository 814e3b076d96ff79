import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { syncBuiltinESMExports } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it, mock } from 'node:test';
import { pino } from 'pino';
import { resolveAuthMode } from '../src/api/auth/auth-mode.js';
import { hashApiKey } from '../src/api/auth/api-key.js';
import { openKeyStore } from '../src/api/auth/key-store-file.js';
import { AuthenticationError, SandboxClient } from '../src/client/index.js';
import { defaultConfig } from '../src/config.js';
import { createLogger } from '../src/logger.js';
import { startOrchestrator } from '../src/orchestrator.js';
import { connectToGuest, guestAddress, guestSh } from './helpers/guest.js';
import { startXev, typedText, waitForXev } from './helpers/xev.js';
import { startTestOrchestrator, TEST_PREFIX, TEST_SUBNET, type TestOrchestrator } from './helpers/orchestrator.js';

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
const NO_SUCH_SESSION = 'zzzzzzzzzz';

describe('API keys and tenants', () => {
  let orch: TestOrchestrator;
  let keyA: string;
  let keyB: string;
  let idA: string;
  let idB: string;

  before(async () => {
    orch = await startTestOrchestrator({}, true);
    keyA = orch.keys.create('tenant-a').key;
    keyB = orch.keys.create('tenant-b').key;
    const [a, b] = await Promise.all([
      orch.server.inject({ method: 'POST', url: '/v1/sessions', headers: bearer(keyA), payload: { width: 800, height: 600 } }),
      orch.server.inject({ method: 'POST', url: '/v1/sessions', headers: bearer(keyB), payload: {} }),
    ]);
    assert.equal(a.statusCode, 201, a.body);
    assert.equal(b.statusCode, 201, b.body);
    idA = a.json().id;
    idB = b.json().id;
    assert.equal(a.json().tenant, 'tenant-a');
    assert.equal(b.json().tenant, 'tenant-b');
  });
  after(async () => {
    await orch?.stop();
  });

  it('no Authorization header: 401 with WWW-Authenticate: Bearer and how to get a key', async () => {
    for (const [method, url] of [
      ['GET', '/v1/sessions'],
      ['POST', '/v1/sessions'],
      ['GET', `/v1/sessions/${idA}`],
      ['DELETE', `/v1/sessions/${idA}`],
      ['GET', `/v1/sessions/${idA}/screenshot`],
    ] as const) {
      const res = await orch.server.inject({ method, url, payload: method === 'POST' ? {} : undefined });
      assert.equal(res.statusCode, 401, `${method} ${url}: ${res.body}`);
      assert.match(String(res.headers['www-authenticate']), /^Bearer\b/);
      assert.equal(res.json().error.code, 'missing_api_key');
      assert.match(res.json().error.message, /Authorization: Bearer/);
      assert.match(res.json().error.message, /sbx keys create/);
    }
    assert.equal(orch.manager.get(idA).state, 'ready', 'the unauthenticated DELETE did nothing');
  });

  it('a wrong key: 401 invalid_token, whatever is wrong with it', async () => {
    const idOfA = keyA.split('_')[1] as string;
    const wrong = [
      'Bearer nope',
      `Bearer sbx_${idOfA}_${'A'.repeat(43)}`, // A's id, another secret
      `Bearer sbx_aaaaaaaaaaaa_${'A'.repeat(43)}`, // an id that does not exist
      `Bearer ${keyA}x`,
      `Basic ${Buffer.from(`x:${keyA}`).toString('base64')}`,
      keyA, // no scheme
      'Bearer',
    ];
    for (const authorization of wrong) {
      const res = await orch.server.inject({ method: 'GET', url: '/v1/sessions', headers: { authorization } });
      assert.equal(res.statusCode, 401, `${authorization}: ${res.body}`);
      assert.match(String(res.headers['www-authenticate']), /^Bearer .*error="invalid_token"/);
      assert.equal(res.json().error.code, 'invalid_api_key');
      assert.doesNotMatch(res.body, new RegExp(idOfA), 'a wrong key learns nothing about the key it resembles');
    }
  });

  it('an expired key: 401 saying it expired, and when', async () => {
    const past = new Date(Date.now() - 60_000);
    const { record, key } = orch.keys.create('tenant-a', past);
    const res = await orch.server.inject({ method: 'GET', url: '/v1/sessions', headers: bearer(key) });
    assert.equal(res.statusCode, 401, res.body);
    assert.equal(res.json().error.code, 'expired_api_key');
    assert.match(res.json().error.message, new RegExp(`API key ${record.id} expired at ${past.toISOString()}`));
    assert.match(String(res.headers['www-authenticate']), /error="invalid_token"/);
    // One that expires later works until then.
    const later = orch.keys.create('tenant-a', new Date(Date.now() + 3_600_000)).key;
    assert.equal((await orch.server.inject({ method: 'GET', url: '/v1/sessions', headers: bearer(later) })).statusCode, 200);
  });

  it('a revoked key: 401 from the moment it is revoked', async () => {
    const { record, key } = orch.keys.create('tenant-a');
    assert.equal((await orch.server.inject({ method: 'GET', url: `/v1/sessions/${idA}`, headers: bearer(key) })).statusCode, 200);
    // Revoked through the store file as `sbx keys revoke` does, while the server runs.
    const cli = openKeyStore(orch.stateDir);
    cli.keys.revoke(record.id);
    cli.close();
    const res = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${idA}`, headers: bearer(key) });
    assert.equal(res.statusCode, 401, res.body);
    assert.equal(res.json().error.code, 'revoked_api_key');
    assert.match(res.json().error.message, /revoked/);
  });

  it("tenant B gets exactly the 404 of a session that does not exist on every route of A's session", async () => {
    // B's attempts carry a marker, so that one that ran anyway (a 404 given after the work)
    // would leave a trace in A's sandbox: a file, a shell's output, keys typed into A's desktop.
    const marker = `zq${crypto
      .randomBytes(4)
      .toString('hex')
      .replace(/[0-9]/g, (d) => 'ghijklmnop'[Number(d)] as string)}`;
    const guestA = await connectToGuest(orch.stateDir, idA, await guestAddress(orch.names, idA));
    try {
      await startXev(guestA, 800, 600);
      await tenantBIsRefusedEverywhere(marker);
      const traces = await guestSh(guestA, `grep -rl ${marker} /tmp /home/user 2>/dev/null; ls -A /tmp | grep ${marker}; true`);
      assert.equal(traces.text, '', `B's marker in A's sandbox: ${traces.text}`);
      // Positive control: A's own typing of the marker does arrive in the xev window that watched.
      const typedByA = await orch.server.inject({
        method: 'POST',
        url: `/v1/sessions/${idA}/actions`,
        headers: bearer(keyA),
        payload: { action: 'type', text: `a${marker}` },
      });
      assert.equal(typedByA.statusCode, 200, typedByA.body);
      const typed = typedText(await waitForXev(guestA, (log) => typedText(log).includes(`a${marker}`)));
      assert.equal(typed, `a${marker}`, "the keys A typed arrived, and only those: none of B's");
    } finally {
      // Inside A's sandbox: the window later tests do not expect (A may be gone if B's DELETE went through).
      await guestSh(guestA, 'pkill -x xev; true').catch(() => undefined);
      guestA.close();
    }
  });

  async function tenantBIsRefusedEverywhere(marker: string): Promise<void> {
    const routes: Array<{ method: 'GET' | 'POST' | 'PUT' | 'DELETE'; path: string; payload?: unknown; contentType?: string }> = [
      { method: 'GET', path: '' },
      { method: 'GET', path: '/health' },
      { method: 'GET', path: '/screenshot' },
      { method: 'POST', path: '/actions', payload: { action: 'left_click', coordinate: [10, 10] } },
      { method: 'POST', path: '/actions', payload: { action: 'type', text: `b${marker}` } },
      { method: 'POST', path: '/tools/computer', payload: { action: 'screenshot' } },
      { method: 'POST', path: '/tools/computer', payload: { action: 'type', text: `c${marker}` } },
      { method: 'POST', path: '/tools/bash', payload: { command: `echo d${marker} > /tmp/d${marker}; echo e${marker}` } },
      { method: 'POST', path: '/tools/str_replace_based_edit_tool', payload: { command: 'view', path: '/etc/hostname' } },
      { method: 'POST', path: '/tools/str_replace_based_edit_tool', payload: { command: 'create', path: `/tmp/f${marker}`, file_text: marker } },
      { method: 'GET', path: '/files?path=/etc/hostname' },
      { method: 'PUT', path: '/files?path=/tmp/from-b', payload: 'hello', contentType: 'application/octet-stream' },
      { method: 'GET', path: '/desktop/windows' },
      { method: 'GET', path: '/desktop/screen' },
      { method: 'GET', path: '/desktop/clipboard' },
      { method: 'PUT', path: '/desktop/clipboard', payload: { text: `g${marker}` } },
      { method: 'POST', path: '/desktop/open', payload: { target: 'https://example.test/' } },
      { method: 'POST', path: '/desktop/launch', payload: { app: 'debian-xterm' } },
      { method: 'POST', path: '/desktop/windows/1/focus' },
      { method: 'POST', path: '/desktop/windows/1/close' },
      { method: 'DELETE', path: '' },
    ];
    for (const r of routes) {
      const ask = (id: string) =>
        orch.server.inject({
          method: r.method,
          url: `/v1/sessions/${id}${r.path}`,
          headers: { ...bearer(keyB), ...(r.contentType ? { 'content-type': r.contentType } : {}) },
          payload: r.payload as string | object | undefined,
        });
      const theirs = await ask(idA);
      const none = await ask(NO_SUCH_SESSION);
      assert.equal(theirs.statusCode, 404, `${r.method} ${r.path}: ${theirs.body}`);
      assert.equal(none.statusCode, 404, `${r.method} ${r.path} (no such session): ${none.body}`);
      assert.equal(theirs.body, none.body.replaceAll(NO_SUCH_SESSION, idA), `${r.method} ${r.path}`);
    }
    // Nothing B tried reached A's session: it is still ready, and A still drives it.
    const view = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${idA}`, headers: bearer(keyA) });
    assert.equal(view.json().state, 'ready');
    const act = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${idA}/actions`, headers: bearer(keyA), payload: { action: 'cursor_position' } });
    assert.equal(act.statusCode, 200, act.body);
    const file = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${idA}/files?path=/tmp/from-b`, headers: bearer(keyA) });
    assert.equal(file.statusCode, 404, 'B uploaded nothing');
    const clipboard = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${idA}/desktop/clipboard`, headers: bearer(keyA) });
    assert.equal(clipboard.statusCode, 200, clipboard.body);
    assert.notEqual(clipboard.json().text, `g${marker}`, 'B set nothing on the clipboard');
  }

  it("a tenant's list shows its own sessions only", async () => {
    const listA = (await orch.server.inject({ method: 'GET', url: '/v1/sessions', headers: bearer(keyA) })).json().sessions as Array<{
      id: string;
      tenant: string;
    }>;
    const listB = (await orch.server.inject({ method: 'GET', url: '/v1/sessions', headers: bearer(keyB) })).json().sessions as Array<{
      id: string;
      tenant: string;
    }>;
    assert.deepEqual(
      listA.map((s) => s.id),
      [idA],
    );
    assert.deepEqual(
      listB.map((s) => s.id),
      [idB],
    );
    assert.ok(listA.every((s) => s.tenant === 'tenant-a'));
  });

  it('the SDK sends its apiKey as a Bearer token', async () => {
    const address = orch.server.server.address();
    assert.ok(address && typeof address === 'object');
    const baseUrl = `http://127.0.0.1:${address.port}`;
    const client = new SandboxClient({ baseUrl, apiKey: keyB });
    assert.deepEqual(
      (await client.list()).map((s) => s.id),
      [idB],
    );
    await assert.rejects(new SandboxClient({ baseUrl, apiKey: keyB }).get(idA), { name: 'NotFoundError', status: 404 });
    await assert.rejects(new SandboxClient({ baseUrl, apiKey: 'sbx_nope' }).list(), (err: unknown) => err instanceof AuthenticationError && err.status === 401);
  });

  it('/healthz and /openapi.json are open; /metrics is open to this machine only', async () => {
    assert.equal((await orch.server.inject({ method: 'GET', url: '/healthz' })).statusCode, 200);
    assert.equal((await orch.server.inject({ method: 'GET', url: '/openapi.json' })).statusCode, 200);
    assert.equal((await orch.server.inject({ method: 'GET', url: '/metrics' })).statusCode, 200);
    const remote = await orch.server.inject({ method: 'GET', url: '/metrics', remoteAddress: '192.0.2.7' });
    assert.equal(remote.statusCode, 401, remote.body);
    const remoteWithKey = await orch.server.inject({ method: 'GET', url: '/metrics', remoteAddress: '192.0.2.7', headers: bearer(keyA) });
    assert.equal(remoteWithKey.statusCode, 200);
  });

  it('stores keys hashed: neither a key nor its secret is in the database files', async () => {
    const files = ['orchestrator.db', 'orchestrator.db-wal', 'orchestrator.db-shm'].map((f) => path.join(orch.stateDir, f)).filter((f) => existsSync(f));
    const bytes = Buffer.concat(await Promise.all(files.map((f) => readFile(f))));
    for (const key of [keyA, keyB]) {
      // sbx_<id>_<secret>: the secret is base64url, which may itself contain "_".
      const secret = key.split('_').slice(2).join('_');
      assert.ok(secret.length >= 40, `the secret of ${key.slice(0, 12)}...`);
      assert.equal(bytes.includes(key), false, 'the key is in the database');
      assert.equal(bytes.includes(secret), false, 'the secret is in the database');
      assert.equal(bytes.includes(Buffer.from(secret, 'base64url')), false, 'the secret bytes are in the database');
    }
    // What is there is the SHA-256 of each key, next to its id.
    const stored = orch.keys.find(keyA.split('_')[1] as string);
    assert.deepEqual(stored?.hash, hashApiKey(keyA));
  });

  it('compares keys in constant time (crypto.timingSafeEqual over 32-byte digests)', async (t) => {
    const spy = mock.method(crypto, 'timingSafeEqual');
    syncBuiltinESMExports(); // so that the named import in api-key.ts sees the spy
    t.after(() => {
      spy.mock.restore();
      syncBuiltinESMExports();
    });
    const idOfA = keyA.split('_')[1] as string;
    for (const key of [keyA, `sbx_${idOfA}_${'B'.repeat(43)}`, `sbx_bbbbbbbbbbbb_${'B'.repeat(43)}`]) {
      await orch.server.inject({ method: 'GET', url: '/v1/sessions', headers: bearer(key) });
    }
    assert.equal(spy.mock.callCount(), 3, 'a right key, a wrong secret and an unknown id are all compared the same way');
    for (const call of spy.mock.calls) {
      const [a, b] = call.arguments as [Buffer, Buffer];
      assert.equal(a.length, 32);
      assert.equal(b.length, 32);
    }
  });
});

describe('keyless mode: loopback only, and said loudly', () => {
  it('a loopback server without keys serves tenant "local", warns at start, and requires keys once one exists', async () => {
    const lines: string[] = [];
    const log = createLogger({ write: (line: string) => void lines.push(line) });
    const orch = await startTestOrchestrator({}, false, undefined, log);
    try {
      const warning = lines.map((l) => JSON.parse(l) as { level: number; msg: string }).find((l) => /WITHOUT AUTHENTICATION/.test(l.msg));
      assert.ok(warning, `a warning at start: ${lines.join('')}`);
      assert.equal(warning.level, 40, 'at warn level');
      assert.equal((await orch.server.inject({ method: 'GET', url: '/v1/sessions' })).statusCode, 200);
      // A key given in keyless mode is still checked.
      assert.equal((await orch.server.inject({ method: 'GET', url: '/v1/sessions', headers: bearer('sbx_wrong') })).statusCode, 401);
      const { record, key } = orch.keys.create('acme');
      assert.equal((await orch.server.inject({ method: 'GET', url: '/v1/sessions' })).statusCode, 401, 'the first key turns auth on');
      assert.equal((await orch.server.inject({ method: 'GET', url: '/v1/sessions', headers: bearer(key) })).statusCode, 200);
      orch.keys.revoke(record.id);
      const afterRevoke = await orch.server.inject({ method: 'GET', url: '/v1/sessions' });
      assert.equal(afterRevoke.statusCode, 401, 'no key left, yet keys stay required: revoking does not reopen keyless mode');
      assert.equal(afterRevoke.json().error.code, 'missing_api_key');
    } finally {
      await orch.stop();
    }
  });

  it('refuses to start keyless on a non-loopback address, saying how to create a key', async () => {
    const stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-test-'));
    const config = { ...defaultConfig(process.env), stateDir, subnet: TEST_SUBNET, resourcePrefix: TEST_PREFIX, runtime: 'container' as const, port: 0 };
    const silent = pino({ level: 'silent' });
    try {
      for (const host of ['0.0.0.0', '::', '192.0.2.1']) {
        await assert.rejects(
          startOrchestrator({ ...config, host }, silent, { listen: false, buildImageIfMissing: false }),
          /not a loopback address.*sbx keys create --tenant/,
        );
      }
      await assert.rejects(
        startOrchestrator({ ...config, host: '0.0.0.0', auth: 'off' }, silent, { listen: false }),
        /keyless mode .* is for local development on 127\.0\.0\.1 only/,
      );
      // The decision itself: loopback may be keyless; elsewhere only with keys.
      const none = { usable: false, ever: false };
      const some = { usable: true, ever: true };
      const onlyRevoked = { usable: false, ever: true };
      assert.equal(resolveAuthMode('auto', '127.0.0.1', none, stateDir), 'keyless-until-first-key');
      assert.equal(resolveAuthMode('auto', '::1', none, stateDir), 'keyless-until-first-key');
      assert.equal(resolveAuthMode('auto', '127.0.0.1', onlyRevoked, stateDir), 'required', 'revoked keys keep a loopback server keyed');
      assert.equal(resolveAuthMode('off', 'localhost', some, stateDir), 'keyless');
      assert.equal(resolveAuthMode('on', '127.0.0.1', none, stateDir), 'required');
      assert.equal(resolveAuthMode('auto', '0.0.0.0', some, stateDir), 'required');
      assert.throws(() => resolveAuthMode('on', '10.1.2.3', none, stateDir), /sbx keys create/);
      assert.throws(() => resolveAuthMode('auto', '10.1.2.3', onlyRevoked, stateDir), /sbx keys create/);
    } finally {
      await rm(stateDir, { recursive: true, force: true });
    }
  });

  it('`sbx serve --host 0.0.0.0` without keys exits with the message; `sbx keys` creates, lists and revokes keys', async () => {
    const stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-test-'));
    try {
      const serve = await cli(['serve', '--host', '0.0.0.0', '--port', '0', '--state-dir', stateDir, '--runtime', 'container']);
      assert.equal(serve.code, 1, serve.stderr);
      assert.match(serve.stderr, /refusing to serve on 0\.0\.0\.0 .*sbx keys create --tenant <name>/);

      const created = await cli(['keys', 'create', '--tenant', 'acme', '--expires-in', '30d', '--state-dir', stateDir]);
      assert.equal(created.code, 0, created.stderr);
      const key = created.stdout.trim();
      assert.match(key, /^sbx_[a-z0-9]{12}_[A-Za-z0-9_-]{43}$/);
      const id = key.split('_')[1] as string;
      assert.match(created.stderr, new RegExp(`key ${id} for tenant "acme", expires `));
      assert.match(created.stderr, /only time it is shown/);

      const listed = await cli(['keys', 'list', '--state-dir', stateDir]);
      assert.equal(listed.code, 0, listed.stderr);
      assert.match(listed.stdout, new RegExp(`^${id}\\s+acme\\s+active`, 'm'));
      assert.equal(listed.stdout.includes(key.slice(17)), false, 'list never shows the key');

      const revoked = await cli(['keys', 'revoke', id, '--state-dir', stateDir]);
      assert.equal(revoked.code, 0, revoked.stderr);
      assert.match((await cli(['keys', 'list', '--state-dir', stateDir])).stdout, new RegExp(`^${id}\\s+acme\\s+revoked`, 'm'));

      for (const [args, message] of [
        [['keys', 'create', '--tenant', 'Bad Name'], /tenant must be/],
        [['keys', 'create', '--tenant', 'local'], /reserved/],
        [['keys', 'create', '--tenant', 'acme', '--expires-in', 'soon'], /a duration is a positive whole number and a unit/],
        [['keys', 'revoke', 'nosuchkey'], /no API key with id "nosuchkey"/],
      ] as const) {
        const res = await cli([...args, '--state-dir', stateDir]);
        assert.equal(res.code, 1, `${args.join(' ')}: ${res.stdout}`);
        assert.match(res.stderr, message);
      }
    } finally {
      await rm(stateDir, { recursive: true, force: true });
    }
  });
});

async function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [path.resolve('dist/cli/main.js'), ...args], {
    env: { ...process.env, SBX_RESOURCE_PREFIX: TEST_PREFIX, SBX_SUBNET: TEST_SUBNET, SBX_API_KEY: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const [code] = (await once(child, 'close')) as [number | null];
  return { code, stdout, stderr };
}

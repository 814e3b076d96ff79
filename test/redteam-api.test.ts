import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readdir, mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it, mock } from 'node:test';
import { publicSummary } from '../src/api/public-message.js';
import { parseTenantLimitOverrides, RequestLimitError, TenantRequestGate } from '../src/api/tenant-request-limits.js';
import { createLogger } from '../src/logger.js';
import { SESSION_ID_PATTERN } from '../src/network/names.js';
import { run } from '../src/util/exec.js';
import { openKeyStore } from '../src/api/auth/key-store-file.js';
import { pngSize } from './helpers/guest.js';
import { memoryOf } from './helpers/raw-http.js';
import { startTestOrchestrator, TEST_PREFIX, type TestOrchestrator } from './helpers/orchestrator.js';
import { runCli, startServe, type ServeProcess } from './helpers/serve.js';
import { errorHeaders } from '../src/api/errors.js';

/**
 * The API's side of issue 11, attacked for real: a web page on a rebinding domain and a
 * cross-site page against a keyless `sbx serve`; a revoked last key; a tenant that floods
 * the API while another works; 5xx answers that must not show the host.
 */

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  json(): { error: { code: string; message: string; requestId?: string } } & Record<string, unknown>;
}

/** One request with exactly these headers (fetch will not send a Host or Origin of our choosing). */
function request(port: number, method: string, url: string, headers: Record<string, string>, body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: url, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json: () => JSON.parse(text) as ReturnType<Answer['json']> });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** A port nobody listens on now (the kernel's pick), for a `sbx serve` of this file. */
async function freePort(): Promise<number> {
  const server = net.createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as net.AddressInfo;
  server.close();
  await once(server, 'close');
  return port;
}

async function stopServe(serve: ServeProcess | undefined): Promise<void> {
  if (serve && serve.child.exitCode === null) {
    serve.child.kill('SIGTERM');
    await once(serve.child, 'exit');
  }
}

async function sessionDirs(stateDir: string): Promise<string[]> {
  return (await readdir(stateDir, { withFileTypes: true })).filter((e) => e.isDirectory() && SESSION_ID_PATTERN.test(e.name)).map((e) => e.name);
}

async function ourNetns(): Promise<string[]> {
  return (await run(['ip', 'netns', 'list'])).stdout.split('\n').filter((l) => l.startsWith(TEST_PREFIX));
}

function percentile(samples: number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;
}

describe('a keyless sbx serve against web pages in a browser on this machine', () => {
  let stateDir: string;
  let serve: ServeProcess;
  let port: number;

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-redteam-api-'));
    port = await freePort();
    serve = await startServe(stateDir, port);
  });
  after(async () => {
    await stopServe(serve);
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it('DNS rebinding: a request for evil.example that reaches 127.0.0.1 is 403 invalid_host and creates nothing', async () => {
    // What the browser does once evil.example resolves to 127.0.0.1: connect here, and say
    // which site it wants in Host. curl --resolve makes exactly that request.
    const { stdout } = await run(
      [
        'curl',
        '-sS',
        '--resolve',
        `evil.example:${port}:127.0.0.1`,
        '-X',
        'POST',
        '-H',
        'content-type: application/json',
        '-d',
        '{"width":800,"height":600}',
        '-w',
        '\n%{http_code}',
        `http://evil.example:${port}/v1/sessions`,
      ],
      { allowFailure: true },
    );
    const lines = stdout.trimEnd().split('\n');
    const status = Number(lines.pop());
    assert.equal(status, 403, stdout);
    const body = JSON.parse(lines.join('\n')) as { error: { code: string; message: string } };
    assert.equal(body.error.code, 'invalid_host');
    assert.match(body.error.message, /Host header "evil\.example:\d+" is not a loopback name/);
    assert.match(body.error.message, /DNS rebinding/);
    assert.match(body.error.message, new RegExp(`http://127\\.0\\.0\\.1:${port}`), 'says what to do instead');

    // Every other way in is shut too, reads included (a page could read them once rebound).
    for (const [method, url] of [
      ['GET', '/v1/sessions'],
      ['DELETE', '/v1/sessions/aaaaaaaaaa'],
      ['GET', '/metrics'],
      ['GET', '/nosuchroute'],
    ] as const) {
      const res = await request(port, method, url, { host: `evil.example:${port}` });
      assert.equal(res.status, 403, `${method} ${url}: ${res.text}`);
      assert.equal(res.json().error.code, 'invalid_host');
    }
    for (const host of ['evil.example', '127.0.0.1.evil.example', 'localhost.evil.example', `10.0.0.1:${port}`, 'localhost.', '[::2]']) {
      const res = await request(port, 'GET', '/v1/sessions', { host });
      assert.equal(res.status, 403, `Host "${host}": ${res.text}`);
    }
    // The liveness probe still answers, saying nothing.
    const health = await request(port, 'GET', '/healthz', { host: 'evil.example' });
    assert.equal(health.status, 200);
    assert.deepEqual(JSON.parse(health.text), { status: 'ok' });

    // Nothing was made: no session, no session directory, no network namespace.
    const list = await request(port, 'GET', '/v1/sessions', { host: `127.0.0.1:${port}` });
    assert.equal(list.status, 200, list.text);
    assert.deepEqual(JSON.parse(list.text), { sessions: [] });
    assert.deepEqual(await sessionDirs(stateDir), []);
    assert.deepEqual(await ourNetns(), []);
  });

  it('cross-site: a request a browser marks as from another site or origin is 403; curl, the SDK and same-origin pages are served', async () => {
    const create = (headers: Record<string, string>) =>
      request(port, 'POST', '/v1/sessions', { host: `127.0.0.1:${port}`, 'content-type': 'application/json', ...headers }, '{}');
    for (const headers of <Array<Record<string, string>>>[
      { origin: 'http://evil.example' },
      { origin: 'null' }, // a sandboxed frame or a file:// page
      { origin: `http://localhost:${port + 1}` }, // another local server's page: not our origin
      { 'sec-fetch-site': 'cross-site' },
      { 'sec-fetch-site': 'same-site' },
    ]) {
      const res = await create(headers);
      assert.equal(res.status, 403, `${JSON.stringify(headers)}: ${res.text}`);
      assert.equal(res.json().error.code, 'cross_origin_request');
      assert.match(res.json().error.message, /without an API key, only programs on this machine.*curl or an SDK/);
    }
    assert.deepEqual(await sessionDirs(stateDir), [], 'none of those made a session');

    // Served: names of this machine, with or without a port; a page of our own origin.
    for (const headers of <Array<Record<string, string>>>[
      { host: `127.0.0.1:${port}` },
      { host: `localhost:${port}` },
      { host: 'localhost' },
      { host: `[::1]:${port}` },
      { host: `dev.localhost:${port}` },
      { host: `127.0.0.2:${port}` },
      { host: `127.0.0.1:${port}`, origin: `http://127.0.0.1:${port}`, 'sec-fetch-site': 'same-origin' },
      { host: `localhost:${port}`, 'sec-fetch-site': 'none' }, // typed into the address bar
    ]) {
      const res = await request(port, 'GET', '/v1/sessions', headers);
      assert.equal(res.status, 200, `${JSON.stringify(headers)}: ${res.text}`);
    }
    // Real clients: curl and fetch (Node's, as the SDK uses) send neither Origin nor Sec-Fetch-Site.
    const curl = await run(['curl', '-sS', '-o', '/dev/null', '-w', '%{http_code}', `http://127.0.0.1:${port}/v1/sessions`]);
    assert.equal(curl.stdout, '200');
    assert.equal((await fetch(`http://localhost:${port}/v1/sessions`)).status, 200);
  });
});

describe('revoking the last key (real sbx serve, real sbx keys)', () => {
  let stateDir: string;
  let serve: ServeProcess | undefined;
  let port: number;

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-redteam-keys-'));
    port = await freePort();
  });
  after(async () => {
    await stopServe(serve);
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it('the server stays keyed after the last key is revoked, and across a restart; only `keys reset --yes` and a restart reopen keyless mode', async () => {
    const keys = (...args: string[]) => runCli(['keys', ...args, '--state-dir', stateDir], `http://127.0.0.1:${port}`);
    const list = (headers: Record<string, string> = {}) => request(port, 'GET', '/v1/sessions', { host: `127.0.0.1:${port}`, ...headers });

    serve = await startServe(stateDir, port);
    assert.equal((await list()).status, 200, 'no key ever: keyless on loopback');

    const created = await keys('create', '--tenant', 'acme');
    assert.equal(created.code, 0, created.stderr);
    const key = created.stdout.trim();
    const id = key.split('_')[1] as string;
    assert.equal((await list()).status, 401, 'the first key turns keys on');
    assert.equal((await list({ authorization: `Bearer ${key}` })).status, 200);

    const revoked = await keys('revoke', id);
    assert.equal(revoked.code, 0, revoked.stderr);
    const anonymous = await list();
    assert.equal(anonymous.status, 401, `revoking the last key does not reopen the API: ${anonymous.text}`);
    assert.equal(anonymous.json().error.code, 'missing_api_key');
    assert.equal((await list({ authorization: `Bearer ${key}` })).json().error.code, 'revoked_api_key');
    assert.match(serve.output(), /keys are required from now on, for good/);

    // A restart with the same store: still keyed (only a revoked key in it).
    await stopServe(serve);
    serve = await startServe(stateDir, port);
    assert.equal((await list()).status, 401, 'still keyed after a restart');
    assert.match(serve.output(), /API keys required/);

    // The way back is explicit: reset without --yes does nothing.
    const unsure = await keys('reset');
    assert.equal(unsure.code, 1);
    assert.match(unsure.stderr, /--yes/);
    assert.match((await keys('list')).stdout, new RegExp(`^${id}\\s+acme\\s+revoked`, 'm'));
    const reset = await keys('reset', '--yes');
    assert.equal(reset.code, 0, reset.stderr);
    assert.match(reset.stderr, /deleted 1 key/);
    assert.equal((await list()).status, 401, 'the running server keeps requiring keys until it is restarted');

    await stopServe(serve);
    serve = await startServe(stateDir, port);
    assert.equal((await list()).status, 200, 'reset and restarted: keyless again, as asked');
  });
});

describe('per-tenant request limits, one tenant flooding while another works (real sbx serve, real sandboxes)', () => {
  // Small limits for tenant A, set as an operator would, so that a test can reach them
  // quickly; tenant B has the defaults (64 in flight, 50/s, bursts of 200).
  const LIMITS = { SBX_TENANT_REQUEST_LIMITS: 'tenant-a=4/5/10' };
  let stateDir: string;
  let serve: ServeProcess;
  let port: number;
  let keyA: string;
  let keyB: string;
  let idA: string;
  let idB: string;

  const as = (key: string, method: string, url: string, body?: unknown, signal?: AbortSignal) =>
    fetch(`http://127.0.0.1:${port}${url}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });

  /** The refusals counted so far, read from /metrics as a local Prometheus agent would. */
  const refusedByRate = async () =>
    Number(/sandbox_api_requests_refused_total\{limit="rate"\} (\d+)/.exec(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text())?.[1] ?? 0);

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-redteam-limits-'));
    const store = openKeyStore(stateDir);
    keyA = store.keys.create('tenant-a').key;
    keyB = store.keys.create('tenant-b').key;
    store.close();
    port = await freePort();
    serve = await startServe(stateDir, port, undefined, [], LIMITS);
    const [a, b] = await Promise.all([as(keyA, 'POST', '/v1/sessions', {}), as(keyB, 'POST', '/v1/sessions', {})]);
    assert.equal(a.status, 201, await a.clone().text());
    assert.equal(b.status, 201, await b.clone().text());
    idA = ((await a.json()) as { id: string }).id;
    idB = ((await b.json()) as { id: string }).id;
    await sleep(2_100); // both buckets full again
  });
  after(async () => {
    await stopServe(serve);
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it('over its concurrency limit a tenant gets 429 with Retry-After; the other tenant is served meanwhile; every slot comes back, also from abandoned requests', async () => {
    const wait = () => as(keyA, 'POST', `/v1/sessions/${idA}/actions`, { action: 'wait', duration: 2 });
    const holding = Array.from({ length: 4 }, wait);
    await sleep(300);
    const refused = await as(keyA, 'GET', `/v1/sessions/${idA}`);
    assert.equal(refused.status, 429);
    assert.equal(refused.headers.get('retry-after'), '1');
    const error = ((await refused.json()) as { error: { code: string; message: string } }).error;
    assert.equal(error.code, 'tenant_concurrency_limit');
    assert.match(
      error.message,
      /tenant "tenant-a" has 4, its limit of concurrent requests \(4, SBX_TENANT_MAX_CONCURRENT_REQUESTS or the tenant's entry in SBX_TENANT_REQUEST_LIMITS\)/,
    );
    // Tenant B, meanwhile: its own session, screenshot and all.
    const started = performance.now();
    const shot = await as(keyB, 'GET', `/v1/sessions/${idB}/screenshot`);
    assert.equal(shot.status, 200);
    assert.equal(pngSize(Buffer.from(await shot.arrayBuffer())).width, 1024);
    assert.equal((await as(keyB, 'GET', `/v1/sessions/${idB}`)).status, 200);
    console.log(`tenant B's screenshot and GET while tenant A is at its limit: ${(performance.now() - started).toFixed(0)} ms`);
    for (const res of await Promise.all(holding)) assert.equal(res.status, 200, 'the held requests themselves were served');

    // Requests the client gives up on give their slots back when their connection closes.
    await sleep(1_100); // a token or more back in A's bucket
    const abandon = new AbortController();
    const abandoned = Array.from({ length: 4 }, () =>
      as(keyA, 'POST', `/v1/sessions/${idA}/actions`, { action: 'wait', duration: 3 }, abandon.signal).catch((err: unknown) => err),
    );
    await sleep(300);
    assert.equal((await as(keyA, 'GET', `/v1/sessions/${idA}`)).status, 429, 'four in flight');
    abandon.abort();
    await Promise.all(abandoned);
    await sleep(200);
    const afterAbort = await as(keyA, 'GET', `/v1/sessions/${idA}`);
    assert.equal(afterAbort.status, 200, `the abandoned requests' slots are free: ${await afterAbort.text()}`);
  });

  it('over its rate a tenant gets 429 with Retry-After naming the limit; the other tenant is unaffected; refusals are counted', async () => {
    // B's latency alone first, at the same pace, to compare with B's latency under A's flood.
    const quiet: number[] = [];
    for (let i = 0; i < 8; i++) {
      await sleep(300);
      const t = performance.now();
      assert.equal((await (await as(keyB, 'POST', `/v1/sessions/${idB}/actions`, { action: 'cursor_position' })).arrayBuffer()).byteLength > 0, true);
      quiet.push(performance.now() - t);
    }
    await sleep(2_100); // A's bucket full again: 10 tokens, 5 a second
    const refusedBefore = await refusedByRate();
    const memoryBefore = await memoryOf(serve.child.pid as number);
    const counts = new Map<number, number>();
    let sample: Response | undefined;
    const bLatencies: number[] = [];
    let bStatuses = new Set<number>();
    const started = performance.now();
    let flooding = true;
    // A: 4 connections sending as fast as the server answers, for 3 s.
    const flood = Array.from({ length: 4 }, async () => {
      while (performance.now() - started < 3_000) {
        const res = await as(keyA, 'GET', `/v1/sessions/${idA}`);
        counts.set(res.status, (counts.get(res.status) ?? 0) + 1);
        if (res.status === 429 && !sample) sample = res.clone();
        await res.arrayBuffer();
      }
    });
    // B: an agent's loop at an agent's pace (an action every 300 ms, under B's own 5/s), measured.
    const agent = (async () => {
      while (flooding) {
        await sleep(300);
        const t = performance.now();
        const res = await as(keyB, 'POST', `/v1/sessions/${idB}/actions`, { action: 'cursor_position' });
        await res.arrayBuffer();
        bLatencies.push(performance.now() - t);
        bStatuses = new Set([...bStatuses, res.status]);
      }
    })();
    await Promise.all(flood);
    const seconds = (performance.now() - started) / 1000;
    flooding = false;
    await agent;
    const served = counts.get(200) ?? 0;
    const refused = counts.get(429) ?? 0;
    const memoryAfter = await memoryOf(serve.child.pid as number);
    console.log(
      `tenant A flooding for ${seconds.toFixed(1)} s: ${served} served, ${refused} refused (${((served + refused) / seconds).toFixed(0)} req/s); ` +
        `tenant B meanwhile: ${bLatencies.length} actions, p50 ${percentile(bLatencies, 50).toFixed(1)} ms, p99 ${percentile(bLatencies, 99).toFixed(1)} ms ` +
        `(alone before: p50 ${percentile(quiet, 50).toFixed(1)} ms, max ${percentile(quiet, 100).toFixed(1)} ms); ` +
        `orchestrator RSS ${memoryBefore.rssMiB} -> ${memoryAfter.rssMiB} MiB, peak ${memoryBefore.peakMiB} -> ${memoryAfter.peakMiB} MiB`,
    );
    assert.deepEqual([...counts.keys()].sort(), [200, 429], `only 200 and 429: ${JSON.stringify([...counts])}`);
    assert.ok(served <= 10 + Math.ceil(5 * seconds) + 1, `at most the burst and the rate got through: ${served} in ${seconds.toFixed(1)} s`);
    assert.ok(served >= 10, `the burst got through: ${served}`);
    assert.ok(sample);
    assert.ok(Number(sample.headers.get('retry-after')) >= 1, `Retry-After: ${sample.headers.get('retry-after')}`);
    const error = ((await sample.json()) as { error: { code: string; message: string } }).error;
    assert.equal(error.code, 'tenant_rate_limit');
    assert.match(error.message, /tenant "tenant-a" is over its request rate limit of 5 a second, in bursts of at most 10/);
    assert.deepEqual([...bStatuses], [200], 'tenant B was never refused');
    assert.ok(bLatencies.length >= 5, `tenant B kept working: ${bLatencies.length} actions`);
    assert.equal((await refusedByRate()) - refusedBefore, refused, 'every refusal is counted');
    assert.ok(
      memoryAfter.peakMiB - memoryBefore.peakMiB < 50,
      `the flood cost the orchestrator ${memoryAfter.peakMiB - memoryBefore.peakMiB} MiB of peak memory`,
    );
    // And A is served again once it slows down.
    await sleep(1_100);
    assert.equal((await as(keyA, 'GET', `/v1/sessions/${idA}`)).status, 200);
  });

  it('/healthz says "ok" and nothing else without a key, and a tenant only its own count', async () => {
    const anonymous = await fetch(`http://127.0.0.1:${port}/healthz`);
    assert.equal(anonymous.status, 200);
    assert.deepEqual(await anonymous.json(), { status: 'ok' });
    assert.deepEqual(await (await as(keyA, 'GET', '/healthz')).json(), { status: 'ok', runtime: 'container', sessions: 1 });
    const wrong = await fetch(`http://127.0.0.1:${port}/healthz`, { headers: { authorization: 'Bearer sbx_nope' } });
    assert.equal(wrong.status, 401, 'a key, when given, is checked');
  });

  it('/metrics, open without a key to this machine, is not open to a rebound web page', async () => {
    assert.equal((await request(port, 'GET', '/metrics', { host: `127.0.0.1:${port}` })).status, 200);
    const rebound = await request(port, 'GET', '/metrics', { host: `evil.example:${port}` });
    assert.equal(rebound.status, 403, rebound.text);
    assert.equal(rebound.json().error.code, 'invalid_host');
    assert.equal((await request(port, 'GET', '/metrics', { host: `127.0.0.1:${port}`, origin: 'http://evil.example' })).status, 403);
  });
});

describe('request limit settings', () => {
  it('the gate: a token bucket and a count in flight per tenant, on a clock of its own', () => {
    let clock = 0;
    const gate = new TenantRequestGate(
      { maxConcurrent: 2, perSecond: 2, burst: 3 },
      new Map([['big', { maxConcurrent: 100, perSecond: 100, burst: 100 }]]),
      () => clock,
    );
    /** The refusal of one more request of `tenant`, or undefined if it was admitted (and is over at once). */
    const refusal = (tenant: string) => {
      try {
        gate.admit(tenant)();
      } catch (err) {
        assert.ok(err instanceof RequestLimitError);
        return { code: err.code, retryAfter: errorHeaders(err)['retry-after'] };
      }
      return undefined;
    };
    const first = gate.admit('a');
    const second = gate.admit('a');
    assert.deepEqual(refusal('a'), { code: 'tenant_concurrency_limit', retryAfter: '1' });
    first();
    first(); // twice: counted once
    gate.admit('a')(); // the third token
    second();
    assert.deepEqual(refusal('a'), { code: 'tenant_rate_limit', retryAfter: '1' }, 'the burst of 3 is spent');
    assert.equal(refusal('b'), undefined, 'another tenant has its own bucket');
    clock += 499;
    assert.equal(refusal('a')?.code, 'tenant_rate_limit', 'not yet a whole token back');
    clock += 1;
    assert.equal(refusal('a'), undefined, 'half a second at 2/s gives one back');
    clock += 60_000;
    for (let i = 0; i < 3; i++) gate.admit('a')();
    assert.equal(refusal('a')?.code, 'tenant_rate_limit', 'a long pause refills to the burst, not beyond');
    clock += 60_000;
    gate.admit('a');
    gate.admit('a');
    assert.equal(refusal('a')?.code, 'tenant_concurrency_limit', 'every slot was given back exactly once: two in flight is the limit again');
    for (let i = 0; i < 50; i++) gate.admit('big');
    assert.equal(refusal('big'), undefined, 'a tenant with its own limits');
  });

  it('SBX_TENANT_REQUEST_LIMITS: tenant=concurrent/perSecond/burst, or a start-up error that shows the form', () => {
    assert.deepEqual(
      [...parseTenantLimitOverrides(' ci=256/500/1000, local=8/2/4 ')],
      [
        ['ci', { maxConcurrent: 256, perSecond: 500, burst: 1000 }],
        ['local', { maxConcurrent: 8, perSecond: 2, burst: 4 }],
      ],
    );
    assert.equal(parseTenantLimitOverrides('').size, 0);
    for (const bad of ['ci=1/2', 'ci=0/1/1', 'Bad Name=1/1/1', 'ci=1/1/1;rm', 'ci=-1/1/1']) {
      assert.throws(() => parseTenantLimitOverrides(bad), /SBX_TENANT_REQUEST_LIMITS: ".*" is not tenant=concurrent\/perSecond\/burst/, bad);
    }
  });
});

describe('5xx answers: the gist and a request id to the client, the detail to the log', () => {
  let orch: TestOrchestrator;
  const lines: string[] = [];
  const logLines = () => lines.map((l) => JSON.parse(l) as { level: number; reqId?: string; msg: string; err?: { message: string } });

  before(async () => {
    // 30 ms is too short for SSH and the display to come up (a container boots in 300-500 ms): a real boot failure.
    orch = await startTestOrchestrator({ bootTimeoutMs: 30 }, false, undefined, createLogger({ write: (line: string) => void lines.push(line) }, 'info'));
  });
  after(async () => {
    await orch?.stop();
  });

  it('a sandbox that fails to boot: 503 without host paths, addresses of files or console output; its request id leads to them in the log', async () => {
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
    assert.equal(res.statusCode, 503, res.body);
    const { error } = res.json<{ error: { code: string; message: string; requestId: string } }>();
    assert.equal(error.code, 'unavailable');
    assert.match(error.message, /^sandbox failed to start: .*(SSH|display|desktop).* \(request id \S+: the orchestrator's log has the details\)$/);
    assert.equal(typeof error.requestId, 'string');
    assert.ok(error.message.includes(error.requestId));
    assert.equal(res.body.includes('/'), false, `no path in the body: ${res.body}`);
    assert.doesNotMatch(res.body, /console|runc|LC_ALL|xdotool|ssh-keygen|\\n/, res.body);

    const logged = logLines().filter((l) => l.reqId === error.requestId && l.level >= 40);
    assert.ok(logged.length > 0, `an error line for ${error.requestId}`);
    const detail = logged.map((l) => l.err?.message ?? '').join('\n');
    assert.match(detail, /sandbox failed to start/);
    assert.ok(detail.length > error.message.length - 80, 'the log keeps at least what the client saw, and more');
    assert.match(detail, /\/|guest console|last error/, `the log has the detail: ${detail.slice(0, 500)}`);
  });

  it('an unexpected error: 500 "internal error" and a request id; the log has its message, path and all', async (t) => {
    const secret = "ENOENT: no such file or directory, open '/var/lib/sandboxes/zz/secret.key'";
    const list = mock.method(orch.manager, 'list', () => {
      throw new Error(secret);
    });
    t.after(() => list.mock.restore());
    const res = await orch.server.inject({ method: 'GET', url: '/v1/sessions' });
    assert.equal(res.statusCode, 500, res.body);
    const { error } = res.json<{ error: { code: string; message: string; requestId: string } }>();
    assert.equal(error.code, 'internal');
    assert.match(error.message, /^internal error \(request id \S+/);
    assert.equal(res.body.includes('/var/lib'), false, res.body);
    assert.equal(res.body.includes('ENOENT'), false, res.body);
    const logged = logLines().find((l) => l.reqId === error.requestId && l.level >= 50);
    assert.equal(logged?.err?.message, secret);
  });

  it('the gist of the messages that carried host detail: no path, no command line, no console', () => {
    const cases: Array<[string, string]> = [
      [
        'sandbox failed to start: SSH to 10.242.3.2:22 (last error: connect ECONNREFUSED 10.242.3.2:22) did not finish within 300 ms (console log kept at /var/lib/sandboxes/logs/abc.console.log)\n--- guest console (last lines) ---\nsandbox-init: mount /dev/vdb failed',
        'sandbox failed to start: SSH to 10.242.3.2:22 did not finish within 300 ms',
      ],
      [
        'sandbox failed to start: container tab-abc exited at once; see /tmp/sbx-test-x/abc/console.log',
        'sandbox failed to start: container tab-abc exited at once',
      ],
      [
        'the tool could not run in the sandbox: guest command "LC_ALL=C.UTF-8 DISPLAY=:99 xdotool key a" did not finish within 15000 ms',
        'the tool could not run in the sandbox: guest command did not finish within 15000 ms',
      ],
      ["xdotool failed in the guest: Error: Can't open display: /tmp/.X11-unix/X99", "xdotool failed in the guest: Error: Can't open display: <path>"],
      ['this host runs 64 sessions, its limit (SBX_MAX_SESSIONS=64): retry later', 'this host runs 64 sessions, its limit (SBX_MAX_SESSIONS=64): retry later'],
      ['\n/etc/shadow', 'the request failed'],
    ];
    for (const [message, gist] of cases) assert.equal(publicSummary(message), gist);
    assert.ok(publicSummary('x'.repeat(10_000)).length <= 300);
  });

  it("4xx messages still name the client's field", async () => {
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { width: 'wide' } });
    assert.equal(res.statusCode, 400);
    assert.match(res.json().error.message, /width/);
  });
});

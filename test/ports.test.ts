/**
 * Guest ports on URLs (issue 24), on real sandboxes behind a real `sbx serve`: a server in the
 * guest reached through the path-based and the host-based form (HTTP of every method,
 * streamed bodies, Server-Sent Events, WebSockets), port tokens scoped to one session and one
 * port, bad input, and a guest that floods a port, with the orchestrator's memory measured.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import http from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { WebSocket } from 'ws';
import { chromium } from 'playwright-core';
import { openKeyStore } from '../src/api/auth/key-store-file.js';
import { ResourceNames } from '../src/network/names.js';
import type { GuestTransport } from '../src/transport/index.js';
import { connectToGuest, guestAddress, guestSh } from './helpers/guest.js';
import { startGuestConnectionServers, startGuestWebServer } from './helpers/guest-web.js';
import { GuestPortPools, MAX_POOLED_PORTS_PER_SESSION } from '../src/ports/channel-pool.js';
import { TEST_PREFIX } from './helpers/orchestrator.js';
import { memoryOf } from './helpers/raw-http.js';
import { runCliWith, startServe, type ServeProcess } from './helpers/serve.js';
import { SandboxClient } from '../src/client/index.js';

const NAMES = new ResourceNames(TEST_PREFIX);
const DOMAIN = 'sbx.test';
const MAX_CHANNELS = 6;
/** GUEST_CONNECTION_SERVERS' ports: kept alive, HTTP/1.0, closes a reused connection, closes idle connections. */
const CONN_BASE = 3002;
const [KEPT, HTTP10, CLOSES_REUSED, CLOSES_IDLE] = [CONN_BASE, CONN_BASE + 1, CONN_BASE + 2, CONN_BASE + 3];

/** "<client port> <requests on that connection> <method> <path> [body]", as the guest's connection servers answer. */
function connectionAnswer(body: Buffer): { conn: string; served: number; said: string } {
  const [conn, served, ...rest] = body.toString().split(' ');
  return { conn: conn ?? '', served: Number(served), said: rest.join(' ') };
}
type Json = Record<string, unknown>;

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** A request to the orchestrator with any Host header (fetch will not set one). */
function request(url: string, opts: { method?: string; headers?: Record<string, string>; body?: Buffer | string; host?: string } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const target = new URL(url);
    const req = http.request(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname + target.search,
        method: opts.method ?? 'GET',
        headers: { ...(opts.host ? { host: opts.host } : {}), ...opts.headers },
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}

describe('guest ports on URLs', { timeout: 600_000 }, () => {
  let stateDir = '';
  let serve: ServeProcess;
  let key = '';
  let otherKey = '';
  const guests: GuestTransport[] = [];
  let main: { id: string; guest: GuestTransport };
  let second: { id: string; guest: GuestTransport };

  const api = async (method: string, route: string, body?: unknown, auth: string | undefined = key): Promise<{ status: number; json: Json }> => {
    const headers: Record<string, string> = auth ? { authorization: `Bearer ${auth}` } : {};
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(`${serve.url}${route}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    return { status: res.status, json: text ? (JSON.parse(text) as Json) : {} };
  };
  const newSession = async (): Promise<{ id: string; guest: GuestTransport }> => {
    const created = await api('POST', '/v1/sessions', {});
    assert.equal(created.status, 201, JSON.stringify(created.json));
    const id = created.json.id as string;
    const guest = await connectToGuest(stateDir, id, await guestAddress(NAMES, id));
    guests.push(guest);
    return { id, guest };
  };
  const hostOf = (id: string, port: number) => `${port}-${id}.${DOMAIN}:${new URL(serve.url).port}`;
  const auth = () => ({ authorization: `Bearer ${key}` });

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-ports-'));
    const store = openKeyStore(stateDir);
    key = store.keys.create('tenant-a').key;
    otherKey = store.keys.create('tenant-b').key;
    store.close();
    serve = await startServe(stateDir, 19_100 + Math.floor(Math.random() * 400), undefined, [], {
      SBX_TENANT_REQUEST_LIMITS: 'tenant-a=1000/100000/100000',
      SBX_PORTS_DOMAIN: DOMAIN,
      SBX_PORT_MAX_CHANNELS_PER_SESSION: String(MAX_CHANNELS),
      SBX_PORT_IDLE_TIMEOUT_SECONDS: '5',
    });
    main = await newSession();
    second = await newSession();
    await startGuestWebServer(main.guest, 3000, '/tmp/www', {
      'hello.txt': 'hello from the guest\n',
      'index.html': '<title>guest page</title><p id="p">served in the guest</p>',
    });
    await startGuestWebServer(main.guest, 3001, '/tmp/www1', { 'hello.txt': 'port 3001\n' });
    await startGuestWebServer(second.guest, 3000, '/tmp/www', { 'hello.txt': 'the second session\n' });
    await startGuestConnectionServers(main.guest, CONN_BASE);
  });

  after(async () => {
    for (const guest of guests) guest.close();
    if (serve && serve.child.exitCode === null) {
      serve.child.kill('SIGTERM');
      await once(serve.child, 'exit');
    }
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it('POST .../ports answers the path-based and host-based URLs; with the API key both reach the guest', async () => {
    const made = await api('POST', `/v1/sessions/${main.id}/ports`, { port: 3000 });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    assert.equal(made.json.url, `${serve.url}/v1/sessions/${main.id}/ports/3000/`);
    assert.equal(made.json.hostUrl, `http://${hostOf(main.id, 3000)}/`);
    assert.equal(made.json.token, undefined, 'no token unless public');
    const byPath = await request(`${made.json.url as string}hello.txt`, { headers: auth() });
    assert.equal(byPath.status, 200);
    assert.equal(byPath.body.toString(), 'hello from the guest\n');
    const byHost = await request(`${serve.url}/hello.txt`, { host: hostOf(main.id, 3000), headers: auth() });
    assert.equal(byHost.status, 200);
    assert.equal(byHost.body.toString(), 'hello from the guest\n');
    // Without a key or token: refused, whichever form.
    assert.equal((await request(`${made.json.url as string}hello.txt`)).status, 401);
    assert.equal((await request(`${serve.url}/hello.txt`, { host: hostOf(main.id, 3000) })).status, 401);
  });

  it('the guest sees the prefix stripped, X-Forwarded-Prefix, its own Host, and never the API key', async () => {
    const viaPath = await request(`${serve.url}/v1/sessions/${main.id}/ports/3000/headers?a=b%20c`, { headers: { ...auth(), cookie: 'app=1' } });
    const seen = JSON.parse(viaPath.body.toString()) as Record<string, string>;
    assert.equal(seen[':path'], '/headers?a=b%20c');
    assert.equal(seen['x-forwarded-prefix'], `/v1/sessions/${main.id}/ports/3000`);
    assert.equal(seen.host, 'localhost:3000');
    assert.equal(seen.authorization, undefined, 'the API key never reaches the guest');
    assert.equal(seen.cookie, 'app=1', "the app's own cookies pass");
    assert.match(String(viaPath.headers['content-security-policy']), /^sandbox /, 'a path-based page lives in an opaque origin');
    const viaHost = await request(`${serve.url}/headers`, { host: hostOf(main.id, 3000), headers: auth() });
    const seenByHost = JSON.parse(viaHost.body.toString()) as Record<string, string>;
    assert.equal(seenByHost[':path'], '/headers');
    assert.equal(seenByHost['x-forwarded-prefix'], undefined);
    assert.equal(seenByHost['x-forwarded-host'], hostOf(main.id, 3000));
    assert.equal(viaHost.headers['content-security-policy'], undefined);
  });

  it('every method, and a 5 MB body streamed both ways, passes through', async () => {
    const body = Buffer.alloc(5 * 1024 * 1024);
    for (let i = 0; i < body.length; i++) body[i] = (i * 7) & 255;
    for (const method of ['POST', 'PUT']) {
      const echoed = await request(`${serve.url}/v1/sessions/${main.id}/ports/3000/echo`, {
        method,
        headers: { ...auth(), 'content-type': 'application/json' },
        body,
      });
      assert.equal(echoed.status, 200, method);
      assert.ok(echoed.body.equals(body), `${method}: the same bytes came back`);
    }
    const bare = await request(`${serve.url}/v1/sessions/${main.id}/ports/3000/echo`, {
      method: 'POST',
      headers: { ...auth(), 'content-length': '5' },
      body: 'plain',
    });
    assert.equal(bare.body.toString(), 'plain', 'a body without a content type passes too');
    const deleted = await request(`${serve.url}/echo`, { method: 'DELETE', host: hostOf(main.id, 3000), headers: auth() });
    assert.equal(deleted.body.toString(), 'deleted');
    const head = await request(`${serve.url}/v1/sessions/${main.id}/ports/3000/hello.txt`, { method: 'HEAD', headers: auth() });
    assert.equal(head.status, 200);
    assert.equal(head.headers['content-length'], String('hello from the guest\n'.length));
  });

  it('Server-Sent Events arrive one by one, as the guest sends them', async () => {
    const res = await fetch(`${serve.url}/v1/sessions/${main.id}/ports/3000/sse`, { headers: auth() });
    assert.equal(res.headers.get('content-type'), 'text/event-stream');
    const reader = res.body!.getReader();
    const started = Date.now();
    const first = await reader.read();
    const firstAt = Date.now() - started;
    assert.match(Buffer.from(first.value!).toString(), /data: event 0/);
    let rest = '';
    for (;;) {
      const next = await reader.read();
      if (next.done) break;
      rest += Buffer.from(next.value).toString();
    }
    const lastAt = Date.now() - started;
    assert.match(rest, /event 2/);
    assert.ok(lastAt - firstAt >= 400, `the events were not held back until the end (first at ${firstAt} ms, end at ${lastAt} ms)`);
  });

  it('a WebSocket echoes through both forms', async () => {
    for (const [url, headers] of [
      [`${serve.url.replace('http', 'ws')}/v1/sessions/${main.id}/ports/3000/ws`, auth()],
      [`${serve.url.replace('http', 'ws')}/ws`, { ...auth(), host: hostOf(main.id, 3000) }],
    ] as const) {
      const ws = new WebSocket(url, { headers });
      await once(ws, 'open');
      ws.send('ping through the port');
      const [text] = (await once(ws, 'message')) as [Buffer];
      assert.equal(text.toString(), 'ping through the port');
      const big = Buffer.alloc(200_000, 7);
      ws.send(big);
      const [echoed] = (await once(ws, 'message')) as [Buffer];
      assert.ok(Buffer.from(echoed).equals(big));
      ws.close();
      await once(ws, 'close');
    }
  });

  it('a port nothing listens on is a 502 that says so (HTTP and WebSocket)', async () => {
    const res = await request(`${serve.url}/v1/sessions/${main.id}/ports/3999/`, { headers: auth() });
    assert.equal(res.status, 502);
    const json = JSON.parse(res.body.toString()) as { error: { code: string; message: string } };
    assert.equal(json.error.code, 'port_not_listening');
    assert.match(json.error.message, /nothing listens on port 3999/);
    const ws = new WebSocket(`${serve.url.replace('http', 'ws')}/v1/sessions/${main.id}/ports/3999/ws`, { headers: auth() });
    ws.on('error', () => undefined);
    const [, refused] = (await once(ws, 'unexpected-response')) as [unknown, http.IncomingMessage];
    assert.equal(refused.statusCode, 502);
    ws.terminate();
  });

  it('a port token opens its port of its session only, and a revoked one is refused before any byte reaches the guest', async () => {
    const made = await api('POST', `/v1/sessions/${main.id}/ports`, { port: 3000, public: true, ttlSeconds: 60 });
    assert.equal(made.status, 201);
    const token = made.json.token as string;
    assert.match(token, /^prt_/);
    assert.equal(made.json.url, `${serve.url}/v1/sessions/${main.id}/ports/3000/?sbx_token=${token}`);
    const opened = await request(`${serve.url}/v1/sessions/${main.id}/ports/3000/hello.txt?sbx_token=${token}`);
    assert.equal(opened.status, 200);
    assert.equal(opened.body.toString(), 'hello from the guest\n');
    assert.match(String(opened.headers['set-cookie']), /sbx_port_token=prt_.*Path=\/v1\/sessions\/.*\/ports\/3000\/; HttpOnly; SameSite=Lax/);
    // The cookie alone (a page's own requests), and the host-based form.
    assert.equal((await request(`${serve.url}/v1/sessions/${main.id}/ports/3000/hello.txt`, { headers: { cookie: `sbx_port_token=${token}` } })).status, 200);
    assert.equal((await request(`${serve.url}/hello.txt?sbx_token=${token}`, { host: hostOf(main.id, 3000) })).status, 200);
    // The token is ours: the guest does not see it in the query.
    const seen = JSON.parse((await request(`${serve.url}/v1/sessions/${main.id}/ports/3000/headers?x=1&sbx_token=${token}`)).body.toString()) as Record<
      string,
      string
    >;
    assert.equal(seen[':path'], '/headers?x=1');
    // Another port, another session, another route: nothing.
    for (const url of [
      `${serve.url}/v1/sessions/${main.id}/ports/3001/hello.txt?sbx_token=${token}`,
      `${serve.url}/v1/sessions/${second.id}/ports/3000/hello.txt?sbx_token=${token}`,
    ]) {
      assert.equal((await request(url)).status, 401, url);
    }
    assert.equal((await request(`${serve.url}/hello.txt?sbx_token=${token}`, { host: hostOf(main.id, 3001) })).status, 401);
    assert.equal((await request(`${serve.url}/v1/sessions/${main.id}?sbx_token=${token}`)).status, 401, 'a port token is no API key');
    // A token of another kind (a live view's) opens no port.
    const view = await api('POST', `/v1/sessions/${main.id}/views`, { mode: 'view' });
    const viewToken = String(view.json.url).split('/').pop();
    const viaView = await request(`${serve.url}/v1/sessions/${main.id}/ports/3000/hello.txt?sbx_token=${viewToken}`);
    assert.equal(viaView.status, 401);
    // Revoked: refused, and the guest's server saw no request.
    assert.equal((await api('DELETE', `/v1/sessions/${main.id}/port-tokens/${made.json.tokenId as string}`)).status, 204);
    await guestSh(main.guest, ': > /tmp/seen.log');
    const revoked = await request(`${serve.url}/v1/sessions/${main.id}/ports/3000/hello.txt?sbx_token=${token}`);
    assert.equal(revoked.status, 401);
    assert.equal((JSON.parse(revoked.body.toString()) as { error: { code: string } }).error.code, 'revoked_port_token');
    const ws = new WebSocket(`${serve.url.replace('http', 'ws')}/v1/sessions/${main.id}/ports/3000/ws?sbx_token=${token}`);
    ws.on('error', () => undefined);
    const [, wsRefused] = (await once(ws, 'unexpected-response')) as [unknown, http.IncomingMessage];
    assert.equal(wsRefused.statusCode, 401);
    ws.terminate();
    await sleep(300);
    assert.equal((await guestSh(main.guest, 'cat /tmp/seen.log')).text, '', 'no byte of a refused request reached the guest');
    // Another tenant's key opens nothing of this session, and cannot make tokens for it.
    assert.equal((await request(`${serve.url}/v1/sessions/${main.id}/ports/3000/hello.txt`, { headers: { authorization: `Bearer ${otherKey}` } })).status, 404);
    assert.equal((await api('POST', `/v1/sessions/${main.id}/ports`, { port: 3000, public: true }, otherKey)).status, 404);
  });

  it('Chromium on the host opens a guest page through both forms with a port token, and a WebSocket from the page echoes', async () => {
    const browser = await chromium.launch({
      executablePath: process.env.SBX_TEST_CHROMIUM || '/usr/bin/chromium',
      // The host-based names resolve to this orchestrator on loopback, and nowhere else.
      args: ['--no-sandbox', '--disable-gpu', `--host-resolver-rules=MAP *.${DOMAIN} 127.0.0.1`],
    });
    try {
      const made = await api('POST', `/v1/sessions/${main.id}/ports`, { port: 3000, public: true });
      const page = await browser.newPage();
      await page.goto(made.json.url as string);
      assert.equal(await page.textContent('#p'), 'served in the guest');
      assert.equal(await page.evaluate(() => window.origin), 'null', 'a path-based page lives in an opaque origin');
      const hostPage = await browser.newPage();
      await hostPage.goto(made.json.hostUrl as string);
      assert.equal(await hostPage.textContent('#p'), 'served in the guest');
      assert.equal(await hostPage.evaluate(() => window.origin), `http://${hostOf(main.id, 3000)}`);
      // The page's own requests carry the token by its cookie.
      const echoed = await hostPage.evaluate(
        () =>
          new Promise<string>((resolve, reject) => {
            const ws = new WebSocket(`ws://${location.host}/ws`);
            ws.onopen = () => ws.send('from the page');
            ws.onmessage = (e) => resolve(typeof e.data === 'string' ? e.data : '(binary)');
            ws.onerror = () => reject(new Error('websocket failed'));
          }),
      );
      assert.equal(echoed, 'from the page');
      const fetched = await hostPage.evaluate(async () => (await fetch('/hello.txt')).text());
      assert.equal(fetched, 'hello from the guest\n');
    } finally {
      await browser.close();
    }
  });

  it('POST .../browser on a template without Chromium is a 409 that says so', async () => {
    const res = await api('POST', `/v1/sessions/${main.id}/browser`, {});
    assert.equal(res.status, 409, JSON.stringify(res.json));
    assert.match(JSON.stringify(res.json), /browser_unavailable.*no Chromium/);
  });

  it('the client (sandbox.ports.url) and the CLI (sbx port) give URLs that open the port without the key', async () => {
    const sandbox = await new SandboxClient({ baseUrl: serve.url, apiKey: key }).connect(main.id);
    const url = await sandbox.ports.url(3000);
    assert.equal(await (await fetch(`${url}`.replace('/?', '/hello.txt?'))).text(), 'hello from the guest\n');
    const cli = await runCliWith(['--url', serve.url, 'port', main.id, '3001'], { SBX_API_KEY: key });
    assert.equal(cli.code, 0, cli.stderr);
    const [pathUrl, hostUrl] = cli.stdout.trim().split('\n');
    assert.match(pathUrl!, new RegExp(`/v1/sessions/${main.id}/ports/3001/\\?sbx_token=prt_`));
    assert.match(hostUrl!, new RegExp(`^http://3001-${main.id}\\.${DOMAIN}:`));
    assert.equal(await (await fetch(pathUrl!.replace('/?', '/hello.txt?'))).text(), 'port 3001\n');
    const bad = await runCliWith(['--url', serve.url, 'port', main.id, '70000'], { SBX_API_KEY: key });
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /port from 1 to 65535/);
  });

  it('bad input is a 400 naming the field', async () => {
    for (const [body, field] of [
      [{ port: 0 }, 'port'],
      [{ port: 65536 }, 'port'],
      [{ port: '3000' }, 'port'],
      [{ port: 3000.5 }, 'port'],
      [{}, 'port'],
      [{ port: 3000, ttlSeconds: 5 }, 'ttlSeconds'],
      [{ port: 3000, ttlSeconds: 8 * 24 * 3600 }, 'ttlSeconds'],
      [{ port: 3000, public: 'yes' }, 'public'],
      [{ port: 3000, host: '10.0.0.1' }, 'host'],
    ] as const) {
      const res = await api('POST', `/v1/sessions/${main.id}/ports`, body);
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.match(JSON.stringify(res.json), new RegExp(field), JSON.stringify(res.json));
    }
    for (const port of ['0', '65536', 'abc', '3000x', '-1', '03000']) {
      const res = await request(`${serve.url}/v1/sessions/${main.id}/ports/${port}/`, { headers: auth() });
      assert.equal(res.status, 400, port);
      assert.match(res.body.toString(), /port must be a whole number/);
    }
  });

  it(`at most ${MAX_CHANNELS} requests at once per session; the next is a 429, another session is not affected`, async () => {
    const slow = Array.from({ length: MAX_CHANNELS }, () => request(`${serve.url}/v1/sessions/${main.id}/ports/3000/sleep`, { headers: auth() }));
    await sleep(500);
    const refused = await request(`${serve.url}/v1/sessions/${main.id}/ports/3000/hello.txt`, { headers: auth() });
    assert.equal(refused.status, 429);
    assert.equal((JSON.parse(refused.body.toString()) as { error: { code: string } }).error.code, 'port_channel_limit');
    const other = await request(`${serve.url}/v1/sessions/${second.id}/ports/3000/hello.txt`, { headers: auth() });
    assert.equal(other.body.toString(), 'the second session\n');
    for (const answer of await Promise.all(slow)) assert.equal(answer.body.toString(), 'slept');
    assert.equal((await request(`${serve.url}/v1/sessions/${main.id}/ports/3000/hello.txt`, { headers: auth() })).status, 200, 'the slots came back');
  });

  it('keep-alive: GETs in a row from different clients go on one kept-alive guest connection, each with its own answer', async () => {
    const answers = [];
    for (let i = 0; i < 6; i++) {
      const res = await request(`${serve.url}/v1/sessions/${main.id}/ports/${KEPT}/n${i}?q=${i}`, { headers: auth() });
      assert.equal(res.status, 200, res.body.toString());
      answers.push(connectionAnswer(res.body));
    }
    answers.forEach((answer, i) => assert.equal(answer.said, `GET /n${i}?q=${i}`));
    const connections = new Set(answers.map((a) => a.conn));
    assert.ok(connections.size < answers.length, `${answers.length} requests took ${connections.size} guest connections`);
    assert.ok(Math.max(...answers.map((a) => a.served)) >= 3, `a guest connection served several requests: ${JSON.stringify(answers)}`);
  });

  it('keep-alive: a guest server that writes head and body apart without TCP_NODELAY answers GETs in a row without a delayed-ACK wait', async () => {
    // Python's http.server (port 3000) writes the head, then the body: on a kept connection the
    // body waited for the ACK of the head, which the guest delays 40 ms (unless its local
    // routes say quickack: netns.ts, sandbox-init). Warm first, so the channel is a kept one.
    const get = () => request(`${serve.url}/v1/sessions/${main.id}/ports/3000/hello.txt`, { headers: auth() });
    assert.equal((await get()).status, 200);
    const times: number[] = [];
    for (let i = 0; i < 9; i++) {
      const started = performance.now();
      const res = await get();
      times.push(performance.now() - started);
      assert.equal(res.status, 200);
    }
    const median = [...times].sort((a, b) => a - b)[4] ?? Infinity;
    console.log(
      `back-to-back GETs on a kept channel to a server without TCP_NODELAY: median ${median.toFixed(1)} ms (${times.map((t) => t.toFixed(1)).join(', ')})`,
    );
    assert.ok(median < 30, `median ${median.toFixed(1)} ms a GET: a delayed ACK (40 ms) on every kept-alive request`);
  });

  it('keep-alive: a guest server that closes after every answer (HTTP/1.0, Connection: close) answers request after request', async () => {
    let lastClosing = '';
    for (let i = 0; i < 10; i++) {
      const port = i % 2 === 0 ? HTTP10 : KEPT;
      const method = i % 4 < 2 ? 'GET' : 'POST';
      const route = port === KEPT ? `/close${i}` : `/h${i}`;
      const res = await request(`${serve.url}/v1/sessions/${main.id}/ports/${port}${route}`, {
        method,
        headers: { ...auth(), 'content-type': 'text/plain' },
        ...(method === 'POST' ? { body: `b${i}` } : {}),
      });
      assert.equal(res.status, 200, `${method} ${port}${route}: ${res.body.toString()}`);
      const answer = connectionAnswer(res.body);
      assert.equal(answer.said, method === 'POST' ? `POST ${route} b${i}` : `GET ${route}`);
      if (port === HTTP10) assert.equal(answer.served, 1, 'an HTTP/1.0 connection serves one request');
      else {
        assert.notEqual(answer.conn, lastClosing, 'a connection closed by the guest is not used again');
        lastClosing = answer.conn;
      }
    }
    // A guest that says Connection: close and then holds its connection open: the proxy closes the channel all the same.
    const held = await request(`${serve.url}/v1/sessions/${main.id}/ports/${KEPT}/close-hold1`, { headers: auth() });
    assert.equal(connectionAnswer(held.body).said, 'GET /close-hold1');
    await sleep(1_600);
    const seen = JSON.parse((await request(`${serve.url}/v1/sessions/${main.id}/ports/${KEPT}/held`, { headers: auth() })).body.toString()) as Json;
    assert.equal(seen['/close-hold1'], 'closed', 'the guest found the connection it held closed by the proxy');
  });

  it('keep-alive: a GET that meets a kept connection the guest closed is sent again on a fresh one; a POST is a 502', async () => {
    const base = `${serve.url}/v1/sessions/${main.id}/ports`;
    // CLOSES_REUSED closes a connection that brings a second request, before any answer.
    for (let i = 0; i < 4; i++) {
      const res = await request(`${base}/${CLOSES_REUSED}/r${i}`, { headers: auth() });
      assert.equal(res.status, 200, `GET ${i}: ${res.body.toString()}`);
      assert.deepEqual({ ...connectionAnswer(res.body), conn: '' }, { conn: '', served: 1, said: `GET /r${i}` });
    }
    const deleted = await request(`${base}/${CLOSES_REUSED}/h`, { method: 'DELETE', headers: auth() });
    assert.equal(deleted.status, 200, 'a DELETE without a body is sent again too');
    const posted = await request(`${base}/${CLOSES_REUSED}/p`, { method: 'POST', headers: { ...auth(), 'content-type': 'text/plain' }, body: 'once' });
    assert.equal(posted.status, 502, posted.body.toString());
    assert.equal((JSON.parse(posted.body.toString()) as { error: { code: string } }).error.code, 'guest_port_error');
    assert.equal((await request(`${base}/${CLOSES_REUSED}/after`, { headers: auth() })).status, 200);
    // CLOSES_IDLE closes its idle connections after 0.3 s, long before the pool would.
    for (let i = 0; i < 2; i++) {
      const res = await request(`${base}/${CLOSES_IDLE}/i${i}`, { headers: auth() });
      assert.equal(res.status, 200, res.body.toString());
      assert.equal(connectionAnswer(res.body).said, `GET /i${i}`);
      await sleep(700);
    }
  });

  it('keep-alive pool: idle channels are bounded, closed when idle, and none outlive their connection', async () => {
    const conn = await connectToGuest(stateDir, main.id, await guestAddress(NAMES, main.id));
    const pools = new GuestPortPools(2, 500);
    const get = (route: string): Promise<{ conn: string; served: number; said: string }> =>
      new Promise((resolve, reject) => {
        const agent = pools.agentFor(conn, KEPT);
        if (!agent) return reject(new Error('no agent'));
        http
          .get({ agent, path: route }, (res) => {
            const chunks: Buffer[] = [];
            res.on('data', (c: Buffer) => chunks.push(c));
            res.on('end', () => resolve(connectionAnswer(Buffer.concat(chunks))));
          })
          .on('error', reject);
      });
    const openInGuest = async () =>
      JSON.parse((await request(`${serve.url}/v1/sessions/${main.id}/ports/${KEPT}/open`, { headers: auth() })).body.toString()) as number[];
    try {
      const one = [await get('/a'), await get('/b'), await get('/c')];
      assert.deepEqual(
        one.map((a) => a.served),
        [1, 2, 3],
      );
      assert.equal(new Set(one.map((a) => a.conn)).size, 1);
      assert.deepEqual(pools.stats(conn), { ports: 1, free: 1, busy: 0 });
      assert.ok((await openInGuest()).includes(Number(one[0]!.conn)));
      // Unused past its timeout (0.5 s here): closed, in the guest too.
      await sleep(900);
      assert.deepEqual(pools.stats(conn), { ports: 1, free: 0, busy: 0 });
      assert.ok(!(await openInGuest()).includes(Number(one[0]!.conn)), 'the idle channel was closed');
      // Three at once: three channels, two kept.
      const three = await Promise.all([get('/x'), get('/y'), get('/z')]);
      assert.equal(new Set(three.map((a) => a.conn)).size, 3);
      await sleep(50);
      assert.deepEqual(pools.stats(conn), { ports: 1, free: 2, busy: 0 });
      // The connection closes (as when its session ends): no channel left, in the guest either.
      conn.close();
      const kept = three.map((a) => Number(a.conn));
      for (let i = 0; i < 50 && pools.stats(conn).free > 0; i++) await sleep(100);
      assert.deepEqual(pools.stats(conn), { ports: 1, free: 0, busy: 0 });
      assert.equal(pools.agentFor(conn, KEPT), undefined, 'a closed connection gets no agent');
      assert.deepEqual(pools.stats(conn), { ports: 0, free: 0, busy: 0 });
      for (let i = 0; i < 50 && (await openInGuest()).some((p) => kept.includes(p)); i++) await sleep(100);
      assert.ok(!(await openInGuest()).some((p) => kept.includes(p)), 'the guest saw every pooled connection closed');
    } finally {
      conn.close();
    }
    // A session keeps idle channels for a few ports at most: the least recently used goes.
    const bounded = new GuestPortPools(2);
    for (let port = 4001; port <= 4001 + MAX_POOLED_PORTS_PER_SESSION + 2; port++) bounded.agentFor(main.guest, port);
    assert.equal(bounded.stats(main.guest).ports, MAX_POOLED_PORTS_PER_SESSION);
  });

  it('red team: an endless response and a WebSocket flood cost only their own requests; the orchestrator memory stays bounded', async () => {
    const pid = serve.child.pid!;
    const before = await memoryOf(pid);
    // 1. An endless response read as fast as it comes: 256 MiB through.
    const res = await fetch(`${serve.url}/v1/sessions/${main.id}/ports/3000/endless`, { headers: auth() });
    const reader = res.body!.getReader();
    let got = 0;
    const started = Date.now();
    while (got < 256 * 1024 * 1024) got += (await reader.read()).value!.length;
    const mibPerSecond = got / 1024 / 1024 / ((Date.now() - started) / 1000);
    await reader.cancel();
    // 2. An endless response nobody reads, and a WebSocket flood nobody reads, at once.
    const stalled = http.get({
      host: '127.0.0.1',
      port: new URL(serve.url).port,
      path: `/v1/sessions/${main.id}/ports/3000/endless`,
      headers: auth(),
      agent: false,
    });
    const [stalledRes] = (await once(stalled, 'response')) as [http.IncomingMessage];
    stalledRes.pause();
    const flood = new WebSocket(`${serve.url.replace('http', 'ws')}/v1/sessions/${main.id}/ports/3000/wsflood`, { headers: auth() });
    await once(flood, 'open');
    (flood as unknown as { _socket: import('node:net').Socket })._socket.pause();
    await sleep(2_000);
    // Meanwhile: the other session's port, this session's other requests, and the API answer.
    const t0 = Date.now();
    assert.equal((await request(`${serve.url}/v1/sessions/${second.id}/ports/3000/hello.txt`, { headers: auth() })).body.toString(), 'the second session\n');
    assert.equal((await request(`${serve.url}/v1/sessions/${main.id}/ports/3001/hello.txt`, { headers: auth() })).body.toString(), 'port 3001\n');
    assert.equal((await api('GET', `/v1/sessions/${second.id}`)).status, 200);
    const duringMs = Date.now() - t0;
    const during = await memoryOf(pid);
    // The idle timeout (5 s here) closes what nobody reads: once read again, each ends
    // after what was already in flight instead of going on forever.
    await sleep(6_000);
    const ended = new Promise<boolean>((resolve) => {
      let read = 0;
      stalledRes.on('data', (c: Buffer) => (read += c.length));
      stalledRes.on('error', () => resolve(true));
      stalledRes.on('close', () => resolve(true));
      setTimeout(() => resolve(false), 20_000).unref();
    });
    stalledRes.resume();
    assert.ok(await ended, 'the unread endless response was closed by the idle timeout');
    const wsClosed = Promise.race([once(flood, 'close').then(() => true), sleep(20_000).then(() => false)]);
    flood.on('message', () => undefined);
    (flood as unknown as { _socket: import('node:net').Socket })._socket.resume();
    assert.ok(await wsClosed, 'the unread WebSocket flood was closed by the idle timeout');
    const growth = during.rssMiB - before.rssMiB;
    console.log(
      `ports red team: endless read at ${mibPerSecond.toFixed(0)} MiB/s; RSS ${before.rssMiB} -> ${during.rssMiB} MiB (peak ${during.peakMiB}) with an unread response and an unread WebSocket flood; other requests meanwhile ${duringMs} ms`,
    );
    assert.ok(growth < 96, `the orchestrator grew by ${growth} MiB`);
    assert.equal((await request(`${serve.url}/v1/sessions/${main.id}/ports/3000/hello.txt`, { headers: auth() })).status, 200, 'the session still serves');
  });
});

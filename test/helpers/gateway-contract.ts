/**
 * What a gateway must do whatever store it runs on: the tests the unit tier runs with the
 * in-memory store (test/unit/cluster-gateway.test.ts) and the real tier with PostgreSQL
 * (test/cluster-gateway.test.ts). Each test asserts what the client sees and what the node
 * behind the gateway received (or that it received nothing).
 */
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { after, before, it } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import WebSocket from 'ws';
import type { ClusterStore } from '../../src/cluster/store/cluster-store.js';
import { startCluster, rawRequest, type TestCluster } from './gateway-cluster.js';
import type { FakeNode } from './fake-node.js';

export interface ContractOptions {
  /** Makes the store stop answering (a database that is down); returns how to bring it back. */
  breakStore: (store: ClusterStore) => (() => void) | Promise<() => Promise<void> | void>;
}

const json = async <T>(res: Response): Promise<T> => (await res.json()) as T;
type ErrorBody = { error: { code: string; message: string } };

export function gatewayContract(makeStore: () => ClusterStore | Promise<ClusterStore>, opts: ContractOptions): void {
  let c: TestCluster;
  let n1: FakeNode;
  let n2: FakeNode;
  const auth = (key: string) => ({ authorization: `Bearer ${key}` });

  before(async () => {
    c = await startCluster(await makeStore(), ['n1', 'n2']);
    [n1, n2] = c.nodes as [FakeNode, FakeNode];
    await c.seed('acmeaaaaa1', 'acme', n1);
    await c.seed('acmeaaaaa2', 'acme', n2);
    await c.seed('umbrellab1', 'umbrella', n2);
  });
  after(async () => {
    await c.close();
    await c.store.close();
  });

  it("another tenant's session is the same 404 as one that does not exist, and its node never sees the request", async () => {
    const before = n2.seen.length;
    const other = await fetch(`${c.url}/v1/sessions/umbrellab1`, { headers: auth(c.keyA) });
    const none = await fetch(`${c.url}/v1/sessions/zzzzzzzzzz`, { headers: auth(c.keyA) });
    assert.equal(other.status, 404);
    assert.equal(none.status, 404);
    assert.deepEqual((await json<ErrorBody>(other)).error, { code: 'not_found', message: 'session umbrellab1 does not exist' });
    assert.deepEqual((await json<ErrorBody>(none)).error, { code: 'not_found', message: 'session zzzzzzzzzz does not exist' });
    for (const [method, path] of [
      ['POST', '/actions'],
      ['PUT', '/files?path=/tmp/x'],
      ['DELETE', ''],
      ['GET', '/recording'],
    ] as const) {
      const res = await fetch(`${c.url}/v1/sessions/umbrellab1${path}`, {
        method,
        headers: { ...auth(c.keyA), 'content-type': method === 'PUT' ? 'application/octet-stream' : 'application/json' },
        ...(method === 'POST' ? { body: '{"action":"screenshot"}' } : method === 'PUT' ? { body: 'x' } : {}),
      });
      assert.equal(res.status, 404, `${method} ${path}`);
    }
    assert.equal(n2.seen.length, before, 'nothing of another tenant was forwarded');
    // The owner reaches it.
    assert.equal((await fetch(`${c.url}/v1/sessions/umbrellab1`, { headers: auth(c.keyB) })).status, 200);
  });

  it("a path a URL parser would rewrite (dot segments) is no route: never forwarded to reach another's session", async () => {
    const before = n2.seen.length + n1.seen.length;
    for (const path of [
      '/v1/sessions/acmeaaaaa2/../umbrellab1',
      '/v1/sessions/acmeaaaaa2/%2e%2e/umbrellab1/actions',
      '/v1/sessions/acmeaaaaa2/%2E%2E/%2e%2e/sessions/umbrellab1',
      '/v1/sessions/acmeaaaaa2/..\\umbrellab1',
    ]) {
      const post = path.endsWith('actions');
      const res = await rawRequest(
        c.port,
        post ? 'POST' : 'GET',
        path,
        { authorization: `Bearer ${c.keyA}`, ...(post ? { 'content-type': 'application/json' } : {}) },
        post ? '{}' : undefined,
      );
      assert.equal(res.status, 404, path);
      assert.equal((JSON.parse(res.body) as ErrorBody).error.code, 'route_not_found', path);
    }
    assert.equal(n2.seen.length + n1.seen.length, before, 'nothing was forwarded');
  });

  it('keys: none, wrong, and revoked answer as on a single host; revoked stops within the cache', async () => {
    const none = await fetch(`${c.url}/v1/sessions`);
    assert.equal(none.status, 401);
    assert.equal((await json<ErrorBody>(none)).error.code, 'missing_api_key');
    assert.equal(none.headers.get('www-authenticate'), 'Bearer realm="sbx"');
    const wrong = await fetch(`${c.url}/v1/sessions`, { headers: auth(`${c.keyA.slice(0, -3)}xyz`) });
    assert.deepEqual((await json<ErrorBody>(wrong)).error, { code: 'invalid_api_key', message: 'invalid API key' });
    const { generateApiKey } = await import('../../src/api/auth/api-key.js');
    const k = generateApiKey();
    await c.store.createKey({ id: k.id, tenant: 'acme', hash: k.hash, createdAt: new Date().toISOString(), expiresAt: null, revokedAt: null });
    assert.equal((await fetch(`${c.url}/v1/sessions/acmeaaaaa1`, { headers: auth(k.key) })).status, 200);
    await c.store.revokeKey(k.id);
    await new Promise((resolve) => setTimeout(resolve, 250)); // the test gateway's key cache: 200 ms
    const revoked = await fetch(`${c.url}/v1/sessions/acmeaaaaa1`, { headers: auth(k.key) });
    assert.equal(revoked.status, 401);
    assert.equal((await json<ErrorBody>(revoked)).error.code, 'revoked_api_key');
  });

  it('forwards the protocol headers: secret, tenant, key id, the client Host, x-forwarded-for; never Authorization or a client x-sbx-*', async () => {
    const before = n1.seen.length;
    const res = await rawRequest(c.port, 'GET', '/v1/sessions/acmeaaaaa1', {
      host: 'sandboxes.example.test',
      authorization: `Bearer ${c.keyA}`,
      'x-sbx-tenant': 'umbrella',
      'x-sbx-cluster-secret': 'forged',
      'x-sbx-session-id': 'forged',
    });
    assert.equal(res.status, 200);
    assert.equal((JSON.parse(res.body) as { host: string }).host, 'sandboxes.example.test');
    const seen = n1.seen.slice(before);
    assert.equal(seen.length, 1);
    const headers = seen[0]!.headers;
    assert.equal(headers.authorization, undefined, 'the client key never reaches a node');
    assert.equal(headers['x-sbx-tenant'], 'acme');
    assert.equal(headers['x-sbx-api-key-id'], c.keyAId);
    assert.equal(headers['x-sbx-session-id'], undefined);
    assert.equal(headers.host, 'sandboxes.example.test');
    assert.equal(headers['x-forwarded-for'], '127.0.0.1');
    assert.ok(typeof headers['x-sbx-cluster-secret'] === 'string' && headers['x-sbx-cluster-secret'] !== 'forged');
  });

  it('a small body (read whole) reaches the node byte for byte, its type with its parameters as the client sent it', async () => {
    const before = n1.seen.length;
    const body = '{"action":"mouse_move","coordinate":[1,2],"text":"\u00e9t\u00e9"}';
    const res = await rawRequest(
      c.port,
      'POST',
      '/v1/sessions/acmeaaaaa1/actions',
      {
        authorization: `Bearer ${c.keyA}`,
        'content-type': 'application/json; charset=utf-8',
        'content-length': String(Buffer.byteLength(body)),
      },
      body,
    );
    assert.equal(res.status, 200, res.body);
    assert.deepEqual((JSON.parse(res.body) as { body: unknown }).body, JSON.parse(body));
    const headers = n1.seen.slice(before)[0]!.headers;
    assert.equal(headers['content-type'], 'application/json; charset=utf-8');
    assert.equal(headers['content-length'], String(Buffer.byteLength(body)));
  });

  it('streams an upload: the node has bytes while the client is still sending, and gets them all', async () => {
    let sent = 0;
    let release: () => void = () => undefined;
    const halfway = new Promise<void>((resolve) => (release = resolve));
    const chunk = Buffer.alloc(1024 * 1024, 7);
    const total = 48;
    const body = Readable.from(
      (async function* () {
        for (let i = 0; i < total; i++) {
          if (i === 8) await halfway; // held until the node has seen bytes: nothing waits for the whole body
          sent += chunk.length;
          yield chunk;
        }
      })(),
    );
    const upload = fetch(`${c.url}/v1/sessions/acmeaaaaa1/files?path=/tmp/big`, {
      method: 'PUT',
      headers: { ...auth(c.keyA), 'content-type': 'application/octet-stream' },
      body: Readable.toWeb(body) as ReadableStream,
      duplex: 'half',
    } as RequestInit);
    const deadline = Date.now() + 5_000;
    while (n1.uploadBytes === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.ok(n1.uploadBytes > 0 && sent < total * chunk.length, `the node had ${n1.uploadBytes} bytes while the client had sent ${sent}`);
    release();
    const res = await upload;
    assert.equal(res.status, 201);
    assert.equal((await json<{ size: number }>(res)).size, total * chunk.length);
  });

  it("routes an ended session's recording to its node (its artifacts outlive it)", async () => {
    await c.seed('endedsess1', 'acme', n2, 'ended');
    const res = await fetch(`${c.url}/v1/sessions/endedsess1/recording`, { headers: { ...auth(c.keyA), range: 'bytes=0-9' } });
    assert.equal(res.status, 206);
    assert.ok(n2.seen.some((r) => r.url === '/v1/sessions/endedsess1/recording'));
    assert.equal((await fetch(`${c.url}/v1/sessions/endedsess1/recording`, { headers: auth(c.keyB) })).status, 404, "and it is still no one else's");
  });

  it("passes a byte range's 206 through", async () => {
    const res = await fetch(`${c.url}/v1/sessions/acmeaaaaa1/recording`, { headers: { ...auth(c.keyA), range: 'bytes=10-19' } });
    assert.equal(res.status, 206);
    assert.equal(res.headers.get('content-range'), 'bytes 10-19/1000');
    assert.equal((await res.arrayBuffer()).byteLength, 10);
  });

  it('streams Server-Sent Events as the node sends them (each before the next is written)', async () => {
    const controller = new AbortController();
    const res = await fetch(`${c.url}/v1/sessions/acmeaaaaa1/screen/stream`, { headers: auth(c.keyA), signal: controller.signal });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'text/event-stream');
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    for (let i = 1; i <= 3; i++) {
      while (!n1.releaseEvent) await new Promise((resolve) => setTimeout(resolve, 5));
      const release = n1.releaseEvent;
      n1.releaseEvent = undefined;
      release();
      let text = '';
      while (!text.includes('\n\n')) {
        const { value, done } = await reader.read();
        assert.ok(!done, 'the stream ended early');
        text += decoder.decode(value);
      }
      assert.match(text, new RegExp(`"n":${i}`));
    }
    controller.abort();
  });

  it('joins a live view WebSocket to its node, both ways, and closes both together', async () => {
    const made = await fetch(`${c.url}/v1/sessions/acmeaaaaa2/views`, {
      method: 'POST',
      headers: { ...auth(c.keyA), 'content-type': 'application/json' },
      body: '{"mode":"view"}',
    });
    assert.equal(made.status, 201);
    const { url } = await json<{ url: string }>(made);
    assert.ok(url.startsWith(`http://127.0.0.1:${c.port}/v1/views/`), 'the URL the node built points at the gateway');
    const ws = new WebSocket(url.replace(/^http/, 'ws') + '/rfb');
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    const echoed = new Promise<string>((resolve) => ws.once('message', (data: Buffer) => resolve(data.toString())));
    ws.send('hello');
    assert.equal(await echoed, 'echo:hello');
    assert.deepEqual(n2.wsMessages, ['hello'], 'the session is on n2: its view routes there');
    const closed = new Promise<number>((resolve) => ws.once('close', (code: number) => resolve(code)));
    ws.send('close-4001');
    assert.equal(await closed, 4001, "the node's close code reaches the browser");
    // The browser closing closes the node's side.
    const ws2 = new WebSocket(url.replace(/^http/, 'ws') + '/rfb');
    await new Promise<void>((resolve) => ws2.once('open', () => resolve()));
    n2.wsClosed = undefined;
    ws2.close(1000);
    const deadline = Date.now() + 3_000;
    while (n2.wsClosed === undefined && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(n2.wsClosed, 1000);
  });

  it('a live view that stops reading holds the node back: the gateway buffers about 1 MiB, not the flood', async () => {
    const made = await fetch(`${c.url}/v1/sessions/acmeaaaaa2/views`, {
      method: 'POST',
      headers: { ...auth(c.keyA), 'content-type': 'application/json' },
      body: '{"mode":"view"}',
    });
    const { url } = await json<{ url: string }>(made);
    const ws = new WebSocket(url.replace(/^http/, 'ws') + '/rfb');
    await new Promise<void>((resolve) => ws.once('open', () => resolve()));
    let received = 0;
    ws.on('message', (data: Buffer) => (received += data.length));
    ws.pause(); // a browser that stops reading
    const messages = 1024; // 64 MiB
    ws.send(`flood:${messages}`);
    // Until what waits at the node stops going down (or 8 s): the gateway stopped reading it.
    let waiting = Number.POSITIVE_INFINITY;
    for (const until = Date.now() + 8_000; Date.now() < until;) {
      await new Promise((resolve) => setTimeout(resolve, 500));
      const now = n2.lastWs!.bufferedAmount;
      if (now >= waiting) break;
      waiting = now;
    }
    console.log(`live view flood: ${waiting} of ${messages * 64 * 1024} bytes still wait at the node while the browser does not read`);
    // What is not waiting at the node is in the gateway or in the kernel's socket buffers.
    assert.ok(waiting > 48 * 1024 * 1024, `only ${waiting} bytes still wait at the node: the gateway read the rest`);
    ws.resume();
    const deadline = Date.now() + 20_000;
    while (received < messages * 64 * 1024 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(received, messages * 64 * 1024, 'everything arrives once the browser reads again');
    ws.close();
  });

  it("an unknown view token gets a node's own refusal page; open routes carry no tenant and no key", async () => {
    const res = await fetch(`${c.url}/v1/views/no-such-token`, { headers: auth(c.keyA) });
    assert.equal(res.status, 404);
    assert.match(await res.text(), /This live view cannot be opened/);
    const seen = [...n1.seen, ...n2.seen].filter((r) => r.url === '/v1/views/no-such-token');
    assert.equal(seen.length, 1);
    assert.equal(seen[0]!.headers['x-sbx-tenant'], undefined);
    assert.equal(seen[0]!.headers.authorization, undefined);
  });

  it("a link token's page opens without a key, at the session's node, which checks the token", async () => {
    const res = await fetch(`${c.url}/v1/sessions/umbrellab1/trajectory/view?token=tok`);
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { page: 'trajectory', node: 'n2', token: 'tok' });
    const seen = n2.seen.filter((r) => r.url.startsWith('/v1/sessions/umbrellab1/trajectory/view'));
    assert.equal(seen.at(-1)!.headers['x-sbx-tenant'], undefined, 'no tenant: the node checks the token');
    // Not a page a link opens: a key is required.
    const action = await fetch(`${c.url}/v1/sessions/umbrellab1/actions?token=tok`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    assert.equal(action.status, 401);
    assert.equal((await json<ErrorBody>(action)).error.code, 'missing_api_key');
  });

  it('a view URL and a run id made through one gateway work through another', async () => {
    const { createGateway } = await import('../../src/cluster/gateway/gateway.js');
    const { pino } = await import('pino');
    const { FAST_SETTINGS } = await import('./gateway-cluster.js');
    const { TEST_SECRET } = await import('./fake-node.js');
    const second = await createGateway({ store: c.store, secret: TEST_SECRET, settings: FAST_SETTINGS, logger: pino({ level: 'silent' }) });
    await second.start({ host: '127.0.0.1', port: 0 });
    try {
      const other = `http://127.0.0.1:${(second.app.server.address() as import('node:net').AddressInfo).port}`;
      const made = await fetch(`${c.url}/v1/sessions/acmeaaaaa2/views`, {
        method: 'POST',
        headers: { ...auth(c.keyA), 'content-type': 'application/json' },
        body: '{"mode":"view"}',
      });
      const token = (await json<{ url: string }>(made)).url.split('/v1/views/')[1]!;
      n2.wsMessages.length = 0;
      const ws = new WebSocket(`${other.replace(/^http/, 'ws')}/v1/views/${token}/rfb`);
      await new Promise<void>((resolve, reject) => {
        ws.once('open', () => resolve());
        ws.once('error', reject);
      });
      const echoed = new Promise<string>((resolve) => ws.once('message', (data: Buffer) => resolve(data.toString())));
      ws.send('via-two');
      assert.equal(await echoed, 'echo:via-two');
      ws.close();
      const run = await json<{ id: string }>(
        await fetch(`${c.url}/v1/runs`, {
          method: 'POST',
          headers: { ...auth(c.keyA), 'content-type': 'application/json' },
          body: JSON.stringify({ task: 'x', sessionId: 'acmeaaaaa1' }),
        }),
      );
      const got = await fetch(`${other}/v1/runs/${run.id}`, { headers: auth(c.keyA) });
      assert.equal((await json<{ node: string }>(got)).node, 'n1');
    } finally {
      await second.close();
    }
  });

  it("a node found lost by this gateway's sweep answers 410 at once, not after the cache", async () => {
    // A gateway marks nodes lost only once it has seen the database answer for lostAfterMs:
    // a sweep now starts that clock, whatever the earlier tests did.
    await c.gateway.sweep();
    await c.store.registerNode('brief', 'instance-brief', { ...n1.report(), url: n1.url });
    await c.store.place(
      'briefsess1',
      'acme',
      { runtime: 'container', template: 'desktop', memoryMiB: 1024, vcpus: 1 },
      ['n1', 'n2', 'dead', 'gone'].filter((n) => n !== 'brief'),
    );
    await c.store.confirm('briefsess1');
    n1.sessions.set('briefsess1', 'acme');
    assert.equal((await fetch(`${c.url}/v1/sessions/briefsess1`, { headers: auth(c.keyA) })).status, 200, 'routed, and now cached');
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    await c.gateway.sweep();
    assert.equal((await fetch(`${c.url}/v1/sessions/briefsess1`, { headers: auth(c.keyA) })).status, 410);
  });

  it('routes runs: to the session of sessionId, by run id afterwards; another tenant gets 404', async () => {
    const made = await fetch(`${c.url}/v1/runs`, {
      method: 'POST',
      headers: { ...auth(c.keyA), 'content-type': 'application/json' },
      body: JSON.stringify({ task: 'x', sessionId: 'acmeaaaaa2' }),
    });
    assert.equal(made.status, 201);
    const run = await json<{ id: string; node: string }>(made);
    assert.equal(run.node, 'n2');
    const got = await fetch(`${c.url}/v1/runs/${run.id}`, { headers: auth(c.keyA) });
    assert.equal((await json<{ node: string }>(got)).node, 'n2');
    const other = await fetch(`${c.url}/v1/runs/${run.id}`, { headers: auth(c.keyB) });
    assert.deepEqual((await json<ErrorBody>(other)).error, { code: 'not_found', message: `run ${run.id} does not exist` });
    const otherSession = await fetch(`${c.url}/v1/runs`, {
      method: 'POST',
      headers: { ...auth(c.keyB), 'content-type': 'application/json' },
      body: JSON.stringify({ task: 'x', sessionId: 'acmeaaaaa2' }),
    });
    assert.equal(otherSession.status, 404);
    // Without a session: placed like a create, the node told the id.
    const placed = await fetch(`${c.url}/v1/runs`, {
      method: 'POST',
      headers: { ...auth(c.keyA), 'content-type': 'application/json' },
      body: JSON.stringify({ task: 'x' }),
    });
    assert.equal(placed.status, 201);
    const placedRun = await json<{ id: string; sessionId: string; node: string }>(placed);
    const entry = await c.store.lookup(placedRun.sessionId);
    assert.equal(entry?.state, 'live');
    assert.equal(entry?.node, placedRun.node);
    assert.equal(await c.store.lookupRun(placedRun.id), placedRun.sessionId);
  });

  it('creates: a new id placed and confirmed; a node that fails it is released and another asked', async () => {
    n1.createAnswer = { status: 503, code: 'host_memory_low' };
    n2.createAnswer = undefined;
    try {
      for (let i = 0; i < 4; i++) {
        const res = await fetch(`${c.url}/v1/sessions`, {
          method: 'POST',
          headers: { ...auth(c.keyA), 'content-type': 'application/json' },
          body: '{"template":"minimal"}',
        });
        assert.equal(res.status, 201);
        const made = await json<{ id: string; tenant: string; node: string }>(res);
        assert.equal(made.node, 'n2');
        assert.equal(made.tenant, 'acme');
        assert.equal((await c.store.lookup(made.id))?.state, 'live');
      }
      // A node's 4xx is the answer, not retried.
      n2.createAnswer = { status: 429, code: 'tenant_session_limit' };
      n1.createAnswer = { status: 429, code: 'tenant_session_limit' };
      const limited = await fetch(`${c.url}/v1/sessions`, { method: 'POST', headers: { ...auth(c.keyA), 'content-type': 'application/json' }, body: '{}' });
      assert.equal(limited.status, 429);
      assert.equal((await json<ErrorBody>(limited)).error.code, 'tenant_session_limit');
      // Nobody: the 503 says why.
      n1.createAnswer = { status: 503 };
      n2.createAnswer = { status: 503 };
      const none = await fetch(`${c.url}/v1/sessions`, { method: 'POST', headers: { ...auth(c.keyA), 'content-type': 'application/json' }, body: '{}' });
      assert.equal(none.status, 503);
      assert.equal((await json<ErrorBody>(none)).error.code, 'unavailable');
      // Bad input: the node's own 400s, from the same schema; an unknown template lists the ones there are.
      const bad = await fetch(`${c.url}/v1/sessions`, {
        method: 'POST',
        headers: { ...auth(c.keyA), 'content-type': 'application/json' },
        body: '{"width":5}',
      });
      assert.equal(bad.status, 400);
      assert.match((await json<ErrorBody>(bad)).error.message, /width/);
      const unknown = await fetch(`${c.url}/v1/sessions`, {
        method: 'POST',
        headers: { ...auth(c.keyA), 'content-type': 'application/json' },
        body: '{"template":"nope"}',
      });
      assert.deepEqual((await json<ErrorBody>(unknown)).error, {
        code: 'invalid_request',
        message: 'template: unknown template "nope"; available: desktop, minimal',
      });
    } finally {
      n1.createAnswer = undefined;
      n2.createAnswer = undefined;
    }
  });

  it("lists the tenant's sessions from every node", async () => {
    const res = await fetch(`${c.url}/v1/sessions`, { headers: auth(c.keyB) });
    const { sessions } = await json<{ sessions: Array<{ id: string; tenant: string }> }>(res);
    assert.deepEqual(
      sessions.map((s) => s.id),
      ['umbrellab1'],
    );
    const mine = await json<{ sessions: Array<{ id: string; node: string }> }>(await fetch(`${c.url}/v1/sessions`, { headers: auth(c.keyA) }));
    assert.ok(mine.sessions.some((s) => s.id === 'acmeaaaaa1' && s.node === 'n1'));
    assert.ok(mine.sessions.some((s) => s.id === 'acmeaaaaa2' && s.node === 'n2'));
    assert.ok(mine.sessions.every((s) => s.id !== 'umbrellab1'));
  });

  it('/mcp: the MCP SDK client through the gateway, its tools routed like any request', async () => {
    const transport = new StreamableHTTPClientTransport(new URL(`${c.url}/mcp`), { requestInit: { headers: auth(c.keyB) } });
    const client = new Client({ name: 'gateway-test', version: '1.0.0' });
    await client.connect(transport);
    try {
      const listed = (await client.callTool({ name: 'sandbox_list', arguments: {} })) as { content: Array<{ text: string }>; isError?: boolean };
      assert.ok(!listed.isError, listed.content[0]?.text);
      assert.match(listed.content[0]!.text, /umbrellab1/);
      assert.doesNotMatch(listed.content[0]!.text, /acmeaaaaa/);
      const bash = (await client.callTool({ name: 'bash', arguments: { sandbox_id: 'umbrellab1', command: 'uname' } })) as {
        content: Array<{ text: string }>;
        isError?: boolean;
      };
      assert.equal(bash.content[0]!.text, 'n2 ran uname for umbrella', "a tool's POST is forwarded to the session's node, as the caller");
      const before = n1.seen.length;
      const destroyed = (await client.callTool({ name: 'sandbox_destroy', arguments: { sandbox_id: 'acmeaaaaa1' } })) as {
        content: Array<{ text: string }>;
        isError?: boolean;
      };
      assert.equal(destroyed.isError, true);
      assert.match(destroyed.content[0]!.text, /does not exist/);
      assert.equal(n1.seen.length, before, "another tenant's destroy never reached the node");
    } finally {
      await client.close();
    }
  });

  it('a node that does not answer is a 503 node_unreachable, not a 500 or a hang', async () => {
    const dead = { ...n1.report(), url: 'http://127.0.0.1:9' };
    await c.store.registerNode('dead', 'instance-dead', dead);
    await c.store.place('deadsess01', 'acme', { runtime: 'container', template: 'desktop', memoryMiB: 1024, vcpus: 1 }, ['n1', 'n2']);
    await c.store.confirm('deadsess01');
    const started = performance.now();
    const res = await fetch(`${c.url}/v1/sessions/deadsess01/actions`, {
      method: 'POST',
      headers: { ...auth(c.keyA), 'content-type': 'application/json' },
      body: '{"action":"screenshot"}',
    });
    assert.equal(res.status, 503);
    const body = await json<ErrorBody>(res);
    assert.equal(body.error.code, 'node_unreachable');
    assert.match(body.error.message, /node dead/);
    assert.ok(performance.now() - started < 2_000);
  });

  it('a session whose node was lost answers 410 session_lost with the node and when it was last heard', async () => {
    const report = { ...n1.report(), url: 'http://127.0.0.1:9' };
    await c.store.registerNode('gone', 'instance-gone', report);
    await c.store.place('lostsess01', 'acme', { runtime: 'container', template: 'desktop', memoryMiB: 1024, vcpus: 1 }, ['n1', 'n2', 'dead']);
    await c.store.confirm('lostsess01');
    // A gateway marks nodes lost only once it has seen the database answer for lostAfterMs
    // (after an outage every heartbeat is old): this sweep sees it, the next may mark.
    await c.gateway.sweep();
    // Silent for 1.5 s while n1 and n2 heartbeat every 200 ms: only it is stale at 1 s.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    await c.gateway.sweep();
    assert.equal((await c.store.getNode('gone'))?.state, 'lost');
    assert.equal((await c.store.getNode('n1'))?.state, 'up');
    const res = await fetch(`${c.url}/v1/sessions/lostsess01`, { headers: auth(c.keyA) });
    assert.equal(res.status, 410);
    const body = await json<ErrorBody>(res);
    assert.equal(body.error.code, 'session_lost');
    assert.match(body.error.message, /^session lostsess01 was on node gone, which stopped answering at \d{4}-\d\d-\d\dT.*; create a new session$/);
    // Another tenant still gets the 404, not the 410.
    assert.equal((await fetch(`${c.url}/v1/sessions/lostsess01`, { headers: auth(c.keyB) })).status, 404);
    // The list shows it as lost.
    const { sessions } = await json<{ sessions: Array<{ id: string; state: string }> }>(await fetch(`${c.url}/v1/sessions`, { headers: auth(c.keyA) }));
    assert.equal(sessions.find((s) => s.id === 'lostsess01')?.state, 'lost');
  });

  it('a request in flight to a node that goes silent ends when the node is found lost (502), not after the answer timeout', async () => {
    await c.store.registerNode('stuck', 'instance-stuck', { ...n1.report(), url: n1.url });
    const others = (await c.store.listNodes()).map((node) => node.name).filter((name) => name !== 'stuck');
    await c.store.place('stucksess1', 'acme', { runtime: 'container', template: 'desktop', memoryMiB: 1024, vcpus: 1 }, others);
    await c.store.confirm('stucksess1');
    const started = performance.now();
    const pending = fetch(`${c.url}/v1/sessions/stucksess1/desktop/windows`, { headers: auth(c.keyA) });
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    await c.gateway.sweep();
    const res = await pending;
    assert.equal(res.status, 502);
    const body = await json<ErrorBody>(res);
    assert.equal(body.error.code, 'node_failed');
    assert.match(body.error.message, /node stuck/);
    assert.ok(performance.now() - started < 4_000);
    assert.equal((await fetch(`${c.url}/v1/sessions/stucksess1`, { headers: auth(c.keyA) })).status, 410, 'and from then on, 410');
  });

  it("lists the cluster's templates: every node's, merged by name", async () => {
    const { templates } = await json<{ templates: Array<{ name: string; built: boolean }> }>(await fetch(`${c.url}/v1/templates`, { headers: auth(c.keyA) }));
    const byName = new Map(templates.map((t) => [t.name, t.built]));
    assert.equal(byName.get('desktop'), true, 'built where any node built it');
    assert.equal(byName.get('only-n1'), true);
    assert.equal(byName.get('only-n2'), true);
  });

  it("serves its own /metrics (the forwarded requests counted) and a node's /openapi.json", async () => {
    const metrics = await (await fetch(`${c.url}/metrics`)).text();
    assert.match(metrics, /sandbox_gateway_proxied_requests_total\{family="sessions",status="404"\} \d+/);
    assert.match(metrics, /sandbox_gateway_placement_tries_total\{outcome="refused"\} \d+/);
    assert.match(metrics, /sandbox_gateway_nodes_lost_total \d+/);
    const openapi = await fetch(`${c.url}/openapi.json`);
    assert.equal(openapi.status, 200);
    assert.equal(((await openapi.json()) as { openapi: string }).openapi, '3.0.3');
  });

  it('a store that does not answer is a 503 cluster_state_unavailable within its deadline, and recovers', async () => {
    const restore = await opts.breakStore(c.store);
    try {
      const started = performance.now();
      const res = await fetch(`${c.url}/v1/sessions/acmeaaaaa9`, { headers: auth(c.keyA) });
      const elapsed = performance.now() - started;
      assert.equal(res.status, 503);
      assert.equal((await json<ErrorBody>(res)).error.code, 'cluster_state_unavailable');
      assert.ok(elapsed < 3_000, `answered in ${Math.round(elapsed)} ms`);
    } finally {
      await restore();
    }
    const deadline = Date.now() + 10_000;
    let status = 0;
    while (Date.now() < deadline && status !== 200) {
      status = (await fetch(`${c.url}/v1/sessions/acmeaaaaa1`, { headers: auth(c.keyA) })).status;
      if (status !== 200) await new Promise((resolve) => setTimeout(resolve, 200));
    }
    assert.equal(status, 200, 'the gateway recovers without a restart');
  });
}

/**
 * Issue 24's doors through a cluster (issue 22): two `sbx node`s, two `sbx gateway`s, one
 * PostgreSQL. A session placed through gateway 1 is reached through either gateway as on a
 * single `sbx serve`: a server in its guest by the path-based and the host-based URL, with
 * the API key or a public URL's port token (in the query, then its cookie); its WebSockets,
 * a process's xterm socket and its output's event stream; the desktop's Chromium by
 * Playwright's connectOverCDP. The guest never sees the key, the token, or the cluster's
 * credential; another tenant's session is the same 404, and a port token opens nothing else.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { chromium } from 'playwright-core';
import { WebSocket } from 'ws';
import { launchBrowser } from './helpers/browser.js';
import { CLUSTER_SECRET, startCluster, type TestCluster } from './helpers/cluster.js';
import { GUEST_WEB_SERVER } from './helpers/guest-web.js';
import { readProcessOutput } from './helpers/process-api.js';

const DOMAIN = 'sbx.test';
type Json = Record<string, unknown>;

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  json: Json;
}

/** A request with any Host header (fetch will not set one). */
function request(
  url: string,
  opts: { method?: string; headers?: Record<string, string>; body?: string; host?: string; localAddress?: string } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const target = new URL(url);
    const req = http.request(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname + target.search,
        method: opts.method ?? 'GET',
        headers: { ...(opts.host ? { host: opts.host } : {}), ...(opts.body !== undefined ? { 'content-type': 'application/json' } : {}), ...opts.headers },
        agent: false,
        ...(opts.localAddress ? { localAddress: opts.localAddress } : {}),
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const body = Buffer.concat(chunks);
          let json: Json = {};
          try {
            json = JSON.parse(body.toString()) as Json;
          } catch {
            // not JSON
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body, json });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** A WebSocket that opened, or the HTTP status it was refused with. */
function openSocket(url: string, headers: Record<string, string> = {}): Promise<{ ws?: WebSocket; status?: number; body?: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    ws.once('open', () => resolve({ ws }));
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => {
        _req.destroy(); // ws leaves a refused request's socket to whoever listens for the refusal
        resolve({ status: res.statusCode ?? 0, body });
      });
    });
    ws.once('error', reject);
  });
}

/** The next message of a socket, as text. */
function nextMessage(ws: WebSocket): Promise<{ data: Buffer; binary: boolean }> {
  return new Promise((resolve, reject) => {
    ws.once('message', (data: Buffer, binary: boolean) => resolve({ data, binary }));
    ws.once('close', () => reject(new Error('closed before a message')));
  });
}

describe("issue 24's doors through a cluster's gateways", { timeout: 600_000 }, () => {
  let cluster: TestCluster;
  let g1: string;
  let g2: string;
  let id = '';
  let theirs = '';

  const api = (base: string, method: string, path: string, headers: Record<string, string>, body?: unknown) =>
    request(`${base}${path}`, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
  const portHost = (base: string, sessionId: string, port: number) => `${port}-${sessionId}.${DOMAIN}:${new URL(base).port}`;

  before(async () => {
    cluster = await startCluster(
      [
        { name: 'n1', vcpus: 8 },
        { name: 'n2', vcpus: 8 },
      ],
      2,
      { SBX_TEMPLATE: 'desktop', SBX_PORTS_DOMAIN: DOMAIN },
    );
    [g1, g2] = cluster.gateways.map((g) => g.url) as [string, string];
    const made = await api(g1, 'POST', '/v1/sessions', cluster.acme, { width: 1024, height: 768 });
    assert.equal(made.status, 201, made.body.toString());
    id = made.json.id as string;
    const other = await api(g1, 'POST', '/v1/sessions', cluster.other, {});
    assert.equal(other.status, 201, other.body.toString());
    theirs = other.json.id as string;
    // The guest's web server, put there and started through gateway 2 (fs, files, processes).
    const dir = await api(g2, 'POST', `/v1/sessions/${id}/fs/mkdir`, cluster.acme, { path: '/tmp/www' });
    assert.equal(dir.status, 201, dir.body.toString());
    for (const [path, text] of [
      ['/tmp/guest-web.py', GUEST_WEB_SERVER],
      ['/tmp/www/hello.txt', 'hello from the guest\n'],
      ['/tmp/www/index.html', '<title>guest page</title><p id="p">served in the guest</p>'],
    ] as const) {
      const put = await request(`${g2}/v1/sessions/${id}/files?path=${encodeURIComponent(path)}`, {
        method: 'PUT',
        headers: { ...cluster.acme, 'content-type': 'application/octet-stream' },
        body: text,
      });
      assert.ok(put.status === 200 || put.status === 201 || put.status === 204, `${path}: ${put.status} ${put.body.toString()}`);
    }
    const server = await api(g2, 'POST', `/v1/sessions/${id}/processes`, cluster.acme, { argv: ['python3', '/tmp/guest-web.py', '3000'], cwd: '/tmp/www' });
    assert.equal(server.status, 201, server.body.toString());
    const deadline = Date.now() + 20_000;
    for (;;) {
      const probe = await api(g2, 'GET', `/v1/sessions/${id}/ports/3000/hello.txt`, cluster.acme);
      if (probe.status === 200) break;
      assert.ok(Date.now() < deadline, `the guest's server never answered: ${probe.status} ${probe.body.toString()}`);
      await sleep(200);
    }
  });

  after(async () => {
    await cluster?.stop();
  });

  it('a public URL made through gateway 1 opens through gateway 2 by its token (query, then cookie); the guest sees no key, token or cluster credential', async () => {
    const made = await api(g1, 'POST', `/v1/sessions/${id}/ports`, cluster.acme, { port: 3000, public: true });
    assert.equal(made.status, 201, made.body.toString());
    const token = made.json.token as string;
    assert.match(token, /^prt_/);
    assert.equal(made.json.url, `${g1}/v1/sessions/${id}/ports/3000/?sbx_token=${token}`, 'the URL names the gateway it was asked of');
    assert.equal(made.json.hostUrl, `http://${portHost(g1, id, 3000)}/?sbx_token=${token}`);

    // The token, on the other gateway, without a key.
    // From another loopback address than the gateway's own, to tell the client from the gateway.
    const byQuery = await request(`${g2}/v1/sessions/${id}/ports/3000/headers?a=1&sbx_token=${token}`, { localAddress: '127.0.0.2' });
    assert.equal(byQuery.status, 200, byQuery.body.toString());
    const seen = byQuery.json as Record<string, string>;
    assert.equal(seen[':path'], '/headers?a=1', 'the token taken out of the query');
    assert.equal(seen['x-forwarded-for'], '127.0.0.2', "the guest is told the client's address, not the gateway's");
    assert.equal(seen.authorization, undefined);
    assert.equal(seen['x-forwarded-prefix'], `/v1/sessions/${id}/ports/3000`);
    const cookie = String(byQuery.headers['set-cookie']);
    assert.match(cookie, new RegExp(`^sbx_port_token=${token}; Path=/v1/sessions/${id}/ports/3000/; HttpOnly`));
    // What a browser sends next: the cookie alone, with one of the page's own.
    const byCookie = await request(`${g1}/v1/sessions/${id}/ports/3000/headers`, { headers: { cookie: `app=1; sbx_port_token=${token}` } });
    assert.equal(byCookie.status, 200, byCookie.body.toString());
    assert.equal((byCookie.json as Record<string, string>).cookie, 'app=1', 'the token cookie taken out');
    // With the key, through either: what the guest sees has none of ours.
    const byKey = await api(g2, 'GET', `/v1/sessions/${id}/ports/3000/headers`, cluster.acme);
    assert.equal(byKey.status, 200);
    for (const answer of [byQuery, byCookie, byKey]) {
      const text = answer.body.toString();
      assert.ok(!text.includes(token) && !text.includes(cluster.acme.authorization!.slice(7)), text);
      assert.ok(!text.includes(CLUSTER_SECRET), `the cluster's credential reached the guest: ${text}`);
      assert.doesNotMatch(text, /x-sbx-/, text);
    }

    // A made-up token, a token of this port on another session (another tenant's, on whichever
    // node), no credential at all: refused as a single host refuses them.
    const madeUp = await request(`${g2}/v1/sessions/${id}/ports/3000/hello.txt?sbx_token=prt_aaaaaaaaaaaa_${'b'.repeat(43)}`);
    assert.equal(madeUp.status, 401);
    assert.equal((madeUp.json.error as Json).code, 'invalid_port_token');
    const elsewhere = await request(`${g2}/v1/sessions/${theirs}/ports/3000/hello.txt?sbx_token=${token}`);
    assert.equal(elsewhere.status, 401);
    assert.equal((elsewhere.json.error as Json).code, 'invalid_port_token');
    const otherPort = await request(`${g2}/v1/sessions/${id}/ports/3001/hello.txt?sbx_token=${token}`);
    assert.equal(otherPort.status, 401);
    assert.equal((await request(`${g2}/v1/sessions/${id}/ports/3000/hello.txt`)).status, 401);
    // The token opens no API route either.
    assert.equal((await request(`${g2}/v1/sessions/${id}/screenshot?sbx_token=${token}`)).status, 401);

    // Revoked through gateway 2: from then on it opens nothing, through either.
    assert.equal((await api(g2, 'DELETE', `/v1/sessions/${id}/port-tokens/${String(made.json.tokenId)}`, cluster.acme)).status, 204);
    const revoked = await request(`${g1}/v1/sessions/${id}/ports/3000/hello.txt?sbx_token=${token}`);
    assert.equal(revoked.status, 401);
    assert.equal((revoked.json.error as Json).code, 'revoked_port_token');
  });

  it('host-based URLs arrive at a gateway: the guest at the root path of its own origin, with the key or a token', async () => {
    const made = await api(g2, 'POST', `/v1/sessions/${id}/ports`, cluster.acme, { port: 3000, public: true });
    const token = made.json.token as string;
    const host = portHost(g1, id, 3000);
    const page = await request(`${g1}/index.html?sbx_token=${token}`, { host });
    assert.equal(page.status, 200, page.body.toString());
    assert.match(page.body.toString(), /served in the guest/);
    assert.match(String(page.headers['set-cookie']), /; Path=\/; HttpOnly/, 'the host-based cookie is for the whole origin');
    assert.equal(page.headers['content-security-policy'], undefined, 'a real origin: no sandbox policy');
    const headers = await request(`${g1}/headers`, { host, headers: cluster.acme });
    assert.equal(headers.status, 200, headers.body.toString());
    const seen = headers.json as Record<string, string>;
    assert.equal(seen[':path'], '/headers', 'the root path, not a prefix');
    assert.equal(seen['x-forwarded-host'], host);
    assert.equal(seen['x-forwarded-prefix'], undefined);
    assert.ok(!headers.body.toString().includes(CLUSTER_SECRET));
    // Every path on such a name is the guest's: the API is not served there.
    const api404 = await request(`${g2}/v1/sessions`, { host: portHost(g2, id, 3000), headers: cluster.acme });
    assert.ok(!('sessions' in api404.json), `the API answered on a port's name: ${api404.body.toString().slice(0, 200)}`);
    // Another tenant's key, a made-up session, no credential: the single host's answers.
    const other = await request(`${g2}/hello.txt`, { host: portHost(g2, id, 3000), headers: cluster.other });
    assert.equal(other.status, 404);
    assert.deepEqual(other.json, { error: { code: 'not_found', message: `session ${id} does not exist` } });
    assert.equal((await request(`${g2}/hello.txt`, { host: portHost(g2, id, 3000) })).status, 401);
  });

  it("red team: a host-based request for a port of one's own session, with E2B's sandbox header naming another tenant's on the same node, reaches nothing of theirs", async () => {
    // Another tenant's session on the node that holds acme's (each node keeps its sessions' dirs).
    const holder = cluster.nodes.find((node) => existsSync(path.join(node.stateDir, id)));
    assert.ok(holder, `no node holds ${id}`);
    let mine = '';
    for (let i = 0; i < 6 && !mine; i++) {
      const made = await api(g1, 'POST', '/v1/sessions', cluster.other, {});
      assert.equal(made.status, 201, made.body.toString());
      if (existsSync(path.join(holder.stateDir, made.json.id as string))) mine = made.json.id as string;
    }
    assert.ok(mine, `no session of the other tenant landed on ${holder.name}`);
    const asked = (method: string, url: string, body?: string) =>
      request(`${g2}${url}`, {
        method,
        host: portHost(g2, mine, 3000),
        headers: { ...cluster.other, 'e2b-sandbox-id': id, 'x-access-token': 'guessed', ...(body ? { 'content-type': 'application/connect+json' } : {}) },
        ...(body ? { body } : {}),
      });
    const read = await asked('GET', '/files?path=/tmp/www/hello.txt');
    assert.ok(!read.body.toString().includes('hello from the guest'), `acme's file was read: ${read.status}`);
    assert.notEqual(read.status, 200);
    const start = await asked('POST', '/process.Process/Start', JSON.stringify({ process: { cmd: '/bin/sh', args: ['-c', 'touch /tmp/www/pwned'] } }));
    assert.notEqual(start.status, 200, start.body.toString().slice(0, 200));
    await sleep(500);
    const pwned = await api(g1, 'GET', `/v1/sessions/${id}/files?path=${encodeURIComponent('/tmp/www/pwned')}`, cluster.acme);
    assert.equal(pwned.status, 404, "no command ran in acme's sandbox");
    assert.equal((await api(g1, 'DELETE', `/v1/sessions/${mine}`, cluster.other)).status, 200);
  });

  it("WebSockets through a gateway: a guest port's (path-based by token, host-based by key) and a process's xterm socket; output as events", async () => {
    const made = await api(g1, 'POST', `/v1/sessions/${id}/ports`, cluster.acme, { port: 3000, public: true });
    const token = made.json.token as string;
    const byToken = await openSocket(`${g2.replace('http', 'ws')}/v1/sessions/${id}/ports/3000/ws?sbx_token=${token}`);
    assert.ok(byToken.ws, `refused: ${byToken.status} ${byToken.body}`);
    byToken.ws.send('ping through the gateway');
    const echoed = await nextMessage(byToken.ws);
    assert.equal(echoed.data.toString(), 'ping through the gateway');
    const binary = Buffer.alloc(200_000, 9);
    byToken.ws.send(binary);
    const back = await nextMessage(byToken.ws);
    assert.ok(back.binary && back.data.equals(binary), 'a 200 kB binary message came back whole');
    byToken.ws.close();

    const byHost = await openSocket(`${g1.replace('http', 'ws')}/ws`, { ...cluster.acme, host: portHost(g1, id, 3000) });
    assert.ok(byHost.ws, `refused: ${byHost.status} ${byHost.body}`);
    byHost.ws.send('by host');
    assert.equal((await nextMessage(byHost.ws)).data.toString(), 'by host');
    byHost.ws.close();

    // Refusals come before any upgrade, as HTTP: another tenant's key, a token of another session.
    const foreign = await openSocket(`${g2.replace('http', 'ws')}/v1/sessions/${id}/ports/3000/ws`, cluster.other);
    assert.equal(foreign.status, 404, foreign.body);
    const wrong = await openSocket(`${g2.replace('http', 'ws')}/v1/sessions/${theirs}/ports/3000/ws?sbx_token=${token}`);
    assert.equal(wrong.status, 401, wrong.body);

    // A terminal: bash in a pty, started through gateway 1, typed into through gateway 2.
    const started = await api(g1, 'POST', `/v1/sessions/${id}/processes`, cluster.acme, {
      argv: ['bash', '--norc', '-i'],
      pty: { cols: 80, rows: 24 },
      env: { PS1: '$ ' },
    });
    assert.equal(started.status, 201, started.body.toString());
    const pid = started.json.pid as number;
    const terminal = await openSocket(`${g2.replace('http', 'ws')}/v1/sessions/${id}/processes/${pid}/ws`, cluster.acme);
    assert.ok(terminal.ws, `refused: ${terminal.status} ${terminal.body}`);
    let screen = '';
    terminal.ws.on('message', (data: Buffer) => (screen += data.toString('utf8')));
    terminal.ws.send('echo $((6*7))-through-the-gateway; stty size\r');
    const deadline = Date.now() + 10_000;
    while (!/42-through-the-gateway[\s\S]*24 80/.test(screen) && Date.now() < deadline) await sleep(25);
    assert.match(screen, /42-through-the-gateway[\s\S]*24 80/);
    terminal.ws.send(JSON.stringify({ type: 'resize', cols: 100, rows: 30 }));
    await sleep(100);
    terminal.ws.send('stty size; exit\r');
    const closed = await new Promise<{ code: number; reason: string }>((resolve) =>
      terminal.ws!.once('close', (code, reason) => resolve({ code, reason: reason.toString() })),
    );
    assert.match(screen, /30 100/);
    assert.equal(closed.code, 1000, 'the exit, as the node closed it');
    assert.equal((JSON.parse(closed.reason) as { exitCode: number }).exitCode, 0);
    assert.equal((await openSocket(`${g1.replace('http', 'ws')}/v1/sessions/${id}/processes/${pid}/ws`, cluster.other)).status, 404);

    // A process's output as Server-Sent Events through the other gateway.
    const counted = await api(g2, 'POST', `/v1/sessions/${id}/processes`, cluster.acme, {
      cmd: 'for i in 1 2 3; do echo line-$i; sleep 0.2; done; echo oops >&2',
    });
    const output = await readProcessOutput(`${g1}/v1/sessions/${id}/processes/${String(counted.json.pid)}/output`, { headers: cluster.acme });
    assert.equal(output.stdout.toString(), 'line-1\nline-2\nline-3\n');
    assert.equal(output.stderr.toString(), 'oops\n');
    assert.equal(output.exit?.exitCode, 0);
  });

  it("Playwright's connectOverCDP through a gateway: the desktop's Chromium loads a page served in the guest", async () => {
    const made = await api(g1, 'POST', `/v1/sessions/${id}/browser`, cluster.acme, {});
    assert.equal(made.status, 200, made.body.toString());
    const cdpUrl = made.json.cdpUrl as string;
    assert.match(
      cdpUrl,
      new RegExp(`^${g1.replace('http', 'ws').replace(/\./g, '\\.')}/v1/sessions/${id}/ports/9222/devtools/browser/[0-9a-f-]+\\?sbx_token=prt_`),
    );
    // Through the other gateway: any gateway takes the URL.
    const browser = await chromium.connectOverCDP(cdpUrl.replace(new URL(g1).host, new URL(g2).host));
    try {
      const context = browser.contexts()[0]!;
      const page = context.pages()[0] ?? (await context.newPage());
      await page.goto('http://127.0.0.1:3000/index.html');
      assert.equal(await page.title(), 'guest page');
      assert.equal(await page.textContent('#p'), 'served in the guest');
    } finally {
      await browser.close().catch(() => undefined);
    }
    // Another tenant's key on the browser's route: the same 404.
    assert.equal((await api(g2, 'POST', `/v1/sessions/${id}/browser`, cluster.other, {})).status, 404);
  });

  it('a terminal link made through gateway 1 opens in Chromium through gateway 2: its page, files and shell socket', async () => {
    const made = await api(g1, 'POST', `/v1/sessions/${id}/links`, cluster.acme, { purpose: 'terminal' });
    assert.equal(made.status, 201, made.body.toString());
    const browser = await launchBrowser();
    try {
      const page = await browser.newPage();
      await page.goto(`${g2}${made.json.path as string}`);
      await page.waitForSelector('#state.connected', { timeout: 20_000 });
      const text = () =>
        page.evaluate(() => {
          const term = (
            window as unknown as { sbxTerminal: { buffer: { active: { length: number; getLine(i: number): { translateToString(): string } | undefined } } } }
          ).sbxTerminal;
          return Array.from({ length: term.buffer.active.length }, (_, i) => term.buffer.active.getLine(i)?.translateToString() ?? '').join('\n');
        });
      // Typed before bash's readline is up, the line is half eaten (CI once saw `6*7))"` alone).
      const promptBy = Date.now() + 20_000;
      while (!(await text()).includes('$') && Date.now() < promptBy) await sleep(100);
      await page.keyboard.type('echo "gw=$((6*7))"');
      await page.keyboard.press('Enter');
      const deadline = Date.now() + 20_000;
      while (!(await text()).includes('gw=42') && Date.now() < deadline) await sleep(100);
      assert.match(await text(), /gw=42/);
    } finally {
      await browser.close();
    }
    // The token opens this session's terminal only.
    const token = new URL(made.json.path as string, g1).searchParams.get('token') as string;
    assert.equal((await request(`${g2}/v1/sessions/${theirs}/terminal?token=${token}`)).status, 401);
  });

  it('red team: refused upgrades (no credential, refused by a gateway; a made-up port token, refused by the node) leave no socket open on either', async () => {
    const parts = [...cluster.gateways, ...cluster.nodes].map((part) => part.process.child?.pid as number);
    const descriptors = async () => Promise.all(parts.map(async (pid) => (await readdir(`/proc/${pid}/fd`)).length));
    const before = await descriptors();
    const rounds = 60;
    for (let i = 0; i < rounds; i += 10) {
      const refused = await Promise.all(
        Array.from({ length: 10 }, (_, j) =>
          openSocket(
            j % 2 === 0
              ? `${g2.replace('http', 'ws')}/v1/sessions/${id}/ports/3000/ws`
              : `${g1.replace('http', 'ws')}/v1/sessions/${id}/ports/3000/ws?sbx_token=prt_aaaaaaaaaaaa_${'b'.repeat(43)}`,
          ),
        ),
      );
      assert.deepEqual(
        refused.map((r) => r.status),
        Array.from({ length: 10 }, () => 401),
      );
    }
    await sleep(500);
    const after = await descriptors();
    console.log(`descriptors of the gateways and nodes before ${before.join(', ')}, after ${rounds} refused upgrades ${after.join(', ')}`);
    // Before the fix each refused upgrade held its socket on the gateway (and, for the node's refusals, on the node) for good.
    for (const [i, count] of after.entries()) assert.ok(count - (before[i] as number) <= 8, `process ${parts[i]}: ${before[i]} -> ${count} descriptors`);
  });
});

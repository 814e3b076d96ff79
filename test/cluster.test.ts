/**
 * A cluster on this host (issue 22): PostgreSQL 15, three `sbx node`s of different sizes and
 * two `sbx gateway`s. Creates spread as the scoring says; a session placed through one
 * gateway is driven through the other with every route family; tenants stay apart; a node
 * answers its gateways only; two gateways racing for a node's last place: one wins.
 */
import assert from 'node:assert/strict';
import { readdir, readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { chromium, type Browser } from 'playwright-core';
import sharp from 'sharp';
import { SandboxClient } from '../src/client/index.js';
import { CLUSTER_SECRET, startCluster, type TestCluster } from './helpers/cluster.js';
import { MessagesStandIn } from './helpers/messages-stand-in.js';

interface NodeJson {
  name: string;
  capacity: { sessions: number; vcpus: { committed: number; total: number } };
  state: string;
}

describe('a cluster: three nodes, two gateways, one PostgreSQL', { timeout: 600_000 }, () => {
  let cluster: TestCluster;
  let g1: string;
  let g2: string;
  let browser: Browser;
  const stand = new MessagesStandIn();

  const api = async (base: string, method: string, path: string, headers: Record<string, string>, body?: unknown) => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let json: Record<string, unknown> = {};
    try {
      json = JSON.parse(text) as Record<string, unknown>;
    } catch {
      // not JSON
    }
    return { status: res.status, json, text, headers: res.headers };
  };
  const nodes = async (): Promise<NodeJson[]> => JSON.parse((await cluster.cli(['nodes', '--json', '--db', cluster.pg.url])).stdout) as NodeJson[];
  const sessionsPerNode = async () => Object.fromEntries((await nodes()).map((n) => [n.name, n.capacity.sessions]));

  before(async () => {
    await stand.start();
    cluster = await startCluster(
      [
        { name: 'n1', vcpus: 8 },
        { name: 'n2', vcpus: 16 },
        { name: 'n3', vcpus: 24 },
      ],
      2,
      { ANTHROPIC_API_KEY: 'sk-test-key', ANTHROPIC_BASE_URL: stand.url, SBX_MAX_SESSIONS_PER_TENANT: '40' },
    );
    [g1, g2] = cluster.gateways.map((g) => g.url) as [string, string];
    browser = await chromium.launch({ executablePath: '/usr/bin/chromium' });
  });

  after(async () => {
    await browser?.close();
    await cluster?.stop();
    await stand.stop();
  });

  it('30 creates through one gateway spread over the nodes in proportion to their size (8, 16, 24 vCPUs)', async () => {
    const ids: string[] = [];
    // Six at a time: this host has two cores for three nodes, two gateways and the sandboxes.
    for (let batch = 0; batch < 5; batch++) {
      const made = await Promise.all(Array.from({ length: 6 }, () => api(g1, 'POST', '/v1/sessions', cluster.acme, {})));
      for (const m of made) {
        assert.equal(m.status, 201, m.text);
        ids.push(m.json.id as string);
      }
    }
    const spread = await sessionsPerNode();
    const tries = (await (await fetch(`${g1}/metrics`, { headers: cluster.acme })).text()).split('\n').filter((l) => l.startsWith('sandbox_gateway_placement'));
    console.log(`spread ${JSON.stringify(spread)}; ${tries.join('; ')}`);
    // Scoring every node (K >= 3) by its commitment after placing: 5, 10 and 15 one by one;
    // six at a time a choice may see the others' commitments a moment late (seen: 6, 11, 13;
    // and 6, 12, 12, where two nodes tie). Each node's vCPU commitment stays near the cluster's
    // (30 of 48): the fullest within 1.25 of it, and a larger node never holds fewer.
    const [n1, n2, n3] = [spread.n1 ?? 0, spread.n2 ?? 0, spread.n3 ?? 0];
    const fullest = Math.max(n1 / 8, n2 / 16, n3 / 24) / (30 / 48);
    assert.ok(fullest <= 1.25 && n1 < n2 && n2 <= n3, `${JSON.stringify(spread)}: fullest/ideal ${fullest.toFixed(2)}`);
    // Any gateway's /metrics tells the same spread, and the nodes up.
    const scraped = await (await fetch(`${g2}/metrics`, { headers: cluster.acme })).text();
    for (const [name, count] of Object.entries(spread)) assert.match(scraped, new RegExp(`^sandbox_cluster_node_sessions\\{node="${name}"\\} ${count}$`, 'm'));
    assert.match(scraped, /^sandbox_cluster_nodes\{state="up"\} 3$/m);
    // Each is listed through the other gateway, and destroyed through it.
    const listed = await api(g2, 'GET', '/v1/sessions', cluster.acme);
    assert.equal(listed.status, 200);
    const listedIds = new Set((listed.json.sessions as Array<{ id: string }>).map((s) => s.id));
    for (const id of ids) assert.ok(listedIds.has(id), `${id} listed through gateway 2`);
    for (let i = 0; i < ids.length; i += 6) {
      const gone = await Promise.all(ids.slice(i, i + 6).map((id) => api(g2, 'DELETE', `/v1/sessions/${id}`, cluster.acme)));
      for (const g of gone) assert.equal(g.status, 200, g.text);
    }
    await sleep(3000); // the nodes tell the directory at their next heartbeat
    assert.deepEqual(await sessionsPerNode(), { n1: 0, n2: 0, n3: 0 });
  });

  it('a session placed through gateway 1 is driven through gateway 2: every route family', async () => {
    const made = await api(g1, 'POST', '/v1/sessions', cluster.acme, { record: true });
    assert.equal(made.status, 201, made.text);
    const id = made.json.id as string;
    const client = new SandboxClient({ baseUrl: g2, apiKey: cluster.acme.authorization!.slice('Bearer '.length) });
    const sandbox = await client.connect(id);

    // Screenshot and action.
    const png = await sandbox.screenshot();
    assert.equal(png.subarray(1, 4).toString(), 'PNG');
    const clicked = await sandbox.leftClick(100, 100);
    assert.ok(clicked, 'the action answered');
    // Bash, with what only the guest could compute.
    const bash = await sandbox.bash('echo cluster-$((6*7)) && DISPLAY=:99 xsetroot -solid "#ff00ff"');
    assert.match(JSON.stringify(bash), /cluster-42/);
    // Files, streamed both ways.
    const payload = Buffer.alloc(3 * 1024 * 1024, 7);
    payload.write('head', 0);
    await sandbox.upload('/tmp/through-the-gateway.bin', payload);
    assert.ok((await sandbox.download('/tmp/through-the-gateway.bin')).equals(payload));

    // The live view in Chromium, its URL on gateway 2, the page's WebSocket through it.
    const view = await api(g2, 'POST', `/v1/sessions/${id}/views`, cluster.acme, { mode: 'view' });
    assert.equal(view.status, 201, view.text);
    assert.ok(String(view.json.url).startsWith(g2), `the view URL names the gateway it was asked of: ${String(view.json.url)}`);
    const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    // As test/live-view.test.ts opens it: a page that is not live within 15 s is loaded again
    // (a first load on a busy host can miss it), at most 5 times, its errors kept for the failure.
    const problems: string[] = [];
    page.on('pageerror', (e) => void problems.push(e.message));
    page.on('console', (m) => void (m.type() === 'error' && problems.push(m.text())));
    for (let attempt = 1; ; attempt++) {
      await page.goto(String(view.json.url));
      try {
        await page.waitForFunction(() => document.getElementById('state')?.textContent === 'live', undefined, { timeout: 15_000 });
        break;
      } catch (err) {
        const state = await page.evaluate(() => document.getElementById('state')?.textContent ?? '').catch(() => '?');
        problems.push(`attempt ${attempt}: state "${state}"`);
        if (attempt >= 5) throw new Error(`${(err as Error).message}\n${problems.join('\n')}`);
      }
    }
    if (problems.length > 0) console.log(`live view through the gateway: ${problems.join('; ')}`);
    let seen: number[] = [];
    for (let i = 0; i < 50; i++) {
      const box = (await page.locator('#screen canvas').boundingBox())!;
      const { data, info } = await sharp(await page.screenshot({ clip: box }))
        .raw()
        .toBuffer({ resolveWithObject: true });
      const at = (Math.floor(0.97 * info.height) * info.width + Math.floor(0.97 * info.width)) * info.channels;
      seen = [data[at] ?? -1, data[at + 1] ?? -1, data[at + 2] ?? -1];
      if (Math.abs(seen[0]! - 255) <= 8 && seen[1]! <= 8 && Math.abs(seen[2]! - 255) <= 8) break;
      await sleep(100);
    }
    assert.deepEqual(
      seen.map((v) => Math.round(v / 16)),
      [16, 0, 16],
      `the canvas through the gateway shows the magenta bash set (saw ${seen.join(',')})`,
    );
    // The same token opens the view through gateway 1 too.
    const viaG1 = await fetch(String(view.json.url).replace(g2, g1) + '/state');
    assert.equal(viaG1.status, 200);
    await page.close();

    // Server-Sent Events: the screen stream's first frame through gateway 2.
    const stream = await fetch(`${g2}/v1/sessions/${id}/screen/stream`, { headers: cluster.acme });
    assert.equal(stream.status, 200);
    assert.match(String(stream.headers.get('content-type')), /text\/event-stream/);
    const reader = stream.body!.getReader();
    let sse = '';
    while (!/event: frame/.test(sse)) sse += new TextDecoder().decode((await reader.read()).value);
    await reader.cancel();

    // MCP on gateway 2: its tools go through the gateway's routes.
    const transport = new StreamableHTTPClientTransport(new URL(`${g2}/mcp`), { requestInit: { headers: cluster.acme } });
    const mcp = new Client({ name: 'cluster-test', version: '1.0.0' });
    await mcp.connect(transport);
    const shot = (await mcp.callTool({ name: 'screenshot', arguments: { sandbox_id: id } })) as { content: Array<{ type: string }> };
    assert.ok(
      shot.content.some((c) => c.type === 'image'),
      JSON.stringify(shot).slice(0, 300),
    );
    await mcp.close();

    // A run through gateway 1 on this session, its events and its end read through gateway 2.
    const task = 'Take one screenshot through the cluster';
    stand.script(task, [
      { content: [{ type: 'tool_use', id: 'tu_1', name: 'computer', input: { action: 'screenshot' } }], stop_reason: 'tool_use' },
      { content: [{ type: 'text', text: 'Done.' }], stop_reason: 'end_turn' },
    ]);
    const run = await api(g1, 'POST', '/v1/runs', cluster.acme, { task, sessionId: id, toolVersion: 'computer_20250124' });
    assert.equal(run.status, 201, run.text);
    const events = await (await fetch(`${g2}/v1/runs/${String(run.json.id)}/events`, { headers: cluster.acme })).text();
    assert.match(events, /"type":"end"|event: end/);
    const ended = await api(g2, 'GET', `/v1/runs/${String(run.json.id)}`, cluster.acme);
    assert.equal(ended.json.state, 'completed', ended.text);

    // The recording after the session ended, with a byte range, through gateway 2.
    assert.equal((await api(g1, 'DELETE', `/v1/sessions/${id}`, cluster.acme)).status, 200);
    let video: Response | undefined;
    for (let i = 0; i < 60; i++) {
      video = await fetch(`${g2}/v1/sessions/${id}/recording`, { headers: { ...cluster.acme, range: 'bytes=4-11' } });
      if (video.status === 206) break;
      await sleep(500);
    }
    assert.equal(video?.status, 206);
    assert.equal(
      Buffer.from(await video.arrayBuffer())
        .subarray(0, 4)
        .toString(),
      'ftyp',
    );
  });

  it('tenants stay apart through any gateway, a node answers its gateways only, its credentials are in no other process', async () => {
    // Recorded: its ffmpeg is a child process of the node for the session's whole life.
    const made = await api(g1, 'POST', '/v1/sessions', cluster.acme, { record: true });
    const id = made.json.id as string;
    const theirs = await api(g2, 'GET', `/v1/sessions/${id}/screenshot`, cluster.other);
    const madeUp = await api(g2, 'GET', '/v1/sessions/zzzzzzzzzz/screenshot', cluster.other);
    assert.equal(theirs.status, 404);
    assert.deepEqual(theirs.json, { error: { code: 'not_found', message: `session ${id} does not exist` } });
    assert.equal(madeUp.status, 404);
    assert.equal((await api(g2, 'GET', `/v1/sessions/${id}`, {})).status, 401);
    // Straight to the node that holds it, even with the tenant's key: refused.
    for (const node of cluster.nodes) {
      const direct = await api(node.url, 'GET', `/v1/sessions/${id}`, { ...cluster.acme, 'x-sbx-tenant': 'acme' });
      assert.equal(direct.status, 401);
      assert.equal((direct.json.error as { code: string }).code, 'cluster_credential_required');
    }
    // The cluster's credential and database URL are in no process but the nodes' and gateways'
    // own (they leave their environment once read): not in a sandbox's, runc's, ssh's, ffmpeg's.
    const own = new Set([...cluster.nodes, ...cluster.gateways].map((part) => part.process.child?.pid));
    const password = new URL(cluster.pg.url).password || cluster.pg.url;
    const holders: string[] = [];
    for (const pid of await readdir('/proc')) {
      if (!/^\d+$/.test(pid) || own.has(Number(pid))) continue;
      const environ = await readFile(`/proc/${pid}/environ`).catch(() => Buffer.alloc(0));
      if (environ.includes(CLUSTER_SECRET) || environ.includes(cluster.pg.url) || environ.includes(password))
        holders.push(`${pid} ${(await readFile(`/proc/${pid}/cmdline`).catch(() => Buffer.alloc(0))).toString().replace(/\0/g, ' ')}`);
    }
    assert.deepEqual(holders, []);
    assert.equal((await api(g1, 'DELETE', `/v1/sessions/${id}`, cluster.acme)).status, 200);
  });

  it('two gateways creating at once onto a node with room for one: exactly one wins, the other is told why', async () => {
    for (const name of ['n2', 'n3']) assert.equal((await cluster.cli(['node', 'drain', name, '--db', cluster.pg.url])).code, 0);
    const held: string[] = [];
    let committed = 0;
    try {
      // n1 offers 8 vCPUs: sessions of 1 until room for one is left.
      committed = (await nodes()).find((n) => n.name === 'n1')?.capacity.vcpus.committed ?? 0;
      for (let i = committed; i < 7; i++) {
        const made = await api(g1, 'POST', '/v1/sessions', cluster.acme, {});
        assert.equal(made.status, 201, made.text);
        held.push(made.json.id as string);
      }
      const race = await Promise.all([api(g1, 'POST', '/v1/sessions', cluster.acme, {}), api(g2, 'POST', '/v1/sessions', cluster.acme, {})]);
      const won = race.filter((r) => r.status === 201);
      const lost = race.filter((r) => r.status !== 201);
      assert.equal(won.length, 1, race.map((r) => `${r.status} ${r.text}`).join('\n'));
      held.push(won[0]!.json.id as string);
      assert.equal(lost[0]!.status, 503);
      assert.match(String((lost[0]!.json.error as { message: string }).message), /draining|vCPU/);
      assert.equal((await nodes()).find((n) => n.name === 'n1')?.capacity.vcpus.committed, 8);
    } finally {
      for (const id of held) await api(g1, 'DELETE', `/v1/sessions/${id}`, cluster.acme);
      assert.equal((await nodes()).find((n) => n.name === 'n1')?.capacity.vcpus.committed, committed, 'every destroy counted at once');
      for (const name of ['n2', 'n3']) await cluster.cli(['node', 'undrain', name, '--db', cluster.pg.url]);
    }
  });
});

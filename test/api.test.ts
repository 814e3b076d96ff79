import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import { run } from '../src/util/exec.js';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

describe('HTTP API: bad input gets a clear 4xx', () => {
  let orch: TestOrchestrator;
  let id: string;

  before(async () => {
    orch = await startTestOrchestrator();
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
    assert.equal(res.statusCode, 201, res.body);
    id = res.json().id;
    assert.deepEqual(res.json().display, { width: 1024, height: 768 });
  });
  after(async () => {
    await orch?.stop();
  });

  it('unknown sessions are 404 on every route', async () => {
    for (const [method, url] of [
      ['GET', '/v1/sessions/nosuchsess'],
      ['DELETE', '/v1/sessions/nosuchsess'],
      ['GET', '/v1/sessions/nosuchsess/screenshot'],
      ['POST', '/v1/sessions/nosuchsess/actions'],
    ] as const) {
      const res = await orch.server.inject({ method, url, payload: method === 'POST' ? { action: 'screenshot' } : undefined });
      assert.equal(res.statusCode, 404, `${method} ${url}`);
      assert.equal(res.json().error.code, 'not_found');
      assert.match(res.json().error.message, /nosuchsess does not exist/);
    }
  });

  it('invalid JSON is a 400', async () => {
    const res = await orch.server.inject({
      method: 'POST',
      url: '/v1/sessions',
      headers: { 'content-type': 'application/json' },
      payload: '{"width": 800,',
    });
    assert.equal(res.statusCode, 400);
    assert.equal(res.json().error.code, 'invalid_json');
  });

  const badCreates: Array<[Record<string, unknown>, RegExp]> = [
    [{ width: 100 }, /width must be >= 320/],
    [{ width: 4000 }, /width must be <= 3840/],
    [{ height: 319 }, /height must be >= 320/],
    [{ width: 800.5 }, /width must be integer/],
    [{ width: '800' }, /width must be integer/],
    [{ timeoutSeconds: -1 }, /timeoutSeconds must be >= 10/],
    [{ colour: 'blue' }, /must NOT have additional properties/],
    [{ metadata: 'x' }, /metadata must be object/],
  ];
  for (const [payload, message] of badCreates) {
    it(`create rejects ${JSON.stringify(payload)}`, async () => {
      const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload });
      assert.equal(res.statusCode, 400, res.body);
      assert.equal(res.json().error.code, 'invalid_request');
      assert.match(res.json().error.message, message);
    });
  }

  const badActions: Array<[unknown, RegExp]> = [
    [{}, /action/],
    [{ action: 'teleport' }, /action "teleport" is unknown/],
    [{ action: 'left_click', coordinate: [2000, 10] }, /outside the screen \(1024x768/],
    [{ action: 'left_click', coordinate: [-5, 10] }, /coordinate/],
    [{ action: 'left_click', coordinate: [5.5, 10] }, /coordinate/],
    [{ action: 'mouse_move' }, /coordinate is required for mouse_move/],
    [{ action: 'type', text: 'hi', coordinate: [1, 1] }, /coordinate is not accepted for type/],
    [{ action: 'key', text: 'Return; touch /tmp/pwned' }, /invalid key name/],
    [{ action: 'key', text: 'NoSuchKeyName' }, /unknown key name "NoSuchKeyName"/],
  ];
  for (const [payload, message] of badActions) {
    it(`action rejects ${JSON.stringify(payload)}`, async () => {
      const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/actions`, payload: payload as object });
      assert.equal(res.statusCode, 400, res.body);
      assert.match(res.json().error.message, message);
    });
  }

  it('the session still works after all that', async () => {
    const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/actions`, payload: { action: 'cursor_position' } });
    assert.equal(res.statusCode, 200);
    assert.match(res.json().output, /^X=\d+,Y=\d+$/);
  });

  it('serves /healthz and an OpenAPI document of the routes', async () => {
    const health = (await orch.server.inject({ method: 'GET', url: '/healthz' })).json();
    assert.deepEqual(health, { status: 'ok', runtime: 'container', sessions: 1 });
    const spec = (await orch.server.inject({ method: 'GET', url: '/openapi.json' })).json();
    assert.equal(spec.openapi, '3.0.3');
    for (const p of ['/v1/sessions', '/v1/sessions/{id}', '/v1/sessions/{id}/screenshot', '/v1/sessions/{id}/actions', '/metrics', '/healthz']) {
      assert.ok(spec.paths[p], `OpenAPI documents ${p}`);
    }
    assert.equal(spec.paths['/v1/sessions'].post.requestBody.content['application/json'].schema.properties.width.maximum, 3840);
  });
});

describe('a sandbox that does not come up in time', () => {
  let orch: TestOrchestrator;
  before(async () => {
    // 30 ms is too short for SSH and the display to come up (a container boots in 300-500 ms): a real boot failure.
    orch = await startTestOrchestrator({ bootTimeoutMs: 30 });
  });
  after(async () => {
    await orch?.stop();
  });

  it('fails the create with 503 and a reason, and leaves nothing behind', async () => {
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
    assert.equal(res.statusCode, 503, res.body);
    assert.equal(res.json().error.code, 'unavailable');
    assert.match(res.json().error.message, /sandbox failed to start: .*(SSH|display|desktop|guest command)/);
    assert.deepEqual(await readdir(orch.stateDir).then((e) => e.filter((n) => /^[a-z0-9]{10}$/.test(n))), []);
    const netns = (await run(['ip', 'netns', 'list'])).stdout;
    assert.doesNotMatch(netns, new RegExp(orch.names.prefix));
    assert.doesNotMatch((await run(['ip', '-o', 'link', 'show'])).stdout, new RegExp(orch.names.prefix));
    assert.equal(existsSync(orch.names.runcRoot) ? (await readdir(orch.names.runcRoot)).length : 0, 0);
    const sessions = (await orch.server.inject({ method: 'GET', url: '/v1/sessions' })).json().sessions;
    assert.equal(sessions.length, 1);
    assert.equal(sessions[0].state, 'failed');
    assert.match((await orch.server.inject({ method: 'GET', url: '/metrics' })).body, /sandbox_sessions_active 0/);
  });
});

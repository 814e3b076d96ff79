import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import Fastify from 'fastify';
import { StreamSlots } from '../../src/api/stream-slots.js';
import { installTenantRequestLimits, TenantRequestGate } from '../../src/api/tenant-request-limits.js';
import { OrchestratorError } from '../../src/errors.js';
import { KeyedSlots, takeAll } from '../../src/util/slots.js';
import { ViewerLimitError, ViewerSlots } from '../../src/views/viewer-slots.js';

/**
 * Issue 21, caps that hold under concurrency: the counters the live views, event streams and
 * runs take their slots from. What a burst does to them is checked here without sandboxes;
 * the real-sandbox tests (live-view.test.ts, runs.test.ts) do it over the network.
 */
describe('caps: slots taken in one synchronous step', () => {
  it('KeyedSlots counts per key, and a release counts once', () => {
    const slots = new KeyedSlots((key) => (key === 'big' ? 3 : 1));
    assert.ok(slots.fits('a'));
    const release = slots.take('a');
    assert.equal(slots.fits('a'), false);
    assert.ok(slots.fits('big'));
    release();
    release();
    assert.equal(slots.count('a'), 0);
    assert.ok(slots.fits('a'));
  });

  it('takeAll takes every pair or none, and names the first full one', () => {
    const session = new KeyedSlots(() => 2);
    const tenant = new KeyedSlots(() => 3);
    const first = takeAll([[session, 's1'], [tenant, 't']]);
    const second = takeAll([[session, 's1'], [tenant, 't']]);
    assert.ok('release' in first && 'release' in second);
    assert.deepEqual(takeAll([[session, 's1'], [tenant, 't']]), { full: 0 });
    assert.equal(tenant.count('t'), 2, 'nothing taken of the tenant when the session was full');
    const third = takeAll([[session, 's2'], [tenant, 't']]);
    assert.ok('release' in third);
    assert.deepEqual(takeAll([[session, 's3'], [tenant, 't']]), { full: 1 });
    assert.equal(session.count('s3'), 0, 'nothing taken of the session when the tenant was full');
    third.release();
    assert.equal(tenant.count('t'), 2);
  });

  it('viewer slots: a burst of 200 admits exactly the per-session cap, then the per-tenant cap holds across sessions', () => {
    const slots = new ViewerSlots({ maxViewersPerSession: 8, maxViewersPerTenant: 12 });
    const outcomes = Array.from({ length: 200 }, () => {
      try {
        return slots.take('s1', 'acme');
      } catch (err) {
        assert.ok(err instanceof ViewerLimitError);
        return err.code;
      }
    });
    assert.equal(outcomes.filter((o) => typeof o === 'function').length, 8);
    assert.equal(outcomes.filter((o) => o === 'session_viewer_limit').length, 192);
    const other = Array.from({ length: 10 }, () => {
      try {
        return slots.take('s2', 'acme');
      } catch (err) {
        return (err as OrchestratorError).code;
      }
    });
    assert.equal(other.filter((o) => typeof o === 'function').length, 4, 'the tenant has 12: 8 on s1, 4 on s2');
    assert.equal(other.filter((o) => o === 'tenant_viewer_limit').length, 6);
    assert.throws(() => slots.take('s3', 'acme'), (err: OrchestratorError) => err.statusCode === 429 && /SBX_MAX_VIEWERS_PER_TENANT/.test(err.message));
    assert.equal(typeof slots.take('s3', 'other-tenant'), 'function', 'another tenant is not affected');
    for (const release of outcomes) if (typeof release === 'function') release();
    assert.equal(slots.ofSession('s1'), 0);
  });
});

describe('caps: event streams hold a stream slot, not a request slot', () => {
  it('with a request limit of 2, three streams are open and requests still pass; the fourth stream is a 429; a closed one frees its slot', async () => {
    // Closed at the end whatever its clients' sockets are doing (keep-alive, abandoned streams).
    const app = Fastify({ forceCloseConnections: true });
    app.decorateRequest('tenant', '');
    app.addHook('onRequest', async (request) => {
      request.tenant = 'acme';
    });
    installTenantRequestLimits(app, new TenantRequestGate({ maxConcurrent: 2, perSecond: 1000, burst: 1000 }), () => undefined);
    const streams = new StreamSlots(3);
    app.setErrorHandler(async (err: Error, _request, reply) => {
      const status = err instanceof OrchestratorError ? err.statusCode : 500;
      return reply.status(status).send({ error: { code: err instanceof OrchestratorError ? err.code : 'internal' } });
    });
    app.get('/stream', async (request, reply) => {
      streams.open(request, reply);
      reply.hijack();
      reply.raw.writeHead(200, { 'content-type': 'text/event-stream' });
      reply.raw.write(': open\n\n');
    });
    app.get('/plain', async () => ({ ok: true }));
    await app.listen({ port: 0, host: '127.0.0.1' });
    const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    try {
      const controllers = [new AbortController(), new AbortController(), new AbortController()];
      const open = await Promise.all(controllers.map((c) => fetch(`${url}/stream`, { signal: c.signal })));
      assert.deepEqual(open.map((r) => r.status), [200, 200, 200]);
      assert.equal(streams.openOf('acme'), 3);
      // Before the fix each stream held a request slot: two streams and every request was a 429.
      const plain = await Promise.all([fetch(`${url}/plain`), fetch(`${url}/plain`)]);
      assert.deepEqual(plain.map((r) => r.status), [200, 200]);
      const fourth = await fetch(`${url}/stream`);
      assert.equal(fourth.status, 429);
      assert.equal(((await fourth.json()) as { error: { code: string } }).error.code, 'tenant_stream_limit');
      controllers[0]?.abort();
      for (let i = 0; i < 50 && streams.openOf('acme') > 2; i++) await new Promise((r) => setTimeout(r, 20));
      assert.equal(streams.openOf('acme'), 2, 'the closed stream gave its slot back');
      const again = new AbortController();
      assert.equal((await fetch(`${url}/stream`, { signal: again.signal })).status, 200);
      again.abort();
      for (const c of controllers) c.abort();
      for (let i = 0; i < 50 && streams.openOf('acme') > 0; i++) await new Promise((r) => setTimeout(r, 20));
      assert.equal(streams.openOf('acme'), 0);
    } finally {
      await app.close();
    }
  });
});

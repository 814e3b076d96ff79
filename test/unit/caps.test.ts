import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import Fastify from 'fastify';
import { StreamSlots } from '../../src/api/stream-slots.js';
import { installTenantRequestLimits, TenantRequestGate } from '../../src/api/tenant-request-limits.js';
import { OrchestratorError } from '../../src/errors.js';
import { RunBudgets, RunLimitError } from '../../src/runs/run-budgets.js';
import { DEFAULT_RUN_SETTINGS, type RunSettings } from '../../src/runs/settings.js';
import { KeyedSlots, takeAll } from '../../src/util/slots.js';
import { ViewerLimitError, ViewerSlots } from '../../src/views/viewer-slots.js';
import { httpStatusOf } from '../../src/api/errors.js';

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
    const first = takeAll([
      [session, 's1'],
      [tenant, 't'],
    ]);
    const second = takeAll([
      [session, 's1'],
      [tenant, 't'],
    ]);
    assert.ok('release' in first && 'release' in second);
    assert.deepEqual(
      takeAll([
        [session, 's1'],
        [tenant, 't'],
      ]),
      { full: 0 },
    );
    assert.equal(tenant.count('t'), 2, 'nothing taken of the tenant when the session was full');
    const third = takeAll([
      [session, 's2'],
      [tenant, 't'],
    ]);
    assert.ok('release' in third);
    assert.deepEqual(
      takeAll([
        [session, 's3'],
        [tenant, 't'],
      ]),
      { full: 1 },
    );
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
    assert.throws(
      () => slots.take('s3', 'acme'),
      (err: OrchestratorError) => httpStatusOf(err.code) === 429 && /SBX_MAX_VIEWERS_PER_TENANT/.test(err.message),
    );
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
      const status = err instanceof OrchestratorError ? httpStatusOf(err.code) : 500;
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
      assert.deepEqual(
        open.map((r) => r.status),
        [200, 200, 200],
      );
      assert.equal(streams.openOf('acme'), 3);
      // Before the fix each stream held a request slot: two streams and every request was a 429.
      const plain = await Promise.all([fetch(`${url}/plain`), fetch(`${url}/plain`)]);
      assert.deepEqual(
        plain.map((r) => r.status),
        [200, 200],
      );
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

describe('caps: run budgets', () => {
  const settings = (over: Partial<RunSettings> = {}): RunSettings => ({
    ...DEFAULT_RUN_SETTINGS,
    limits: { maxConcurrentRuns: 2, tokensPerDay: 10_000, secondsPerDay: 600 },
    ...over,
  });
  const defaults = { maxTokens: 2_000_000, maxSeconds: 1800 };

  it('models: the allow-list and its dated ids; another model is a 400 naming the field', () => {
    const budgets = new RunBudgets(settings({ tenantModels: new Map([['ci', ['claude-haiku-4-5']]]) }));
    budgets.checkModel('acme', 'claude-sonnet-4-6', false);
    budgets.checkModel('acme', 'claude-haiku-4-5-20251001', true);
    for (const model of ['gpt-4o', 'claude-haiku-4-5-latest', 'claude-haiku-4', 'claude-sonnet-4-6x']) {
      assert.throws(
        () => budgets.checkModel('acme', model, true),
        (err: OrchestratorError) => httpStatusOf(err.code) === 400 && /^model: /.test(err.message),
        model,
      );
    }
    assert.throws(
      () => budgets.checkModel('ci', 'claude-sonnet-4-6', false),
      /model: the default "claude-sonnet-4-6" is not allowed for tenant "ci"; allowed: claude-haiku-4-5/,
    );
  });

  it('concurrent runs: a burst admits exactly maxConcurrentRuns; a settled run frees its place', () => {
    const budgets = new RunBudgets(settings({ limits: { maxConcurrentRuns: 2, tokensPerDay: 1e9, secondsPerDay: 1e6 } }));
    const outcomes = Array.from({ length: 10 }, () => {
      try {
        return budgets.reserve('acme', {}, defaults);
      } catch (err) {
        return (err as RunLimitError).code;
      }
    });
    const admitted = outcomes.filter((o) => typeof o !== 'string');
    assert.equal(admitted.length, 2);
    assert.deepEqual(
      outcomes.filter((o) => typeof o === 'string'),
      Array(8).fill('tenant_run_limit'),
    );
    admitted[0]?.settle(100, 1);
    admitted[0]?.settle(100, 1);
    assert.equal(budgets.ledger('acme').running, 1, 'settled once');
    assert.doesNotThrow(() => budgets.reserve('acme', {}, defaults));
  });

  it('tokens and seconds per day: reserved at the start, refunded at the end, over-budget runs refused; past the day, a new budget', () => {
    let now = Date.parse('2026-12-01T23:00:00Z');
    const budgets = new RunBudgets(settings(), [{ tenant: 'acme', tokens: 1000, seconds: 0 }], () => now);
    assert.throws(
      () => budgets.reserve('acme', { maxTokens: 10_001 }, defaults),
      (err: OrchestratorError) => httpStatusOf(err.code) === 400 && /^maxTokens must be at most 10000/.test(err.message),
    );
    assert.throws(
      () => budgets.reserve('acme', { maxSeconds: 601 }, defaults),
      (err: OrchestratorError) => httpStatusOf(err.code) === 400 && /^maxSeconds must be at most 600/.test(err.message),
    );
    // The defaults are brought down to the tenant's budget rather than refused.
    const first = budgets.reserve('acme', { maxTokens: 6000, maxSeconds: 60 }, defaults);
    assert.deepEqual([first.maxTokens, first.maxSeconds], [6000, 60]);
    assert.throws(
      () => budgets.reserve('acme', { maxTokens: 4000 }, defaults),
      (err: OrchestratorError) =>
        httpStatusOf(err.code) === 429 &&
        err.code === 'tenant_run_budget' &&
        /3000 tokens left of its 10000 today \(1000 used, 6000 reserved/.test(err.message) &&
        err.retryAfterSeconds === 60,
    );
    first.settle(2500, 30.2);
    assert.deepEqual(budgets.ledger('acme'), { day: '2026-12-01', usedTokens: 3500, usedSeconds: 31, reservedTokens: 0, reservedSeconds: 0, running: 0 });
    // The defaults are the daily budget at most (10000 tokens, 600 s): more than is left today.
    assert.throws(
      () => budgets.reserve('acme', {}, defaults),
      (err: OrchestratorError) => err.code === 'tenant_run_budget' && err.retryAfterSeconds === 3600,
    );
    const second = budgets.reserve('acme', { maxTokens: 6500, maxSeconds: 569 }, defaults);
    second.settle(0, 0);
    assert.throws(() => budgets.reserve('acme', { maxTokens: 6501, maxSeconds: 1 }, defaults), /6500 tokens left/);
    assert.throws(() => budgets.reserve('acme', { maxTokens: 1, maxSeconds: 570 }, defaults), /maxSeconds 570 is more than the 569 seconds left/);
    now = Date.parse('2026-12-02T00:00:01Z');
    assert.doesNotThrow(() => budgets.reserve('acme', { maxTokens: 10_000 }, defaults));
  });
});

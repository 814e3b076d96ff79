import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
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

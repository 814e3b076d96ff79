/**
 * The node pod's shell hooks (deploy/kubernetes/base/node-daemonset.yaml), run for real: the
 * preStop (drain, then wait for the sessions to end) and the undrain init step, with sh,
 * curl and awk, against a stand-in agent on loopback answering /metrics
 * (test/helpers/kubernetes-hooks.ts). Here `sbx` is a stand-in recording its arguments and
 * the URL it was given, so every path of the wait is quick to reach; test/kubernetes-hooks.test.ts
 * runs them with the real CLI on a real PostgreSQL. No root, no sandbox, no cluster.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { hookHarness, PRE_STOP as preStop, UNDRAIN as undrain, type HookHarness } from '../helpers/kubernetes-hooks.js';

const SECRET = 'a'.repeat(64);
const DB_URL = 'postgres://sbx:pw@db.invalid:5432/sbx';

describe("the node pod's hooks, run for real (preStop drain-and-wait, undrain)", () => {
  let hooks: HookHarness;
  before(async () => {
    hooks = await hookHarness('stand-in');
  });
  after(() => hooks.close());

  const runHook = (script: string, env: Record<string, string> = {}) =>
    hooks.run(script, { NODE_NAME: 'kvm-1', SBX_CLUSTER_DB_URL: DB_URL, SBX_CLUSTER_SECRET: SECRET, SBX_MAX_LIFETIME_SECONDS: '3600', ...env });

  it("preStop: drains this node, then polls /metrics until no session is left, the credential on curl's input only", async () => {
    hooks.answer([{ sessions: 2 }, { sessions: 1 }, { sessions: 1 }, { sessions: 0 }, { sessions: 5 }]);
    const res = await runHook(preStop);
    assert.equal(res.exitCode, 0, res.stderr);
    assert.deepEqual(res.sbx, [`node drain kvm-1|${DB_URL}`], 'this node, the URL from the environment, not the command line');
    assert.equal(hooks.requests.length, 4, 'stops at the first 0');
    for (const r of hooks.requests) assert.deepEqual(r, { url: '/metrics', secret: SECRET });
    assert.equal(res.curl.length, 4);
    for (const argv of res.curl) assert.ok(!argv.includes(SECRET), `the credential in curl's arguments: ${argv}`);
  });

  it('preStop: an agent that does not answer is waited for six polls, then not at all', async () => {
    hooks.answer([{ sessions: 3 }, { status: 500 }, { status: 500 }, { status: 500 }, { status: 500 }, { status: 500 }, { status: 500 }, { sessions: 3 }]);
    const res = await runHook(preStop);
    assert.equal(res.exitCode, 0, res.stderr);
    assert.equal(hooks.requests.length, 7, 'one answer, then six silent polls');
  });

  it('preStop: a silence broken by an answer starts the count again', async () => {
    hooks.answer([
      { status: 500 },
      { status: 500 },
      { status: 500 },
      { status: 500 },
      { status: 500 },
      { sessions: 1 },
      { status: 500 },
      { status: 500 },
      { sessions: 0 },
    ]);
    const res = await runHook(preStop);
    assert.equal(res.exitCode, 0, res.stderr);
    assert.equal(hooks.requests.length, 9);
  });

  it('preStop: a failed drain is said and the wait still happens; the wait ends at SBX_MAX_LIFETIME_SECONDS', async () => {
    hooks.answer([{ sessions: 0 }]);
    const failed = await runHook(preStop, { FAKE_SBX_EXIT: '1' });
    assert.equal(failed.exitCode, 0);
    assert.match(failed.stderr, /could not drain kvm-1/);
    assert.equal(hooks.requests.length, 1);
    hooks.answer([{ sessions: 4 }]);
    const noTime = await runHook(preStop, { SBX_MAX_LIFETIME_SECONDS: '0' });
    assert.equal(noTime.exitCode, 0);
    assert.equal(hooks.requests.length, 0, 'a deadline already passed: no poll');
  });

  it("undrain: undrains this node; a failure (a host's first start) is said, not fatal", async () => {
    const ok = await runHook(undrain);
    assert.equal(ok.exitCode, 0);
    assert.deepEqual(ok.sbx, [`node undrain kvm-1|${DB_URL}`]);
    assert.equal(ok.stderr, '');
    const failed = await runHook(undrain, { FAKE_SBX_EXIT: '1' });
    assert.equal(failed.exitCode, 0);
    assert.match(failed.stderr, /kvm-1 not undrained/);
  });
});

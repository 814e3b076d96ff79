/**
 * The node pod's shell hooks (deploy/kubernetes/base/node-daemonset.yaml), run for real: the
 * preStop (drain, then wait for the sessions to end) and the undrain init step, with sh,
 * curl and awk, against a stand-in agent on loopback answering /metrics. `sbx` is a stand-in
 * that records its arguments (the cluster commands are not built yet); `curl` is the real one
 * behind a wrapper that records its arguments and points the hook's port 8080 at the
 * stand-in's; `sleep` returns at once. No root, no sandbox, no cluster.
 */
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { run } from '../../src/util/exec.js';
import { DEPLOY, find, podTemplateOf, renderKustomization, shellScriptOf } from '../helpers/kubernetes-manifests.js';

const pod = podTemplateOf(find(renderKustomization(DEPLOY), 'DaemonSet', 'sbx-node')!)!.spec;
const preStop = shellScriptOf(pod.containers.find((c) => c.name === 'node')?.lifecycle?.preStop?.exec?.command)!;
const undrain = shellScriptOf(pod.initContainers?.find((c) => c.name === 'undrain')?.command)!;

const SECRET = 'a'.repeat(64);
const DB_URL = 'postgres://sbx:pw@db.invalid:5432/sbx';

/** What the stand-in agent answers on each poll: a session count, or an HTTP status. */
type Answer = { sessions: number } | { status: number };

describe('the node pod\'s hooks, run for real (preStop drain-and-wait, undrain)', () => {
  let dir: string;
  let server: http.Server;
  let port: number;
  let answers: Answer[] = [];
  let requests: Array<{ url: string; secret: string | undefined }> = [];

  before(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'sbx-k8s-hooks-'));
    const realCurl = (await run(['sh', '-c', 'command -v curl'])).stdout.trim();
    const tool = (name: string, body: string) => {
      writeFileSync(path.join(dir, name), `#!/bin/sh\n${body}\n`);
      chmodSync(path.join(dir, name), 0o755);
    };
    // Each records its arguments, one call a line.
    // The database URL is the command's --db through SBX_CLUSTER_DB_URL: recorded after a |.
    tool('sbx', `printf '%s|%s\\n' "$*" "\${SBX_CLUSTER_DB_URL:-}" >> "${dir}/sbx.calls"\nexit "\${FAKE_SBX_EXIT:-0}"`);
    tool('curl', `printf '%s\\n' "$*" >> "${dir}/curl.calls"\nfor a; do shift; set -- "$@" "$(printf '%s' "$a" | sed "s/:8080\\//:\${STAND_IN_PORT}\\//")"; done\nexec ${realCurl} "$@"`);
    tool('sleep', 'exit 0');
    server = http.createServer((req, res) => {
      requests.push({ url: req.url ?? '', secret: req.headers['x-sbx-cluster-secret'] as string | undefined });
      const answer = answers.shift() ?? { status: 503 };
      if ('status' in answer) {
        res.writeHead(answer.status).end();
        return;
      }
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end(`# HELP sandbox_sessions_active Sessions\n# TYPE sandbox_sessions_active gauge\nsandbox_sessions_active ${answer.sessions}\nsandbox_sessions_total 9\n`);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });

  after(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    rmSync(dir, { recursive: true, force: true });
  });

  async function runHook(script: string, env: Record<string, string> = {}) {
    for (const f of ['sbx.calls', 'curl.calls']) rmSync(path.join(dir, f), { force: true });
    requests = [];
    const res = await run(['sh', '-c', script], {
      allowFailure: true,
      timeoutMs: 30_000,
      env: {
        PATH: `${dir}:${process.env.PATH ?? '/usr/bin:/bin'}`,
        NODE_NAME: 'kvm-1',
        NODE_IP: '127.0.0.1',
        SBX_CLUSTER_DB_URL: DB_URL,
        SBX_CLUSTER_SECRET: SECRET,
        SBX_MAX_LIFETIME_SECONDS: '3600',
        STAND_IN_PORT: String(port),
        ...env,
      },
    });
    const lines = (f: string) => (existsSync(path.join(dir, f)) ? readFileSync(path.join(dir, f), 'utf8').trim().split('\n') : []);
    return { ...res, sbx: lines('sbx.calls'), curl: lines('curl.calls') };
  }

  it('preStop: drains this node, then polls /metrics until no session is left, the credential on curl\'s input only', async () => {
    answers = [{ sessions: 2 }, { sessions: 1 }, { sessions: 1 }, { sessions: 0 }, { sessions: 5 }];
    const res = await runHook(preStop);
    assert.equal(res.exitCode, 0, res.stderr);
    assert.deepEqual(res.sbx, [`node drain kvm-1|${DB_URL}`], 'this node, the URL from the environment, not the command line');
    assert.equal(requests.length, 4, 'stops at the first 0');
    for (const r of requests) assert.deepEqual(r, { url: '/metrics', secret: SECRET });
    assert.equal(res.curl.length, 4);
    for (const argv of res.curl) assert.ok(!argv.includes(SECRET), `the credential in curl's arguments: ${argv}`);
  });

  it('preStop: an agent that does not answer is waited for six polls, then not at all', async () => {
    answers = [{ sessions: 3 }, { status: 500 }, { status: 500 }, { status: 500 }, { status: 500 }, { status: 500 }, { status: 500 }, { sessions: 3 }];
    const res = await runHook(preStop);
    assert.equal(res.exitCode, 0, res.stderr);
    assert.equal(requests.length, 7, 'one answer, then six silent polls');
  });

  it('preStop: a silence broken by an answer starts the count again', async () => {
    answers = [{ status: 500 }, { status: 500 }, { status: 500 }, { status: 500 }, { status: 500 }, { sessions: 1 }, { status: 500 }, { status: 500 }, { sessions: 0 }];
    const res = await runHook(preStop);
    assert.equal(res.exitCode, 0, res.stderr);
    assert.equal(requests.length, 9);
  });

  it('preStop: a failed drain is said and the wait still happens; the wait ends at SBX_MAX_LIFETIME_SECONDS', async () => {
    answers = [{ sessions: 0 }];
    const failed = await runHook(preStop, { FAKE_SBX_EXIT: '1' });
    assert.equal(failed.exitCode, 0);
    assert.match(failed.stderr, /could not drain kvm-1/);
    assert.equal(requests.length, 1);
    answers = [{ sessions: 4 }];
    const noTime = await runHook(preStop, { SBX_MAX_LIFETIME_SECONDS: '0' });
    assert.equal(noTime.exitCode, 0);
    assert.equal(requests.length, 0, 'a deadline already passed: no poll');
  });

  it('undrain: undrains this node; a failure (a host\'s first start) is said, not fatal', async () => {
    const ok = await runHook(undrain);
    assert.equal(ok.exitCode, 0);
    assert.deepEqual(ok.sbx, [`node undrain kvm-1|${DB_URL}`]);
    assert.equal(ok.stderr, '');
    const failed = await runHook(undrain, { FAKE_SBX_EXIT: '1' });
    assert.equal(failed.exitCode, 0);
    assert.match(failed.stderr, /kvm-1 not undrained/);
  });
});

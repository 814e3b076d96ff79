/**
 * The node pod's hooks (deploy/kubernetes/base/node-daemonset.yaml) with the real `sbx` CLI
 * (dist/cli/main.js) on a real PostgreSQL 15 of the test's own: the preStop drains the node in
 * the cluster's database (placement then skips it), waits on the agent's /metrics (a stand-in
 * on loopback: test/helpers/kubernetes-hooks.ts) and ends; the next pod's undrain step takes
 * it back; both read the database URL from SBX_CLUSTER_DB_URL, not a flag. A host's first
 * start (no such node yet) does not stop the pod. Then the walk-through's commands run in a
 * gateway pod (docs/cluster.md: sbx nodes, keys create, node drain|undrain), as that pod runs
 * them: uid 10001, no home, the URL in its environment. (test/kubernetes-pods.test.ts starts
 * a real node and gateway.) No sandbox; PostgreSQL runs as its own user.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { run } from '../src/util/exec.js';
import type { NodeReport } from '../src/cluster/store/cluster-store.js';
import { PgClusterStore } from '../src/cluster/store/pg-cluster-store.js';
import { hookHarness, PRE_STOP, UNDRAIN, type HookHarness } from './helpers/kubernetes-hooks.js';
import { ROOT } from './helpers/kubernetes-manifests.js';
import { startPostgres } from './helpers/postgres.js';

const SECRET = 'b'.repeat(64);
// At the top level: the helper stops the server in an after() of the file, not of a hook.
const { url } = await startPostgres();

const REPORT: NodeReport = {
  url: 'http://127.0.0.1:1',
  runtimes: ['container'],
  templates: ['minimal'],
  warm: {},
  maxSessions: 10,
  memoryMiB: 16_384,
  vcpus: 16,
  sessionMemoryMiB: 1024,
  sessionVcpus: 1,
  version: '0.1.0',
};

describe("the node pod's hooks with the real sbx CLI and PostgreSQL", () => {
  let hooks: HookHarness;
  let store: PgClusterStore;

  before(async () => {
    assert.ok(existsSync(path.join(ROOT, 'dist', 'cli', 'main.js')), 'build first: npm run build');
    store = new PgClusterStore({ url });
    await store.migrate();
    await store.registerNode('kvm-1', randomUUID(), REPORT);
    hooks = await hookHarness('real');
  });
  after(async () => {
    await hooks?.close();
    await store?.close();
  });

  const draining = async (name: string) => (await store.listNodes()).find((n) => n.name === name)?.draining;
  const runHook = (script: string, nodeName: string) =>
    hooks.run(script, { NODE_NAME: nodeName, SBX_CLUSTER_DB_URL: url, SBX_CLUSTER_SECRET: SECRET, SBX_MAX_LIFETIME_SECONDS: '3600' });

  it('preStop drains the node in the database, waits for its last session, and ends', async () => {
    assert.equal(await draining('kvm-1'), false);
    hooks.answer([{ sessions: 2 }, { sessions: 0 }]);
    const res = await runHook(PRE_STOP, 'kvm-1');
    assert.equal(res.exitCode, 0, res.stderr);
    assert.doesNotMatch(res.stderr, /could not drain/);
    assert.equal(await draining('kvm-1'), true, 'the node is draining: placement takes no new session there');
    assert.equal(hooks.requests.length, 2);
    for (const argv of res.curl) assert.ok(!argv.includes(SECRET) && !argv.includes(url));
  });

  it("the next pod's undrain step takes the node back", async () => {
    const res = await runHook(UNDRAIN, 'kvm-1');
    assert.equal(res.exitCode, 0, res.stderr);
    assert.equal(res.stderr, '');
    assert.equal(await draining('kvm-1'), false);
  });

  it("a host's first start (no such node yet) is said and does not stop the pod; a preStop for it still ends", async () => {
    const undrain = await runHook(UNDRAIN, 'kvm-new');
    assert.equal(undrain.exitCode, 0);
    assert.match(undrain.stderr, /no node called kvm-new/);
    assert.match(undrain.stderr, /kvm-new not undrained/);
    hooks.answer([{ sessions: 0 }]);
    const preStop = await runHook(PRE_STOP, 'kvm-new');
    assert.equal(preStop.exitCode, 0);
    assert.match(preStop.stderr, /could not drain kvm-new/);
    assert.equal(await draining('kvm-1'), false, 'another node is not touched');
  });
});

describe("the walk-through's commands in a gateway pod (uid 10001, no home, the URL in its environment)", () => {
  let store: PgClusterStore;
  const bin = mkdtempSync(path.join(os.tmpdir(), 'sbx-k8s-exec-'));

  before(async () => {
    store = new PgClusterStore({ url });
    await store.migrate();
    await store.registerNode('kvm-exec', randomUUID(), REPORT);
    // The image's /usr/local/bin/sbx, readable by the gateway's uid.
    chmodSync(bin, 0o755);
    writeFileSync(path.join(bin, 'sbx'), `#!/bin/sh\nexec ${process.execPath} ${path.join(ROOT, 'dist', 'cli', 'main.js')} "$@"\n`);
    chmodSync(path.join(bin, 'sbx'), 0o755);
  });
  after(async () => {
    await store?.close();
    rmSync(bin, { recursive: true, force: true });
  });

  /** What docs/cluster.md runs after `kubectl -n sbx exec deploy/sbx-gateway --`, node names made this test's. */
  const docs = readFileSync(path.join(ROOT, 'docs', 'cluster.md'), 'utf8');
  const commands = [...docs.slice(docs.indexOf('## Kubernetes: from an empty cluster')).matchAll(/^kubectl -n sbx exec deploy\/sbx-gateway -- (.+)$/gm)].map(
    (m) => m[1]!.replace(/\bkvm-1\b/g, 'kvm-exec'),
  );
  const inGatewayPod = (command: string) =>
    run(
      [
        'setpriv',
        '--reuid=10001',
        '--regid=10001',
        '--clear-groups',
        '--',
        'sh',
        '-c',
        command.startsWith('sh -c ') ? command.slice(6).replace(/^'|'$/g, '') : command,
      ],
      {
        allowFailure: true,
        timeoutMs: 60_000,
        cwd: '/',
        env: { PATH: `${bin}:/usr/local/bin:/usr/bin:/bin`, HOME: '/nonexistent', SBX_CLUSTER_DB_URL: url, SBX_CLUSTER_SECRET: SECRET },
      },
    );

  it('sbx nodes, keys create, node drain and undrain work as the docs write them', async () => {
    assert.deepEqual(
      commands.map((c) => c.split(' ').slice(0, 4).join(' ')),
      ['sbx nodes', "sh -c 'sbx keys", 'sbx node drain kvm-exec', 'sbx node undrain kvm-exec'],
    );
    const [nodes, key, drain, undrain] = commands as [string, string, string, string];
    const listed = await inGatewayPod(nodes);
    assert.equal(listed.exitCode, 0, listed.stderr);
    assert.match(listed.stdout, /^kvm-exec\s+(up|silent)\s/m, 'listed (up, or silent if this host is slow: it never heartbeats)');
    const created = await inGatewayPod(key);
    assert.equal(created.exitCode, 0, created.stderr);
    assert.match(created.stdout, /\bsbx_[a-z0-9]{12}_\S+/);
    assert.equal((await inGatewayPod(drain)).exitCode, 0);
    assert.equal((await store.listNodes()).find((n) => n.name === 'kvm-exec')?.draining, true);
    assert.equal((await inGatewayPod(undrain)).exitCode, 0);
    assert.equal((await store.listNodes()).find((n) => n.name === 'kvm-exec')?.draining, false);
  });
});

/**
 * The node pod's hooks (deploy/kubernetes/base/node-daemonset.yaml) with the real `sbx` CLI
 * (dist/cli/main.js) on a real PostgreSQL 15 of the test's own: the preStop drains the node in
 * the cluster's database (placement then skips it), waits on the agent's /metrics (a stand-in
 * on loopback: test/helpers/kubernetes-hooks.ts) and ends; the next pod's undrain step takes
 * it back; both read the database URL from SBX_CLUSTER_DB_URL, not a flag. A host's first
 * start (no such node yet) does not stop the pod. Then against a real `sbx node` (container
 * runtime, root): the preStop waits while a session lives and ends once it is gone, reading
 * the agent's own /metrics with the cluster credential. Last, the walk-through's commands
 * run in a gateway pod (docs/cluster.md: sbx nodes, keys create, node drain|undrain), as that
 * pod runs them: uid 10001, no home, the URL in its environment. PostgreSQL runs as its own user.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { run } from '../src/util/exec.js';
import type { NodeReport } from '../src/cluster/store/cluster-store.js';
import { PgClusterStore } from '../src/cluster/store/pg-cluster-store.js';
import { hookHarness, PRE_STOP, UNDRAIN, type HookHarness } from './helpers/kubernetes-hooks.js';
import { DEPLOY, find, podTemplateOf, renderKustomization, ROOT } from './helpers/kubernetes-manifests.js';
import { removeEmptyPrefixCgroups, TEST_PREFIX } from './helpers/orchestrator.js';
import { startPostgres } from './helpers/postgres.js';
import { prefixedResources } from './helpers/resources.js';

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

describe('the node pod\'s hooks with the real sbx CLI and PostgreSQL', () => {
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

  it('the next pod\'s undrain step takes the node back', async () => {
    const res = await runHook(UNDRAIN, 'kvm-1');
    assert.equal(res.exitCode, 0, res.stderr);
    assert.equal(res.stderr, '');
    assert.equal(await draining('kvm-1'), false);
  });

  it('a host\'s first start (no such node yet) is said and does not stop the pod; a preStop for it still ends', async () => {
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

/** A free TCP port on loopback (asked of the kernel, then released). */
async function freePort(): Promise<number> {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('the preStop against a real sbx node, started as the DaemonSet starts it', () => {
  let hooks: HookHarness;
  let store: PgClusterStore;
  let agent: ChildProcess | undefined;
  let output = '';
  let port: number;
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'sbx-k8s-node-'));
  const NAME = 'k8s-prestop';

  before(async () => {
    store = new PgClusterStore({ url });
    await store.migrate();
    hooks = await hookHarness('real');
    port = await freePort();
    // The agent as the DaemonSet starts it: its command line ($(NODE_IP), $(NODE_NAME) filled
    // in as the kubelet would) and the ConfigMaps it reads, but for what must be this test's
    // own on a shared host: the port (not 8080), the state dir, the resource prefix and
    // subnet, and the container runtime with the minimal template (fast, no KVM needed).
    const objects = renderKustomization(DEPLOY);
    const node = podTemplateOf(find(objects, 'DaemonSet', 'sbx-node')!)!.spec.containers.find((c) => c.name === 'node')!;
    const fields: Record<string, string> = { NODE_IP: '127.0.0.1', NODE_NAME: NAME };
    const argv = [...(node.command ?? []), ...(node.args ?? [])].map((word) => word.replace(/\$\(([A-Z_]+)\)/g, (_, v: string) => fields[v] ?? `$(${v})`).replace(/^8080$/, String(port)).replace(/:8080$/, `:${port}`));
    assert.deepEqual(argv, ['sbx', 'node', '--host', '127.0.0.1', '--port', String(port), '--advertise', `http://127.0.0.1:${port}`, '--name', NAME]);
    const settings = Object.assign({}, ...(node.envFrom ?? []).map((f) => find(objects, 'ConfigMap', f.configMapRef!.name)!.data as Record<string, string>)) as Record<string, string>;
    agent = spawn(process.execPath, [path.join(ROOT, 'dist', 'cli', 'main.js'), ...argv.slice(1)], {
      env: {
        ...process.env,
        ...settings,
        SBX_CLUSTER_DB_URL: url,
        SBX_CLUSTER_SECRET: SECRET,
        SBX_STATE_DIR: stateDir,
        SBX_IMAGES_DIR: process.env.SBX_IMAGES_DIR || '/var/lib/sandboxes/images',
        SBX_RESOURCE_PREFIX: TEST_PREFIX,
        SBX_SUBNET: `10.243.${Math.floor(Math.random() * 256)}.0/24`,
        SBX_RUNTIME: 'container',
        SBX_TEMPLATE: 'minimal',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    agent.stdout?.on('data', (d: Buffer) => (output += d.toString()));
    agent.stderr?.on('data', (d: Buffer) => (output += d.toString()));
    // Ready as the kubelet sees it: a bare GET /healthz.
    const deadline = Date.now() + 60_000;
    for (;;) {
      assert.equal(agent.exitCode, null, `sbx node exited:\n${output}`);
      assert.ok(Date.now() < deadline, `sbx node did not answer /healthz:\n${output}`);
      if (await fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false)) break;
      await sleep(200);
    }
  });

  after(async () => {
    if (agent && agent.exitCode === null) {
      agent.kill('SIGTERM');
      await once(agent, 'exit');
    }
    await hooks?.close();
    await store?.close();
    rmSync(stateDir, { recursive: true, force: true });
    await removeEmptyPrefixCgroups();
  });

  const fromGateway = { 'x-sbx-cluster-secret': SECRET, 'x-sbx-tenant': 'k8s' };

  it('waits while a session lives, ends once it is destroyed; the node is left draining and holds nothing', async () => {
    const registered = (await store.listNodes()).find((n) => n.name === NAME);
    assert.equal(registered?.url, `http://127.0.0.1:${port}`, 'registered under its Kubernetes node name, at its --advertise URL');
    assert.equal(registered?.draining, false);
    const sessionId = 'k8sprestop';
    const created = await fetch(`http://127.0.0.1:${port}/v1/sessions`, {
      method: 'POST',
      headers: { ...fromGateway, 'x-sbx-session-id': sessionId, 'content-type': 'application/json' },
      body: '{}',
    });
    assert.equal(created.status, 201, await created.text());

    // The hook's port 8080 is this agent's port; it polls every 0.2 s instead of 10.
    const hook = hooks.run(PRE_STOP, { NODE_NAME: NAME, SBX_CLUSTER_DB_URL: url, SBX_CLUSTER_SECRET: SECRET, SBX_MAX_LIFETIME_SECONDS: '3600', STAND_IN_PORT: String(port), HOOK_SLEEP_SECONDS: '0.2' });
    let ended = false;
    void hook.then(() => (ended = true));
    const drainedBy = Date.now() + 30_000;
    while (!(await store.listNodes()).find((n) => n.name === NAME)?.draining) {
      assert.ok(Date.now() < drainedBy, 'the preStop did not drain the node');
      await sleep(200);
    }
    await sleep(2_000);
    assert.equal(ended, false, 'the preStop ended while a session still lived');

    const destroyed = await fetch(`http://127.0.0.1:${port}/v1/sessions/${sessionId}`, { method: 'DELETE', headers: fromGateway });
    assert.equal(destroyed.status, 200, await destroyed.text());
    const res = await hook;
    assert.equal(res.exitCode, 0, res.stderr);
    assert.doesNotMatch(res.stderr, /could not drain/);
    assert.ok(res.curl.length >= 5, `the hook polled ${res.curl.length} times`);
    for (const argv of res.curl) assert.ok(!argv.includes(SECRET), 'the credential on curl\'s command line');
    assert.deepEqual(await prefixedResources(TEST_PREFIX, stateDir), { netns: [], links: [], keyDirs: [] });
  });
});

describe('the walk-through\'s commands in a gateway pod (uid 10001, no home, the URL in its environment)', () => {
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
  const commands = [...docs.slice(docs.indexOf('## Kubernetes: from an empty cluster')).matchAll(/^kubectl -n sbx exec deploy\/sbx-gateway -- (.+)$/gm)].map((m) =>
    m[1]!.replace(/\bkvm-1\b/g, 'kvm-exec'),
  );
  const inGatewayPod = (command: string) =>
    run(['setpriv', '--reuid=10001', '--regid=10001', '--clear-groups', '--', 'sh', '-c', command.startsWith('sh -c ') ? command.slice(6).replace(/^'|'$/g, '') : command], {
      allowFailure: true,
      timeoutMs: 60_000,
      cwd: '/',
      env: { PATH: `${bin}:/usr/local/bin:/usr/bin:/bin`, HOME: '/nonexistent', SBX_CLUSTER_DB_URL: url, SBX_CLUSTER_SECRET: SECRET },
    });

  it('sbx nodes, keys create, node drain and undrain work as the docs write them', async () => {
    assert.deepEqual(commands.map((c) => c.split(' ').slice(0, 4).join(' ')), [
      'sbx nodes',
      'sh -c \'sbx keys',
      'sbx node drain kvm-exec',
      'sbx node undrain kvm-exec',
    ]);
    const [nodes, key, drain, undrain] = commands as [string, string, string, string];
    const listed = await inGatewayPod(nodes);
    assert.equal(listed.exitCode, 0, listed.stderr);
    assert.match(listed.stdout, /^kvm-exec\s+(up|silent)\s/m, "listed (up, or silent if this host is slow: it never heartbeats)");
    const created = await inGatewayPod(key);
    assert.equal(created.exitCode, 0, created.stderr);
    assert.match(created.stdout, /\bsbx_[a-z0-9]{12}_\S+/);
    assert.equal((await inGatewayPod(drain)).exitCode, 0);
    assert.equal((await store.listNodes()).find((n) => n.name === 'kvm-exec')?.draining, true);
    assert.equal((await inGatewayPod(undrain)).exitCode, 0);
    assert.equal((await store.listNodes()).find((n) => n.name === 'kvm-exec')?.draining, false);
  });
});

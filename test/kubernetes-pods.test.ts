/**
 * The node agent and the gateway started as the manifests start them (the DaemonSet's and the
 * Deployment's command lines, $(NODE_IP)/$(NODE_NAME) filled in as the kubelet would, the
 * ConfigMaps they read, the gateway as uid 10001 with no home), on a PostgreSQL 15 of the
 * test's own: a first session through the gateway as the walk-through makes one (a key from
 * `sbx keys create --db`, a create, a screenshot, a delete), the gateway's readiness probe
 * (GET /healthz) failing while the database does not answer and its liveness probe (TCP)
 * not, then the node's preStop waiting for a live session. What must be this test's own on a
 * shared host is: ports (not 8080), addresses (127.0.0.1, not 0.0.0.0), the state dir, the
 * resource prefix and subnet, and the container runtime with the minimal template.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { PgClusterStore } from '../src/cluster/store/pg-cluster-store.js';
import { run } from '../src/util/exec.js';
import { hookHarness, PRE_STOP, type HookHarness } from './helpers/kubernetes-hooks.js';
import { DEPLOY, find, podTemplateOf, renderKustomization, ROOT, type Container } from './helpers/kubernetes-manifests.js';
import { removeEmptyPrefixCgroups, TEST_PREFIX } from './helpers/orchestrator.js';
import { startPostgres } from './helpers/postgres.js';
import { prefixedResources } from './helpers/resources.js';

const SECRET = 'c'.repeat(64);
const CLI = path.join(ROOT, 'dist', 'cli', 'main.js');
// At the top level: the helper stops the server in an after() of the file, not of a hook.
const database = await startPostgres();
const { url } = database;
const OBJECTS = renderKustomization(DEPLOY);
const GATEWAY_UID = 10001;

/** A free TCP port on loopback (asked of the kernel, then released). */
async function freePort(): Promise<number> {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

function container(kind: string, name: string, containerName: string): Container {
  return podTemplateOf(find(OBJECTS, kind, name)!)!.spec.containers.find((c) => c.name === containerName)!;
}

/** The argv the kubelet would run ($(VAR)s filled in from `fields`), with port 8080 made `port`. */
function argvOf(c: Container, fields: Record<string, string>, port: number): string[] {
  return [...(c.command ?? []), ...(c.args ?? [])].map((word) =>
    word
      .replace(/\$\(([A-Z_]+)\)/g, (_, v: string) => fields[v] ?? `$(${v})`)
      .replace(/^8080$/, String(port))
      .replace(/:8080$/, `:${port}`),
  );
}

/** The environment the container's ConfigMaps give it. */
function settingsOf(c: Container): Record<string, string> {
  return Object.assign({}, ...(c.envFrom ?? []).map((f) => find(OBJECTS, 'ConfigMap', f.configMapRef!.name)!.data as Record<string, string>)) as Record<
    string,
    string
  >;
}

interface Started {
  child: ChildProcess;
  output(): string;
}

/** Starts `sbx <argv>` and waits until a bare GET /healthz answers `ready` (200, or any answer). */
async function start(argv: string[], env: NodeJS.ProcessEnv, port: number, ids?: { uid: number; gid: number }): Promise<Started> {
  const child = spawn(process.execPath, [CLI, ...argv], { env, cwd: '/', stdio: ['ignore', 'pipe', 'pipe'], ...ids });
  let output = '';
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
  const deadline = Date.now() + 60_000;
  for (;;) {
    assert.equal(child.exitCode, null, `sbx ${argv[0]} exited:\n${output}`);
    assert.ok(Date.now() < deadline, `sbx ${argv[0]} did not answer /healthz:\n${output}`);
    if (
      await fetch(`http://127.0.0.1:${port}/healthz`).then(
        (r) => r.ok,
        () => false,
      )
    )
      return { child, output: () => output };
    await sleep(200);
  }
}

async function stop(started: Started | undefined): Promise<void> {
  if (started && started.child.exitCode === null) {
    started.child.kill('SIGTERM');
    await once(started.child, 'exit');
  }
}

describe('the node and the gateway as the manifests start them', () => {
  let store: PgClusterStore;
  let hooks: HookHarness;
  let node: Started | undefined;
  let gateway: Started | undefined;
  let nodePort: number;
  let gatewayPort: number;
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'sbx-k8s-node-'));
  const NAME = 'k8s-pods';

  before(async () => {
    store = new PgClusterStore({ url });
    await store.migrate();
    hooks = await hookHarness('real');
    const shared = {
      SBX_CLUSTER_DB_URL: url,
      SBX_CLUSTER_SECRET: SECRET,
      SBX_RUNTIME: 'container',
      SBX_TEMPLATE: 'minimal',
      PATH: process.env.PATH,
    };

    nodePort = await freePort();
    const agent = container('DaemonSet', 'sbx-node', 'node');
    const nodeArgv = argvOf(agent, { NODE_IP: '127.0.0.1', NODE_NAME: NAME }, nodePort);
    assert.deepEqual(nodeArgv, [
      'sbx',
      'node',
      '--host',
      '127.0.0.1',
      '--port',
      String(nodePort),
      '--advertise',
      `http://127.0.0.1:${nodePort}`,
      '--name',
      NAME,
    ]);
    node = await start(
      nodeArgv.slice(1),
      {
        ...settingsOf(agent),
        ...shared,
        SBX_STATE_DIR: stateDir,
        SBX_IMAGES_DIR: process.env.SBX_IMAGES_DIR || '/var/lib/sandboxes/images',
        SBX_RESOURCE_PREFIX: TEST_PREFIX,
        SBX_SUBNET: `10.243.${Math.floor(Math.random() * 256)}.0/24`,
      },
      nodePort,
    );

    gatewayPort = await freePort();
    const front = container('Deployment', 'sbx-gateway', 'gateway');
    const gatewayArgv = argvOf(front, {}, gatewayPort);
    assert.deepEqual(gatewayArgv, ['sbx', 'gateway', '--host', '0.0.0.0', '--port', String(gatewayPort)]);
    gatewayArgv[3] = '127.0.0.1'; // loopback only on a shared host
    gateway = await start(gatewayArgv.slice(1), { ...settingsOf(front), ...shared, HOME: '/nonexistent' }, gatewayPort, { uid: GATEWAY_UID, gid: GATEWAY_UID });
  });

  after(async () => {
    await stop(gateway);
    await stop(node);
    await hooks?.close();
    await store?.close();
    rmSync(stateDir, { recursive: true, force: true });
    await removeEmptyPrefixCgroups();
  });

  it('a first session through the gateway, as the walk-through makes it', async () => {
    // docs/cluster.md step 6, in the gateway pod.
    const key = await run(
      [
        'setpriv',
        `--reuid=${GATEWAY_UID}`,
        `--regid=${GATEWAY_UID}`,
        '--clear-groups',
        '--',
        process.execPath,
        CLI,
        'keys',
        'create',
        '--tenant',
        'demo',
        '--db',
        url,
      ],
      {
        cwd: '/',
        env: { PATH: process.env.PATH, HOME: '/nonexistent' },
      },
    );
    const apiKey = /\bsbx_[a-z0-9]{12}_\S+/.exec(key.stdout)?.[0];
    assert.ok(apiKey, key.stdout);
    const api = `http://127.0.0.1:${gatewayPort}`;
    const auth = { authorization: `Bearer ${apiKey}` };
    // Step 7.
    const created = await fetch(`${api}/v1/sessions`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: '{"template":"minimal"}',
    });
    const body = (await created.json()) as { id?: string };
    assert.equal(created.status, 201, JSON.stringify(body));
    const shot = await fetch(`${api}/v1/sessions/${body.id}/screenshot`, { headers: auth });
    assert.equal(shot.status, 200);
    assert.equal(shot.headers.get('content-type'), 'image/png');
    assert.deepEqual([...new Uint8Array(await shot.arrayBuffer()).subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
    const nodes = await store.listNodes();
    assert.equal(nodes.find((n) => n.name === NAME)?.capacity.sessions, 1, 'placed on the node the DaemonSet started');
    const destroyed = await fetch(`${api}/v1/sessions/${body.id}`, { method: 'DELETE', headers: auth });
    assert.equal(destroyed.status, 200);
  });

  it('the gateway is ready only while PostgreSQL answers (readiness: GET /healthz); alive all along (liveness: TCP)', async (t) => {
    assert.match(
      readFileSync(`/proc/${gateway!.child.pid}/status`, 'utf8'),
      new RegExp(`^Uid:\\s+${GATEWAY_UID}\\s`, 'm'),
      "the gateway runs as its pod's uid",
    );
    const healthz = () => fetch(`http://127.0.0.1:${gatewayPort}/healthz`, { signal: AbortSignal.timeout(10_000) }).then((r) => r.status);
    assert.equal(await healthz(), 200);
    database.pause();
    try {
      const paused = Date.now();
      let status = await healthz();
      while (status === 200 && Date.now() - paused < 15_000) {
        await sleep(250);
        status = await healthz();
      }
      assert.equal(status, 503, 'not ready while the database does not answer');
      t.diagnostic(`503 after ${Date.now() - paused} ms of a paused database`);
      const socket = net.connect(gatewayPort, '127.0.0.1');
      await once(socket, 'connect');
      socket.destroy();
    } finally {
      database.resume();
    }
    const resumed = Date.now();
    let status = await healthz();
    while (status !== 200 && Date.now() - resumed < 15_000) {
      await sleep(250);
      status = await healthz();
    }
    assert.equal(status, 200, 'ready again once it answers, without a restart');
    t.diagnostic(`200 again ${Date.now() - resumed} ms after it resumed`);
  });

  it("the node's preStop waits while a session lives and ends once it is destroyed; the host holds nothing after", async () => {
    const registered = (await store.listNodes()).find((n) => n.name === NAME);
    assert.equal(registered?.url, `http://127.0.0.1:${nodePort}`, 'registered under its Kubernetes node name, at its --advertise URL');
    assert.equal(registered?.draining, false);
    const fromGateway = { 'x-sbx-cluster-secret': SECRET, 'x-sbx-tenant': 'k8s' };
    const sessionId = 'k8sprestop';
    const created = await fetch(`http://127.0.0.1:${nodePort}/v1/sessions`, {
      method: 'POST',
      headers: { ...fromGateway, 'x-sbx-session-id': sessionId, 'content-type': 'application/json' },
      body: '{}',
    });
    assert.equal(created.status, 201, await created.text());

    // The hook's port 8080 is this agent's; it polls every 0.2 s instead of 10.
    const hook = hooks.run(PRE_STOP, {
      NODE_NAME: NAME,
      SBX_CLUSTER_DB_URL: url,
      SBX_CLUSTER_SECRET: SECRET,
      SBX_MAX_LIFETIME_SECONDS: '3600',
      STAND_IN_PORT: String(nodePort),
      HOOK_SLEEP_SECONDS: '0.2',
    });
    let ended = false;
    void hook.then(() => (ended = true));
    const drainedBy = Date.now() + 30_000;
    while (!(await store.listNodes()).find((n) => n.name === NAME)?.draining) {
      assert.ok(Date.now() < drainedBy, 'the preStop did not drain the node');
      await sleep(200);
    }
    await sleep(2_000);
    assert.equal(ended, false, 'the preStop ended while a session still lived');

    const destroyed = await fetch(`http://127.0.0.1:${nodePort}/v1/sessions/${sessionId}`, { method: 'DELETE', headers: fromGateway });
    assert.equal(destroyed.status, 200, await destroyed.text());
    const res = await hook;
    assert.equal(res.exitCode, 0, res.stderr);
    assert.doesNotMatch(res.stderr, /could not drain/);
    assert.ok(res.curl.length >= 5, `the hook polled ${res.curl.length} times`);
    for (const argv of res.curl) assert.ok(!argv.includes(SECRET), "the credential on curl's command line");
    assert.deepEqual(await prefixedResources(TEST_PREFIX, stateDir), { netns: [], links: [], keyDirs: [] });
  });
});

import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { ResourceNames, SESSION_ID_PATTERN } from '../src/network/names.js';
import { listSandboxLinks, listSandboxNetns } from '../src/network/netns.js';
import { run } from '../src/util/exec.js';
import { removeEmptyPrefixCgroups, TEST_PREFIX } from './helpers/orchestrator.js';
import { freePort, startServeOn } from './helpers/serve.js';

/**
 * A real crash of the orchestrator: the process is SIGKILLed while three sessions are live
 * and a fourth is being created, then started again on the same state. The live ones must
 * be adopted (same sandboxes, still working), the half-made one gone with everything it
 * took, and the host must hold exactly the resources of the sessions that exist.
 */
const NAMES = new ResourceNames(TEST_PREFIX);

let stateDir: string;
let port: number;
let child: ChildProcess | undefined;

/** `sbx serve` as its own process, as an operator runs it (with another resource prefix when asked). */
function startServer(prefix = TEST_PREFIX): Promise<ChildProcess> {
  return startServeOn(stateDir, port, { SBX_RESOURCE_PREFIX: prefix });
}

async function api(
  method: string,
  url: string,
  body?: unknown,
): Promise<{ status: number; json: () => Promise<Record<string, unknown>>; bytes: () => Promise<Buffer> }> {
  const res = await fetch(`http://127.0.0.1:${port}${url}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const buffer = Buffer.from(await res.arrayBuffer());
  return { status: res.status, json: async () => JSON.parse(buffer.toString('utf8')) as Record<string, unknown>, bytes: async () => buffer };
}

async function bash(id: string, command: string): Promise<string> {
  const res = await api('POST', `/v1/sessions/${id}/tools/bash`, { command });
  assert.equal(res.status, 200);
  const content = (await res.json()).content as Array<{ type: string; text?: string }>;
  return content.map((c) => c.text ?? '').join('');
}

/** What the host holds for this test's prefix, by kind. */
async function hostResources() {
  const mounts = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').filter((l) => l.includes(stateDir));
  const runc = (await run(['runc', '--root', NAMES.runcRoot, 'list', '-q'], { allowFailure: true })).stdout.split('\n').filter(Boolean);
  const dirs = existsSync(stateDir) ? (await readdir(stateDir)).filter((d) => SESSION_ID_PATTERN.test(d)) : [];
  const inits: number[] = [];
  for (const id of runc) {
    const state = await run(['runc', '--root', NAMES.runcRoot, 'state', id], { allowFailure: true });
    if (state.exitCode === 0) inits.push((JSON.parse(state.stdout) as { pid: number }).pid);
  }
  return {
    netns: (await listSandboxNetns(NAMES)).sort(),
    veth: (await listSandboxLinks(NAMES)).sort(),
    containers: runc.map((c) => NAMES.sessionIdOf(c)).sort(),
    overlayMounts: mounts.length,
    keyDirs: dirs.sort(),
    liveInits: inits.filter((pid) => existsSync(`/proc/${pid}`)).length,
  };
}

describe('an orchestrator killed with SIGKILL, and started again', () => {
  const live: string[] = [];
  let halfMade: string | undefined;

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-adopt-'));
    port = await freePort();
    child = await startServer();
  });
  after(() => stopAndClean());

  it('dies mid-creation with three live sessions', async () => {
    for (let i = 0; i < 3; i++) {
      const res = await api('POST', '/v1/sessions', { width: 800, height: 600 });
      assert.equal(res.status, 201);
      const id = String((await res.json()).id);
      live.push(id);
      // A mark inside each sandbox: after the restart it must be the same sandbox, not a new one.
      await bash(id, `echo mark-${id} > /tmp/mark`);
    }
    // A fourth, killed part-way: its netns appears early in a create, well before it is ready.
    void api('POST', '/v1/sessions', {}).catch(() => undefined);
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline && (await listSandboxNetns(NAMES)).length < 4) await sleep(10);
    const netns = await listSandboxNetns(NAMES);
    halfMade = netns.find((id) => !live.includes(id));
    assert.ok(halfMade, 'the fourth session was being created');
    child?.kill('SIGKILL');
    await new Promise((resolve) => child?.once('exit', resolve));
    const left = await hostResources();
    assert.ok(left.netns.includes(halfMade), 'the crash left the half-made sandbox behind');
    // The ledger holds what each had taken, recorded before it was taken.
    const ledger = ledgerOf();
    for (const id of live) {
      assert.deepEqual(
        new Set(ledger.filter((r) => r.session_id === id).map((r) => r.kind)),
        new Set(['key-dir', 'netns', 'veth', 'disk', 'mount', 'container', 'process', 'id-range']),
        id,
      );
    }
    assert.ok(
      ledger.some((r) => r.session_id === halfMade && r.kind === 'netns'),
      'the half-made one is on the ledger',
    );
  });

  it('adopts the live sessions on restart: same sandboxes, still working', async () => {
    child = await startServer();
    const listed = (await (await api('GET', '/v1/sessions')).json()) as unknown as
      { sessions?: Array<{ id: string; state: string }> } | Array<{ id: string; state: string }>;
    const sessions = Array.isArray(listed) ? listed : (listed.sessions ?? []);
    assert.deepEqual(
      sessions
        .filter((s) => s.state === 'ready')
        .map((s) => s.id)
        .sort(),
      [...live].sort(),
    );
    for (const id of live) {
      const shot = await api('GET', `/v1/sessions/${id}/screenshot`);
      assert.equal(shot.status, 200);
      assert.equal((await bash(id, 'cat /tmp/mark')).trim(), `mark-${id}`);
      const click = await api('POST', `/v1/sessions/${id}/actions`, { action: 'left_click', coordinate: [100, 100] });
      assert.equal(click.status, 200);
    }
  });

  it('reclaimed the half-made one, and the host holds exactly what the live sessions need', async () => {
    assert.deepEqual(
      ledgerOf().filter((r) => r.session_id === halfMade),
      [],
      'its ledger is cleared',
    );
    const got = await api('GET', `/v1/sessions/${halfMade}`);
    assert.ok(got.status === 404 || (await got.json()).state === 'destroyed', `the half-made session is gone (${got.status})`);
    const held = await hostResources();
    const ids = [...live].sort();
    assert.deepEqual(held.netns, ids);
    assert.deepEqual(held.veth, ids);
    assert.deepEqual(held.containers, ids);
    assert.deepEqual(held.keyDirs, ids);
    assert.equal(held.overlayMounts, 12, 'four mounts each: its disk, the idmapped views of the image and of its config, and its overlay');
    assert.equal(held.liveInits, 3);
  });

  it('destroys adopted sessions like any other, leaving nothing', async () => {
    for (const id of live) assert.equal((await api('DELETE', `/v1/sessions/${id}`)).status, 200);
    const held = await hostResources();
    assert.deepEqual(held, { netns: [], veth: [], containers: [], overlayMounts: 0, keyDirs: [], liveInits: 0 });
    assert.deepEqual(ledgerOf(), [], 'nothing left on the ledger');
  });
});

describe('a crash, then a start with another resource prefix', () => {
  const otherPrefix = TEST_PREFIX === 'zzz-' ? 'zzy-' : 'zzz-';
  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-ledger-'));
    port = await freePort();
  });
  after(async () => {
    await stopAndClean(otherPrefix);
    // The first server was killed: its policy table is left (the second has another prefix).
    await run(['nft', 'delete', 'table', 'inet', NAMES.policyTable], { allowFailure: true });
  });

  it('reclaims by the ledger what no name scan of the new prefix would find', async () => {
    child = await startServer();
    const res = await api('POST', '/v1/sessions', {});
    assert.equal(res.status, 201);
    const id = String((await res.json()).id);
    child.kill('SIGKILL');
    await new Promise((resolve) => child?.once('exit', resolve));
    assert.ok((await hostResources()).netns.includes(id));

    child = await startServer(otherPrefix);
    const held = await hostResources(); // counted under the first prefix
    assert.deepEqual(held, { netns: [], veth: [], containers: [], overlayMounts: 0, keyDirs: [], liveInits: 0 });
    assert.deepEqual(ledgerOf(), []);
  });
});

/** The store's ledger rows, read as a second process would (the server keeps the file open). */
function ledgerOf(): Array<{ session_id: string; kind: string; name: string }> {
  const db = new Database(path.join(stateDir, 'orchestrator.db'), { readonly: true, fileMustExist: true });
  try {
    return db.prepare('SELECT session_id, kind, name FROM session_resources').all() as Array<{ session_id: string; kind: string; name: string }>;
  } finally {
    db.close();
  }
}

/** Stops the server if it runs (SIGTERM: it destroys its sessions), then removes the test's state. */
async function stopAndClean(otherPrefix?: string): Promise<void> {
  if (child && child.exitCode === null) {
    child.kill('SIGTERM');
    await new Promise((resolve) => child?.once('exit', resolve));
  }
  await rm(stateDir, { recursive: true, force: true });
  await rmdirQuiet(NAMES.runcRoot);
  await rmdirQuiet(NAMES.rootfsRoot);
  if (otherPrefix) await rmdirQuiet(new ResourceNames(otherPrefix).runcRoot);
  if (otherPrefix) await rmdirQuiet(new ResourceNames(otherPrefix).rootfsRoot);
  await removeEmptyPrefixCgroups();
}

async function rmdirQuiet(dir: string): Promise<void> {
  await rm(dir, { recursive: false, force: true }).catch(() => undefined);
}

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { once } from 'node:events';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { SandboxClient, NotFoundError, InvalidRequestError } from '../src/client/index.js';
import { run } from '../src/util/exec.js';
import { pngSize } from './helpers/guest.js';
import { ResourceNames } from '../src/network/names.js';
import { hostTrace, rememberNetns } from './helpers/host.js';
import { TEST_PREFIX, startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';
import { runCli, startServe } from './helpers/serve.js';

const NAMES = new ResourceNames(TEST_PREFIX);

async function waitFor(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await sleep(100);
  }
  assert.fail(`timed out waiting for ${what}`);
}

const nothingLeft = { netns: false, veth: false, mounts: [], container: false, processes: [], sessionDir: false };

describe('sessions end by themselves when they should', () => {
  let orch: TestOrchestrator;
  before(async () => {
    orch = await startTestOrchestrator();
  });
  after(async () => {
    await orch?.stop();
  });

  it('an idle session is destroyed when its timeout passes, and activity extends it', async () => {
    const created = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { timeoutSeconds: 10 } });
    assert.equal(created.statusCode, 201, created.body);
    const { id, expiresAt } = created.json();
    await sleep(3_000);
    await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/actions`, payload: { action: 'cursor_position' } });
    const extended = (await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}` })).json().expiresAt;
    assert.ok(Date.parse(extended) >= Date.parse(expiresAt) + 2_500, 'an action moved the deadline');
    await rememberNetns(NAMES, id);
    // Past the deadline it was created with (and a reaper tick after it): the action keeps it alive.
    await sleep(Math.max(0, Date.parse(expiresAt) + 1_500 - Date.now()));
    const past = (await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}` })).json();
    assert.equal(past.state, 'ready', `still ready 1.5 s after its first deadline (${past.endReason ?? ''})`);
    await waitFor('the reaper', async () => (await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}` })).json().state === 'destroyed', 15_000);
    assert.deepEqual(await hostTrace(NAMES, id, path.join(orch.stateDir, id)), nothingLeft);
  });

  it('a sandbox whose init dies is marked failed and releases everything', async () => {
    const { id } = (await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} })).json();
    await rememberNetns(NAMES, id);
    const pid = Number(await readFile(path.join(orch.stateDir, id, 'container.pid'), 'utf8'));
    process.kill(pid, 'SIGKILL');
    await waitFor('the session to fail', async () => (await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}` })).json().state === 'failed');
    const view = (await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}` })).json();
    assert.match(view.error, /stopped unexpectedly/);
    await waitFor('its resources to go', async () => (await hostTrace(NAMES, id, path.join(orch.stateDir, id))).netns === false);
    assert.deepEqual(await hostTrace(NAMES, id, path.join(orch.stateDir, id)), nothingLeft);
    const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/actions`, payload: { action: 'screenshot' } });
    assert.equal(res.statusCode, 410);
    assert.equal(res.json().error.code, 'session_gone');
    assert.equal((await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}` })).json().state, 'destroyed');
  });

  it('a dropped SSH connection is re-established and the next action works', async () => {
    const { id } = (await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} })).json();
    // Kill the guest's per-connection sshd processes from the host: the orchestrator's
    // connection drops as it would if sshd restarted or the link blipped.
    const { stdout } = await run(['ip', 'netns', 'pids', orch.names.netns(id)]);
    let killed = 0;
    for (const pid of stdout.split('\n').filter(Boolean)) {
      const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
      if (cmdline.startsWith('sshd: user')) {
        process.kill(Number(pid), 'SIGKILL');
        killed++;
      }
    }
    assert.ok(killed > 0, 'found the connection in the guest');
    await sleep(200);
    const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/actions`, payload: { action: 'cursor_position' } });
    assert.equal(res.statusCode, 200, res.body);
    assert.match((await orch.server.inject({ method: 'GET', url: '/metrics' })).body, /sandbox_ssh_reconnects_total [1-9]/);
  });
});

describe('the orchestrator process: CLI, SDK, SIGTERM and restart after a crash', () => {
  let stateDir: string;
  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-serve-'));
  });
  after(async () => {
    await rm(stateDir, { recursive: true, force: true });
  });

  it('is driven by the CLI and the SDK, and destroys its sessions on SIGTERM', async () => {
    const serve = await startServe(stateDir, 18081);
    try {
      const unknown = await runCli(['create', '--template', 'no-such-template'], serve.url);
      assert.notEqual(unknown.code, 0);
      assert.match(unknown.stderr, /unknown template "no-such-template"; available: .*minimal/);
      const created = await runCli(['create', '--template', 'minimal', '--width', '640', '--height', '480'], serve.url);
      assert.equal(created.code, 0, created.stderr);
      const id = JSON.parse(created.stdout).id as string;
      assert.equal(JSON.parse(created.stdout).template, 'minimal');
      const ls = await runCli(['ls'], serve.url);
      assert.match(ls.stdout, new RegExp(`${id}\\s+ready\\s+container\\s+minimal\\s+640x480`));
      const out = path.join(stateDir, 'shot.png');
      const shot = await runCli(['screenshot', id, '-o', out], serve.url);
      assert.equal(shot.code, 0, shot.stderr);
      assert.deepEqual(pngSize(await readFile(out)), { width: 640, height: 480 });

      const client = new SandboxClient({ baseUrl: serve.url });
      const sandbox = await client.connect(id);
      await sandbox.mouseMove(40, 50);
      assert.deepEqual(await sandbox.cursorPosition(), { x: 40, y: 50 });
      await assert.rejects(sandbox.leftClick(5000, 5), InvalidRequestError);
      await assert.rejects(client.get('nosuchsess'), NotFoundError);
      const bad = await runCli(['act', id, '{"action":"nope"}'], serve.url);
      assert.equal(bad.code, 1);
      assert.match(bad.stderr, /action "nope" is unknown/);

      const second = await client.create({ width: 800, height: 600 });
      for (const sid of [id, second.id]) await rememberNetns(NAMES, sid);
      serve.child.kill('SIGTERM');
      const [code] = (await once(serve.child, 'exit')) as [number | null];
      assert.equal(code, 0, serve.output());
      for (const sid of [id, second.id]) assert.deepEqual(await hostTrace(NAMES, sid, path.join(stateDir, sid)), nothingLeft);
      // Nor the directories of its containers under /run, once empty.
      for (const dir of [NAMES.runcRoot, NAMES.rootfsRoot]) assert.equal(existsSync(dir), false, `${dir} is left`);
    } finally {
      serve.child.kill('SIGKILL');
    }
  });

  it('a restart after SIGKILL adopts the live sandbox and reclaims everything of one that died meanwhile', async () => {
    // The same subnet after the restart, as an operator's config would be: leases are stored by index.
    const subnet = `10.243.${Math.floor(Math.random() * 256)}.0/24`;
    const serve = await startServe(stateDir, 18082, subnet);
    const client = new SandboxClient({ baseUrl: serve.url });
    const survivor = await client.create();
    const sandbox = await client.create();
    await rememberNetns(NAMES, survivor.id);
    const sessionDir = path.join(stateDir, sandbox.id);
    serve.child.kill('SIGKILL');
    await once(serve.child, 'exit');
    const orphan = await hostTrace(NAMES, sandbox.id, sessionDir);
    assert.ok(orphan.netns && orphan.container && orphan.sessionDir, 'the crash left the sandbox behind');
    // While no orchestrator runs, one sandbox dies.
    await run(['runc', '--root', NAMES.runcRoot, 'delete', '--force', NAMES.container(sandbox.id)]);

    const restarted = await startServe(stateDir, 18083, subnet);
    try {
      assert.deepEqual(await hostTrace(NAMES, sandbox.id, sessionDir), nothingLeft);
      assert.equal(existsSync(path.join(sessionDir, 'id_ed25519')), false, 'the key is gone');
      const again = new SandboxClient({ baseUrl: restarted.url });
      const info = await again.get(sandbox.id);
      assert.equal(info.state, 'destroyed');
      assert.match(info.error ?? '', /restarted/);
      assert.equal((await again.get(survivor.id)).state, 'ready', 'the live one is adopted');
      const adopted = await again.connect(survivor.id);
      await adopted.mouseMove(30, 40);
      assert.deepEqual(await adopted.cursorPosition(), { x: 30, y: 40 });
    } finally {
      restarted.child.kill('SIGTERM');
      await once(restarted.child, 'exit');
    }
    assert.deepEqual(await hostTrace(NAMES, survivor.id, path.join(stateDir, survivor.id)), nothingLeft, 'SIGTERM destroyed the adopted one');
  });
});

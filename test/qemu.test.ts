import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdtemp, open, readdir, readFile, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import ssh2 from 'ssh2';
import { GUEST_USER } from '../src/guest/contract.js';
import { ResourceNames, SESSION_ID_PATTERN } from '../src/network/names.js';
import { GuestConnection, HostKeyMismatchError } from '../src/transport/ssh-connection.js';
import { run } from '../src/util/exec.js';
import { connectToGuest, guestAddress, guestSh } from './helpers/guest.js';
import { act, assertClickArrives, assertScreenshotSize, assertTypesLiterally } from './helpers/desktop-checks.js';
import { hostTrace, processesMentioning } from './helpers/host.js';
import { TEST_PREFIX, startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';
import { startXevSlowly } from './helpers/xev.js';

const { utils } = ssh2;
const NAMES = new ResourceNames(TEST_PREFIX);
const nothingLeft = { netns: false, veth: false, mounts: [], container: false, processes: [], sessionDir: false };

/**
 * The qemu runtime on real microVMs: under TCG on machines without a usable /dev/kvm (CI),
 * with KVM where it works. A TCG boot costs 10-20 s, so one VM serves every check of the
 * end-to-end suite; two more are booted to fail (a broken config drive, a killed QEMU).
 */
describe('a qemu microVM sandbox, end to end', () => {
  let orch: TestOrchestrator;
  let id: string;
  let guest: GuestConnection;

  before(async () => {
    orch = await startTestOrchestrator({ runtime: 'qemu' });
  });
  after(async () => {
    guest?.close();
    await orch?.stop();
  });

  it('boots over HTTP (201) with the requested screen', async (t) => {
    const started = Date.now();
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { width: 800, height: 600, timeoutSeconds: 300 } });
    assert.equal(res.statusCode, 201, res.body);
    t.diagnostic(`create-to-ready: ${Date.now() - started} ms`);
    const body = res.json();
    id = body.id;
    assert.equal(body.state, 'ready');
    assert.equal(body.runtime, 'qemu');
    assert.deepEqual(body.display, { width: 800, height: 600 });
  });

  it('is a real VM: its own kernel, root on a virtio disk, config drive, eth0 with the guest address', async () => {
    const address = await guestAddress(orch.names, id);
    guest = await connectToGuest(orch.stateDir, id, address);
    const facts = (await guestSh(guest, 'uname -r; cat /proc/cmdline; grep -E " / | /sandbox/config " /proc/mounts; ip -o -4 addr show dev eth0')).text;
    const image = JSON.parse(await readFile(path.join(orch.image.dir, 'manifest.json'), 'utf8')) as { vm: { kernelRelease: string } };
    assert.match(facts, new RegExp(`^${image.vm.kernelRelease.replace(/\./g, '\\.')}$`, 'm'), 'the image kernel, not the host one');
    assert.match(facts, /init=\/sbin\/sandbox-init/);
    assert.match(facts, /^\/dev\/vda \/ ext4 rw/m);
    // The config drive (/dev/vdb) is read at boot into a tmpfs: a snapshot clone can be rekeyed.
    assert.match(facts, /^config \/sandbox\/config tmpfs rw/m);
    assert.match(facts, new RegExp(`eth0\\s+inet ${address.replace(/\./g, '\\.')}/30`));
    // The config drive keeps owners and modes: sshd's StrictModes accepted authorized_keys.
    const modes = (await guestSh(guest, 'stat -c "%a %u %n" /sandbox/config/authorized_keys /sandbox/config/ssh_host_ed25519_key')).text;
    assert.match(modes, /^600 1000 \/sandbox\/config\/authorized_keys$/m);
    assert.match(modes, /^600 0 \/sandbox\/config\/ssh_host_ed25519_key$/m);
  });

  it('refuses a guest that presents another host key than the one pinned', async () => {
    const privateKey = await readFile(path.join(orch.stateDir, id, 'id_ed25519'), 'utf8');
    const impostor = utils.parseKey(utils.generateKeyPairSync('ed25519').public);
    if (impostor instanceof Error) throw impostor;
    const conn = new GuestConnection({
      endpoint: { host: await guestAddress(orch.names, id), port: 22 },
      username: GUEST_USER,
      privateKey,
      pinnedHostKey: impostor.getPublicSSH(),
    });
    await assert.rejects(conn.open(10_000), HostKeyMismatchError);
    conn.close();
  });

  it('returns a PNG screenshot of the requested size', async () => {
    await assertScreenshotSize(orch, id, { width: 800, height: 600 });
  });

  it('delivers a click at the requested point to an X client in the guest', async () => {
    await startXevSlowly(guest, 800, 600);
    await assertClickArrives(orch, id, guest);
  });

  it('types text literally: every keysym arrives and nothing is executed', async () => {
    await assertTypesLiterally(orch, id, guest, 100);
  });

  it('counts its boot in /metrics, by accelerator', async () => {
    const text = (await orch.server.inject({ method: 'GET', url: '/metrics' })).body;
    assert.match(text, /sandbox_session_create_duration_seconds_count\{runtime="qemu"\} 1/);
    assert.match(text, /sandbox_vm_boot_seconds_count\{runtime="qemu",accel="(tcg|kvm)"\} 1/);
  });

  it('is destroyed without a trace: no qemu, no netns, veth or TAP, no key dir', async (t) => {
    const sessionDir = path.join(orch.stateDir, id);
    const pid = Number(await readFile(path.join(sessionDir, 'qemu.pid'), 'utf8'));
    const before = await hostTrace(NAMES, id, sessionDir);
    assert.ok(before.netns && before.veth && before.sessionDir);
    assert.ok(before.processes.includes(pid), 'qemu runs inside the session netns');
    assert.match(await readFile(`/proc/${pid}/status`, 'utf8'), /^Uid:\s+65534\s/m, 'qemu dropped root (-runas nobody)');
    const links = (await run(['ip', '-n', orch.names.netns(id), '-o', 'link', 'show'])).stdout;
    assert.match(links, /\btap0\b.*master br0/);
    assert.match(links, /\beth0@.*master br0/);
    guest.close();

    const started = Date.now();
    const res = await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}` });
    assert.equal(res.statusCode, 200);
    t.diagnostic(`destroy: ${Date.now() - started} ms`);
    assert.equal(res.json().state, 'destroyed');
    assert.deepEqual(await hostTrace(NAMES, id, sessionDir), nothingLeft);
    assert.deepEqual(await processesMentioning(orch.names.vm(id)), [], 'no qemu process');
    // The TAP went with the netns; it did not fall back into the host's namespace.
    assert.equal((await run(['ip', 'link', 'show', 'tap0'], { allowFailure: true })).exitCode !== 0, true, 'no tap0 on the host');
    assert.equal((await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}` })).json().state, 'destroyed');
  });
});

describe('qemu sandboxes that fail', () => {
  let orch: TestOrchestrator;
  before(async () => {
    orch = await startTestOrchestrator({ runtime: 'qemu' });
  });
  after(async () => {
    await orch?.stop();
  });

  it('a VM whose config drive is broken fails creation at once, with the reason from its console, and leaves nothing', async (t) => {
    // The guest mounts its config drive seconds after QEMU starts: zero the drive as soon as
    // QEMU is up (its pidfile appears), so that the guest finds no filesystem on /dev/vdb.
    const started = Date.now();
    const creating = orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
    const id = await breakConfigDriveOfNextSession(orch.stateDir);
    const res = await creating;
    t.diagnostic(`failed after ${Date.now() - started} ms`);
    assert.equal(res.statusCode, 503, res.body);
    const message = res.json().error.message as string;
    assert.match(message, /exited while waiting for SSH/);
    assert.match(message, /qemu process \(pid \d+\) exited with code 0/);
    assert.match(message, /sandbox-init: error: no config drive/, 'the console tail says why');
    const kept = path.join(orch.stateDir, 'logs', `${id}.console.log`);
    assert.match(message, new RegExp(`console log kept at ${kept.replace(/[.]/g, '\\.')}`));
    assert.match(await readFile(kept, 'utf8'), /could not mount config drive \/dev\/vdb/);
    assert.ok(Date.now() - started < 60_000, 'it did not wait for the boot timeout');

    assert.deepEqual(await hostTrace(NAMES, id, path.join(orch.stateDir, id)), nothingLeft);
    assert.deepEqual(await processesMentioning(orch.names.vm(id)), []);
    assert.equal((await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}` })).json().state, 'failed');
  });

  it('killing the qemu process of a live session marks it failed and releases everything', async () => {
    const created = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
    assert.equal(created.statusCode, 201, created.body);
    const id = created.json().id as string;
    const sessionDir = path.join(orch.stateDir, id);
    const pid = Number(await readFile(path.join(sessionDir, 'qemu.pid'), 'utf8'));
    process.kill(pid, 'SIGKILL');
    await waitFor('the session to fail', async () => (await getSession(orch, id)).state === 'failed');
    const view = await getSession(orch, id);
    assert.match(view.error, /stopped unexpectedly: the VM's qemu process \(pid \d+\) was killed by SIGKILL/);
    assert.match(view.error, new RegExp(`console log kept at ${path.join(orch.stateDir, 'logs', id)}`));
    await waitFor('its resources to go', async () => (await hostTrace(NAMES, id, sessionDir)).netns === false);
    assert.deepEqual(await hostTrace(NAMES, id, sessionDir), nothingLeft);
    assert.equal((await act(orch, id, { action: 'screenshot' })).statusCode, 410);
    assert.equal((await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}` })).json().state, 'destroyed');
  });
});

describe('qemu VMs left by an orchestrator that crashed', () => {
  let stateDir: string;
  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-qemu-crash-'));
  });
  after(async () => {
    await rm(stateDir, { recursive: true, force: true });
  });

  it('are found by name and reclaimed at the next start: QEMU killed, TAP, bridge and netns gone', async () => {
    // `sbx serve` as its own process, SIGKILLed with a VM running: QEMU (its own process
    // group) outlives it, an orphan that only the next start can find.
    const port = 18600 + Math.floor(Math.random() * 300);
    const serve = spawn(process.execPath, [path.resolve('dist/cli/main.js'), 'serve', '--port', String(port), '--state-dir', stateDir, '--runtime', 'qemu'], {
      env: { ...process.env, SBX_RESOURCE_PREFIX: TEST_PREFIX, SBX_IMAGES_DIR: process.env.SBX_IMAGES_DIR || '/var/lib/sandboxes/images', SBX_SUBNET: `10.245.${Math.floor(Math.random() * 256)}.0/24` },
      stdio: 'ignore',
    });
    let id: string;
    try {
      await waitFor('sbx serve to listen', async () => (await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => undefined))?.ok === true, 30_000);
      const created = await fetch(`http://127.0.0.1:${port}/v1/sessions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
      assert.equal(created.status, 201, await created.clone().text());
      id = ((await created.json()) as { id: string }).id;
    } finally {
      serve.kill('SIGKILL');
      await once(serve, 'exit');
    }
    const orphans = await processesMentioning(NAMES.vm(id));
    assert.equal(orphans.length, 1, 'the VM outlived its orchestrator');
    assert.ok((await hostTrace(NAMES, id, path.join(stateDir, id))).netns);

    const restarted = await startTestOrchestrator({ runtime: 'qemu', stateDir });
    try {
      assert.deepEqual(await processesMentioning(NAMES.vm(id)), [], 'the orphaned QEMU is gone');
      assert.deepEqual(await hostTrace(NAMES, id, path.join(stateDir, id)), nothingLeft);
      assert.equal((await getSession(restarted, id)).state, 'destroyed');
    } finally {
      await restarted.stop();
    }
  });
});

/** Waits for the next session dir's QEMU to start, then fills its config drive with zeros. */
async function breakConfigDriveOfNextSession(stateDir: string): Promise<string> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    for (const name of await readdir(stateDir)) {
      if (!SESSION_ID_PATTERN.test(name)) continue;
      const dir = path.join(stateDir, name);
      if (!existsSync(path.join(dir, 'qemu.pid'))) continue;
      const drive = path.join(dir, 'config.ext4');
      // The same file (QEMU holds it open), overwritten in place.
      const handle = await open(drive, 'r+');
      try {
        await handle.write(Buffer.alloc((await stat(drive)).size), 0, undefined, 0);
      } finally {
        await handle.close();
      }
      return name;
    }
    await sleep(10);
  }
  throw new Error('no session started a VM within 30 s');
}

async function getSession(orch: TestOrchestrator, id: string): Promise<{ state: string; error: string }> {
  return (await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}` })).json();
}

async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await sleep(100);
  }
  assert.fail(`timed out waiting for ${what}`);
}


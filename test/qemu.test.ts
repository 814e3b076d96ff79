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
import { qemuSettingsFromEnv } from '../src/runtimes/qemu/settings.js';
import { GUEST_USER } from '../src/guest/contract.js';
import { createLogger } from '../src/logger.js';
import { AddressPool } from '../src/network/address-pool.js';
import { createSandboxNetwork } from '../src/network/netns.js';
import { QemuRuntime } from '../src/runtimes/qemu/qemu-runtime.js';
import { newSessionId } from '../src/sessions/session.js';
import { generateSessionKeys, writeSessionKeys } from '../src/transport/ssh-keys.js';
import { CleanupStack } from '../src/util/cleanup-stack.js';
import { ResourceNames, SESSION_ID_PATTERN } from '../src/network/names.js';
import { guestTransport, type GuestTransport, HostKeyMismatchError } from '../src/transport/index.js';
import { run } from '../src/util/exec.js';
import { connectToGuest, guestAddress, guestSh } from './helpers/guest.js';
import { act, assertClickArrives, assertScreenshotSize, assertTypesLiterally } from './helpers/desktop-checks.js';
import { hostTrace, processesMentioning, rememberNetns } from './helpers/host.js';
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
  let runtime: QemuRuntime;
  let id: string;
  let guest: GuestTransport;
  let vmUid: number;

  before(async () => {
    runtime = await QemuRuntime.create(NAMES, qemuSettingsFromEnv(process.env));
    orch = await startTestOrchestrator({ runtime: 'qemu' }, false, { runtime, reason: 'test' });
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
    // Its connections to itself acknowledge at once (a kept-alive guest port's server: netns.ts's quickAckRoutes).
    const local = (await guestSh(guest, 'ip route show table local')).text;
    for (const own of ['127.0.0.1', address]) assert.match(local, new RegExp(`^local ${own.replace(/\./g, '\\.')} dev \\S+ .*quickack 1`, 'm'), local);
  });

  it('refuses a guest that presents another host key than the one pinned', async () => {
    const privateKey = await readFile(path.join(orch.stateDir, id, 'id_ed25519'), 'utf8');
    const impostor = utils.parseKey(utils.generateKeyPairSync('ed25519').public);
    if (impostor instanceof Error) throw impostor;
    const conn = guestTransport({
      endpoint: { host: await guestAddress(orch.names, id), port: 22 },
      username: GUEST_USER,
      privateKey,
      pinnedHostKey: impostor.getPublicSSH(),
    });
    await assert.rejects(conn.open(10_000), HostKeyMismatchError);
    conn.close();
  });

  it('runs QEMU under a uid/gid of its own from the pool, which owns its TAP and its disks (0600)', async () => {
    const sessionDir = path.join(orch.stateDir, id);
    const pid = Number(await readFile(path.join(sessionDir, 'qemu.pid'), 'utf8'));
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    vmUid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]);
    assert.ok(runtime.users.contains(vmUid) && vmUid !== 65534, `qemu runs as ${vmUid}, not a uid of the pool ${JSON.stringify(runtime.users.range)}`);
    assert.match(status, new RegExp(`^Uid:\\s+${vmUid}\\s+${vmUid}\\s+${vmUid}\\s+${vmUid}$`, 'm'), 'real, effective, saved and fs uid');
    assert.match(status, new RegExp(`^Gid:\\s+${vmUid}\\s+${vmUid}\\s+${vmUid}\\s+${vmUid}$`, 'm'), 'a group of its own');
    assert.match(status, new RegExp(`^Groups:\\s*(${vmUid}\\s*)?$`, 'm'), 'no supplementary group but its own');
    const tap = (await run(['ip', '-d', '-n', orch.names.netns(id), 'link', 'show', 'tap0'])).stdout;
    assert.match(tap, new RegExp(`user ${vmUid} group ${vmUid}`));
    for (const disk of ['root.qcow2', 'config.ext4']) {
      const info = await stat(path.join(sessionDir, disk));
      assert.deepEqual([info.uid, info.gid, info.mode & 0o777], [vmUid, vmUid, 0o600], disk);
    }
  });

  it('runs QEMU in a cgroup of its own with memory, CPU and pids limits', async () => {
    const pid = Number(await readFile(path.join(orch.stateDir, id, 'qemu.pid'), 'utf8'));
    const limits = await vmCgroupLimits(orch.names.vm(id));
    const memoryMiB = orch.config.memoryLimitMiB + (runtime.accelerator === 'tcg' ? 512 : 0) + 128;
    assert.equal(limits.memory, String(memoryMiB * 1024 * 1024));
    assert.equal(limits.cpu, String(qemuSettingsFromEnv(process.env).smp * 100_000));
    assert.equal(limits.pids, '128');
    for (const procs of limits.procs) assert.ok(procs.includes(pid), `qemu (pid ${pid}) is in the cgroup: ${procs.join(',')}`);
    assert.ok(limits.threads > 1, 'its threads are counted there too');
  });

  it('a second VM of the same runtime gets another uid, and gives it back when it goes', async () => {
    const cleanup = new CleanupStack();
    const second = newSessionId();
    try {
      const sessionDir = path.join(orch.stateDir, second);
      const configDir = path.join(sessionDir, 'config');
      await writeSessionKeys(sessionDir, configDir, generateSessionKeys(second));
      await cleanup.push('session dir', () => rm(sessionDir, { recursive: true, force: true }));
      const pool = new AddressPool(`10.246.${Math.floor(Math.random() * 256)}.0/24`);
      const vmUser = await runtime.leaseVmUser(cleanup);
      const network = await createSandboxNetwork(NAMES, second, pool.lease(), cleanup, 'tap', vmUser);
      const sandbox = await runtime.start(
        {
          sessionId: second,
          image: orch.image,
          sessionDir,
          configDir,
          hostname: 'second',
          network,
          memoryMiB: 256,
          pidsLimit: 64,
          logsDir: path.join(orch.stateDir, 'logs'),
          vmUser,
        },
        cleanup,
      );
      // QEMU writes its pidfile as root, then drops to its uid once its devices are open.
      let uid = 0;
      for (const end = Date.now() + 10_000; uid === 0 && Date.now() < end; await sleep(50)) {
        uid = Number(/^Uid:\s+(\d+)/m.exec(await readFile(`/proc/${sandbox.pid}/status`, 'utf8'))?.[1]);
      }
      assert.ok(runtime.users.contains(uid), `the second qemu runs as ${uid}`);
      assert.notEqual(uid, vmUid, 'two VMs never share a uid');
      assert.equal(runtime.users.inUse, 2);
      assert.ok((await vmCgroupLimits(NAMES.vm(second))).procs.every((p) => p.includes(sandbox.pid)));
    } finally {
      await cleanup.run();
    }
    assert.equal(runtime.users.inUse, 1, 'its uid went back to the pool');
    assert.deepEqual(await vmCgroupDirs(NAMES.vm(second)), [], 'its cgroup is gone');
  });

  it('returns a PNG screenshot of the requested size, from the grabber reading through MIT-SHM', async () => {
    await assertScreenshotSize(orch, id, { width: 800, height: 600 });
    // The VM's own Xvfb shares memory with the grabber as a container's does.
    const maps = await guestSh(guest, 'cat /proc/$(pgrep -f /usr/local/bin/sbx-capture | head -1)/maps');
    assert.match(maps.text, /SYSV/, 'a shared-memory segment is mapped in the grabber');
  });

  it('delivers a click at the requested point to an X client in the guest', async () => {
    // Under TCG a VM is ready (sshd and the display answer) before its xterm maps, and the
    // xterm then takes the focus from a window opened meanwhile (sandbox-init says so): xev
    // is opened once the xterm is there, so that the keys typed below go to xev.
    await guest.exec('DISPLAY=:99 xdotool search --sync --onlyvisible --class xterm >/dev/null', { timeoutMs: 60_000 });
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
    assert.match(await readFile(`/proc/${pid}/status`, 'utf8'), new RegExp(`^Uid:\\s+${vmUid}\\s`, 'm'), 'qemu dropped root (-runas)');
    assert.ok((await vmCgroupDirs(orch.names.vm(id))).length > 0);
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
    assert.deepEqual(await vmCgroupDirs(orch.names.vm(id)), [], 'no cgroup');
    assert.equal(runtime.users.inUse, 0, 'its uid went back to the pool');
    // The TAP went with the netns; it did not fall back into the host's namespace.
    assert.equal((await run(['ip', 'link', 'show', 'tap0'], { allowFailure: true })).exitCode !== 0, true, 'no tap0 on the host');
    assert.equal((await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}` })).json().state, 'destroyed');
  });
});

describe('qemu sandboxes that fail', () => {
  let orch: TestOrchestrator;
  const logLines: string[] = [];
  before(async () => {
    orch = await startTestOrchestrator({ runtime: 'qemu' }, false, undefined, createLogger({ write: (line: string) => void logLines.push(line) }, 'info'));
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
    // The client learns what happened; the host's paths and the console are for the log,
    // under the request id the answer gives (api/errors.ts).
    const { message, requestId } = res.json().error as { message: string; requestId: string };
    assert.match(message, /exited while waiting for SSH/);
    assert.match(message, /qemu process \(pid \d+\) exited with code 0/);
    assert.equal(message.includes('/'), false, message);
    const logged = logLines
      .map((l) => JSON.parse(l) as { reqId?: string; level: number; err?: { message: string } })
      .filter((l) => l.reqId === requestId && l.level >= 40)
      .map((l) => l.err?.message ?? '')
      .join('\n');
    assert.match(logged, /sandbox-init: error: no config drive/, 'the console tail says why');
    const kept = path.join(orch.stateDir, 'logs', `${id}.console.log`);
    assert.match(logged, new RegExp(`console log kept at ${kept.replace(/[.]/g, '\\.')}`));
    assert.match(await readFile(kept, 'utf8'), /could not mount config drive \/dev\/vdb/);
    assert.ok(Date.now() - started < 60_000, 'it did not wait for the boot timeout');

    assert.deepEqual(await hostTrace(NAMES, id, path.join(orch.stateDir, id), { netnsNeverSeen: true }), nothingLeft);
    assert.deepEqual(await processesMentioning(orch.names.vm(id)), []);
    assert.equal((await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}` })).json().state, 'failed');
  });

  it('killing the qemu process of a live session marks it failed and releases everything', async () => {
    const created = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
    assert.equal(created.statusCode, 201, created.body);
    const id = created.json().id as string;
    await rememberNetns(NAMES, id);
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
      env: {
        ...process.env,
        SBX_RESOURCE_PREFIX: TEST_PREFIX,
        SBX_IMAGES_DIR: process.env.SBX_IMAGES_DIR || '/var/lib/sandboxes/images',
        SBX_TEMPLATE: 'minimal',
        SBX_SUBNET: `10.245.${Math.floor(Math.random() * 256)}.0/24`,
      },
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
    assert.ok((await vmCgroupDirs(NAMES.vm(id))).length > 0, 'and so did its cgroup');

    const restarted = await startTestOrchestrator({ runtime: 'qemu', stateDir });
    try {
      assert.deepEqual(await processesMentioning(NAMES.vm(id)), [], 'the orphaned QEMU is gone');
      assert.deepEqual(await vmCgroupDirs(NAMES.vm(id)), [], 'its cgroup is reclaimed');
      assert.deepEqual(await hostTrace(NAMES, id, path.join(stateDir, id)), nothingLeft);
      assert.equal((await getSession(restarted, id)).state, 'destroyed');
    } finally {
      await restarted.stop();
    }
  });
});

/** The cgroup directories of a VM (one per controller on v1, one on v2) that exist now. */
async function vmCgroupDirs(name: string): Promise<string[]> {
  const parent = TEST_PREFIX.slice(0, -1);
  const candidates = [path.join('/sys/fs/cgroup', parent, name), ...['memory', 'cpu', 'pids'].map((c) => path.join('/sys/fs/cgroup', c, parent, name))];
  return candidates.filter((dir) => existsSync(path.join(dir, 'cgroup.procs')));
}

/** A VM cgroup's limits (v1 or v2 files) and the pids in each of its directories. */
async function vmCgroupLimits(name: string): Promise<{ memory: string; cpu: string; pids: string; procs: number[][]; threads: number }> {
  const parent = TEST_PREFIX.slice(0, -1);
  const v2 = existsSync('/sys/fs/cgroup/cgroup.controllers');
  const dir = (controller: string) => (v2 ? path.join('/sys/fs/cgroup', parent, name) : path.join('/sys/fs/cgroup', controller, parent, name));
  const read = async (controller: string, file: string) => (await readFile(path.join(dir(controller), file), 'utf8')).trim();
  const procs = await Promise.all(
    (await vmCgroupDirs(name)).map(async (d) => (await readFile(path.join(d, 'cgroup.procs'), 'utf8')).split('\n').filter(Boolean).map(Number)),
  );
  return {
    memory: await read('memory', v2 ? 'memory.max' : 'memory.limit_in_bytes'),
    cpu: v2 ? ((await read('cpu', 'cpu.max')).split(' ')[0] as string) : await read('cpu', 'cpu.cfs_quota_us'),
    pids: await read('pids', 'pids.max'),
    procs,
    threads: Number(await read('pids', 'pids.current')),
  };
}

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

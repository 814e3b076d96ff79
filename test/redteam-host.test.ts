import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { ResourceNames } from '../src/network/names.js';
import { lockFilePath, OrchestratorLockedError, takeOrchestratorLock } from '../src/orchestrator-lock.js';
import { isProcessAlive, processStartTime } from '../src/host/process-watch.js';
import { run } from '../src/util/exec.js';
import { pngSize } from './helpers/guest.js';
import { cgroupDirsOf, hostTrace, rememberNetns } from './helpers/host.js';
import { TEST_PREFIX, startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';
import { startServe } from './helpers/serve.js';

/**
 * Red team, against the host: a guest that fills its console, a second orchestrator started
 * with the same prefix, and sandboxes killed from the host under a live session. Real
 * sandboxes (runc), a real `sbx serve` for the second orchestrator; the host's cost measured.
 */
const NAMES = new ResourceNames(TEST_PREFIX);
const CAP = 256 * 1024;
const CLI = path.resolve('dist/cli/main.js');
const nothingLeft = { netns: false, veth: false, mounts: [], container: false, processes: [], sessionDir: false };

function vm(field: 'VmRSS' | 'VmHWM'): number {
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync('/proc/self/status', 'utf8'));
  return Number(match?.[1] ?? 0) * 1024;
}

async function consoleBytes(sessionDir: string): Promise<number> {
  let total = 0;
  for (const name of ['console.log', 'console.log.1']) total += (await stat(path.join(sessionDir, name)).catch(() => undefined))?.size ?? 0;
  return total;
}

describe('red team: the host', () => {
  let orch: TestOrchestrator;
  let url: string;
  before(async () => {
    // The kill tests hammer screenshots as fast as they answer (a few ms each now that an
    // unchanged screen is not encoded again): the tenant's request limit is not what they test.
    orch = await startTestOrchestrator(
      { consoleLog: { maxBytes: CAP, keptMaxCount: 100, keptMaxBytes: 64 * 1024 * 1024 }, tenantRequestsPerSecond: 100_000, tenantRequestBurst: 100_000 },
      true,
    );
    const address = orch.server.server.address();
    assert.ok(address && typeof address === 'object');
    url = `http://127.0.0.1:${address.port}`;
  });
  after(async () => {
    await orch?.stop();
  });

  async function createSession(): Promise<string> {
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
    assert.equal(res.statusCode, 201, res.body);
    return res.json().id as string;
  }

  async function bash(id: string, command: string): Promise<string> {
    const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/tools/bash`, payload: { command } });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json<{ content: Array<{ type: string; text?: string }>; is_error?: boolean }>();
    assert.notEqual(body.is_error, true, JSON.stringify(body));
    return body.content.map((c) => c.text ?? '').join('');
  }

  it('60 s of connections to the guest sshd, and 8 MB printed to the console, leave its log under the cap', async (t) => {
    const id = await createSession();
    const sessionDir = path.join(orch.stateDir, id);
    const initPid = Number(await readFile(path.join(sessionDir, 'container.pid'), 'utf8'));
    const before = await consoleBytes(sessionDir);
    const rssBefore = vm('VmRSS');
    const cpuBefore = process.cpuUsage();
    // The loop runs in the guest, detached from the tool call: connect, say something that is
    // not SSH (sshd logs the bad banner and the close, in the guest), hang up; again, for 60 s.
    await bash(
      id,
      `setsid nohup bash -c 'end=$((SECONDS+60)); n=0; while [ $SECONDS -lt $end ]; do ` +
        `{ exec 3<>/dev/tcp/127.0.0.1/22 && echo not-ssh >&3; exec 3<&-; } 2>/dev/null; n=$((n+1)); done; echo $n > /tmp/connects' >/dev/null 2>&1 &`,
    );
    let maxBytes = 0;
    let maxHealthMs = 0;
    let flooded = false;
    const started = Date.now();
    let connects = 0;
    while (!(connects = Number((await bash(id, 'cat /tmp/connects 2>/dev/null || echo 0')).trim()))) {
      assert.ok(Date.now() - started < 90_000, 'the connect loop ends after 60 s');
      if (!flooded && Date.now() - started > 10_000) {
        // A guest root printing straight to its console (what init, sshd -e and the kernel
        // write to): 8 MB, then a last line to find.
        flooded = true;
        await run([
          'nsenter',
          '-t',
          String(initPid),
          '-m',
          '--',
          'sh',
          '-c',
          'yes "a guest flooding its console, line after line" | head -c 8000000 > /proc/1/fd/1',
        ]);
      }
      maxBytes = Math.max(maxBytes, await consoleBytes(sessionDir));
      const health = Date.now();
      assert.equal((await fetch(`${url}/healthz`)).status, 200);
      maxHealthMs = Math.max(maxHealthMs, Date.now() - health);
      await sleep(500);
    }
    // The loop is over: a last line to find, written after everything else.
    await run(['nsenter', '-t', String(initPid), '-m', '--', 'sh', '-c', 'echo last-words-of-the-guest > /proc/1/fd/1']);
    await sleep(500); // the last output reaches the log
    maxBytes = Math.max(maxBytes, await consoleBytes(sessionDir));
    const log = await readFile(path.join(sessionDir, 'console.log'), 'utf8');
    t.diagnostic(
      `connections: ${connects}; console log: ${before} B before, at most ${maxBytes} B during (cap ${CAP}); ` +
        `orchestrator RSS ${Math.round(rssBefore / 1e6)} -> ${Math.round(vm('VmRSS') / 1e6)} MB (peak ${Math.round(vm('VmHWM') / 1e6)} MB); ` +
        `orchestrator (and test) CPU ${Math.round((process.cpuUsage(cpuBefore).user + process.cpuUsage(cpuBefore).system) / 1000)} ms in ${Math.round((Date.now() - started) / 1000)} s; /healthz at most ${maxHealthMs} ms`,
    );
    assert.ok(connects > 100, `the loop connected (${connects} times)`);
    assert.ok(maxBytes <= CAP, `the console log stayed under its cap (${maxBytes} > ${CAP})`);
    assert.ok(flooded);
    assert.ok(log.includes('last-words-of-the-guest\n'), `the newest output is what is kept; the log ends with: ${JSON.stringify(log.slice(-300))}`);
    // sshd itself logs inside the guest now (test/redteam-guest.test.ts shows its logins stay
    // out of the console); the cap above holds whatever the guest writes there.
    // The orchestrator still works for this session.
    const shot = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/screenshot` });
    assert.equal(shot.statusCode, 200);
    await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}` });
  });

  it('a second sbx serve with the same prefix refuses to start, names the first, and touches nothing of it', async (t) => {
    const id = await createSession();
    const otherStateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-second-'));
    try {
      const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--state-dir', path.join(otherStateDir, 'state'), '--runtime', 'container'], {
        env: {
          ...process.env,
          SBX_RESOURCE_PREFIX: TEST_PREFIX,
          SBX_SUBNET: '10.244.0.0/24',
          SBX_IMAGES_DIR: process.env.SBX_IMAGES_DIR || '/var/lib/sandboxes/images',
          SBX_TEMPLATE: 'minimal',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (d: Buffer) => (output += d.toString()));
      child.stderr.on('data', (d: Buffer) => (output += d.toString()));
      // One that started anyway is stopped after a while (and the test fails).
      const stopper = setTimeout(() => child.kill('SIGTERM'), 30_000);
      const [code, signal] = (await once(child, 'exit')) as [number | null, NodeJS.Signals | null];
      clearTimeout(stopper);
      assert.equal(signal, null, `it started and had to be stopped:\n${output}`);
      t.diagnostic(output.trim());
      assert.notEqual(code, 0, output);
      const port = (orch.server.server.address() as { port: number }).port;
      assert.match(output, new RegExp(`resource prefix "${TEST_PREFIX}" is running on this host`));
      assert.match(output, new RegExp(`pid ${process.pid}, listening on 127\\.0\\.0\\.1:${port}, state dir ${orch.stateDir}`));
      assert.match(output, /SBX_RESOURCE_PREFIX=.*SBX_SUBNET=/);
      assert.equal(existsSync(path.join(otherStateDir, 'state')), false, 'it refused before making its state dir');
    } finally {
      await rm(otherStateDir, { recursive: true, force: true });
    }
    const trace = await hostTrace(NAMES, id, path.join(orch.stateDir, id));
    assert.equal(trace.netns && trace.veth && trace.container, true, 'the first one still has its netns, veth and container');
    const shot = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/screenshot` });
    assert.equal(shot.statusCode, 200);
    assert.deepEqual(pngSize(shot.rawPayload), { width: 1024, height: 768 });
    assert.equal((await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}` })).json().state, 'ready');
    await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}` });
  });

  const kills: Array<[string, (id: string, initPid: number) => Promise<void>]> = [
    ['kill -9 of the container init', async (_id, initPid) => void process.kill(initPid, 'SIGKILL')],
    ['runc kill', async (id) => void (await run(['runc', '--root', NAMES.runcRoot, 'kill', NAMES.container(id), 'KILL']))],
    ['deleting its netns', async (id) => void (await run(['ip', 'netns', 'delete', NAMES.netns(id)]))],
    ['deleting its host veth', async (id) => void (await run(['ip', 'link', 'delete', NAMES.hostVeth(id)]))],
  ];
  for (const [how, kill] of kills) {
    it(`a sandbox gone by ${how} is failed within 5 s, answers 410 (never 500), and the host keeps nothing of it`, async (t) => {
      const leasesBefore = orch.manager.leasesInUse;
      const id = await createSession();
      await rememberNetns(NAMES, id);
      const sessionDir = path.join(orch.stateDir, id);
      const initPid = Number(await readFile(path.join(sessionDir, 'container.pid'), 'utf8'));
      const initStart = processStartTime(initPid) as string;
      // Its cgroups on whichever hierarchy this host has (v2, or v1's controllers and a
      // hybrid host's unified tree): seen while it lives, so "gone" below cannot pass by
      // looking where it never was.
      const cgroups = await cgroupDirsOf(NAMES.cgroup(id));
      assert.ok(cgroups.length > 0, `the sandbox has cgroups (${NAMES.cgroup(id)})`);
      // Requests keep coming while the sandbox goes: none may be a 500.
      const statuses = new Map<number, number>();
      let hammering = true;
      const hammer = (async () => {
        while (hammering) {
          const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/actions`, payload: { action: 'screenshot' } });
          statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
          assert.notEqual(res.statusCode, 500, res.body);
          if (res.statusCode !== 200) await sleep(20);
        }
      })();
      await sleep(300);
      const killedAt = Date.now();
      await kill(id, initPid);
      let state = 'ready';
      while (state !== 'failed' && Date.now() - killedAt < 5_000) {
        await sleep(50);
        state = (await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}` })).json().state;
      }
      const failedAfterMs = Date.now() - killedAt;
      await sleep(300);
      hammering = false;
      await hammer;
      t.diagnostic(`failed after ${failedAfterMs} ms; statuses meanwhile: ${JSON.stringify(Object.fromEntries(statuses))}`);
      assert.equal(state, 'failed', `failed within 5 s (still ${state} after ${failedAfterMs} ms)`);
      const view = (await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}` })).json();
      assert.match(view.error, /vanished|stopped unexpectedly/);
      assert.equal(view.endReason, 'failed');
      if (how.startsWith('kill') || how.startsWith('runc')) {
        // Its process died: the newest of its console is kept, under the cap.
        const kept = path.join(orch.stateDir, 'logs', `${id}.console.log`);
        assert.match(view.error, new RegExp(`console log kept at ${kept}`));
        assert.ok((await stat(kept)).size <= CAP);
        assert.match(await readFile(kept, 'utf8'), /sandbox-init/);
      }
      const { sessions } = (await orch.server.inject({ method: 'GET', url: '/v1/sessions' })).json<{ sessions: Array<{ id: string; state: string }> }>();
      assert.equal(sessions.find((s) => s.id === id)?.state, 'failed', 'the list shows it failed');
      const gone = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/actions`, payload: { action: 'screenshot' } });
      assert.equal(gone.statusCode, 410, gone.body);
      assert.equal(gone.json().error.code, 'session_gone');
      const bashGone = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/tools/bash`, payload: { command: 'true' } });
      assert.equal(bashGone.statusCode, 410, bashGone.body);
      assert.deepEqual(await hostTrace(NAMES, id, sessionDir), nothingLeft);
      assert.equal(await isProcessAlive(initPid, initStart), false, 'its init is gone');
      assert.deepEqual(
        cgroups.filter((dir) => existsSync(dir)),
        [],
        `its cgroups are gone (it had ${cgroups.join(', ')})`,
      );
      assert.deepEqual(await cgroupDirsOf(NAMES.cgroup(id)), [], 'and none was made anew');
      assert.equal(orch.manager.leasesInUse, leasesBefore, 'its address is free again');
      assert.equal((await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}` })).json().state, 'destroyed');
    });
  }
});

describe('the orchestrator lock', () => {
  // A prefix of its own, so as not to meet this file's orchestrator.
  const prefix = `${TEST_PREFIX.slice(0, 2)}${TEST_PREFIX[2] === 'z' ? 'y' : 'z'}-`;

  it('is taken over from a holder that died, and refused while one lives', async () => {
    // A holder that died: its pid file is left, its socket went with it.
    const dead = spawn('true');
    await once(dead, 'exit');
    await writeFile(lockFilePath(prefix), JSON.stringify({ pid: dead.pid, startTime: '1', host: '127.0.0.1', port: 1, stateDir: '/nowhere' }));
    const lock = await takeOrchestratorLock(prefix, { host: '127.0.0.1', port: 8080, stateDir: '/var/lib/first' });
    try {
      assert.equal(JSON.parse(await readFile(lockFilePath(prefix), 'utf8')).pid, process.pid);
      await assert.rejects(takeOrchestratorLock(prefix, { host: '127.0.0.1', port: 8081, stateDir: '/var/lib/second' }), (err: unknown) => {
        assert.ok(err instanceof OrchestratorLockedError);
        assert.match(err.message, new RegExp(`pid ${process.pid}, listening on 127\\.0\\.0\\.1:8080, state dir /var/lib/first`));
        return true;
      });
    } finally {
      await lock.release();
    }
    assert.equal(existsSync(lockFilePath(prefix)), false, 'released: the file is gone');
    const again = await takeOrchestratorLock(prefix, { host: '127.0.0.1', port: 8082, stateDir: '/var/lib/third' });
    await again.release();
  });
});

describe('the console of a sandbox adopted after a crash', () => {
  it('is dropped while no orchestrator runs (nothing blocks, the sandbox lives on), then read again into the capped log', async (t) => {
    const cap = 64 * 1024;
    const stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-redteam-'));
    const subnet = `10.243.${Math.floor(Math.random() * 256)}.0/24`;
    const port = 18500 + Math.floor(Math.random() * 400);
    process.env.SBX_CONSOLE_LOG_MAX_BYTES = String(cap);
    let first: Awaited<ReturnType<typeof startServe>> | undefined;
    let second: Awaited<ReturnType<typeof startServe>> | undefined;
    let cleanedUp = false;
    try {
      first = await startServe(stateDir, port, subnet);
      const created = await fetch(`${first.url}/v1/sessions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
      assert.equal(created.status, 201);
      const { id } = (await created.json()) as { id: string };
      await rememberNetns(NAMES, id);
      const sessionDir = path.join(stateDir, id);
      const initPid = Number(await readFile(path.join(sessionDir, 'container.pid'), 'utf8'));
      const initStart = processStartTime(initPid) as string;
      const inGuest = (script: string) => run(['nsenter', '-t', String(initPid), '-m', '-p', '--', 'sh', '-c', script], { timeoutMs: 10_000 });
      // A guest process holding the console open, as init and sshd do: a numbered line every
      // 50 ms, going on when a write fails (it ignores SIGPIPE, as sshd does).
      await inGuest(`setsid -f sh -c 'trap "" PIPE; i=0; while :; do i=$((i+1)); echo "tick $i"; sleep 0.05; done' > /proc/1/fd/1 2>/dev/null`);
      await sleep(500);

      first.child.kill('SIGKILL');
      await once(first.child, 'exit');
      await sleep(2_000); // ~40 ticks written with no reader
      assert.equal(await isProcessAlive(initPid, initStart), true, 'the sandbox lives on');

      second = await startServe(stateDir, port, subnet);
      const view = (await (await fetch(`${second.url}/v1/sessions/${id}`)).json()) as { state: string };
      assert.equal(view.state, 'ready', 'adopted');
      await sleep(1_000);
      const previous = await readFile(path.join(sessionDir, 'console.log.1'), 'utf8').catch(() => '');
      const ticks = [...(previous + (await readFile(path.join(sessionDir, 'console.log'), 'utf8'))).matchAll(/^tick (\d+)$/gm)].map((m) => Number(m[1]));
      const jumps = ticks
        .slice(1)
        .map((n, i) => n - (ticks[i] as number))
        .filter((d) => d > 1);
      t.diagnostic(`ticks kept: ${ticks.length}, last ${ticks.at(-1)}; missing across the crash: ${jumps.map((d) => d - 1).join(', ')}`);
      assert.ok(ticks.length > 20, 'ticks were read before the crash and after the adoption');
      assert.ok(jumps.length >= 1 && Math.max(...jumps) > 10, 'what was written with no reader was dropped');
      // A flood and a last line, after the adoption (a fresh open: there is a reader again).
      await inGuest('{ yes flood | head -c 1000000; echo after-adoption; } > /proc/1/fd/1');
      await sleep(1_000);
      const log = await readFile(path.join(sessionDir, 'console.log'), 'utf8');
      assert.ok(log.includes('after-adoption\n'), 'the adopted console is read again');
      assert.ok((await consoleBytes(sessionDir)) <= cap, `under the cap (${await consoleBytes(sessionDir)})`);
      assert.equal((await fetch(`${second.url}/v1/sessions/${id}/screenshot`)).status, 200);
      second.child.kill('SIGTERM');
      await once(second.child, 'exit');
      cleanedUp = true;
      assert.deepEqual(await hostTrace(NAMES, id, sessionDir), nothingLeft);
    } finally {
      // Whatever failed, an orchestrator of this state dir stops cleanly and leaves nothing.
      if (!cleanedUp) {
        for (const serve of [first, second]) if (serve && serve.child.exitCode === null && serve.child.signalCode === null) serve.child.kill('SIGKILL');
        const cleaner = await startServe(stateDir, port, subnet).catch(() => undefined);
        if (cleaner) {
          cleaner.child.kill('SIGTERM');
          await once(cleaner.child, 'exit');
        }
      }
      delete process.env.SBX_CONSOLE_LOG_MAX_BYTES;
      await rm(stateDir, { recursive: true, force: true });
    }
  });
});

describe('red team: a qemu VM killed from the host (one TCG boot)', () => {
  let orch: TestOrchestrator;
  before(async () => {
    orch = await startTestOrchestrator({ runtime: 'qemu', consoleLog: { maxBytes: CAP, keptMaxCount: 100, keptMaxBytes: 64 * 1024 * 1024 } });
  });
  after(async () => {
    await orch?.stop();
  });

  it('kill -9 of its QEMU: failed within 5 s, 410, its serial console kept under the cap, nothing left', async (t) => {
    const created = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
    assert.equal(created.statusCode, 201, created.body);
    const id = created.json().id as string;
    const sessionDir = path.join(orch.stateDir, id);
    await rememberNetns(NAMES, id);
    // The serial console came through the FIFO into the capped log.
    assert.match(await readFile(path.join(sessionDir, 'console.log'), 'utf8'), /sandbox-init: starting in vm mode/);
    const pid = Number(await readFile(path.join(sessionDir, 'qemu.pid'), 'utf8'));
    const killedAt = Date.now();
    process.kill(pid, 'SIGKILL');
    let state = 'ready';
    while (state !== 'failed' && Date.now() - killedAt < 5_000) {
      await sleep(50);
      state = (await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}` })).json().state;
    }
    t.diagnostic(`failed after ${Date.now() - killedAt} ms`);
    assert.equal(state, 'failed');
    const view = (await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}` })).json();
    assert.match(view.error, /killed by SIGKILL/);
    const kept = path.join(orch.stateDir, 'logs', `${id}.console.log`);
    assert.match(view.error, new RegExp(`console log kept at ${kept}`));
    assert.ok((await stat(kept)).size <= CAP);
    assert.match(await readFile(kept, 'utf8'), /sandbox-init: starting in vm mode/);
    const gone = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/actions`, payload: { action: 'screenshot' } });
    assert.equal(gone.statusCode, 410, gone.body);
    assert.deepEqual(await hostTrace(NAMES, id, sessionDir), nothingLeft);
    assert.equal((await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}` })).json().state, 'destroyed');
  });
});

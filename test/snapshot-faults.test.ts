import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { mkdtemp, rm, rmdir } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { openKeyStore } from '../src/api/auth/key-store-file.js';
import { ResourceNames } from '../src/network/names.js';
import { findQemuProcesses } from '../src/runtimes/qemu/qemu-process.js';
import { qmpSocketOf, qmpStatus } from '../src/runtimes/qemu/qmp.js';
import { freePort, startServeOn } from './helpers/serve.js';
import { serveApi, type Json } from './helpers/serve-api.js';
import { removeEmptyPrefixCgroups, TEST_PREFIX } from './helpers/orchestrator.js';

/**
 * `kill -9` of the orchestrator while a QEMU desktop is being snapshotted, and while a fork
 * starts (docs/snapshots.md, issue 25): what is left is no snapshot or a whole one, never a
 * half-written one, and the restart adopts the source session running (its counter counts on,
 * the same process), and leaves nothing of the half-made snapshot or fork behind: no files, no
 * migration socket, no QEMU, no session. Two moments of a snapshot: while its memory streams
 * (the VM runs), and once the migration has completed (the VM stopped, its disk being copied).
 */
const NAMES = new ResourceNames(TEST_PREFIX);
const SERVE_ENV = { SBX_QEMU_BOOT_TIMEOUT_MS: '300000' };

let stateDir: string;
let port: number;
let child: ChildProcess | undefined;
let key: string;

const { api, bash } = serveApi(
  () => port,
  () => key,
);

async function counter(id: string): Promise<{ pid: number; count: number }> {
  const [pid, count] = (await bash(id, 'cat /var/tmp/counter')).trim().split(' ').map(Number);
  return { pid: pid ?? 0, count: count ?? 0 };
}

async function until(what: string, done: () => Promise<boolean> | boolean, timeoutMs = 60_000, everyMs = 500): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await done()) return;
    await sleep(everyMs);
  }
  assert.fail(`${what}: not within ${timeoutMs} ms`);
}

async function qemuPids(id: string): Promise<number[]> {
  return (await findQemuProcesses(NAMES)).filter((p) => p.sessionId === id).map((p) => p.pid);
}

/** Pids of the processes whose command line holds `text`. */
function processesNaming(text: string): number[] {
  return readdirSync('/proc')
    .filter((e) => /^\d+$/.test(e))
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(text);
      } catch {
        return false; // gone meanwhile
      }
    })
    .map(Number);
}

function snapshotDirs(): string[] {
  const dir = path.join(stateDir, 'snapshots');
  return existsSync(dir) ? readdirSync(dir) : [];
}

/** SIGKILLs the orchestrator and starts it again over the same state; returns what QMP said of the VM in between. */
async function killAndRestart(sessionId: string): Promise<string> {
  child?.kill('SIGKILL');
  await new Promise((resolve) => child?.once('exit', resolve));
  const left = await qmpStatus(qmpSocketOf(path.join(stateDir, sessionId))).catch(() => 'unknown');
  child = await startServeOn(stateDir, port, SERVE_ENV, 'qemu');
  return left;
}

describe('kill -9 of the orchestrator during a snapshot and a fork of a qemu desktop', () => {
  let id: string;
  let pid: number;
  const load = () =>
    os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ');

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-snapfaults-'));
    const keys = openKeyStore(stateDir);
    key = keys.keys.create('alpha').key;
    keys.close();
    port = await freePort();
    child = await startServeOn(stateDir, port, SERVE_ENV, 'qemu');
  });
  after(async () => {
    if (child && child.exitCode === null) {
      child.kill('SIGTERM');
      await new Promise((resolve) => child?.once('exit', resolve));
    }
    await rm(stateDir, { recursive: true, force: true });
    await rmdir(`/run/${TEST_PREFIX}qemu-migrate`).catch(() => undefined);
    await removeEmptyPrefixCgroups();
  });

  /** After a restart: the source is ready and runs (the same process counts on); no snapshot, nothing of one, is left. */
  async function sourceRunsOnAndNothingIsLeft(): Promise<void> {
    const view = await api('GET', `/v1/sessions/${id}`);
    assert.equal(view.status, 200, JSON.stringify(view.json));
    assert.equal(view.json.state, 'ready');
    assert.equal(view.json.paused, null);
    const now = await counter(id);
    assert.equal(now.pid, pid, 'the same process, still');
    await until('it counts on', async () => (await counter(id)).count > now.count);
    const listed = await api('GET', '/v1/snapshots');
    assert.deepEqual(listed.json.snapshots, [], 'no snapshot is listed');
    assert.deepEqual(snapshotDirs(), [], 'no snapshot files are left');
    assert.equal(existsSync(`/run/${TEST_PREFIX}qemu-migrate/${id}`), false, 'no migration socket is left');
    assert.equal((await qemuPids(id)).length, 1, 'its one QEMU');
  }

  it('a desktop counts', async () => {
    const created = await api('POST', '/v1/sessions', { timeoutSeconds: 1800 });
    assert.equal(created.status, 201, JSON.stringify(created.json));
    id = String(created.json.id);
    const loop = 'i=0; while :; do i=$((i+1)); echo "$$ $i" > /var/tmp/counter.new && mv /var/tmp/counter.new /var/tmp/counter; sleep 0.1; done';
    await bash(id, `setsid nohup sh -c '${loop}' >/dev/null 2>&1 < /dev/null &`);
    await until('it counts', async () => (await counter(id)).count > 0, 120_000, 1_000);
    pid = (await counter(id)).pid;
  });

  it('killed while the memory streams: no snapshot, the source adopted running', async () => {
    void api('POST', `/v1/sessions/${id}/snapshots`, { name: 'streaming' }).catch(() => undefined);
    // The state file grows (under its partial name) while the VM runs and its RAM is sent.
    await until(
      'the state streams',
      () => snapshotDirs().some((s) => (statSync(path.join(stateDir, 'snapshots', s, 'vm-state.gz.partial'), { throwIfNoEntry: false })?.size ?? 0) > 0),
      60_000,
      5,
    );
    const left = await killAndRestart(id);
    console.log(`killed while streaming: the VM was left ${left}; load ${load()}`);
    await sourceRunsOnAndNothingIsLeft();
  });

  it('killed once the migration completed (the VM stopped, its disk copied): no snapshot, the source adopted running', async () => {
    void api('POST', `/v1/sessions/${id}/snapshots`, { name: 'copying' }).catch(() => undefined);
    // The disk's copy starts once QEMU has completed the migration and stopped the VM.
    await until('the disk is copied', () => snapshotDirs().some((s) => existsSync(path.join(stateDir, 'snapshots', s, 'root.qcow2'))), 60_000, 2);
    const left = await killAndRestart(id);
    console.log(`killed at the disk's copy: the VM was left ${left}; load ${load()}`);
    await sourceRunsOnAndNothingIsLeft();
  });

  it('killed while a fork starts: the fork is gone without a trace, the snapshot is whole and forks', async () => {
    const taken = await api('POST', `/v1/sessions/${id}/snapshots`, { name: 'whole' });
    assert.equal(taken.status, 201, JSON.stringify(taken.json));
    const snapshot = String(taken.json.id);
    const known = new Set(readdirSync(stateDir));
    void api('POST', '/v1/sessions', { snapshot, timeoutSeconds: 1800 }).catch(() => undefined);
    // Its session dir, then its QEMU loading the state: kill it there.
    let forkId = '';
    await until(
      'the fork starts',
      async () => {
        forkId = readdirSync(stateDir).find((e) => !known.has(e) && /^[a-z0-9]{10}$/.test(e)) ?? '';
        return forkId !== '' && (await qemuPids(forkId)).length > 0;
      },
      60_000,
      100,
    );
    await sleep(1_500); // into the state's load, or the re-keying
    const left = await killAndRestart(id);
    console.log(`killed during a fork; load ${load()} (the source was ${left})`);
    const gone = await api('GET', `/v1/sessions/${forkId}`);
    assert.equal(gone.json.state, 'destroyed', JSON.stringify(gone.json));
    assert.match(String(gone.json.error), /the orchestrator restarted/);
    assert.deepEqual(await qemuPids(forkId), [], "the fork's QEMU is gone");
    assert.equal(existsSync(path.join(stateDir, forkId)), false, "the fork's session dir is gone");
    assert.equal(existsSync(`/var/run/netns/${NAMES.netns(forkId)}`), false, "the fork's netns is gone");
    assert.deepEqual(processesNaming(`${forkId}/rekey.sock`), [], "the fork's forwarder is gone");
    const listed = await api('GET', '/v1/snapshots');
    assert.deepEqual(
      (listed.json.snapshots as Json[]).map((s) => s.id),
      [snapshot],
    );
    assert.equal((await api('GET', `/v1/sessions/${id}`)).json.state, 'ready');
    const fork = await api('POST', '/v1/sessions', { snapshot, timeoutSeconds: 1800 });
    assert.equal(fork.status, 201, JSON.stringify(fork.json));
    const forked = String(fork.json.id);
    assert.equal((await counter(forked)).pid, pid, "the snapshot's counter, in the fork");
    assert.equal((await api('DELETE', `/v1/sessions/${forked}`)).status, 200);
    assert.equal((await api('DELETE', `/v1/snapshots/${snapshot}`)).status, 200);
  });

  it('the source is destroyed without a trace', async () => {
    assert.equal((await api('DELETE', `/v1/sessions/${id}`)).status, 200);
    assert.deepEqual(await qemuPids(id), []);
    assert.ok(!existsSync(path.join(stateDir, id)));
  });
});

import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm, rmdir, stat, symlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import sharp from 'sharp';
import { openKeyStore } from '../src/api/auth/key-store-file.js';
import { ResourceNames } from '../src/network/names.js';
import { findQemuProcesses } from '../src/runtimes/qemu/qemu-process.js';
import { stateFileOf } from '../src/runtimes/qemu/disk-state.js';
import { freePort, startServeOn } from './helpers/serve.js';
import { differingOutside, serveApi, type Json, type RawImage } from './helpers/serve-api.js';
import { removeEmptyPrefixCgroups, TEST_PREFIX } from './helpers/orchestrator.js';

/**
 * Pause to disk of a QEMU desktop (TCG here: slow, so one compact file), across a SIGKILL of
 * the orchestrator: an xterm counts on the screen, into a file and into a log; a pause whose
 * state cannot be written (the disk full: a 1 MiB tmpfs) leaves it running; the pause to disk
 * ends its QEMU and leaves a state file; the orchestrator is killed and started again, and
 * adopts it paused; the resume starts a new QEMU from the file: the same process counts on from
 * where it stopped, the log is whole, the screen is as it was (but for the counter's window),
 * and the state file is gone. Then a host reboot is played (what it takes from the kernel and
 * /run, taken) while paused to disk: the restart makes its network again and it resumes.
 */
const NAMES = new ResourceNames(TEST_PREFIX);
const COUNTER_BOX = { width: 360, height: 120 };
const SERVE_ENV = { SBX_QEMU_BOOT_TIMEOUT_MS: '300000' };

let stateDir: string;
let port: number;
let child: ChildProcess | undefined;
let key: string;
let tmpfs: string | undefined;

const { api, bash, screenshot } = serveApi(
  () => port,
  () => key,
);

async function counter(id: string): Promise<{ pid: number; count: number }> {
  const [pid, count] = (await bash(id, 'cat /var/tmp/counter')).trim().split(' ').map(Number);
  return { pid: pid ?? 0, count: count ?? 0 };
}

/** Pixels that differ outside the counter's box (its own window changes as it counts). */
function differingOutsideCounter(a: RawImage, b: RawImage): number {
  return differingOutside(a, b, COUNTER_BOX);
}

async function until(what: string, done: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await done()) return;
    await sleep(500);
  }
  assert.fail(`${what}: not within ${timeoutMs} ms`);
}

async function qemuPids(id: string): Promise<number[]> {
  return (await findQemuProcesses(NAMES)).filter((p) => p.sessionId === id).map((p) => p.pid);
}

describe('pause to disk of a qemu desktop, across an orchestrator SIGKILL and a host reboot', () => {
  let id: string;
  let qemuBefore: number[];
  let beforePause: { pid: number; count: number };
  let shotBefore: { data: Buffer; width: number; height: number };
  let bytes: number;
  /** When the pause answered: the guest's clock stood still from then until the resume. */
  let pausedAt: number;

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-diskpause-'));
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
    if (tmpfs) {
      execFileSync('umount', [tmpfs]);
      await rm(tmpfs, { recursive: true, force: true });
    }
    await rm(stateDir, { recursive: true, force: true });
    await rmdir(`/run/${TEST_PREFIX}qemu-migrate`).catch(() => undefined); // the sockets' parent, empty by now
    await removeEmptyPrefixCgroups();
  });

  it('a desktop counts in an xterm, into a file and into a log', async () => {
    const created = await api('POST', '/v1/sessions', { width: 1024, height: 768, timeoutSeconds: 1800 });
    assert.equal(created.status, 201, JSON.stringify(created.json));
    id = String(created.json.id);
    // The counter writes its count to a file and a log; an xterm shows it (top left).
    const loop =
      'i=0; while :; do i=$((i+1)); echo "$$ $i" > /var/tmp/counter.new && mv /var/tmp/counter.new /var/tmp/counter; echo $i >> /var/tmp/log; sleep 0.1; done';
    await bash(id, `setsid nohup sh -c '${loop}' >/dev/null 2>&1 < /dev/null &`);
    const show = 'while :; do printf "\\rcount %s " "$(cat /var/tmp/counter)"; sleep 0.2; done';
    await bash(id, `setsid nohup xterm -geometry 30x3+0+0 -e sh -c '${show}' >/dev/null 2>&1 < /dev/null &`);
    await bash(id, `setsid nohup xmessage -geometry +420+300 'a desktop paused to disk keeps its windows' >/dev/null 2>&1 < /dev/null &`);
    const deadline = Date.now() + 120_000;
    while (Date.now() < deadline && !(await bash(id, 'cat /var/tmp/counter 2>/dev/null')).trim()) await sleep(1_000);
    await sleep(5_000); // both windows mapped and drawn, under TCG
    assert.ok((await counter(id)).count > 0);
    qemuBefore = await qemuPids(id);
    assert.equal(qemuBefore.length, 1);
  });

  it('a pause whose state cannot be written (the disk full) leaves the session running', async () => {
    tmpfs = await mkdtemp(path.join(os.tmpdir(), 'sbx-full-'));
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', tmpfs]);
    await symlink(path.join(tmpfs, 'state'), `${stateFileOf(path.join(stateDir, id))}.partial`);
    const before = await counter(id);
    const failed = await api('POST', `/v1/sessions/${id}/pause`, { mode: 'disk' });
    assert.equal(failed.status, 503, JSON.stringify(failed.json));
    assert.match(JSON.stringify(failed.json), /disk is full \(ENOSPC\)/);
    const view = await api('GET', `/v1/sessions/${id}`);
    assert.equal(view.json.state, 'ready');
    assert.equal(view.json.paused, null);
    assert.deepEqual(await qemuPids(id), qemuBefore, 'the same QEMU runs on');
    assert.ok(!existsSync(stateFileOf(path.join(stateDir, id))), 'no state file under the final name');
    await sleep(1_000);
    const after = await counter(id);
    assert.equal(after.pid, before.pid);
    assert.ok(after.count > before.count, `it counts on (${before.count} -> ${after.count})`);
  });

  it('pauses to disk: the QEMU is gone, the state is in a file', async () => {
    // The windows mapped and drawn (slow under TCG): two screenshots alike but for the counter.
    shotBefore = await screenshot(id);
    for (let settled = false, tries = 0; !settled && tries < 30; tries++) {
      await sleep(2_000);
      const again = await screenshot(id);
      settled = differingOutsideCounter(shotBefore, again) === 0;
      shotBefore = again;
    }
    beforePause = await counter(id);
    const started = performance.now();
    const paused = await api('POST', `/v1/sessions/${id}/pause`, { mode: 'disk' });
    const pauseMs = performance.now() - started;
    pausedAt = Date.now();
    assert.equal(paused.status, 200, JSON.stringify(paused.json));
    assert.equal(paused.json.state, 'paused');
    const info = paused.json.paused as Json;
    assert.equal(info.mode, 'disk');
    bytes = Number(info.bytes);
    assert.equal((await stat(stateFileOf(path.join(stateDir, id)))).size, bytes);
    assert.deepEqual(await qemuPids(id), [], 'no QEMU while paused to disk');
    console.log(`pause to disk took ${pauseMs.toFixed(0)} ms (HTTP round trip, TCG); state ${(bytes / 2 ** 20).toFixed(1)} MiB`);
  });

  it('survives a SIGKILL of the orchestrator: adopted paused to disk', async () => {
    child?.kill('SIGKILL');
    await new Promise((resolve) => child?.once('exit', resolve));
    child = await startServeOn(stateDir, port, SERVE_ENV, 'qemu');
    const got = await api('GET', `/v1/sessions/${id}`);
    assert.equal(got.status, 200);
    assert.equal(got.json.state, 'paused');
    assert.deepEqual(got.json.paused && { mode: (got.json.paused as Json).mode, bytes: (got.json.paused as Json).bytes }, { mode: 'disk', bytes });
    assert.deepEqual(await qemuPids(id), [], 'still no QEMU');
  });

  it('resumes from disk: the screen is as it was, the same process counts on, the log is whole, the state file is gone, the clock is right', async () => {
    // Paused long enough that a clock left where the pause found it is plainly wrong.
    await sleep(Math.max(0, pausedAt + 10_000 - Date.now()));
    const pausedForS = Math.round((Date.now() - pausedAt) / 1000);
    const started = performance.now();
    const resumed = await api('POST', `/v1/sessions/${id}/resume`);
    const resumeMs = performance.now() - started;
    assert.equal(resumed.status, 200, JSON.stringify(resumed.json));
    assert.equal(resumed.json.state, 'ready');
    assert.equal(resumed.json.paused, null);
    const shotAfter = await screenshot(id);
    const differing = differingOutsideCounter(shotBefore, shotAfter);
    console.log(`resume from disk took ${resumeMs.toFixed(0)} ms (HTTP round trip, after a restart, TCG); ${differing} pixels differ outside the counter`);
    if (differing > 0) {
      for (const [name, shot] of [
        ['before', shotBefore],
        ['after', shotAfter],
      ] as const) {
        const channels = (shot.data.length / (shot.width * shot.height)) as 3 | 4;
        await sharp(shot.data, { raw: { width: shot.width, height: shot.height, channels } })
          .png()
          .toFile(path.join(os.tmpdir(), `sbx-diskpause-${name}.png`));
      }
    }
    assert.equal(differing, 0, 'the screen is as it was before the pause');
    assert.ok(!existsSync(stateFileOf(path.join(stateDir, id))), 'the state file is gone');
    const running = await qemuPids(id);
    assert.equal(running.length, 1);
    assert.notDeepEqual(running, qemuBefore, 'a new QEMU');
    const atResume = await counter(id);
    // The same shell loop, its count kept: it goes on from where the pause found it (the VM was
    // gone meanwhile: no QEMU above), not from zero.
    assert.equal(atResume.pid, beforePause.pid, 'the same process');
    assert.ok(atResume.count >= beforePause.count, `not from zero (${beforePause.count} -> ${atResume.count})`);
    const log = (await bash(id, 'cat /var/tmp/log')).trim().split('\n').map(Number);
    assert.ok(
      log.every((n, i) => n === i + 1),
      'every line of the log, in order: the file was written through the pause',
    );
    assert.ok((log.at(-1) ?? 0) >= atResume.count, 'the log goes up to the counter');
    await until('it counts on', async () => (await counter(id)).count > atResume.count);
    // The guest's clock: set from its RTC (which follows the host's) within a few seconds of the resume.
    let skew = Number.NaN;
    await until(
      'the guest clock is the host clock',
      async () => {
        skew = Number((await bash(id, 'date +%s')).trim()) - Math.round(Date.now() / 1000);
        return Math.abs(skew) <= 3;
      },
      10_000,
    );
    console.log(`guest clock after a pause of ${pausedForS} s: ${skew} s off the host's`);
  });

  it('a SIGKILL of the orchestrator during a resume leaves the state or the resumed VM, and the next resume works', async () => {
    const paused = await api('POST', `/v1/sessions/${id}/pause`, { mode: 'disk' });
    assert.equal(paused.status, 200, JSON.stringify(paused.json));
    const before = Number((paused.json.paused as Json).bytes);
    void api('POST', `/v1/sessions/${id}/resume`).catch(() => undefined);
    await sleep(700); // the new QEMU is loading the state
    child?.kill('SIGKILL');
    await new Promise((resolve) => child?.once('exit', resolve));
    child = await startServeOn(stateDir, port, SERVE_ENV, 'qemu');
    const got = await api('GET', `/v1/sessions/${id}`);
    const state = String(got.json.state);
    const mode = (got.json.paused as { mode?: string } | null)?.mode;
    console.log(
      `killed during the resume: adopted ${state}${mode ? ` (${mode})` : ''}; state file ${existsSync(stateFileOf(path.join(stateDir, id))) ? 'kept' : 'gone'}`,
    );
    if (state === 'paused' && mode === 'disk') {
      assert.equal((await stat(stateFileOf(path.join(stateDir, id)))).size, before, 'the whole state, as written');
      assert.deepEqual(await qemuPids(id), [], 'the half-started QEMU was stopped');
    } else assert.ok(['ready', 'paused'].includes(state), `adopted ${state}`);
    if (state === 'paused') assert.equal((await api('POST', `/v1/sessions/${id}/resume`)).status, 200);
    const now = await counter(id);
    assert.equal(now.pid, beforePause.pid, 'the same process, still');
    await until('it counts on', async () => (await counter(id)).count > now.count);
  });

  it('survives a host reboot while paused to disk: its network is made again, and it resumes where it was', async () => {
    const atPause = await counter(id);
    const paused = await api('POST', `/v1/sessions/${id}/pause`, { mode: 'disk' });
    assert.equal(paused.status, 200, JSON.stringify(paused.json));
    child?.kill('SIGKILL');
    await new Promise((resolve) => child?.once('exit', resolve));
    // What a reboot takes and the disk keeps: the session's netns (its veth and TAP with it), the
    // policy table, the cgroups, what is under /run. The state file and the session dir stay.
    const netns = NAMES.netns(id);
    execFileSync('ip', ['netns', 'delete', netns]);
    execFileSync('nft', ['delete', 'table', 'inet', NAMES.policyTable]);
    await rm(`/run/${TEST_PREFIX}qemu-migrate`, { recursive: true, force: true });
    for (const controller of await readdir('/sys/fs/cgroup').catch(() => [] as string[])) {
      const parent = path.join('/sys/fs/cgroup', controller, TEST_PREFIX.slice(0, -1));
      await rmdir(path.join(parent, NAMES.vm(id))).catch(() => undefined);
    }
    assert.ok(!existsSync(`/var/run/netns/${netns}`));
    child = await startServeOn(stateDir, port, SERVE_ENV, 'qemu');
    const got = await api('GET', `/v1/sessions/${id}`);
    assert.equal(got.json.state, 'paused');
    assert.equal((got.json.paused as Json).mode, 'disk');
    assert.ok(existsSync(`/var/run/netns/${netns}`), 'its netns made again');
    const resumed = await api('POST', `/v1/sessions/${id}/resume`);
    assert.equal(resumed.status, 200, JSON.stringify(resumed.json));
    const now = await counter(id);
    assert.equal(now.pid, beforePause.pid, 'the same process, after the reboot');
    assert.ok(now.count >= atPause.count, `not from zero (${atPause.count} -> ${now.count})`);
    await until('it counts on', async () => (await counter(id)).count > now.count);
  });

  it('is destroyed without a trace: no QEMU, no state', async () => {
    const gone = await api('DELETE', `/v1/sessions/${id}`);
    assert.equal(gone.status, 200);
    assert.deepEqual(await qemuPids(id), []);
    assert.ok(!existsSync(path.join(stateDir, id)));
  });
});

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import WebSocket from 'ws';
import { ResourceNames } from '../src/network/names.js';
import { criuUnavailable } from '../src/runtimes/container/criu-check.js';
import { containerSettingsFromEnv } from '../src/runtimes/container/settings.js';
import { COUNTER_BOX, counterOf, startCounter, startServeRig, type ServeRig } from './helpers/counting-desktop.js';
import { differingOutside, serveApi, type Json, type RawImage } from './helpers/serve-api.js';
import { TEST_PREFIX } from './helpers/orchestrator.js';

/**
 * Memory pause of a real container desktop, across a SIGKILL of the orchestrator: an xterm
 * counts on the screen and into a file; the session is paused (its cgroup frozen); its CPU
 * time does not grow and the counter does not move while paused; the orchestrator is killed
 * and started again, and adopts the session paused; the resume finds the same process
 * counting on from where it stopped, the screen as it was (but for the counter's window), and
 * the next action works. Then the refusals: bad mode, pause twice, resume a running one,
 * another tenant.
 */
const NAMES = new ResourceNames(TEST_PREFIX);
const criuMissing = await criuUnavailable(containerSettingsFromEnv(process.env).criuBin);

let rig: ServeRig;

const { api, bash, screenshot } = serveApi(
  () => rig.port,
  () => rig.keys.alpha,
);
const counter = (id: string) => counterOf(NAMES, id);

/** Frames the session's recording has written so far (looking at it does not resume the session). */
async function recordedFrames(id: string): Promise<number> {
  const res = await api('GET', `/v1/sessions/${id}/recording/status`);
  assert.equal(res.status, 200, JSON.stringify(res.json));
  return Number(res.json.frames);
}

/** The container's CPU time so far, ns (cgroup v1 cpuacct). */
async function cpuNs(id: string): Promise<number> {
  return Number((await readFile(path.join('/sys/fs/cgroup/cpuacct', NAMES.cgroup(id), 'cpuacct.usage'), 'utf8')).trim());
}

/** Pixels that differ outside the counter's box (its own window changes as it counts). */
function differingOutsideCounter(a: RawImage, b: RawImage): number {
  return differingOutside(a, b, COUNTER_BOX);
}

describe('memory pause of a container desktop, across an orchestrator SIGKILL', () => {
  let id: string;
  let first: { pid: number; count: number };
  let atPause: { pid: number; count: number };
  let shotBefore: { data: Buffer; width: number; height: number };

  before(async () => {
    rig = await startServeRig(NAMES, 'sbx-pause-');
  });
  after(async () => {
    await rig.stop();
  });

  it('a desktop counts in an xterm and into a file', async () => {
    const created = await api('POST', '/v1/sessions', { width: 1024, height: 768, record: true });
    assert.equal(created.status, 201, JSON.stringify(created.json));
    id = String(created.json.id);
    assert.equal(created.json.paused, null);
    await bash(id, `setsid nohup xmessage -geometry +420+300 'a paused desktop keeps its windows' >/dev/null 2>&1 < /dev/null &`);
    await startCounter(bash, NAMES, id); // both windows mapped and drawn by then
    first = await counter(id);
    // Where CRIU cannot run, a container cannot be snapshotted: a 409 that says why (docs/snapshots.md);
    // where it runs, test/container-snapshots.test.ts snapshots and forks one.
    if (criuMissing) {
      const snapshot = await api('POST', `/v1/sessions/${id}/snapshots`, {});
      assert.equal(snapshot.status, 409, JSON.stringify(snapshot.json));
      assert.equal((snapshot.json.error as Json).code, 'snapshot_unsupported');
      assert.match(String((snapshot.json.error as Json).message), /CRIU/);
    }
  });

  it('pauses in memory: no CPU and no count while paused', async () => {
    shotBefore = await screenshot(id);
    const cpuRunning0 = await cpuNs(id);
    await sleep(1_000);
    const cpuRunning = (await cpuNs(id)) - cpuRunning0;
    const started = performance.now();
    const paused = await api('POST', `/v1/sessions/${id}/pause`, { mode: 'memory' });
    const pauseMs = performance.now() - started;
    assert.equal(paused.status, 200, JSON.stringify(paused.json));
    assert.equal(paused.json.state, 'paused');
    assert.equal((paused.json.paused as Json).mode, 'memory');
    assert.equal((paused.json.paused as Json).bytes, 0);
    atPause = await counter(id);
    const cpuPaused0 = await cpuNs(id);
    const framesAtPause = await recordedFrames(id);
    await sleep(3_000);
    const cpuPaused = (await cpuNs(id)) - cpuPaused0;
    const still = await counter(id);
    assert.equal(await recordedFrames(id), framesAtPause, 'the recording captures nothing while paused (its video time stands still)');
    console.log(
      `pause took ${pauseMs.toFixed(1)} ms (HTTP round trip); CPU: ${(cpuRunning / 1e6).toFixed(1)} ms in 1 s running, ${(cpuPaused / 1e6).toFixed(3)} ms in 3 s paused`,
    );
    assert.ok(cpuRunning > 1e6, `the control: running, the desktop used CPU (${cpuRunning} ns in 1 s)`);
    assert.equal(cpuPaused, 0, 'a frozen cgroup uses no CPU at all');
    assert.deepEqual(still, atPause, 'the counter did not move while paused');
    const state = await readFile(path.join('/sys/fs/cgroup/freezer', NAMES.cgroup(id), 'freezer.state'), 'utf8');
    assert.equal(state.trim(), 'FROZEN');
  });

  it('refuses what does not fit: a bad mode names the field, pause twice, another tenant', async () => {
    const bad = await api('POST', `/v1/sessions/${id}/pause`, { mode: 'deep' });
    assert.equal(bad.status, 400);
    assert.match(JSON.stringify(bad.json), /mode/);
    const twice = await api('POST', `/v1/sessions/${id}/pause`, { mode: 'memory' });
    assert.equal(twice.status, 409);
    assert.equal((twice.json.error as Json).code, 'session_already_paused');
    const disk = await api('POST', `/v1/sessions/${id}/pause`, { mode: 'disk' });
    assert.equal(disk.status, 409, 'paused already, in memory: not paused again to disk');
    assert.equal((disk.json.error as Json).code, 'session_already_paused');
    for (const url of [`/v1/sessions/${id}/resume`, `/v1/sessions/${id}/pause`, `/v1/sessions/${id}/screenshot`]) {
      const other = await api(url.endsWith('screenshot') ? 'GET' : 'POST', url, url.endsWith('screenshot') ? undefined : {}, rig.keys.beta);
      assert.equal(other.status, 404, `${url} as another tenant`);
    }
    const stillPaused = await api('GET', `/v1/sessions/${id}`);
    assert.equal(stillPaused.json.state, 'paused', 'looking at it does not resume it');
  });

  it('survives a SIGKILL of the orchestrator: adopted paused, still frozen', async () => {
    await rig.crashAndRestart();
    const got = await api('GET', `/v1/sessions/${id}`);
    assert.equal(got.status, 200);
    assert.equal(got.json.state, 'paused');
    assert.equal((got.json.paused as Json).mode, 'memory');
    assert.deepEqual(await counter(id), atPause, 'still frozen after the restart');
  });

  it('resumes: the same process counts on from where it stopped, the screen is as it was, the next action works', async () => {
    const started = performance.now();
    const resumed = await api('POST', `/v1/sessions/${id}/resume`);
    const resumeMs = performance.now() - started;
    assert.equal(resumed.status, 200, JSON.stringify(resumed.json));
    assert.equal(resumed.json.state, 'ready');
    assert.equal(resumed.json.paused, null);
    const shotAfter = await screenshot(id);
    const differing = differingOutsideCounter(shotBefore, shotAfter);
    await sleep(500);
    const after = await counter(id);
    console.log(
      `resume took ${resumeMs.toFixed(1)} ms (HTTP round trip); counter ${first.count} before, ${atPause.count} at pause, ${after.count} 0.5 s after resume`,
    );
    assert.equal(after.pid, first.pid, 'the same process');
    assert.ok(after.count > atPause.count, 'it counts again');
    assert.ok(after.count - atPause.count < 40, 'from where it stopped (not from zero, and not as if it had run during the pause)');
    assert.equal(differing, 0, 'the screen outside the counter is pixel-identical to the one before the pause');
    const click = await api('POST', `/v1/sessions/${id}/actions`, { action: 'left_click', coordinate: [600, 600] });
    assert.equal(click.status, 200);
    assert.match(await bash(id, 'echo next-action-works'), /next-action-works/);
    const again = await api('POST', `/v1/sessions/${id}/resume`);
    assert.equal(again.status, 409);
    assert.equal((again.json.error as Json).code, 'session_not_paused');
  });

  it('auto-resume: a request to a paused session resumes it first; a destroy of a paused one leaves nothing', async () => {
    const t0 = performance.now();
    assert.equal((await api('POST', `/v1/sessions/${id}/pause`, {})).status, 200);
    const t1 = performance.now();
    const shot = await api('GET', `/v1/sessions/${id}/screenshot`);
    assert.equal(shot.status, 200, 'the screenshot resumed it');
    const t2 = performance.now();
    assert.equal((await api('GET', `/v1/sessions/${id}`)).json.state, 'ready');
    // A live view opened while paused: the desktop runs again and the viewer gets the RFB
    // greeting (not a socket waiting on a frozen guest). The view is made before the pause.
    const view = await api('POST', `/v1/sessions/${id}/views`, { mode: 'view' });
    assert.equal(view.status, 201, JSON.stringify(view.json));
    assert.equal((await api('POST', `/v1/sessions/${id}/pause`, {})).status, 200);
    const greeting = await new Promise<string>((resolve, reject) => {
      const ws = new WebSocket(String(view.json.url).replace(/^http/, 'ws') + '/rfb');
      const timer = setTimeout(() => reject(new Error('no RFB greeting within 15 s')), 15_000);
      ws.once('message', (data: Buffer) => {
        clearTimeout(timer);
        resolve(data.toString('latin1'));
        ws.close();
      });
      ws.once('error', reject);
    });
    assert.match(greeting, /^RFB 003\.00\d\n/);
    assert.equal((await api('GET', `/v1/sessions/${id}`)).json.state, 'ready', 'opening the view resumed it');
    assert.equal((await api('POST', `/v1/sessions/${id}/pause`, {})).status, 200);
    const t3 = performance.now();
    const deleted = await api('DELETE', `/v1/sessions/${id}`);
    console.log(
      `pause ${(t1 - t0).toFixed(0)} ms, screenshot with auto-resume ${(t2 - t1).toFixed(0)} ms, pause ${(t3 - t2).toFixed(0)} ms, destroy of a paused session ${(performance.now() - t3).toFixed(0)} ms`,
    );
    assert.equal(deleted.status, 200);
    assert.equal(deleted.json.state, 'destroyed');
    assert.equal(existsSync(path.join('/sys/fs/cgroup/freezer', NAMES.cgroup(id))), false, 'its cgroup is gone');
    assert.equal(existsSync(path.join(rig.stateDir, id)), false, 'its session dir is gone');
  });
});

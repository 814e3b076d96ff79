import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { isProcessAlive, processStartTime } from '../src/host/process-watch.js';
import type { GuestTransport } from '../src/transport/index.js';
import { connectToGuest, guestAddress, guestSh, pngSize } from './helpers/guest.js';
import { act, assertClickArrives, assertScreenshotSize, assertTypesLiterally } from './helpers/desktop-checks.js';
import { startXev, typedText, waitForXev } from './helpers/xev.js';
import { ResourceNames } from '../src/network/names.js';
import { cgroupDirsOf, hostTrace, processesMentioning } from './helpers/host.js';
import { TEST_PREFIX, startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

const NAMES = new ResourceNames(TEST_PREFIX);

/**
 * The spine, end to end on real sandboxes: create over HTTP, see the screen, click and type
 * into a real X client that records what arrived, destroy, and find nothing left.
 */
describe('a sandbox, end to end', () => {
  let orch: TestOrchestrator;
  let id: string;
  let guest: GuestTransport;

  before(async () => {
    orch = await startTestOrchestrator();
  });
  after(async () => {
    guest?.close();
    await orch?.stop();
  });

  it('is created over HTTP with the requested screen', async () => {
    const res = await orch.server.inject({
      method: 'POST',
      url: '/v1/sessions',
      payload: { width: 800, height: 600, timeoutSeconds: 120, metadata: { test: 'e2e' } },
    });
    assert.equal(res.statusCode, 201, res.body);
    const body = res.json();
    id = body.id;
    assert.equal(body.state, 'ready');
    assert.deepEqual(body.display, { width: 800, height: 600 });
    assert.equal(body.runtime, 'container');
    assert.ok(Date.parse(body.expiresAt) > Date.parse(body.createdAt));
    assert.deepEqual(body.metadata, { test: 'e2e' });
    const list = (await orch.server.inject({ method: 'GET', url: '/v1/sessions' })).json();
    assert.ok(list.sessions.some((s: { id: string }) => s.id === id));
  });

  it('keeps its keys in a 0700 dir with 0600 files', async () => {
    const { stat } = await import('node:fs/promises');
    const dir = path.join(orch.stateDir, id);
    assert.equal((await stat(dir)).mode & 0o777, 0o700);
    assert.equal((await stat(path.join(dir, 'id_ed25519'))).mode & 0o777, 0o600);
    assert.equal((await stat(path.join(dir, 'config', 'ssh_host_ed25519_key'))).mode & 0o777, 0o600);
    assert.match(await readFile(path.join(dir, 'id_ed25519'), 'utf8'), /BEGIN OPENSSH PRIVATE KEY/);
    guest = await connectToGuest(orch.stateDir, id, await guestAddress(orch.names, id));
  });

  it('returns a PNG screenshot of the requested size', async () => {
    await assertScreenshotSize(orch, id, { width: 800, height: 600 });
  });

  it('delivers a click at the requested point to an X client in the guest', async () => {
    await startXev(guest, 800, 600);
    await assertClickArrives(orch, id, guest);
  });

  it('types text literally: every keysym arrives and nothing is executed', async () => {
    await assertTypesLiterally(orch, id, guest);
    assert.equal(existsSync('/tmp/pwned'), false);
  });

  it('types accents, CJK and emoji, and newlines, each arriving as its own keysym', async () => {
    // More distinct non-ASCII symbols than the keyboard has spare keys: typed in chunks.
    const text = 'Grüße, café — 漢字かな 🎉👍\nçà ñ ø å ß 你好世界 éèêë';
    await guestSh(guest, ': > /tmp/xev.log');
    const res = await act(orch, id, { action: 'type', text });
    assert.equal(res.statusCode, 200, res.body);
    const typed = await waitForXev(guest, (log) => typedText(log) === text);
    assert.equal(typedText(typed), text);
  });

  it('presses key combos and reports the cursor', async () => {
    await guestSh(guest, ': > /tmp/xev.log');
    assert.equal((await act(orch, id, { action: 'key', text: 'ctrl+a' })).statusCode, 200);
    const log = await waitForXev(guest, (l) => /keysym 0x61, a\)/.test(l));
    assert.match(log, /Control_L/);
    assert.equal((await act(orch, id, { action: 'mouse_move', coordinate: [123, 456] })).statusCode, 200);
    const pos = await act(orch, id, { action: 'cursor_position' });
    assert.equal(pos.json().output, 'X=123,Y=456');
    const shot = await act(orch, id, { action: 'screenshot' });
    assert.equal(shot.json().image.mediaType, 'image/png');
    assert.deepEqual(pngSize(Buffer.from(shot.json().image.data, 'base64')), { width: 800, height: 600 });
  });

  it('screenshots hold exactly the pixels scrot captures', async () => {
    const sharp = (await import('sharp')).default;
    const pixels = async (png: Buffer) => sharp(png).removeAlpha().raw().toBuffer();
    let same = false;
    // The screen is still (no blinking cursor in xev or xterm), so the two captures agree;
    // a retry covers a repaint landing between them.
    for (let attempt = 0; attempt < 3 && !same; attempt++) {
      const ours = (await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/screenshot` })).rawPayload;
      const scrot = (await guest.exec('DISPLAY=:99 scrot -')).stdout;
      assert.deepEqual(pngSize(ours), pngSize(scrot));
      same = (await pixels(ours)).equals(await pixels(scrot));
    }
    assert.ok(same, 'the API screenshot and scrot agree pixel for pixel');
  });

  it('counts what it did in /metrics', async () => {
    const text = (await orch.server.inject({ method: 'GET', url: '/metrics' })).body;
    assert.match(text, /sandbox_screenshot_duration_seconds_count [1-9]/);
    assert.match(text, /sandbox_action_duration_seconds_count\{action="left_click"\} 1/);
    assert.match(text, /sandbox_session_create_duration_seconds_count\{runtime="container"\} 1/);
    assert.match(text, /sandbox_sessions_active 1/);
  });

  it('is destroyed without a trace, and destroy is idempotent', async () => {
    const sessionDir = path.join(orch.stateDir, id);
    const pid = Number(await readFile(path.join(sessionDir, 'container.pid'), 'utf8'));
    const startTime = processStartTime(pid) as string;
    const before = await hostTrace(NAMES, id, sessionDir);
    assert.ok(before.netns && before.veth && before.container && before.sessionDir && before.mounts.length > 0);
    assert.ok(before.processes.includes(pid));
    const cgroups = await cgroupDirsOf(orch.names.cgroup(id));
    assert.ok(cgroups.length > 0, `the sandbox has a cgroup on this host (${orch.names.cgroup(id)})`);
    assert.ok(
      cgroups.every((dir) => readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n').includes(String(pid))),
      `its init is in ${cgroups.join(', ')}`,
    );
    guest.close();

    const res = await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}` });
    assert.equal(res.statusCode, 200);
    assert.equal(res.json().state, 'destroyed');

    const trace = await hostTrace(NAMES, id, sessionDir);
    assert.deepEqual(trace, { netns: false, veth: false, mounts: [], container: false, processes: [], sessionDir: false });
    // Gone, or a zombie that only the host's init has left to reap: nothing runs any more.
    assert.equal(await isProcessAlive(pid, startTime), false, 'the container init is gone');
    assert.deepEqual(await processesMentioning(orch.names.container(id)), []);
    assert.deepEqual(await cgroupDirsOf(orch.names.cgroup(id)), [], 'its cgroups are gone');

    const again = await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}` });
    assert.equal(again.statusCode, 200);
    assert.equal(again.json().state, 'destroyed');
    const gone = await act(orch, id, { action: 'screenshot' });
    assert.equal(gone.statusCode, 409);
    assert.match(gone.json().error.message, /destroyed/);
    assert.match((await orch.server.inject({ method: 'GET', url: '/metrics' })).body, /sandbox_sessions_active 0/);
  });
});

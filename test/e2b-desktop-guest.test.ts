import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import sharp, { type OutputInfo } from 'sharp';
import { WebSocket } from 'ws';
import { openKeyStore } from '../src/api/auth/key-store-file.js';
import { ResourceNames } from '../src/network/names.js';
import type { GuestTransport } from '../src/transport/index.js';
import { connectToGuest, guestAddress, guestSh, pngSize } from './helpers/guest.js';
import { TEST_PREFIX } from './helpers/orchestrator.js';
import { readProcessOutput } from './helpers/process-api.js';
import { startServe, type ServeProcess } from './helpers/serve.js';

/**
 * Issue 26, E2B Desktop inside the guest: a session of the `xfce` template, whose X server is
 * not ours. Through our own API (a real `sbx serve`, a real container sandbox), the display is
 * started exactly as @e2b/desktop 2.4.0's Sandbox.create starts it (the same command lines, as
 * the guest user, through our processes API), then our screenshot, actions and live view must
 * work on that display (:0), and every command the SDK runs must answer what the SDK parses.
 */
const NAMES = new ResourceNames(TEST_PREFIX);
type Json = Record<string, unknown>;

// @e2b/desktop 2.4.0 (node_modules/@e2b/desktop/dist/index.mjs), verbatim.
const SDK_XVFB = 'Xvfb :0 -ac -screen 0 1024x768x24 -retro -dpi 96 -nolisten tcp -nolisten unix';
const SDK_XFCE_RUNNING = 'pgrep -x xfce4-session >/dev/null && pgrep -x xfwm4 >/dev/null && pgrep -x xfdesktop >/dev/null';
const SDK_NOVNC = 'cd /opt/noVNC/utils && ./novnc_proxy --vnc localhost:5900 --listen 6080 --web /opt/noVNC > /tmp/novnc.log 2>&1';
const sdkX11vnc = (pwdFlag: string) => `x11vnc -bg -display :0 -forever -wait 50 -shared -rfbport 5900 ${pwdFlag} 2>/tmp/x11vnc_stderr.log`;

describe('E2B Desktop in the guest: the xfce template, its display started by the session', { timeout: 300_000 }, () => {
  let stateDir = '';
  let serve: ServeProcess;
  let key = '';
  let otherKey = '';
  let id = '';
  let guest: GuestTransport;

  const api = async (method: string, route: string, body?: unknown): Promise<{ status: number; json: Json; raw: Buffer; headers: Headers }> => {
    const headers: Record<string, string> = { authorization: `Bearer ${key}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(`${serve.url}${route}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), redirect: 'manual' });
    const raw = Buffer.from(await res.arrayBuffer());
    let json: Json = {};
    if ((res.headers.get('content-type') ?? '').includes('json') && raw.length > 0) json = JSON.parse(raw.toString('utf8')) as Json;
    return { status: res.status, json, raw, headers: res.headers };
  };

  /** `bash -lc <cmd>` through our processes API, as the guest user (as the SDK's commands.run does on E2B). */
  const run = async (cmd: string): Promise<{ exitCode: number | null; stdout: string; stderr: string }> => {
    const started = await api('POST', `/v1/sessions/${id}/processes`, { cmd });
    assert.equal(started.status, 201, JSON.stringify(started.json));
    const out = await readProcessOutput(`${serve.url}/v1/sessions/${id}/processes/${String(started.json.pid)}/output`, {
      headers: { authorization: `Bearer ${key}` },
    });
    return { exitCode: out.exit?.exitCode ?? null, stdout: out.stdout.toString('utf8'), stderr: out.stderr.toString('utf8') };
  };
  /** A background command (the SDK's `{ background: true }`): started, not waited for. */
  const runInBackground = async (cmd: string): Promise<void> => {
    const started = await api('POST', `/v1/sessions/${id}/processes`, { cmd });
    assert.equal(started.status, 201, JSON.stringify(started.json));
  };
  /** The SDK's waitAndVerify: the command until it exits 0, every 0.5 s, for `seconds`. */
  const waitFor = async (cmd: string, seconds: number): Promise<void> => {
    const deadline = Date.now() + seconds * 1000;
    let last = '';
    while (Date.now() < deadline) {
      const r = await run(cmd);
      if (r.exitCode === 0) return;
      last = r.stderr;
      await sleep(500);
    }
    assert.fail(`${cmd} did not succeed within ${seconds} s (${last})`);
  };
  const screenshot = async (): Promise<{ data: Buffer; info: OutputInfo }> => {
    const shot = await api('GET', `/v1/sessions/${id}/screenshot`);
    assert.equal(shot.status, 200, shot.raw.toString('utf8').slice(0, 300));
    return sharp(shot.raw).removeAlpha().raw().toBuffer({ resolveWithObject: true });
  };

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-e2b-desktop-'));
    const store = openKeyStore(stateDir);
    key = store.keys.create('tenant-a').key;
    otherKey = store.keys.create('tenant-b').key;
    store.close();
    serve = await startServe(stateDir, 19_900 + Math.floor(Math.random() * 90), undefined, [], { SBX_TENANT_REQUEST_LIMITS: 'tenant-a=1000/100000/100000' });
    const created = await api('POST', '/v1/sessions', { template: 'xfce' });
    assert.equal(created.status, 201, JSON.stringify(created.json));
    id = created.json.id as string;
    guest = await connectToGuest(stateDir, id, await guestAddress(NAMES, id));
  });

  after(async () => {
    guest?.close();
    if (serve && serve.child.exitCode === null) {
      serve.child.kill('SIGTERM');
      await once(serve.child, 'exit');
    }
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it('before the session starts its X server: ready for commands; a screenshot, an action and a live view are a clear 409', async () => {
    const view = await api('GET', `/v1/sessions/${id}`);
    assert.equal(view.json.state, 'ready');
    assert.equal(view.json.template, 'xfce');
    // Our init started no X server: nothing listens on :0 or :99.
    assert.equal((await guestSh(guest, 'pgrep -x Xvfb || echo none')).text.trim(), 'none');
    const started = performance.now();
    const shot = await api('GET', `/v1/sessions/${id}/screenshot`);
    assert.equal(shot.status, 409, shot.raw.toString('utf8'));
    assert.equal((shot.json.error as Json).code, 'display_not_ready');
    assert.match((shot.json.error as Json).message as string, /display :0 does not answer yet.*Xvfb :0/);
    const click = await api('POST', `/v1/sessions/${id}/actions`, { action: 'left_click', coordinate: [10, 10] });
    assert.equal(click.status, 409, JSON.stringify(click.json));
    assert.equal((click.json.error as Json).code, 'display_not_ready');
    // The desktop actions too (their helper fails on a display that is not there).
    const windows = await api('GET', `/v1/sessions/${id}/desktop/windows`);
    assert.equal(windows.status, 409, JSON.stringify(windows.json));
    assert.equal((windows.json.error as Json).code, 'display_not_ready');
    assert.ok(performance.now() - started < 10_000, 'answered at once, not after a wait');
    // A live view's WebSocket says why it closes.
    const made = await api('POST', `/v1/sessions/${id}/views`, { mode: 'view' });
    assert.equal(made.status, 201);
    const ws = new WebSocket((made.json.url as string).replace(/^http/, 'ws') + '/rfb');
    const [code, reason] = (await once(ws, 'close')) as [number, Buffer];
    assert.equal(code, 1011);
    assert.match(reason.toString(), /display does not answer yet/);
    // Commands run meanwhile, as the guest user, with DISPLAY=:0.
    const who = await run('id -un; echo "$DISPLAY"');
    assert.deepEqual(who.stdout.trim().split('\n'), ['user', ':0']);
  });

  it("the SDK's start-up: Xvfb :0 and startxfce4 as it runs them; then our screenshot shows XFCE's panel", async () => {
    await runInBackground(SDK_XVFB);
    await waitFor('xdpyinfo -display :0', 10);
    await runInBackground('startxfce4');
    await waitFor(SDK_XFCE_RUNNING, 60);
    // The panel (Debian's default layout: a bar across the top) once XFCE has drawn it.
    let panel = false;
    let last: { data: Buffer; info: OutputInfo } | undefined;
    for (let i = 0; i < 60 && !panel; i++) {
      last = await screenshot();
      panel = topBarDrawn(last.data, last.info.width);
      if (!panel) await sleep(500);
    }
    assert.ok(last);
    assert.deepEqual({ width: last.info.width, height: last.info.height }, { width: 1024, height: 768 });
    if (process.env.E2B_DESKTOP_SHOT)
      await sharp(last.data, { raw: { width: 1024, height: 768, channels: 3 } })
        .png()
        .toFile(process.env.E2B_DESKTOP_SHOT);
    assert.ok(panel, 'a panel across the top of the screen');
    // The X server is the SDK's (the user's), and ours attached to it.
    assert.match((await guestSh(guest, 'ps -o user=,args= -C Xvfb')).text, /^user\s+Xvfb :0 -ac .*-nolisten unix/m);
  });

  it('our computer tool clicks and types on :0: into Mousepad, saved, read back from the file; the recording has frames of :0', async () => {
    const recording = await api('POST', `/v1/sessions/${id}/recording/start`);
    assert.equal(recording.status, 200, JSON.stringify(recording.json));
    await runInBackground('mousepad /tmp/e2b-note.txt');
    await waitFor('xdotool search --onlyvisible --class mousepad', 30);
    const win = (await run('xdotool search --onlyvisible --class mousepad | head -n 1')).stdout.trim();
    const geometry = (await run(`xdotool getwindowgeometry --shell ${win}`)).stdout;
    const at = (name: string) => Number(new RegExp(`^${name}=(\\d+)`, 'm').exec(geometry)?.[1]);
    const [x, y] = [at('X') + Math.floor(at('WIDTH') / 2), at('Y') + Math.floor(at('HEIGHT') / 2)];
    const click = await api('POST', `/v1/sessions/${id}/actions`, { action: 'left_click', coordinate: [x, y] });
    assert.equal(click.status, 200, JSON.stringify(click.json));
    // The SDK's getCursorPosition parses exactly this.
    const where = /x:(\d+)\s+y:(\d+)/.exec((await run('xdotool getmouselocation')).stdout);
    assert.deepEqual([Number(where?.[1]), Number(where?.[2])], [x, y]);
    const typed = await api('POST', `/v1/sessions/${id}/actions`, { action: 'type', text: 'Hello from E2B, wörld' });
    assert.equal(typed.status, 200, JSON.stringify(typed.json));
    // The SDK's write(): its own command line, typed into the same window.
    assert.equal((await run("xdotool type --delay 75 -- ' and the SDK'")).exitCode, 0);
    const save = await api('POST', `/v1/sessions/${id}/actions`, { action: 'key', text: 'ctrl+s' });
    assert.equal(save.status, 200, JSON.stringify(save.json));
    let text = '';
    const expected = 'Hello from E2B, wörld and the SDK';
    for (let i = 0; i < 50 && text !== expected; i++) {
      text = (await guestSh(guest, 'cat /tmp/e2b-note.txt 2>/dev/null')).text.replace(/\n$/, '');
      if (text !== expected) await sleep(200);
    }
    assert.equal(text, expected);
    const recorded = await api('POST', `/v1/sessions/${id}/recording/stop`);
    assert.equal(recorded.status, 200, JSON.stringify(recorded.json));
    assert.equal(recorded.json.state, 'finished');
    assert.ok((recorded.json.frames as number) >= 5, `frames: ${String(recorded.json.frames)}`);
    assert.ok((recorded.json.bytes as number) > 0);
  });

  it('the commands the SDK runs answer what it parses: getmouselocation, scrot --pointer, xdpyinfo, xrandr, gtk-launch, xdg-open of a file', async () => {
    await run('xdotool mousemove --sync 321 234');
    const where = /x:(\d+)\s+y:(\d+)/.exec((await run('xdotool getmouselocation')).stdout);
    assert.deepEqual([where?.[1], where?.[2]], ['321', '234']);
    const shot = await run('scrot --pointer /tmp/screenshot-test.png');
    assert.equal(shot.exitCode, 0, shot.stderr);
    const png = (await guestSh(guest, 'base64 -w0 /tmp/screenshot-test.png')).text;
    assert.deepEqual(pngSize(Buffer.from(png, 'base64')), { width: 1024, height: 768 });
    assert.equal((await run('xdpyinfo -display :0')).exitCode, 0);
    // getScreenSize: the first WxH in xrandr's output.
    assert.equal(/(\d+x\d+)/.exec((await run('xrandr')).stdout)?.[1], '1024x768');
    assert.match((await run('xdotool getwindowfocus')).stdout.trim(), /^\d+$/);
    const launched = await run('gtk-launch xfce4-terminal');
    assert.equal(launched.exitCode, 0, launched.stderr);
    await waitFor('xdotool search --onlyvisible --class xfce4-terminal', 30);
    const windows = (await run('xdotool search --onlyvisible --class xfce4-terminal')).stdout.trim().split('\n');
    assert.match((await run(`xdotool getwindowname ${windows[0]}`)).stdout, /Terminal/);
    for (const tool of ['netstat', 'pkill', 'xev', 'xwininfo']) assert.equal((await run(`command -v ${tool}`)).exitCode, 0, tool);
    // open(file): xdg-open hands a text file to Mousepad.
    await run('printf "opened by xdg-open\\n" > /tmp/e2b-open.txt');
    await runInBackground('xdg-open /tmp/e2b-open.txt');
    await waitFor('xdotool search --onlyvisible --name "e2b-open.txt"', 30);
    // An ordinary session: listed like any other.
    const listed = await api('GET', '/v1/sessions');
    assert.ok((listed.json.sessions as Json[]).some((s) => s.id === id && s.template === 'xfce'));
  });

  it("our live view streams :0 through our own x11vnc, which the SDK's stream helpers neither see nor kill; its stream URL redirects to a view", async () => {
    const made = await api('POST', `/v1/sessions/${id}/views`, { mode: 'view' });
    const init = await serverInit((made.json.url as string).replace(/^http/, 'ws') + '/rfb');
    assert.deepEqual({ width: init.readUInt16BE(0), height: init.readUInt16BE(2) }, { width: 1024, height: 768 });
    assert.match((await guestSh(guest, 'pgrep -a sbx-vnc')).text, /-display :0 /);
    // stream.start() refuses when `pgrep -x x11vnc` finds one: ours is not one.
    assert.notEqual((await run('pgrep -x x11vnc')).exitCode, 0);
    // stream.start({ requireAuth: true }), as the SDK runs it.
    const password = 'Abc123xyz789Qwer';
    assert.equal((await run('mkdir -p ~/.vnc')).exitCode, 0);
    assert.equal((await run(`x11vnc -storepasswd ${password} ~/.vnc/passwd`)).exitCode, 0);
    assert.equal((await run(sdkX11vnc('-usepw'))).exitCode, 0);
    await runInBackground(SDK_NOVNC);
    await waitFor('netstat -tuln | grep ":6080 "', 10);
    // getUrl({ authKey }): the orchestrator answers with our live view, a token and no password.
    const url = `/v1/sessions/${id}/ports/6080/vnc.html?autoconnect=true&resize=scale&password=${password}`;
    const redirect = await api('GET', url);
    assert.equal(redirect.status, 303, redirect.raw.toString('utf8'));
    const location = redirect.headers.get('location') ?? '';
    assert.match(location, /^http:\/\/127\.0\.0\.1:\d+\/v1\/views\/[A-Za-z0-9_-]{43}$/);
    assert.ok(!location.includes(password));
    assert.equal((await fetch(location)).status, 200);
    const viewed = await serverInit(location.replace(/^http/, 'ws') + '/rfb');
    assert.equal(viewed.readUInt16BE(0), 1024);
    for (const bad of [url.replace(password, 'Wrong123wrong456'), url.replace(`&password=${password}`, ''), url.replace(password, "x';id;'")]) {
      const refused = await api('GET', bad);
      assert.equal(refused.status, 401, bad);
      assert.equal((refused.json.error as Json).code, 'stream_password_invalid');
    }
    // stream.stop(): `pkill x11vnc` ends the SDK's server, not our view's.
    await run('pkill x11vnc');
    assert.match((await guestSh(guest, 'pgrep -a sbx-vnc')).text, /-display :0 /);
    const stopped = await api('GET', url);
    assert.equal(stopped.status, 409);
    assert.equal((stopped.json.error as Json).code, 'stream_not_started');
    // Started again without requireAuth: the URL opens a view as E2B's does.
    assert.equal((await run(sdkX11vnc('-nopw'))).exitCode, 0);
    const open = await api('GET', `/v1/sessions/${id}/ports/6080/vnc.html?autoconnect=true&resize=scale&view_only=true`);
    assert.equal(open.status, 303);
    // Another tenant's key reaches nothing: the port route's own check comes first.
    const stranger = await fetch(`${serve.url}/v1/sessions/${id}/ports/6080/vnc.html?view_only=true`, {
      headers: { authorization: `Bearer ${otherKey}` },
      redirect: 'manual',
    });
    assert.equal(stranger.status, 404);
  });
});

/** Whether the top rows hold a bar (XFCE's panel: each row nearly one colour) unlike the desktop below. */
function topBarDrawn(rgb: Buffer, width: number): boolean {
  const at = (x: number, y: number) => rgb.readUIntBE((y * width + x) * 3, 3);
  let uniformRows = 0;
  for (let y = 2; y < 22; y++) {
    const colours = new Set<number>();
    for (let x = 300; x < 700; x += 4) colours.add(at(x, y));
    if (colours.size <= 3) uniformRows++;
  }
  return uniformRows >= 15 && at(500, 10) !== at(500, 400);
}

/** The RFB handshake through a live view's WebSocket (security None, shared); resolves with ServerInit. */
async function serverInit(url: string): Promise<Buffer> {
  const ws = new WebSocket(url);
  const steps: Array<[number, Buffer | undefined]> = [
    [12, Buffer.from('RFB 003.008\n')],
    [2, Buffer.from([1])],
    [4, Buffer.from([1])],
    [24, undefined],
  ];
  let got = Buffer.alloc(0);
  try {
    return await new Promise<Buffer>((resolve, reject) => {
      ws.on('close', (code: number, reason: Buffer) => reject(new Error(`closed during the handshake: ${code} ${reason.toString()}`)));
      ws.on('error', reject);
      ws.on('message', (data: Buffer) => {
        got = Buffer.concat([got, data]);
        while (steps.length > 0 && got.length >= steps[0]![0]) {
          const [need, answer] = steps.shift()!;
          if (!answer) return resolve(got);
          got = got.subarray(need);
          ws.send(answer);
        }
      });
    });
  } finally {
    ws.terminate();
  }
}

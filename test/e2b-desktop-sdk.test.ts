/**
 * `@e2b/desktop` from npm, unmodified, against a real `sbx serve` (issue 26): the program E2B's
 * docs show (create a desktop, look at it, open an editor, click, type, save, screenshot, run
 * a command, files, the stream URL, kill), pointed at us by E2B_API_URL, E2B_SANDBOX_URL,
 * E2B_API_KEY and E2B_DOMAIN only. Its `Sandbox.create` starts Xvfb :0 and XFCE itself in our
 * `xfce` template (E2B's `desktop`); each effect is checked through our own API: our
 * screenshot of the same screen, the saved file read back, the stream URL answered by a live
 * view of ours.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import http from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Sandbox } from '@e2b/desktop';
import { openKeyStore } from '../src/api/auth/key-store-file.js';
import { decodePng } from './helpers/browser.js';
import { startServe, type ServeProcess } from './helpers/serve.js';

const DOMAIN = 'sbx.test';
type Json = Record<string, unknown>;

describe('@e2b/desktop against sbx serve', { timeout: 420_000 }, () => {
  let stateDir = '';
  let serve: ServeProcess;
  let key = '';
  let desktop: Sandbox;

  const api = async (method: string, route: string, body?: unknown): Promise<{ status: number; json: Json; bytes: Buffer }> => {
    const headers: Record<string, string> = { authorization: `Bearer ${key}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(`${serve.url}${route}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const bytes = Buffer.from(await res.arrayBuffer());
    const text = bytes.toString('utf8');
    return { status: res.status, json: text.startsWith('{') ? (JSON.parse(text) as Json) : {}, bytes };
  };

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-e2b-desktop-'));
    const store = openKeyStore(stateDir);
    key = store.keys.create('tenant-a').key;
    store.close();
    serve = await startServe(stateDir, 19_100 + Math.floor(Math.random() * 300), undefined, [], {
      SBX_TENANT_REQUEST_LIMITS: 'tenant-a=1000/100000/100000',
      SBX_PORTS_DOMAIN: DOMAIN,
    });
    process.env.E2B_API_URL = serve.url;
    process.env.E2B_SANDBOX_URL = serve.url;
    process.env.E2B_API_KEY = key;
    process.env.E2B_DOMAIN = DOMAIN;
  });

  after(async () => {
    if (serve && serve.child.exitCode === null) {
      serve.child.kill('SIGTERM');
      await once(serve.child, 'exit');
    }
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it('Sandbox.create starts the desktop itself: an xfce session of ours, whose screen our own screenshot shows', async () => {
    const started = performance.now();
    desktop = await Sandbox.create({ timeoutMs: 300_000, metadata: { purpose: 'e2b-desktop-docs' } });
    console.log(`@e2b/desktop: Sandbox.create (Xvfb :0 and XFCE started by the SDK) took ${Math.round(performance.now() - started)} ms`);
    const session = await api('GET', `/v1/sessions/${desktop.sandboxId}`);
    assert.equal(session.status, 200, JSON.stringify(session.json));
    assert.equal(session.json.template, 'xfce', "E2B's desktop is our xfce");
    assert.deepEqual(await desktop.getScreenSize(), { width: 1024, height: 768 });
    // XFCE's desktop is not one flat colour (its panel, its icons): drawn within seconds of the
    // processes the SDK waits for.
    const colours = new Set<number>();
    for (let i = 0; i < 40 && colours.size <= 20; i++) {
      if (i > 0) await desktop.wait(250);
      const shot = await api('GET', `/v1/sessions/${desktop.sandboxId}/screenshot`);
      assert.equal(shot.status, 200);
      const image = await decodePng(shot.bytes);
      assert.deepEqual([image.width, image.height], [1024, 768]);
      colours.clear();
      for (let p = 0; p < image.pixels.length; p += 4 * 97) colours.add((image.pixels[p]! << 16) | (image.pixels[p + 1]! << 8) | image.pixels[p + 2]!);
    }
    assert.ok(colours.size > 20, `the desktop is drawn (${colours.size} colours sampled)`);
  });

  it('launch, leftClick, write and press: the text typed into Mousepad is saved in the file', async () => {
    await desktop.files.write('/home/user/note.txt', '');
    await desktop.launch('org.xfce.mousepad', '/home/user/note.txt');
    let windows: string[] = [];
    for (let i = 0; i < 60 && windows.filter(Boolean).length === 0; i++) {
      await desktop.wait(500);
      windows = await desktop.getApplicationWindows('mousepad').catch(() => []);
    }
    const windowId = windows.filter(Boolean)[0];
    assert.ok(windowId, 'Mousepad has a window');
    assert.match(await desktop.getWindowTitle(windowId), /note\.txt/);
    const { width, height } = await desktop.getScreenSize();
    await desktop.leftClick(Math.round(width / 2), Math.round(height / 2));
    assert.deepEqual(await desktop.getCursorPosition(), { x: Math.round(width / 2), y: Math.round(height / 2) });
    await desktop.write('Hello from @e2b/desktop');
    await desktop.press(['ctrl', 's']);
    let saved = '';
    for (let i = 0; i < 20 && !saved.includes('Hello'); i++) {
      await desktop.wait(250);
      const file = await api('GET', `/v1/sessions/${desktop.sandboxId}/files?path=${encodeURIComponent('/home/user/note.txt')}`);
      saved = file.bytes.toString('utf8');
    }
    assert.equal(saved.trim(), 'Hello from @e2b/desktop', 'read back through our own files API');
  });

  it('screenshot() is a 1024x768 PNG of the screen; commands.run streams; files round-trip', async () => {
    const png = Buffer.from(await desktop.screenshot());
    const theirs = await decodePng(png);
    assert.deepEqual([theirs.width, theirs.height], [1024, 768]);
    const chunks: string[] = [];
    const result = await desktop.commands.run('echo one; sleep 0.2; echo two', { onStdout: (data) => void chunks.push(data) });
    assert.equal(result.stdout, 'one\ntwo\n');
    await desktop.files.write('/home/user/data/e2b.txt', 'written by the SDK');
    assert.equal(await desktop.files.read('/home/user/data/e2b.txt'), 'written by the SDK');
    assert.ok((await desktop.files.list('/home/user/data')).some((entry) => entry.name === 'e2b.txt'));
  });

  it('stream.start({requireAuth}) and getUrl(): the URL opens one of our live views, its password never in it', async () => {
    await desktop.stream.start({ requireAuth: true });
    const streamUrl = new URL(desktop.stream.getUrl({ authKey: desktop.stream.getAuthKey() }));
    assert.equal(streamUrl.hostname, `6080-${desktop.sandboxId}.${DOMAIN}`);
    // A browser on the E2B domain would send this; here the request goes to our server with that Host.
    const answer = await new Promise<{ status: number; location: string; body: string }>((resolve, reject) => {
      const target = new URL(serve.url);
      http
        .get(
          {
            host: target.hostname,
            port: target.port,
            path: streamUrl.pathname + streamUrl.search,
            headers: { host: streamUrl.host, authorization: `Bearer ${key}` },
            agent: false,
          },
          (res) => {
            const chunks: Buffer[] = [];
            res.on('data', (chunk: Buffer) => chunks.push(chunk));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, location: String(res.headers.location ?? ''), body: Buffer.concat(chunks).toString() }));
          },
        )
        .on('error', reject);
    });
    assert.equal(answer.status, 303, JSON.stringify(answer));
    assert.match(answer.location, /\/v1\/views\/[^/?]+/);
    const password = streamUrl.searchParams.get('password');
    assert.ok(password, 'the SDK put its password in its own URL');
    assert.ok(!answer.location.includes(password), 'the password is not in the view URL');
    await desktop.stream.stop();
  });

  it("resolution: a desktop the SDK starts at another size is ours at that size (screenshots, the session's display, clicks)", async () => {
    const wide = await Sandbox.create({ resolution: [1280, 800], timeoutMs: 300_000 });
    try {
      assert.deepEqual(await wide.getScreenSize(), { width: 1280, height: 800 });
      const shot = await api('GET', `/v1/sessions/${wide.sandboxId}/screenshot`);
      assert.equal(shot.status, 200, shot.bytes.toString().slice(0, 300));
      const image = await decodePng(shot.bytes);
      assert.deepEqual([image.width, image.height], [1280, 800]);
      const session = await api('GET', `/v1/sessions/${wide.sandboxId}`);
      assert.deepEqual(session.json.display, { width: 1280, height: 800 });
      // Our computer tool clicks in the new screen's corner, where the SDK then finds the pointer.
      const click = await api('POST', `/v1/sessions/${wide.sandboxId}/tools/computer`, { action: 'mouse_move', coordinate: [1270, 790] });
      assert.equal(click.status, 200, JSON.stringify(click.json));
      assert.deepEqual(await wide.getCursorPosition(), { x: 1270, y: 790 });
    } finally {
      await wide.kill();
    }
  });

  it('kill ends the session', async () => {
    const id = desktop.sandboxId;
    await desktop.kill();
    const session = await api('GET', `/v1/sessions/${id}`);
    assert.ok(session.status === 404 || ['destroyed', 'destroying'].includes(String(session.json.state)), JSON.stringify(session.json));
  });
});

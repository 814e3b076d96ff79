/**
 * The desktop's Chromium over CDP (issue 24), on a real `desktop` session behind `sbx serve`:
 * POST /v1/sessions/:id/browser answers a cdpUrl that Playwright's connectOverCDP takes as it
 * is; a page served inside the guest is filled in through it, and the computer tool's next
 * screenshot shows the filled form where the text went. A second call answers the same
 * browser, DELETE closes it, the next call starts it again.
 * Needs a desktop image with Chromium (SBX_IMAGES_DIR pointing at one built from this recipe).
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chromium } from 'playwright-core';
import { openKeyStore } from '../src/api/auth/key-store-file.js';
import { ResourceNames } from '../src/network/names.js';
import type { GuestTransport } from '../src/transport/index.js';
import { decodePng, type Rgba } from './helpers/browser.js';
import { colourAt, probe } from './helpers/video.js';
import { connectToGuest, guestAddress, guestSh } from './helpers/guest.js';
import { startGuestWebServer } from './helpers/guest-web.js';
import { TEST_PREFIX } from './helpers/orchestrator.js';
import { startServe, type ServeProcess } from './helpers/serve.js';

const NAMES = new ResourceNames(TEST_PREFIX);
type Json = Record<string, unknown>;

/** A page that fills the browser's viewport with one colour, for the recording to show. */
const MAGENTA = `<!doctype html><title>magenta</title><body style="margin:0;background:#ff00ff;height:100vh"></body>`;

const FORM = `<!doctype html><title>form</title><body style="margin:40px;background:#fff">
<form><input id="name" style="font:48px monospace;width:700px;height:80px;border:2px solid #000;background:#fff;color:#000"></form></body>`;

/** The screen's pixels that differ between two screenshots, as a bounding box and a count. */
function changedBox(a: Rgba, b: Rgba): { count: number; x0: number; y0: number; x1: number; y1: number } {
  let count = 0;
  let x0 = Infinity;
  let y0 = Infinity;
  let x1 = -1;
  let y1 = -1;
  for (let y = 0; y < a.height; y++) {
    for (let x = 0; x < a.width; x++) {
      const i = (y * a.width + x) * 4;
      if (Math.abs(a.pixels[i]! - b.pixels[i]!) + Math.abs(a.pixels[i + 1]! - b.pixels[i + 1]!) + Math.abs(a.pixels[i + 2]! - b.pixels[i + 2]!) < 48) continue;
      count++;
      x0 = Math.min(x0, x);
      y0 = Math.min(y0, y);
      x1 = Math.max(x1, x);
      y1 = Math.max(y1, y);
    }
  }
  return { count, x0, y0, x1, y1 };
}

describe("the desktop's Chromium over CDP", { timeout: 600_000 }, () => {
  let stateDir = '';
  let serve: ServeProcess;
  let key = '';
  let id = '';
  let guest: GuestTransport;

  const api = async (method: string, route: string, body?: unknown): Promise<{ status: number; json: Json }> => {
    const headers: Record<string, string> = { authorization: `Bearer ${key}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(`${serve.url}${route}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    return { status: res.status, json: text ? (JSON.parse(text) as Json) : {} };
  };
  const screenshot = async (): Promise<Rgba> => {
    const shot = await api('POST', `/v1/sessions/${id}/tools/computer`, { action: 'screenshot' });
    assert.equal(shot.status, 200, JSON.stringify(shot.json).slice(0, 300));
    const image = (shot.json.content as Array<{ type: string; source?: { data: string } }>).find((c) => c.type === 'image');
    return decodePng(Buffer.from(image!.source!.data, 'base64'));
  };

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-browser-'));
    const store = openKeyStore(stateDir);
    key = store.keys.create('tenant-a').key;
    store.close();
    serve = await startServe(stateDir, 19_600 + Math.floor(Math.random() * 300), undefined, [], {
      SBX_TEMPLATE: 'desktop',
      SBX_TENANT_REQUEST_LIMITS: 'tenant-a=1000/100000/100000',
    });
    const created = await api('POST', '/v1/sessions', { width: 1024, height: 768 });
    assert.equal(created.status, 201, JSON.stringify(created.json));
    id = created.json.id as string;
    guest = await connectToGuest(stateDir, id, await guestAddress(NAMES, id));
    await startGuestWebServer(guest, 8000, '/tmp/site', { 'form.html': FORM, 'magenta.html': MAGENTA });
  });

  after(async () => {
    guest?.close();
    if (serve && serve.child.exitCode === null) {
      serve.child.kill('SIGTERM');
      await once(serve.child, 'exit');
    }
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it('connectOverCDP(cdpUrl) fills a form served in the guest, and the next screenshot shows it there', async () => {
    const started = Date.now();
    const made = await api('POST', `/v1/sessions/${id}/browser`, {});
    assert.equal(made.status, 200, JSON.stringify(made.json));
    const startMs = Date.now() - started;
    const cdpUrl = made.json.cdpUrl as string;
    assert.match(cdpUrl, new RegExp(`^ws://127\\.0\\.0\\.1:\\d+/v1/sessions/${id}/ports/9222/devtools/browser/[0-9a-f-]+\\?sbx_token=prt_`));
    assert.equal(made.json.started, true);
    // DevTools listen on the guest's loopback only.
    const listening = (await guestSh(guest, 'cat /proc/net/tcp')).text;
    assert.match(listening, /0100007F:2406 0{8}:0000 0A/, 'DevTools on 127.0.0.1:9222');
    assert.doesNotMatch(listening, /00000000:2406 0{8}:0000 0A/, 'not on every address');
    const browser = await chromium.connectOverCDP(cdpUrl);
    try {
      const context = browser.contexts()[0]!;
      const page = context.pages()[0] ?? (await context.newPage());
      await page.goto('http://127.0.0.1:8000/form.html');
      await page.bringToFront();
      await page.waitForTimeout(500);
      const before = await screenshot();
      await page.fill('#name', 'FILLED BY PLAYWRIGHT');
      await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur());
      // Where the input is on the screen: the window's place plus the browser's own bars.
      const box = await page.evaluate(() => {
        const r = document.getElementById('name')!.getBoundingClientRect();
        const chromeTop = window.outerHeight - window.innerHeight;
        return { x0: window.screenX + r.left, y0: window.screenY + chromeTop + r.top, x1: window.screenX + r.right, y1: window.screenY + chromeTop + r.bottom };
      });
      // The screen once it settles: a transient the fill brings (a suggestion popup under the
      // input, going with the blur) is not the typed text.
      await page.waitForTimeout(300);
      let after = await screenshot();
      for (let i = 0; i < 15; i++) {
        await page.waitForTimeout(200);
        const next = await screenshot();
        if (changedBox(after, next).count === 0) break;
        after = next;
      }
      const changed = changedBox(before, after);
      console.log(
        `browser: started in ${startMs} ms; ${changed.count} pixels changed in [${changed.x0},${changed.y0}]-[${changed.x1},${changed.y1}], the input at [${box.x0},${box.y0}]-[${box.x1},${box.y1}]`,
      );
      assert.ok(changed.count > 500, `the typed text shows on the screen (${changed.count} pixels changed)`);
      const slack = 12;
      assert.ok(
        changed.x0 >= box.x0 - slack && changed.x1 <= box.x1 + slack && changed.y0 >= box.y0 - slack && changed.y1 <= box.y1 + slack,
        'only where the text was typed',
      );
    } finally {
      await browser.close().catch(() => undefined);
    }
  });

  it('the recording shows the browser: a page Playwright opens is in the video, where the window is on the screen', async () => {
    const started = await api('POST', `/v1/sessions/${id}/recording/start`);
    assert.equal(started.status, 200, JSON.stringify(started.json));
    const made = await api('POST', `/v1/sessions/${id}/browser`, {});
    assert.equal(made.status, 200, JSON.stringify(made.json));
    const browser = await chromium.connectOverCDP(made.json.cdpUrl as string);
    let centre: { x: number; y: number };
    try {
      const context = browser.contexts()[0]!;
      const page = context.pages()[0] ?? (await context.newPage());
      await page.goto('http://127.0.0.1:8000/magenta.html');
      await page.bringToFront();
      // The middle of the page's viewport, in screen pixels.
      centre = await page.evaluate(() => ({
        x: Math.round(window.screenX + window.innerWidth / 2),
        y: Math.round(window.screenY + window.outerHeight - window.innerHeight / 2),
      }));
      await page.waitForTimeout(1500);
    } finally {
      await browser.close().catch(() => undefined);
    }
    const stopped = await api('POST', `/v1/sessions/${id}/recording/stop`);
    assert.equal(stopped.status, 200, JSON.stringify(stopped.json));
    const video = await fetch(`${serve.url}/v1/sessions/${id}/recording`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(video.status, 200);
    const file = path.join(stateDir, 'browser.mp4');
    await writeFile(file, Buffer.from(await video.arrayBuffer()));
    const { seconds } = await probe(file);
    const [r, g, b] = await colourAt(file, Math.max(0, seconds - 0.4), centre.x - 50, centre.y - 50);
    console.log(`recording: ${seconds.toFixed(1)} s; at the viewport's centre (${centre.x}, ${centre.y}) near the end: rgb(${r}, ${g}, ${b})`);
    assert.ok(r > 200 && g < 60 && b > 200, `the browser's magenta page is in the video's last frames (rgb ${r}, ${g}, ${b})`);
  });

  it('a second call answers the same browser; DELETE closes it; the next call starts it again', async () => {
    const first = await api('POST', `/v1/sessions/${id}/browser`, {});
    const second = await api('POST', `/v1/sessions/${id}/browser`, {});
    assert.equal(second.json.started, false);
    const pathOf = (url: unknown) => new URL(String(url)).pathname;
    assert.equal(pathOf(second.json.cdpUrl), pathOf(first.json.cdpUrl), 'the same browser');
    assert.equal((await guestSh(guest, 'pgrep -c -x chromium || true')).text.trim() !== '0', true);
    assert.equal((await api('DELETE', `/v1/sessions/${id}/browser`)).status, 204);
    assert.equal((await guestSh(guest, 'pgrep -x chromium >/dev/null && echo running || echo gone')).text.trim(), 'gone');
    const again = await api('POST', `/v1/sessions/${id}/browser`, {});
    assert.equal(again.json.started, true);
    assert.notEqual(pathOf(again.json.cdpUrl), pathOf(first.json.cdpUrl), 'a new browser');
    const browser = await chromium.connectOverCDP(again.json.cdpUrl as string);
    const samples: number[] = [];
    const page = browser.contexts()[0]!.pages()[0] ?? (await browser.contexts()[0]!.newPage());
    for (let i = 0; i < 50; i++) {
      const t0 = process.hrtime.bigint();
      await page.evaluate('1');
      samples.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    samples.sort((a, b) => a - b);
    console.log(`browser: page.evaluate('1') through the orchestrator p50 ${samples[25]!.toFixed(2)} ms`);
    await browser.close();
  });

  it('red team: something else on the DevTools port answering garbage is a 502 after the start timeout; the session goes on, and the browser starts once the port is free', async () => {
    assert.equal((await api('DELETE', `/v1/sessions/${id}/browser`)).status, 204);
    await guestSh(guest, 'mkdir -p /tmp/garbage/json && printf \'{"webSocketDebuggerUrl": "ws://elsewhere.example/x"}\' > /tmp/garbage/json/version');
    await startGuestWebServer(guest, 9222, '/tmp/garbage');
    const rssBefore = (await import('./helpers/raw-http.js')).memoryOf(serve.child.pid!);
    const started = Date.now();
    const refused = await api('POST', `/v1/sessions/${id}/browser`, {});
    const tookMs = Date.now() - started;
    assert.equal(refused.status, 502, JSON.stringify(refused.json));
    assert.match(JSON.stringify(refused.json), /browser_start_failed/);
    assert.ok(tookMs < 45_000, `answered after ${tookMs} ms`);
    assert.equal((await guestSh(guest, 'pgrep -x chromium >/dev/null && echo running || echo gone')).text.trim(), 'gone', 'the Chromium it started was closed');
    const shot = await api('POST', `/v1/sessions/${id}/tools/computer`, { action: 'screenshot' });
    assert.equal(shot.status, 200, 'the session still works');
    const rssAfter = await (await import('./helpers/raw-http.js')).memoryOf(serve.child.pid!);
    console.log(`browser red team: garbage on 9222 answered 502 after ${tookMs} ms; orchestrator RSS ${(await rssBefore).rssMiB} -> ${rssAfter.rssMiB} MiB`);
    await guestSh(guest, 'pkill -f "guest-web.py 9222"; true');
    const again = await api('POST', `/v1/sessions/${id}/browser`, {});
    assert.equal(again.status, 200, JSON.stringify(again.json));
    assert.equal(again.json.started, true);
  });
});

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { pino } from 'pino';
import type { Browser } from 'playwright-core';
import sharp from 'sharp';
import { LinkTokens } from '../src/api/links/link-tokens.js';
import { DEFAULT_TRAJECTORY_SETTINGS } from '../src/sessions/trajectory/settings.js';
import { SandboxClient } from '../src/client/index.js';
import { decodePng, findColour, launchBrowser } from './helpers/browser.js';
import { runCli } from './helpers/serve.js';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

const MiB = 1024 * 1024;
const CAPS = { maxSessionBytes: 1 * MiB, maxSteps: 150 };
const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
const CLICK = { x: 200, y: 150 };
const SECRET = 'hunter2-not-for-the-log';
/** The marker's colour in the page (viewer-style.ts / viewer-script.ts). */
const MAGENTA: [number, number, number] = [255, 0, 255];

interface Step {
  n: number;
  tool: string;
  action: string | null;
  input: Record<string, unknown>;
  output: string | null;
  error: { code: string; message: string } | null;
  startedMs: number;
  durationMs: number;
  settleMs: number | null;
  screenshots: { before: string | null; after: string | null };
}

/**
 * The trajectory on a real sandbox: a session that clicks, types and runs bash is stored step
 * by step, as JSON and JSONL, kept after destroy and pruned by age; the page renders in a real
 * Chromium with the click marker on the pixel clicked, opened through a link token that other
 * tokens cannot stand in for.
 */
describe('trajectory', () => {
  let orch: TestOrchestrator;
  let keyA: string;
  let keyB: string;
  let id: string;
  let optedIn: string;
  let browser: Browser;
  let base: string;
  let logText = '';

  const inject = (method: 'GET' | 'POST' | 'DELETE', url: string, key: string, payload?: unknown, headers: Record<string, string> = {}) =>
    orch.server.inject({
      method,
      url,
      headers: { ...bearer(key), ...headers },
      ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }),
    });
  const computer = (session: string, input: Record<string, unknown>) => inject('POST', `/v1/sessions/${session}/tools/computer`, keyA, input);

  before(async () => {
    const sink = new Writable({ write: (chunk: Buffer, _enc, done) => ((logText += chunk.toString()), done()) });
    // Small caps for the red-team flood at the end; the other tests stay far below them.
    orch = await startTestOrchestrator({ trajectory: { ...DEFAULT_TRAJECTORY_SETTINGS, ...CAPS } }, true, undefined, pino({ level: 'info' }, sink));
    keyA = orch.keys.create('tenant-a').key;
    keyB = orch.keys.create('tenant-b').key;
    const address = orch.server.server.address();
    assert.ok(address && typeof address === 'object');
    base = `http://127.0.0.1:${address.port}`;
    const [plain, opted] = await Promise.all([
      inject('POST', '/v1/sessions', keyA, {}),
      inject('POST', '/v1/sessions', keyA, { trajectory: { keepTypedText: true } }),
    ]);
    assert.equal(plain.statusCode, 201, plain.body);
    assert.equal(opted.statusCode, 201, opted.body);
    id = plain.json().id;
    optedIn = opted.json().id;
    browser = await launchBrowser();
  });

  after(async () => {
    await browser?.close();
    await orch?.stop();
  });

  it('lists every call in order, with timings, results and screenshots; typed text as its length', async () => {
    assert.equal((await computer(id, { action: 'screenshot' })).statusCode, 200);
    assert.equal((await computer(id, { action: 'left_click', coordinate: [CLICK.x, CLICK.y] })).statusCode, 200);
    assert.equal((await computer(id, { action: 'type', text: SECRET })).statusCode, 200);
    assert.equal((await computer(id, { action: 'key', text: 'Return' })).statusCode, 200);
    const bash = await inject('POST', `/v1/sessions/${id}/tools/bash`, keyA, { command: 'echo trajectory-$((6*7))' });
    assert.equal(bash.statusCode, 200, bash.body);
    const refused = await computer(id, { action: 'left_click', coordinate: [99999, 5] });
    assert.equal(refused.json().is_error, true);
    assert.equal((await inject('POST', `/v1/sessions/${id}/actions`, keyA, { action: 'mouse_move', coordinate: [10, 10] })).statusCode, 200);

    const res = await inject('GET', `/v1/sessions/${id}/trajectory`, keyA);
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json<{ state: string; totals: Record<string, number>; videoUrl: null; steps: Step[] }>();
    assert.equal(body.state, 'ready');
    assert.equal(body.videoUrl, null);
    const steps = body.steps;
    assert.deepEqual(
      steps.map((s) => [s.n, s.tool, s.action]),
      [
        [1, 'computer', 'screenshot'],
        [2, 'computer', 'left_click'],
        [3, 'computer', 'type'],
        [4, 'computer', 'key'],
        [5, 'bash', 'command'],
        [6, 'computer', 'left_click'],
        [7, 'actions', 'mouse_move'],
      ],
    );
    assert.equal(body.totals.steps, 7);
    assert.equal(body.totals.errors, 1);
    for (let k = 1; k < steps.length; k++) assert.ok(steps[k]!.startedMs >= steps[k - 1]!.startedMs, 'in the order they ran');
    for (const s of steps) assert.ok(s.durationMs > 0 && s.startedMs > 0, `step ${s.n} has timings`);
    const [shot, click, typed, key, run, bad] = steps as [Step, Step, Step, Step, Step, Step];
    assert.deepEqual(click.input, { action: 'left_click', coordinate: [CLICK.x, CLICK.y] });
    assert.equal(typeof click.settleMs, 'number');
    assert.equal(shot.screenshots.before, null);
    assert.match(click.screenshots.before ?? '', /\/steps\/2\/screenshot\?when=before$/);
    assert.match(click.screenshots.after ?? '', /\/steps\/2\/screenshot\?when=after$/);
    assert.deepEqual(typed.input, { action: 'type', textLength: SECRET.length }, 'typed text is a length by default');
    assert.deepEqual(key.input, { action: 'key', textLength: 'Return'.length });
    assert.equal(run.output, 'trajectory-42');
    assert.equal(bad.error?.code, 'invalid_request');
    assert.match(bad.error?.message ?? '', /coordinate/);
    assert.ok(!res.body.includes(SECRET), 'the typed secret is nowhere in the trajectory');
    // In pages: ?from and ?limit, and `next` while there are more.
    const page = (await inject('GET', `/v1/sessions/${id}/trajectory?from=3&limit=3`, keyA)).json<{ steps: Step[]; next: string }>();
    assert.deepEqual(
      page.steps.map((s) => s.n),
      [3, 4, 5],
    );
    assert.equal(page.next, `/v1/sessions/${id}/trajectory?from=6&limit=3`);
    const last = (await inject('GET', page.next, keyA)).json<{ steps: Step[]; next: string | null }>();
    assert.deepEqual([last.steps.map((s) => s.n), last.next], [[6, 7], null]);

    // The screenshot by URL: the frame the click returned, as the model saw it.
    const image = await inject('GET', click.screenshots.after!, keyA);
    assert.equal(image.statusCode, 200);
    assert.equal(image.headers['content-type'], 'image/png');
    const meta = await sharp(image.rawPayload).metadata();
    const view = (await inject('GET', `/v1/sessions/${id}`, keyA)).json();
    assert.deepEqual([meta.width, meta.height], [view.computerTool.display_width_px, view.computerTool.display_height_px]);
    // "before" of step 2 is step 1's frame, the same bytes.
    const beforeClick = await inject('GET', click.screenshots.before!, keyA);
    const first = await inject('GET', shot.screenshots.after!, keyA);
    assert.ok(beforeClick.rawPayload.equals(first.rawPayload));
    assert.equal((await inject('GET', `/v1/sessions/${id}/trajectory/steps/5/screenshot`, keyA)).statusCode, 404, 'bash returns no screenshot');
  });

  it('keeps typed text when the session opted in at create', async () => {
    assert.equal((await computer(optedIn, { action: 'type', text: 'shown-on-purpose' })).statusCode, 200);
    const steps = (await inject('GET', `/v1/sessions/${optedIn}/trajectory`, keyA)).json().steps as Step[];
    assert.deepEqual(steps[0]?.input, { action: 'type', text: 'shown-on-purpose' });
  });

  it('streams JSONL: a summary line, then one line per step', async () => {
    for (const request of [
      { url: `/v1/sessions/${id}/trajectory?format=jsonl`, headers: {} as Record<string, string> },
      { url: `/v1/sessions/${id}/trajectory`, headers: { accept: 'application/x-ndjson' } },
    ]) {
      const res = await inject('GET', request.url, keyA, undefined, request.headers);
      assert.equal(res.statusCode, 200);
      assert.match(String(res.headers['content-type']), /application\/x-ndjson/);
      const lines = res.body
        .trimEnd()
        .split('\n')
        .map((line) => JSON.parse(line) as { type: string; n?: number });
      assert.equal(lines[0]?.type, 'trajectory');
      assert.deepEqual(
        lines.slice(1).map((l) => [l.type, l.n]),
        [1, 2, 3, 4, 5, 6, 7].map((n) => ['step', n]),
      );
    }
    // Streamed for real over HTTP: chunked, read line by line.
    const res = await fetch(`${base}/v1/sessions/${id}/trajectory?format=jsonl`, { headers: bearer(keyA) });
    assert.equal(res.headers.get('transfer-encoding'), 'chunked');
    assert.equal((await res.text()).trimEnd().split('\n').length, 8);
  });

  it('the client and the CLI show it: sandbox.trajectory(), sandbox.trajectoryUrl(), sbx trajectory', async () => {
    const sdk = new SandboxClient({ baseUrl: base, apiKey: keyA });
    const sandbox = await sdk.connect(id);
    const trajectory = await sandbox.trajectory();
    assert.deepEqual(
      trajectory.steps.map((s) => s.n),
      [1, 2, 3, 4, 5, 6, 7],
    );
    const link = await sandbox.trajectoryUrl({ ttlSeconds: 60 });
    assert.ok(link.startsWith(`${base}/v1/sessions/${id}/trajectory/view?token=lnk_`));
    const page = await fetch(link);
    assert.equal(page.status, 200);
    assert.match(String(page.headers.get('content-security-policy')), /default-src 'none'/);
    assert.equal(page.headers.get('referrer-policy'), 'no-referrer');

    const cli = await runCli(['--api-key', keyA, 'trajectory', id], base);
    assert.equal(cli.code, 0, cli.stderr);
    const lines = cli.stdout.trimEnd().split('\n');
    assert.match(lines[0]!, new RegExp(`^session ${id} \\(ready\\).*: 7 steps, 1 error`));
    assert.match(cli.stdout, /#2 +\+\d+\.\d\d s +computer +left_click \(200, 150\)/);
    assert.match(cli.stdout, /type \(23 characters\)/);
    assert.match(cli.stdout, /→ trajectory-42/);
    assert.match(cli.stdout, /✗ invalid_request: /);
    assert.ok(!cli.stdout.includes(SECRET));
    const json = await runCli(['--api-key', keyA, 'trajectory', id, '--json'], base);
    assert.equal(JSON.parse(json.stdout).steps.length, 7);

    const openapi = (await orch.server.inject({ method: 'GET', url: '/openapi.json' })).json<{ paths: Record<string, Record<string, unknown>> }>();
    for (const route of [
      '/v1/sessions/{id}/trajectory',
      '/v1/sessions/{id}/trajectory/view',
      '/v1/sessions/{id}/trajectory/steps/{n}/screenshot',
      '/v1/sessions/{id}/links',
    ]) {
      assert.ok(openapi.paths[route], `${route} is in the OpenAPI document`);
    }
    assert.ok(openapi.paths['/v1/sessions/{id}/links/{linkId}']?.delete);
  });

  it("is the session's tenant's only: another tenant gets 404, as for a session that does not exist", async () => {
    for (const url of [`/v1/sessions/${id}/trajectory`, `/v1/sessions/${id}/trajectory/steps/2/screenshot`, `/v1/sessions/${id}/trajectory/view`]) {
      const res = await inject('GET', url, keyB);
      assert.equal(res.statusCode, 404, url);
      assert.equal(res.json().error.code, 'not_found');
    }
    assert.equal((await inject('POST', `/v1/sessions/${id}/links`, keyB, { purpose: 'trajectory' })).statusCode, 404);
  });

  it('renders in Chromium through a link token, the click marker on the pixel clicked, and steps with the arrow keys', async () => {
    const link = await inject('POST', `/v1/sessions/${id}/links`, keyA, { purpose: 'trajectory', ttlSeconds: 600 });
    assert.equal(link.statusCode, 201, link.body);
    const { url, path: linkPath } = link.json<{ url: string; path: string }>();
    assert.match(linkPath, new RegExp(`^/v1/sessions/${id}/trajectory/view\\?token=lnk_`));
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    try {
      // Through inject, the link's url names inject's Host; a browser asks our real address.
      assert.match(url, /^http:\/\/localhost(:\d+)?\/v1\//);
      const response = await page.goto(`${base}${linkPath}#step-2`);
      assert.equal(response?.status(), 200);
      await page.waitForFunction(() => (document.getElementById('screenshot') as HTMLImageElement | null)?.dataset.loaded === '2before');
      assert.match((await page.textContent('#step-title')) ?? '', /left click at \(200, 150\)/);
      assert.match((await page.textContent('#totals')) ?? '', /Steps\s*7/);
      const box = await page.locator('#screenshot').boundingBox();
      const natural = await page.$eval('#screenshot', (img) => [(img as HTMLImageElement).naturalWidth, (img as HTMLImageElement).naturalHeight]);
      assert.ok(box);
      const expected = { x: box.x + (CLICK.x * box.width) / natural[0]!, y: box.y + (CLICK.y * box.height) / natural[1]! };
      // SBX_TEST_SCREENSHOT_DIR=dir keeps the page's screenshot, to look at it.
      const keep = process.env.SBX_TEST_SCREENSHOT_DIR;
      const shot = await page.screenshot(keep ? { path: path.join(keep, 'trajectory-page.png') } : {});
      const pixels = await decodePng(shot);
      const marker = findColour(pixels, MAGENTA, { ...expected, radius: 30 });
      assert.ok(marker.count > 30, `the marker is drawn near (${expected.x.toFixed(0)}, ${expected.y.toFixed(0)})`);
      assert.ok(
        Math.abs(marker.x - expected.x) <= 2 && Math.abs(marker.y - expected.y) <= 2,
        `marker centred at ${marker.x},${marker.y}, expected ${expected.x},${expected.y}`,
      );
      // Nothing magenta elsewhere on the screenshot: the marker is only where the click was.
      const elsewhere = findColour(pixels, MAGENTA, { x: box.x + box.width / 2, y: box.y + box.height / 2, radius: Math.min(box.width, box.height) / 2 - 1 });
      assert.equal(elsewhere.count, marker.count);

      await page.keyboard.press('ArrowRight');
      assert.match((await page.textContent('#step-title')) ?? '', /#3 · type 23 characters/);
      await page.keyboard.press('ArrowLeft');
      await page.keyboard.press('ArrowLeft');
      assert.match((await page.textContent('#position')) ?? '', /^1 \/ 7$/);
      // A failed step shows its error; a bash step its output.
      await page.click('#step-list li:nth-child(6)');
      assert.match((await page.textContent('#error')) ?? '', /^invalid_request: coordinate/);
      if (keep) await page.screenshot({ path: path.join(keep, 'trajectory-page-error.png') });
      await page.evaluate(() => (location.hash = '#step-5'));
      await page.waitForFunction(() => document.getElementById('output')?.textContent === 'trajectory-42');
      if (keep) await page.screenshot({ path: path.join(keep, 'trajectory-page-bash.png') });
    } finally {
      await page.close();
    }
    assert.ok(!logText.includes(url.split('token=')[1]!), 'the link token is never logged');
    assert.match(logText, /trajectory\/view/, 'the page request was logged (by its route)');
  });

  it("refuses an expired, a revoked, a made-up and another session's token", async () => {
    const db = new Database(path.join(orch.stateDir, 'orchestrator.db'));
    const expired = new LinkTokens(db).create('tenant-a', id, 'trajectory', 10, new Date(Date.now() - 60_000)).token;
    db.close();
    const revokedLink = (await inject('POST', `/v1/sessions/${id}/links`, keyA, { purpose: 'trajectory' })).json<{ id: string; path: string }>();
    assert.equal((await inject('DELETE', `/v1/sessions/${id}/links/${revokedLink.id}`, keyA)).statusCode, 204);
    const other = (await inject('POST', `/v1/sessions/${optedIn}/links`, keyA, { purpose: 'trajectory' })).json<{ path: string }>();
    const otherToken = other.path.split('token=')[1]!;
    const page = await browser.newPage();
    try {
      const cases: Array<[string, string]> = [
        [`/v1/sessions/${id}/trajectory/view?token=${expired}`, 'expired_link_token'],
        [revokedLink.path, 'revoked_link_token'],
        [`/v1/sessions/${id}/trajectory/view?token=lnk_aaaaaaaaaaaa_${'A'.repeat(43)}`, 'invalid_link_token'],
        [`/v1/sessions/${id}/trajectory/view?token=${otherToken}`, 'invalid_link_token'],
        [`/v1/sessions/${id}/trajectory/steps/2/screenshot?token=${otherToken}`, 'invalid_link_token'],
      ];
      for (const [url, code] of cases) {
        const response = await page.goto(`${base}${url}`);
        assert.equal(response?.status(), 401, url);
        assert.equal((await response?.json())?.error.code, code, url);
      }
      // A link token opens its pages only: not the session's other routes.
      const direct = await fetch(`${base}/v1/sessions/${optedIn}?token=${otherToken}`);
      assert.equal(direct.status, 401);
    } finally {
      await page.close();
    }
  });

  it('draws a drag as a path from its start to its end', async () => {
    const drag = await computer(optedIn, { action: 'left_click_drag', start_coordinate: [100, 400], coordinate: [600, 400] });
    assert.equal(drag.statusCode, 200, drag.body);
    const { path: linkPath } = (await inject('POST', `/v1/sessions/${optedIn}/links`, keyA, { purpose: 'trajectory' })).json<{ path: string }>();
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    try {
      const steps = (await inject('GET', `/v1/sessions/${optedIn}/trajectory`, keyA)).json().steps as Step[];
      const n = steps.find((s) => s.action === 'left_click_drag')!.n;
      await page.goto(`${base}${linkPath}#step-${n}`);
      await page.waitForFunction(
        (want) => (document.getElementById('screenshot') as HTMLImageElement | null)?.dataset.loaded === want,
        `${n}${n > 1 ? 'before' : 'after'}`,
      );
      const box = (await page.locator('#screenshot').boundingBox())!;
      const natural = await page.$eval('#screenshot', (img) => (img as HTMLImageElement).naturalWidth);
      const at = (x: number) => ({ x: box.x + (x * box.width) / natural, y: box.y + (400 * box.width) / natural, radius: 20 });
      const keep = process.env.SBX_TEST_SCREENSHOT_DIR;
      const pixels = await decodePng(await page.screenshot(keep ? { path: path.join(keep, 'trajectory-page-drag.png') } : {}));
      for (const x of [100, 350, 600]) {
        const found = findColour(pixels, MAGENTA, at(x));
        assert.ok(found.count > 5, `the path is drawn at x=${x}`);
        assert.ok(Math.abs(found.y - at(x).y) <= 2);
      }
      assert.equal(findColour(pixels, MAGENTA, { ...at(350), y: at(350).y + 60 }).count, 0, 'and nowhere else');
    } finally {
      await page.close();
    }
  });

  it('is kept after the session is destroyed, then pruned by its retention', async () => {
    const destroyed = await inject('DELETE', `/v1/sessions/${id}`, keyA);
    assert.equal(destroyed.statusCode, 200, destroyed.body);
    const res = await inject('GET', `/v1/sessions/${id}/trajectory`, keyA);
    assert.equal(res.statusCode, 200);
    assert.equal(res.json().state, 'destroyed');
    assert.equal(res.json().steps.length, 7);
    assert.equal((await inject('GET', `/v1/sessions/${id}/trajectory/steps/2/screenshot`, keyA)).statusCode, 200);
    const dir = path.join(orch.stateDir, 'trajectories', id);
    assert.ok(existsSync(dir));

    const deleted = await orch.trajectory.prune(Date.now() + orch.config.trajectory.retentionSeconds * 1000 + 1000);
    assert.equal(deleted, 1, "only the ended session's trajectory: the live one is kept");
    assert.equal(existsSync(dir), false, 'its screenshots are gone');
    assert.equal((await inject('GET', `/v1/sessions/${id}/trajectory`, keyA)).statusCode, 404);
    assert.equal((await inject('GET', `/v1/sessions/${optedIn}/trajectory`, keyA)).statusCode, 200);
  });

  it('red team: a model that floods calls with large inputs fills its own budget and no more, at little cost to the host', async () => {
    const dir = path.join(orch.stateDir, 'trajectories', optedIn);
    // A screen of noise (static): its screenshots are large against the rows, so the budget is
    // filled by images and the next one is dropped. An idle screen's PNG is a few KiB, and the
    // rows alone could fill the budget to within less than one row, leaving no image to drop.
    const noise = "xterm -geometry 200x60+0+0 -e sh -c 'head -c 12000 /dev/urandom | base64 -w 190; exec sleep 600' >/dev/null 2>&1 &";
    assert.equal((await inject('POST', `/v1/sessions/${optedIn}/tools/bash`, keyA, { command: noise })).statusCode, 200);
    for (let i = 0; i < 100 && (await inject('GET', `/v1/sessions/${optedIn}/screenshot`, keyA)).rawPayload.length < 64 * 1024; i++) {
      await new Promise((r) => setTimeout(r, 100));
    }
    const rssBefore = process.memoryUsage().rss;
    const latencies: number[] = [];
    let flooding = true;
    // Another tenant's request meanwhile, timed.
    const probe = (async () => {
      while (flooding) {
        const t0 = performance.now();
        assert.equal((await inject('GET', '/v1/sessions', keyB)).statusCode, 200);
        latencies.push(performance.now() - t0);
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    const calls = 200;
    const big = 'y'.repeat(900 * 1024); // near the body limit: stored cut to 8 KiB
    let next = 0;
    const worker = async () => {
      while (next < calls) {
        const k = next++;
        const res =
          k % 4 === 0
            ? await inject('POST', `/v1/sessions/${optedIn}/tools/str_replace_based_edit_tool`, keyA, { command: 'create', path: `/tmp/f${k}`, file_text: big })
            : await computer(optedIn, { action: 'screenshot' });
        assert.equal(res.statusCode, 200);
      }
    };
    const started = performance.now();
    await Promise.all([worker(), worker(), worker()]);
    const seconds = (performance.now() - started) / 1000;
    flooding = false;
    await probe;
    const rssAfter = process.memoryUsage().rss;

    const row = orch.trajectory.get(optedIn)!;
    const onDisk = (await readdir(dir)).length
      ? (await Promise.all((await readdir(dir)).map((f) => stat(path.join(dir, f))))).reduce((sum, st) => sum + st.size, 0)
      : 0;
    assert.ok(row.bytes <= CAPS.maxSessionBytes, `${row.bytes} bytes counted`);
    assert.ok(onDisk <= CAPS.maxSessionBytes, `${onDisk} bytes on disk`);
    assert.equal(row.steps + row.droppedSteps, calls + 3, 'every call is counted, the bash call of the noise too');
    assert.ok(row.steps <= CAPS.maxSteps);
    assert.ok(row.droppedImages > 0, 'screenshots past the budget were dropped');
    const steps = (await inject('GET', `/v1/sessions/${optedIn}/trajectory`, keyA)).json().steps as Step[];
    const created = steps.find((s) => s.action === 'create')!;
    assert.ok(String(created.input.file_text).length < 9 * 1024, 'a large input is stored cut');
    latencies.sort((a, b) => a - b);
    const p50 = latencies[Math.floor(latencies.length / 2)]!;
    const max = latencies[latencies.length - 1]!;
    const metrics = (await orch.server.inject({ method: 'GET', url: '/metrics', remoteAddress: '127.0.0.1' })).body;
    assert.match(metrics, /sandbox_trajectory_steps_total\{outcome="dropped"\} [1-9]/);
    assert.match(metrics, /sandbox_trajectory_steps_total\{outcome="screenshot_dropped"\} [1-9]/);
    assert.match(metrics, /sandbox_trajectory_bytes [1-9]/);
    console.log(
      `trajectory flood: ${calls} calls in ${seconds.toFixed(1)} s; stored ${row.steps} steps, ${row.droppedSteps} counted only, ` +
        `${row.droppedImages} screenshots dropped; ${(row.bytes / 1024).toFixed(0)} KiB counted, ${(onDisk / 1024).toFixed(0)} KiB of files; ` +
        `orchestrator RSS ${(rssBefore / MiB).toFixed(0)} -> ${(rssAfter / MiB).toFixed(0)} MiB; ` +
        `another tenant's GET /v1/sessions meanwhile: p50 ${p50.toFixed(1)} ms, max ${max.toFixed(1)} ms over ${latencies.length}`,
    );
  });
});

/**
 * Without keys (local development) the page needs no token, and the browser rules of every
 * keyless request apply to it, token or not: a page elsewhere cannot open it (DNS rebinding,
 * cross-site navigation).
 */
describe('trajectory page without API keys', () => {
  let orch: TestOrchestrator;
  before(async () => {
    orch = await startTestOrchestrator();
  });
  after(async () => {
    await orch?.stop();
  });

  it('follows the browser rules of keyless requests', async () => {
    const url = '/v1/sessions/abcdefghij/trajectory/view';
    const get = (headers: Record<string, string>, query = '') => orch.server.inject({ method: 'GET', url: url + query, headers });
    // A same-origin or typed-in request reaches the route (no such trajectory here: 404).
    assert.equal((await get({ host: '127.0.0.1:8080', 'sec-fetch-site': 'none' })).statusCode, 404);
    assert.equal((await get({ host: 'localhost:8080', 'sec-fetch-site': 'same-origin' })).statusCode, 404);
    const crossSite = await get({ host: '127.0.0.1:8080', 'sec-fetch-site': 'cross-site' });
    assert.equal(crossSite.statusCode, 403);
    assert.equal(crossSite.json().error.code, 'cross_origin_request');
    assert.equal((await get({ host: 'evil.example' })).json().error.code, 'invalid_host');
    const withToken = await get({ host: 'evil.example' }, `?token=lnk_aaaaaaaaaaaa_${'A'.repeat(43)}`);
    assert.equal(withToken.statusCode, 403, 'a token does not lift the browser rules');
  });
});

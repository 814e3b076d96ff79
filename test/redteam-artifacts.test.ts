import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import type { Browser } from 'playwright-core';
import sharp from 'sharp';
import { SESSION_ID_PATTERN } from '../src/network/names.js';
import { recordingFiles } from '../src/recording/retention.js';
import { DEFAULT_RECORDING_SUBDIR } from '../src/recording/settings.js';
import { launchBrowser } from './helpers/browser.js';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
/** Typed text in each place a vendor or a desktop action puts it: none may be stored. */
const SECRETS = { openai: 'openai-hunter2-typed', gemini: 'gemini-hunter2-typed', clipboard: 'clipboard-hunter2-put' };
/** An operator's folder in the state directory, of a session id's shape ([a-z0-9]{10}). */
const OPERATOR_DIR = 'op3rat0r42';

/** CPU time of this process's waited-for children (ffmpeg runs as one), in ms: /proc/self/stat's cutime + cstime. */
async function childCpuMs(): Promise<number> {
  const fields = (await readFile('/proc/self/stat', 'utf8')).split(') ')[1]!.split(' ');
  // After "pid (comm) ": state is field 3, so cutime (16) and cstime (17) are at 13 and 14; 100 ticks a second.
  return (Number(fields[13]) + Number(fields[14])) * 10;
}

interface Step {
  n: number;
  tool: string;
  action: string | null;
  input: Record<string, unknown>;
  output: string | null;
  error: { code: string } | null;
  screenshots: { before: string | null; after: string | null; frame: string | null };
}

/**
 * What is kept after a session (recording, subtitles, status, trajectory, its screenshots,
 * frames and page, links) on a real sandbox and a real orchestrator, across a real restart
 * whose start-up reconciliation prunes the session's row (aged by a day in the store, then
 * pruned by reconcile's own code): tenant B gets on every kept route exactly the 404 of a
 * session that never existed; tenant A still gets its files. Also on the way: vendor calls
 * and desktop actions in the trajectory with typed text masked, a recording's frame in the
 * page for a step without a screenshot (in Chromium), and an operator's folder of a session
 * id's shape surviving the restart.
 */
describe("red team: what is kept after a session is its tenant's by what it stores", () => {
  let stateDir: string;
  let orch: TestOrchestrator;
  let keyA: string;
  let keyB: string;
  let id: string;
  let linkToken: string;
  let linkId: string;
  let base: string;
  let browser: Browser | undefined;
  let videoOnDisk: Buffer;

  const inject = (method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, key: string | undefined, payload?: unknown) =>
    orch.server.inject({ method, url, headers: key ? bearer(key) : {}, ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }) });
  const start = async () => {
    orch = await startTestOrchestrator({ stateDir }, true);
    const address = orch.server.server.address();
    assert.ok(address && typeof address === 'object');
    base = `http://127.0.0.1:${address.port}`;
  };

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-kept-'));
    await start();
    keyA = orch.keys.create('tenant-a').key;
    keyB = orch.keys.create('tenant-b').key;
    const created = await inject('POST', '/v1/sessions', keyA, { record: true });
    assert.equal(created.statusCode, 201, created.body);
    id = created.json().id;
  });

  after(async () => {
    await browser?.close();
    await orch?.stop();
    await rm(stateDir, { recursive: true, force: true });
  });

  it('stores vendor calls and desktop actions as steps, typed text masked wherever it sits', async () => {
    assert.equal((await inject('POST', `/v1/sessions/${id}/tools/computer`, keyA, { action: 'screenshot' })).statusCode, 200);
    // No ?screenshot=true: a step with no screenshot of its own, taken while recording.
    assert.equal((await inject('POST', `/v1/sessions/${id}/actions`, keyA, { action: 'left_click', coordinate: [100, 100] })).statusCode, 200);
    const openai = await inject('POST', `/v1/sessions/${id}/tools/openai-computer`, keyA, {
      type: 'computer_call',
      call_id: 'c1',
      action: { type: 'type', text: SECRETS.openai },
    });
    assert.equal(openai.statusCode, 200, openai.body);
    const gemini = await inject('POST', `/v1/sessions/${id}/tools/gemini-computer`, keyA, {
      name: 'type_text_at',
      args: { x: 500, y: 500, text: SECRETS.gemini },
      id: 'g1',
    });
    assert.equal(gemini.statusCode, 200, gemini.body);
    assert.equal(gemini.json().response.error, undefined, gemini.body);
    assert.equal((await inject('PUT', `/v1/sessions/${id}/desktop/clipboard`, keyA, { text: SECRETS.clipboard })).statusCode, 200);
    const read = await inject('GET', `/v1/sessions/${id}/desktop/clipboard`, keyA);
    assert.equal(read.json().text, SECRETS.clipboard, read.body);
    assert.equal((await inject('GET', `/v1/sessions/${id}/desktop/screen`, keyA)).statusCode, 200);
    const refused = await inject('POST', `/v1/sessions/${id}/tools/openai-computer`, keyA, { action: { type: 'teleport' } });
    assert.equal(refused.statusCode, 400, refused.body);

    const res = await inject('GET', `/v1/sessions/${id}/trajectory`, keyA);
    assert.equal(res.statusCode, 200, res.body);
    const steps = res.json().steps as Step[];
    assert.deepEqual(
      steps.map((s) => [s.n, s.tool, s.action, s.error?.code ?? null]),
      [
        [1, 'computer', 'screenshot', null],
        [2, 'actions', 'left_click', null],
        [3, 'openai-computer', 'type', null],
        [4, 'gemini-computer', 'type_text_at', null],
        [5, 'desktop', 'set_clipboard', null],
        [6, 'desktop', 'clipboard', null],
        [7, 'desktop', 'screen', null],
        [8, 'openai-computer', 'teleport', 'invalid_request'],
      ],
    );
    assert.deepEqual(steps[2]!.input, { type: 'computer_call', call_id: 'c1', action: { type: 'type', textLength: SECRETS.openai.length } });
    assert.deepEqual(steps[3]!.input, { name: 'type_text_at', args: { x: 500, y: 500, textLength: SECRETS.gemini.length }, id: 'g1' });
    assert.deepEqual(steps[4]!.input, { action: 'set_clipboard', textLength: SECRETS.clipboard.length });
    assert.match(steps[5]!.output ?? '', /^\(21 characters, not stored\)$/);
    assert.match(steps[6]!.output ?? '', /"width":\d+/);
    // A vendor call's settled screen is its screenshot; a plain action without one has the recording's frame.
    assert.ok(steps[2]!.screenshots.after && steps[3]!.screenshots.after, 'vendor calls store their screenshot');
    assert.equal(steps[1]!.screenshots.after, null);
    assert.equal(steps[1]!.screenshots.frame, `/v1/sessions/${id}/trajectory/steps/2/frame`);
    assert.equal(steps[0]!.screenshots.frame, null, 'a step with its own screenshot needs no frame');
    // Nowhere: not in any answer, not in the database's files.
    const everything = JSON.stringify(steps) + (await inject('GET', `/v1/sessions/${id}/trajectory?format=jsonl`, keyA)).body;
    for (const secret of Object.values(SECRETS)) assert.ok(!everything.includes(secret), `${secret} is not in the trajectory`);
    for (const file of ['orchestrator.db', 'orchestrator.db-wal']) {
      const bytes = await readFile(path.join(stateDir, file)).catch(() => Buffer.alloc(0));
      for (const secret of Object.values(SECRETS)) assert.equal(bytes.indexOf(secret), -1, `${secret} is not in ${file}`);
    }
  });

  it("the page shows the recording's frame for a step taken without a screenshot (Chromium)", { timeout: 120_000 }, async (t) => {
    // Some video after the last step, then the recording ends: its frames are final.
    await sleep(2_500);
    const stopped = await inject('POST', `/v1/sessions/${id}/recording/stop`, keyA);
    assert.equal(stopped.json().state, 'finished', stopped.body);
    const link = await inject('POST', `/v1/sessions/${id}/links`, keyA, { purpose: 'trajectory', ttlSeconds: 3600 });
    assert.equal(link.statusCode, 201, link.body);
    linkId = link.json().id;
    linkToken = String(link.json().path).split('token=')[1]!;

    browser = await launchBrowser();
    const page = await browser.newPage();
    const frames: number[] = [];
    page.on('response', (r) => {
      if (r.url().includes('/frame')) frames.push(r.status());
    });
    const loaded = (what: string) =>
      page.waitForFunction((w) => (document.getElementById('screenshot') as HTMLImageElement).dataset.loaded === w, what, { timeout: 30_000 });
    const shown = () =>
      page.evaluate(() => {
        const img = document.getElementById('screenshot') as HTMLImageElement;
        return { hidden: img.hidden, width: img.naturalWidth, height: img.naturalHeight, caption: document.getElementById('shot-caption')?.textContent ?? '' };
      });
    // A desktop action (no pointer, no screenshot of its own): the frame is what the page shows.
    await page.goto(`${base}${link.json().path}#step-6`);
    await loaded('6frame');
    const desktop = await shown();
    assert.equal(desktop.hidden, false);
    assert.deepEqual([desktop.width, desktop.height], [1024, 768], 'the frame is the real screen');
    assert.match(desktop.caption, /recording at the end of this step/);
    // A click without ?screenshot=true: the screen before it first (as the model saw it), its "After" is the frame.
    await page.evaluate(() => (location.hash = '#step-2'));
    await loaded('2before');
    assert.equal(await page.locator('#show-after').isDisabled(), false);
    await page.click('#show-after');
    await loaded('2frame');
    assert.deepEqual(frames, [200, 200]);
    assert.match((await shown()).caption, /recording at the end of this step/);

    // It is the screen: the frame matches the settled screenshot taken just before (the click changed nothing visible).
    const before = { children: await childCpuMs(), at: performance.now() };
    const frame = await inject('GET', `/v1/sessions/${id}/trajectory/steps/2/frame`, keyA);
    t.diagnostic(
      `one frame: ${(performance.now() - before.at).toFixed(0)} ms, ${(await childCpuMs()) - before.children} ms of ffmpeg CPU, ${frame.rawPayload.length} bytes of JPEG`,
    );
    assert.equal(frame.headers['content-type'], 'image/jpeg');
    const shot = await inject('GET', `/v1/sessions/${id}/trajectory/steps/1/screenshot`, keyA);
    const [a, b] = await Promise.all([frame.rawPayload, shot.rawPayload].map((img) => sharp(img).resize(256, 192).removeAlpha().raw().toBuffer()));
    let diff = 0;
    for (let i = 0; i < a!.length; i++) diff += Math.abs(a![i]! - b![i]!);
    assert.ok(diff / a!.length < 12, `mean difference ${(diff / a!.length).toFixed(1)} per channel between the frame and the screenshot`);
    // Checked input: a step that does not exist, a step number that is not one.
    assert.equal((await inject('GET', `/v1/sessions/${id}/trajectory/steps/99/frame`, keyA)).statusCode, 404);
    assert.equal((await inject('GET', `/v1/sessions/${id}/trajectory/steps/0/frame`, keyA)).statusCode, 400);
    assert.equal((await inject('GET', `/v1/sessions/${id}/trajectory/steps/1e3/frame`, keyA)).statusCode, 400);
  });

  it(
    "after a restart whose reconciliation prunes the row, tenant B gets the 404 of a made-up id on every kept route; the operator's folder stays",
    { timeout: 180_000 },
    async (t) => {
      assert.equal((await inject('DELETE', `/v1/sessions/${id}`, keyA)).statusCode, 200);
      videoOnDisk = await readFile(recordingFiles(path.join(stateDir, DEFAULT_RECORDING_SUBDIR), id).video);
      await orch.close();
      await rm(orch.stateDir, { recursive: true, force: true }); // the helper's own (unused: ours is the override)
      // A day and an hour later, as far as the store can tell: the row is due for the prune.
      const db = new Database(path.join(stateDir, 'orchestrator.db'));
      assert.equal(db.prepare('UPDATE sessions SET updated_at = ? WHERE id = ?').run(new Date(Date.now() - 25 * 3600_000).toISOString(), id).changes, 1);
      db.close();
      assert.ok(SESSION_ID_PATTERN.test(OPERATOR_DIR));
      await mkdir(path.join(stateDir, OPERATOR_DIR));
      await writeFile(path.join(stateDir, OPERATOR_DIR, 'notes.txt'), 'mine');

      await start();
      assert.equal(await readFile(path.join(stateDir, OPERATOR_DIR, 'notes.txt'), 'utf8'), 'mine', "reconciliation left the operator's folder alone");
      const rows = new Database(path.join(stateDir, 'orchestrator.db'), { readonly: true });
      assert.equal((rows.prepare('SELECT COUNT(*) AS n FROM sessions WHERE id = ?').get(id) as { n: number }).n, 0, 'the row was pruned');
      rows.close();

      const madeUp = 'zz9zz9zz9z';
      const routes: Array<{ method: 'GET' | 'POST' | 'DELETE'; path: string; payload?: unknown }> = [
        { method: 'GET', path: '/recording' },
        { method: 'GET', path: '/recording/subtitles' },
        { method: 'GET', path: '/recording/status' },
        { method: 'POST', path: '/recording/stop' },
        { method: 'POST', path: '/recording/start' },
        { method: 'GET', path: '/trajectory' },
        { method: 'GET', path: '/trajectory?format=jsonl' },
        { method: 'GET', path: '/trajectory/steps/1/screenshot' },
        { method: 'GET', path: '/trajectory/steps/3/screenshot?when=before' },
        { method: 'GET', path: '/trajectory/steps/2/frame' },
        { method: 'GET', path: '/trajectory/view' },
        { method: 'POST', path: '/links', payload: { purpose: 'trajectory' } },
        { method: 'DELETE', path: `/links/${linkId}` },
        { method: 'GET', path: '' },
      ];
      const cpu = process.cpuUsage();
      const children = await childCpuMs();
      for (const route of routes) {
        const asB = await inject(route.method, `/v1/sessions/${id}${route.path}`, keyB, route.payload);
        const never = await inject(route.method, `/v1/sessions/${madeUp}${route.path}`, keyB, route.payload);
        assert.equal(
          asB.statusCode,
          404,
          `${route.method} ${route.path}: ${asB.statusCode} ${String(asB.headers['content-type'])} ${asB.rawPayload.length} bytes`,
        );
        assert.equal(asB.body.replaceAll(id, madeUp), never.body, `${route.method} ${route.path}: B cannot tell A's session from one that never existed`);
        assert.equal(asB.headers['content-type'], never.headers['content-type']);
      }
      const used = process.cpuUsage(cpu);
      const cpuMs = (used.user + used.system) / 1000;
      const childMs = (await childCpuMs()) - children;
      t.diagnostic(
        `B's ${routes.length * 2} probes (${routes.length} on A's session, as many on a made-up id): ${cpuMs.toFixed(0)} ms of orchestrator CPU, ${childMs} ms of child processes`,
      );
      // No ffmpeg ran for B: the tenant check comes before any extraction. One frame costs
      // ~140 ms of ffmpeg CPU here; the bound leaves room for the policy guard's nft runs only.
      assert.ok(childMs < 70, `${childMs} ms of child CPU during the probes: an ffmpeg ran for B`);
      assert.ok(cpuMs < 2_000, `B's probes cost ${cpuMs.toFixed(0)} ms of orchestrator CPU`);
      // B's link token is no key to A's pages either.
      const linkB = await inject('POST', `/v1/sessions/${madeUp}/links`, keyB, { purpose: 'trajectory' });
      assert.equal(linkB.statusCode, 404);
      // Defence in depth: the recording itself answers by its own stored tenant, whatever the hook decided.
      await assert.rejects(orch.manager.recordingFiles(id, 'tenant-b'), { category: 'not_found' });
      await assert.rejects(orch.manager.recordingStatus(id, 'tenant-b'), { category: 'not_found' });
      await assert.rejects(orch.manager.stopRecording(id, 'tenant-b'), { category: 'not_found' });
      assert.equal(await orch.manager.recordingFrame(id, 'tenant-b', 500), undefined);
    },
  );

  it('tenant A still gets every kept file after the prune, by key and by its link', { timeout: 120_000 }, async () => {
    assert.equal((await inject('GET', `/v1/sessions/${id}`, keyA)).statusCode, 404, 'the row is gone for A too');
    const video = await inject('GET', `/v1/sessions/${id}/recording`, keyA);
    assert.equal(video.statusCode, 200);
    assert.ok(video.rawPayload.equals(videoOnDisk), 'the same bytes as the file');
    assert.ok(videoOnDisk.length > 1000);
    const subtitles = await inject('GET', `/v1/sessions/${id}/recording/subtitles`, keyA);
    assert.equal(subtitles.statusCode, 200);
    assert.match(subtitles.body, /^WEBVTT/);
    const status = await inject('GET', `/v1/sessions/${id}/recording/status`, keyA);
    assert.equal(status.json().state, 'finished', status.body);
    const trajectory = await inject('GET', `/v1/sessions/${id}/trajectory`, keyA);
    assert.equal(trajectory.statusCode, 200);
    assert.equal(trajectory.json().state, 'ended');
    assert.equal((trajectory.json().steps as Step[]).length, 8);
    for (const url of ['/trajectory/steps/1/screenshot', '/trajectory/steps/2/frame', '/trajectory/view']) {
      const res = await inject('GET', `/v1/sessions/${id}${url}`, keyA);
      assert.equal(res.statusCode, 200, `${url}: ${res.body.slice(0, 200)}`);
    }
    // A's link, made before the prune, still opens A's page and video: no key, its token only.
    const page = await inject('GET', `/v1/sessions/${id}/trajectory/view?token=${linkToken}`, undefined);
    assert.equal(page.statusCode, 200, page.body.slice(0, 300));
    const byLink = await inject('GET', `/v1/sessions/${id}/recording?token=${linkToken}`, undefined);
    assert.equal(byLink.statusCode, 200);
    assert.ok(byLink.rawPayload.equals(videoOnDisk));
    assert.ok(existsSync(path.join(stateDir, OPERATOR_DIR)));
  });
});

import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import WebSocket from 'ws';
import { launchBrowser } from './helpers/browser.js';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

/**
 * A terminal in the browser (issue 24): a link of purpose `terminal` opens a page where
 * xterm.js drives a login shell in the sandbox over the process socket; Chromium types into it
 * and reads the shell's answer off the terminal. The link opens that page and its socket for
 * that session only, and the shell ends when the page goes.
 */
/** Polls an async condition until it holds. */
async function until(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe('terminal page', { timeout: 300_000 }, () => {
  let orch: TestOrchestrator;
  let base: string;
  let keyA: string;
  let keyB: string;
  let idA: string;
  let idB: string;
  let browser: Browser;

  const api = (method: string, path: string, key: string, body?: unknown) =>
    fetch(`${base}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  const link = async (id: string, key: string, purpose: 'terminal' | 'trajectory') => {
    const res = await api('POST', `/v1/sessions/${id}/links`, key, { purpose });
    assert.equal(res.status, 201, await res.clone().text());
    return (await res.json()) as { id: string; url: string; path: string };
  };
  const tokenOf = (path: string) => new URL(path, base).searchParams.get('token') as string;
  /** What the page's terminal shows, line by line. */
  const screenText = (page: Page) =>
    page.evaluate(() => {
      const term = (
        window as unknown as {
          sbxTerminal: { buffer: { active: { length: number; getLine(i: number): { translateToString(trim: boolean): string } | undefined } } };
        }
      ).sbxTerminal;
      const lines: string[] = [];
      for (let i = 0; i < term.buffer.active.length; i++) lines.push(term.buffer.active.getLine(i)?.translateToString(true) ?? '');
      return lines.join('\n');
    });
  const running = async (id: string) => {
    const res = await api('GET', `/v1/sessions/${id}/processes`, keyA);
    return ((await res.json()) as { processes: Array<{ pid: number; argv?: string[] }> }).processes;
  };

  before(async () => {
    orch = await startTestOrchestrator({}, true);
    keyA = orch.keys.create('tenant-a').key;
    keyB = orch.keys.create('tenant-b').key;
    base = `http://127.0.0.1:${(orch.server.server.address() as AddressInfo).port}`;
    const [a, b] = await Promise.all([api('POST', '/v1/sessions', keyA, {}), api('POST', '/v1/sessions', keyB, {})]);
    assert.equal(a.status, 201);
    assert.equal(b.status, 201);
    idA = ((await a.json()) as { id: string }).id;
    idB = ((await b.json()) as { id: string }).id;
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
    orch?.server.server.closeAllConnections();
    await orch?.stop();
  });

  it('a terminal link opens a shell in Chromium: typed commands run as the sandbox user; closing the page ends the shell', async () => {
    const { url } = await link(idA, keyA, 'terminal');
    const page = await browser.newPage({ viewport: { width: 900, height: 520 } });
    const problems: string[] = [];
    page.on('pageerror', (err) => problems.push(err.message));
    await page.goto(url);
    await page.waitForSelector('#state.connected', { timeout: 20_000 });
    await until(async () => (await screenText(page)).includes('$'), 20_000, 'a shell prompt');
    await page.keyboard.type('echo "sum=$((6*7)) as $(whoami) in $PWD"');
    await page.keyboard.press('Enter');
    await until(async () => /sum=42 as user in \/home\/user/.test(await screenText(page)), 20_000, "the shell's answer on the terminal");
    await writeFile('/tmp/sbx-terminal-page.png', await page.screenshot());
    assert.deepEqual(problems, []);
    assert.equal((await running(idA)).length, 1, 'the page has one shell running');

    await page.close();
    await until(async () => (await running(idA)).length === 0, 20_000, 'the shell ended with its page');
  });

  it("red team: a terminal link opens only its session's terminal; other tokens, tenants and revoked links open nothing", async () => {
    const terminal = await link(idA, keyA, 'terminal');
    const token = tokenOf(terminal.path);
    const trajectory = tokenOf((await link(idA, keyA, 'trajectory')).path);
    const status = async (path: string) => (await fetch(`${base}${path}`)).status;
    assert.equal(await status(`/v1/sessions/${idA}/terminal?token=${token}`), 200);
    // Not the API: a terminal link is no key.
    assert.equal(await status(`/v1/sessions/${idA}/processes?token=${token}`), 401);
    assert.equal(await status(`/v1/sessions/${idA}/trajectory/view?token=${token}`), 401);
    // Not another session, not with another purpose's token, not without one.
    assert.equal(await status(`/v1/sessions/${idB}/terminal?token=${token}`), 401);
    assert.equal(await status(`/v1/sessions/${idA}/terminal?token=${trajectory}`), 401);
    assert.equal(await status(`/v1/sessions/${idA}/terminal`), 401);
    // Another tenant cannot make one for this session: the same 404 as a session that does not exist.
    assert.equal((await api('POST', `/v1/sessions/${idA}/links`, keyB, { purpose: 'terminal' })).status, 404);

    const socketStatus = (path: string) =>
      new Promise<number>((resolve) => {
        const ws = new WebSocket(`${base.replace('http', 'ws')}${path}`);
        ws.on('open', () => {
          ws.close();
          resolve(101);
        });
        ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
        ws.on('error', () => resolve(-1));
      });
    assert.equal(await socketStatus(`/v1/sessions/${idB}/terminal/ws?token=${token}`), 401);
    assert.equal(await socketStatus(`/v1/sessions/${idA}/terminal/ws?token=${trajectory}`), 401);
    assert.equal(await socketStatus(`/v1/sessions/${idA}/terminal/ws?token=${token}&cols=80;rm&rows=24`), 400);
    const before = (await running(idA)).length;
    assert.equal((await api('DELETE', `/v1/sessions/${idA}/links/${terminal.id}`, keyA)).status, 204);
    assert.equal(await status(`/v1/sessions/${idA}/terminal?token=${token}`), 401);
    assert.equal(await socketStatus(`/v1/sessions/${idA}/terminal/ws?token=${token}`), 401);
    assert.equal((await running(idA)).length, before, 'no refused socket started a shell');
  });

  it('red team: a terminal open when its link is revoked is closed, and its shell ends', async () => {
    const terminal = await link(idA, keyA, 'terminal');
    const ws = new WebSocket(`${base.replace('http', 'ws')}/v1/sessions/${idA}/terminal/ws?token=${tokenOf(terminal.path)}`);
    const closed = new Promise<[number, string]>((resolve) => ws.on('close', (code: number, reason: Buffer) => resolve([code, reason.toString()])));
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    const isShell = (p: { argv?: string[] }) => p.argv?.join(' ') === 'bash -l';
    for (let i = 0; i < 50 && !(await running(idA)).some(isShell); i++) await new Promise((resolve) => setTimeout(resolve, 100));
    assert.ok((await running(idA)).some(isShell), 'the link opened a shell');
    const revokedAt = performance.now();
    assert.equal((await api('DELETE', `/v1/sessions/${idA}/links/${terminal.id}`, keyA)).status, 204);
    const [code, reason] = await closed;
    console.log(`a terminal whose link was revoked: closed after ${(performance.now() - revokedAt).toFixed(0)} ms (${code} ${reason})`);
    assert.equal(code, 1008);
    for (let i = 0; i < 50 && (await running(idA)).some(isShell); i++) await new Promise((resolve) => setTimeout(resolve, 100));
    assert.ok(!(await running(idA)).some(isShell), "the revoked link's shell is gone");
  });
});

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

/**
 * Gemini's browser-only calls against the desktop template's Firefox, in a real sandbox:
 * open_web_browser starts it, navigate loads a page (in the current tab once a window is
 * open), go_back and go_forward walk its history. Pages are served inside the guest.
 */
describe('Gemini browser calls on the desktop template', () => {
  let orch: TestOrchestrator;
  let id: string;
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  const bash = async (command: string) => {
    const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/tools/bash`, payload: { command } });
    assert.equal(res.statusCode, 200, res.body);
    const result = res.json<{ content: Array<{ text?: string }>; is_error: boolean }>();
    assert.equal(result.is_error, false, JSON.stringify(result.content));
    return result.content.map((c) => c.text ?? '').join('\n');
  };
  const gemini = async (name: string, args: Record<string, unknown> = {}) => {
    const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/tools/gemini-computer`, payload: { name, args } });
    assert.equal(res.statusCode, 200, res.body);
    const answer = res.json<{ response: { url?: string; error?: string }; parts?: Array<{ inlineData: { mimeType: string } }> }>();
    assert.equal(answer.response.error, undefined, `${name}: ${answer.response.error}`);
    assert.equal(answer.parts?.[0]?.inlineData.mimeType, 'image/png');
    return answer;
  };
  const browserTitles = async () => {
    const res = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/desktop/windows` });
    assert.equal(res.statusCode, 200, res.body);
    return (res.json().windows as Array<{ title: string; app: string }>).filter((w) => /firefox/i.test(w.app)).map((w) => w.title);
  };
  /** Waits for a browser window titled `title` (Firefox adds its own name); the titles seen otherwise. */
  const waitForTitle = async (title: string, seconds = 90) => {
    let seen: string[] = [];
    for (const end = Date.now() + seconds * 1000; Date.now() < end; await sleep(300)) {
      seen = await browserTitles();
      if (seen.some((t) => t.startsWith(title))) return seen;
    }
    assert.fail(`no browser window titled "${title}" (saw ${JSON.stringify(seen)})`);
  };

  before(async () => {
    orch = await startTestOrchestrator({ template: 'desktop', settleMaxMs: 2_000 });
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { width: 1024, height: 768, timeoutSeconds: 900 } });
    assert.equal(res.statusCode, 201, res.body);
    id = res.json().id;
    await bash(
      [
        'mkdir -p /tmp/site',
        `printf '%s' '<!doctype html><title>Page A</title><h1>A</h1>' > /tmp/site/a.html`,
        `printf '%s' '<!doctype html><title>Page B</title><h1>B</h1>' > /tmp/site/b.html`,
        'setsid python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/site >/dev/null 2>&1 < /dev/null &',
        'for i in $(seq 50); do python3 -c "import urllib.request; urllib.request.urlopen(\'http://127.0.0.1:8000/a.html\')" 2>/dev/null && break; sleep 0.2; done',
      ].join('\n'),
    );
  });
  after(async () => {
    await orch?.stop();
  });

  it('go_back before any browser window is open is an error saying so', async () => {
    const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/tools/gemini-computer`, payload: { name: 'go_back', args: {} } });
    assert.match(res.json().response.error, /go_back needs an open web browser window, and none is open/);
  });

  it('open_web_browser starts Firefox; navigate loads pages; go_back and go_forward walk the history', async () => {
    await gemini('open_web_browser');
    await waitForTitle('');
    // Firefox's first window may take a moment to take input after it maps.
    await sleep(2_000);
    assert.equal((await gemini('navigate', { url: 'http://127.0.0.1:8000/a.html' })).response.url, 'http://127.0.0.1:8000/a.html');
    await waitForTitle('Page A');
    await gemini('navigate', { url: 'http://127.0.0.1:8000/b.html' });
    await waitForTitle('Page B');
    assert.equal((await browserTitles()).length, 1, 'one window: navigate used its current tab');
    await gemini('go_back');
    await waitForTitle('Page A', 30);
    await gemini('go_forward');
    await waitForTitle('Page B', 30);
  });
});

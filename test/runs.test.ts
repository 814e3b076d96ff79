import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { imagesIn, MessagesStandIn, type SeenRequest } from './helpers/messages-stand-in.js';
import { runCli, startServe, type ServeProcess } from './helpers/serve.js';

/**
 * The built-in Claude loop against a local stand-in for the Messages API (the SDK talks to it
 * through ANTHROPIC_BASE_URL), driving real sandboxes of a real `sbx serve`.
 */
const stand = new MessagesStandIn();
let serve: ServeProcess;
let stateDir: string;

async function api(method: string, url: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${serve.url}${url}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

async function waitEnd(id: string): Promise<Record<string, unknown>> {
  for (;;) {
    const { json } = await api('GET', `/v1/runs/${id}`);
    if (json.state !== 'running') return json;
    await new Promise((r) => setTimeout(r, 100));
  }
}

const toolUse = (id: string, name: string, input: unknown) => ({ type: 'tool_use', id, name, input });
const text = (t: string) => ({ type: 'text', text: t });
const results = (r: SeenRequest) =>
  (r.body.messages.at(-1)?.content ?? []) as Array<{
    type: string;
    tool_use_id: string;
    is_error: boolean;
    content: Array<Record<string, unknown>>;
    cache_control?: unknown;
  }>;

describe('runs: the built-in Claude loop', { timeout: 600_000 }, () => {
  before(async () => {
    await stand.start();
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-runs-'));
    serve = await startServe(stateDir, 20_000 + Math.floor(Math.random() * 20_000), undefined, [], {
      ANTHROPIC_API_KEY: 'sk-test-key',
      ANTHROPIC_BASE_URL: stand.url,
    });
  });
  after(async () => {
    serve?.child.kill('SIGTERM');
    if (serve) await new Promise((r) => serve.child.once('exit', r));
    await stand.stop();
    await rm(stateDir, { recursive: true, force: true });
  });

  it('a bad body is a 400 naming the field, before any sandbox is made', async () => {
    const bad = await api('POST', '/v1/runs', { task: 'x', maxSteps: 0 });
    assert.equal(bad.status, 400);
    assert.match(JSON.stringify(bad.json), /maxSteps/);
    const both = await api('POST', '/v1/runs', { task: 'x', sessionId: 'abc', session: {} });
    assert.equal(both.status, 400);
    assert.match(JSON.stringify(both.json), /sessionId and session/);
    const { json } = await api('GET', '/v1/sessions');
    assert.deepEqual(json.sessions, []);
  });

  it('runs a task end to end (computer_20250124): tools, parallel tool_use, a tool error, the image budget, caching, events', async () => {
    const task = 'Write a haiku into /tmp/haiku.txt';
    const haiku = 'old pond\nfrog leaps in\nsplash';
    stand.script(task, [
      { content: [text('Let me look at the screen.'), toolUse('tu_1', 'computer', { action: 'screenshot' })], stop_reason: 'tool_use' },
      {
        content: [
          text('Writing the file, and clicking.'),
          toolUse('tu_2', 'str_replace_based_edit_tool', { command: 'create', path: '/tmp/haiku.txt', file_text: haiku }),
          toolUse('tu_3', 'computer', { action: 'left_click', coordinate: [99_999, 5] }),
        ],
        stop_reason: 'tool_use',
      },
      { content: [toolUse('tu_4', 'bash', { command: 'cat /tmp/haiku.txt' })], stop_reason: 'tool_use' },
      { content: [toolUse('tu_5', 'computer', { action: 'mouse_move', coordinate: [10, 10] })], stop_reason: 'tool_use' },
      { content: [toolUse('tu_6', 'computer', { action: 'screenshot' })], stop_reason: 'tool_use' },
      { content: [toolUse('tu_7', 'computer', { action: 'screenshot' })], stop_reason: 'tool_use' },
      { content: [text('Done: the haiku is saved.')], stop_reason: 'end_turn' },
    ]);
    const created = await api('POST', '/v1/runs', { task, model: 'claude-sonnet-4-6', toolVersion: 'computer_20250124' });
    assert.equal(created.status, 201, JSON.stringify(created.json));
    const id = created.json.id as string;
    const sessionId = created.json.sessionId as string;
    const eventsText = await (await fetch(`${serve.url}/v1/runs/${id}/events`)).text();
    const end = await waitEnd(id);
    assert.equal(end.state, 'completed');
    assert.equal(end.stopReason, 'end_turn');
    assert.equal(end.steps, 7);
    assert.deepEqual(end.usage, { inputTokens: 7000, outputTokens: 350, cacheReadInputTokens: 5600, cacheCreationInputTokens: 700 });

    const requests = stand.requestsOf(task);
    assert.equal(requests.length, 7);
    const session = (await api('GET', `/v1/sessions/${sessionId}`)).json as { computerTool: { display_width_px: number; display_height_px: number } };
    for (const r of requests) {
      assert.match(String(r.headers['anthropic-beta']), /(^|,)computer-use-2025-01-24(,|$)/);
      // The key from the server's environment, as this SDK sends it (x-api-key or a bearer token).
      assert.ok(r.headers['x-api-key'] === 'sk-test-key' || r.headers.authorization === 'Bearer sk-test-key', 'the API key is sent');
      assert.deepEqual(r.body.tools, [
        {
          type: 'computer_20250124',
          name: 'computer',
          display_width_px: session.computerTool.display_width_px,
          display_height_px: session.computerTool.display_height_px,
        },
        { type: 'bash_20250124', name: 'bash' },
        { type: 'text_editor_20250728', name: 'str_replace_based_edit_tool' },
      ]);
      assert.ok(imagesIn(r).length <= 3, `at most 3 images in a request (${imagesIn(r).length})`);
      // Prompt caching: a breakpoint on the last block of the last user turn, and only there.
      const last = r.body.messages.at(-1)?.content.at(-1);
      assert.deepEqual(last?.cache_control, { type: 'ephemeral' });
      const marks = r.body.messages.flatMap((m) => m.content.filter((b) => b.cache_control)).length;
      assert.equal(marks, 1);
    }
    // The screenshot came back as an image block with its media type.
    const [first] = results(requests[1]!);
    assert.equal(first?.tool_use_id, 'tu_1');
    assert.equal(first?.is_error, false);
    const image = first?.content[0] as { type: string; source: { type: string; media_type: string; data: string } };
    assert.equal(image.type, 'image');
    assert.equal(image.source.type, 'base64');
    assert.equal(image.source.media_type, 'image/png');
    assert.equal(Buffer.from(image.source.data, 'base64').subarray(1, 4).toString(), 'PNG');
    // Parallel tool_use: both results in one user turn, in order; the bad click is a tool error.
    const parallel = results(requests[2]!);
    assert.deepEqual(
      parallel.map((b) => [b.type, b.tool_use_id, b.is_error]),
      [
        ['tool_result', 'tu_2', false],
        ['tool_result', 'tu_3', true],
      ],
    );
    assert.match(JSON.stringify(parallel[1]?.content), /coordinate/);
    // The bash tool read back what the editor wrote.
    assert.match(JSON.stringify(results(requests[3]!)[0]?.content), /frog leaps in/);
    // Image budget: by the last request, 4 screenshots were taken (tu_1, tu_5, tu_6, tu_7): 3 kept, the oldest replaced by text.
    const lastRequest = requests[6]!;
    assert.equal(imagesIn(lastRequest).length, 3);
    assert.match(JSON.stringify(lastRequest.body.messages[2]), /older screenshot omitted/);
    // The transcript is kept in SQLite with the session's trajectory id (image data replaced by its size).
    const db = new Database(path.join(stateDir, 'orchestrator.db'), { readonly: true });
    try {
      const row = db.prepare('SELECT trajectory_id, state, stop_reason, transcript FROM runs WHERE id = ?').get(id) as {
        trajectory_id: string;
        state: string;
        stop_reason: string;
        transcript: string;
      };
      assert.deepEqual([row.trajectory_id, row.state, row.stop_reason], [sessionId, 'completed', 'end_turn']);
      const transcript = JSON.parse(row.transcript) as { messages: unknown[] };
      assert.equal(transcript.messages.length, 14, 'the task, 7 answers and 6 turns of tool results');
      assert.match(row.transcript, /frog leaps in/);
      assert.match(row.transcript, /base64 characters/);
    } finally {
      db.close();
    }
    const trajectory = (await api('GET', `/v1/sessions/${sessionId}/trajectory`)).json as { steps: Array<{ tool: string }> };
    assert.deepEqual(
      trajectory.steps.map((st) => st.tool),
      ['computer', 'str_replace_based_edit_tool', 'computer', 'bash', 'computer', 'computer', 'computer'],
    );
    // The file is there: read through the bash tool route.
    const bash = await api('POST', `/v1/sessions/${sessionId}/tools/bash`, { command: 'cat /tmp/haiku.txt' });
    assert.match(JSON.stringify(bash.json), /old pond\\nfrog leaps in\\nsplash/);
    // Events: text, tool calls, results with a trajectory screenshot URL, usage, the end.
    const events = eventsText
      .split('\n\n')
      .filter(Boolean)
      .map(
        (chunk) =>
          JSON.parse(
            chunk
              .split('\n')
              .find((l) => l.startsWith('data: '))!
              .slice(6),
          ) as Record<string, unknown>,
      );
    assert.ok(events.some((e) => e.type === 'text' && e.text === 'Let me look at the screen.'));
    assert.ok(events.some((e) => e.type === 'tool_call' && e.name === 'bash'));
    const shot = events.find((e) => e.type === 'tool_result' && typeof e.screenshot === 'string');
    assert.ok(shot, 'a tool_result event has a screenshot URL');
    const png = await fetch(`${serve.url}${shot.screenshot as string}`);
    assert.equal(png.status, 200);
    assert.equal(png.headers.get('content-type'), 'image/png');
    assert.ok(events.some((e) => e.type === 'tool_result' && e.isError === true));
    assert.equal(events.filter((e) => e.type === 'usage').length, 7);
    assert.deepEqual(events.at(-1), { type: 'end', state: 'completed', stopReason: 'end_turn', steps: 7, usage: end.usage });
  });

  it('computer_20241022 and computer_20251124: their beta flags and tools; a max_tokens stop; an API error', async () => {
    const old = 'old tools';
    stand.script(old, [
      { content: [toolUse('tu_a', 'str_replace_editor', { command: 'view', path: '/etc/hostname' })], stop_reason: 'tool_use' },
      { content: [text('cut')], stop_reason: 'max_tokens' },
    ]);
    const a = await api('POST', '/v1/runs', { task: old, toolVersion: 'computer_20241022', session: { toolVersion: 'computer_20241022' } });
    assert.equal(a.status, 201, JSON.stringify(a.json));
    const endA = await waitEnd(a.json.id as string);
    assert.equal(endA.stopReason, 'max_tokens');
    assert.equal(endA.state, 'stopped');
    const [r1, r2] = stand.requestsOf(old);
    assert.match(String(r1?.headers['anthropic-beta']), /computer-use-2024-10-22/);
    assert.deepEqual(
      r1?.body.tools.map((t) => [t.type, t.name]),
      [
        ['computer_20241022', 'computer'],
        ['bash_20241022', 'bash'],
        ['text_editor_20241022', 'str_replace_editor'],
      ],
    );
    assert.equal(results(r2!)[0]?.is_error, false, 'str_replace_editor reached the editor');

    const newer = 'newer tools';
    stand.script(newer, [{ status: 400, error: { type: 'invalid_request_error', message: 'scripted refusal' } }]);
    const b = await api('POST', '/v1/runs', { task: newer, toolVersion: 'computer_20251124', sessionId: a.json.sessionId });
    const endB = await waitEnd(b.json.id as string);
    assert.equal(endB.state, 'failed');
    assert.match(String(endB.error), /scripted refusal/);
    const [r] = stand.requestsOf(newer);
    assert.match(String(r?.headers['anthropic-beta']), /computer-use-2025-11-24/);
    assert.equal(r?.body.tools[0]?.type, 'computer_20251124');
    assert.equal(r?.body.tools[0]?.enable_zoom, true);
    assert.equal(r?.body.tools[2]?.type, 'text_editor_20250728');
  });

  it('budgets and DELETE stop a run', async () => {
    const steps = 'one step only';
    stand.script(steps, [{ content: [toolUse('tu_s', 'bash', { command: 'true' })], stop_reason: 'tool_use' }]);
    const s = await api('POST', '/v1/runs', { task: steps, maxSteps: 1 });
    const endS = await waitEnd(s.json.id as string);
    // The defaults: the newest tool version, on the session made for the run too.
    assert.equal(stand.requestsOf(steps)[0]?.body.tools[0]?.type, 'computer_20251124');
    assert.equal(((await api('GET', `/v1/sessions/${s.json.sessionId as string}`)).json.computerTool as { type: string }).type, 'computer_20251124');
    assert.equal(stand.requestsOf(steps)[0]?.body.model, 'claude-sonnet-4-6');
    assert.deepEqual([endS.state, endS.stopReason, endS.steps], ['stopped', 'budget_steps', 1]);

    const hang = 'a model that never answers';
    stand.script(hang, [{ hang: true }]);
    const h = await api('POST', '/v1/runs', { task: hang, sessionId: s.json.sessionId });
    await new Promise((r) => setTimeout(r, 300));
    const second = await api('POST', '/v1/runs', { task: 'a second run on the same session', sessionId: s.json.sessionId });
    assert.equal(second.status, 409);
    assert.match(JSON.stringify(second.json), /run_in_progress/);
    const cancelled = await api('DELETE', `/v1/runs/${h.json.id as string}`);
    assert.equal(cancelled.status, 200);
    assert.deepEqual([cancelled.json.state, cancelled.json.stopReason], ['stopped', 'cancelled']);

    const slow = 'a slow model';
    stand.script(slow, [{ hang: true }]);
    const t = await api('POST', '/v1/runs', { task: slow, sessionId: s.json.sessionId, maxSeconds: 1 });
    const endT = await waitEnd(t.json.id as string);
    assert.deepEqual([endT.state, endT.stopReason], ['stopped', 'budget_seconds']);
  });

  it('computer actions alone: types a command into the terminal and presses Return; the file it writes is read back', async () => {
    // The minimal template's xterm sits in the middle of the screen: a click there focuses it.
    const task = 'Save a line into /tmp/typed.txt with the terminal';
    stand.script(task, [
      { content: [toolUse('tu_t1', 'computer', { action: 'left_click', coordinate: [512, 400] })], stop_reason: 'tool_use' },
      { content: [toolUse('tu_t2', 'computer', { action: 'type', text: 'echo typed-by-the-loop > /tmp/typed.txt' })], stop_reason: 'tool_use' },
      { content: [toolUse('tu_t3', 'computer', { action: 'key', text: 'Return' })], stop_reason: 'tool_use' },
      { content: [text('Saved.')], stop_reason: 'end_turn' },
    ]);
    const run = await api('POST', '/v1/runs', { task, toolVersion: 'computer_20250124' });
    assert.equal(run.status, 201, JSON.stringify(run.json));
    const end = await waitEnd(run.json.id as string);
    assert.deepEqual([end.state, end.stopReason], ['completed', 'end_turn']);
    for (const r of stand.requestsOf(task).slice(1)) assert.equal(results(r)[0]?.is_error, false, JSON.stringify(results(r)[0]?.content).slice(0, 300));
    let content = '';
    for (let i = 0; i < 20 && !content.includes('typed-by-the-loop'); i++) {
      content = JSON.stringify((await api('POST', `/v1/sessions/${run.json.sessionId as string}/tools/bash`, { command: 'cat /tmp/typed.txt 2>&1' })).json);
      if (!content.includes('typed-by-the-loop')) await new Promise((r) => setTimeout(r, 250));
    }
    assert.match(content, /"text":"typed-by-the-loop"/);
  });

  it('a session does not idle out while a run waits for the model', async () => {
    const task = 'a model thinking for longer than the idle timeout';
    stand.script(task, [{ hang: true }]);
    const run = await api('POST', '/v1/runs', { task, session: { timeoutSeconds: 10 } });
    assert.equal(run.status, 201, JSON.stringify(run.json));
    await new Promise((r) => setTimeout(r, 13_000));
    assert.equal((await api('GET', `/v1/sessions/${run.json.sessionId as string}`)).json.state, 'ready');
    assert.equal((await api('DELETE', `/v1/runs/${run.json.id as string}`)).json.stopReason, 'cancelled');
  });

  it('sbx run prints progress and the end', async () => {
    const task = 'cli task';
    stand.script(task, [
      { content: [text('Checking.'), toolUse('tu_c', 'bash', { command: 'echo hi-from-cli' })], stop_reason: 'tool_use' },
      { content: [text('All done.')], stop_reason: 'end_turn' },
    ]);
    const out = await runCli(['run', task, '--max-steps', '5'], serve.url);
    assert.equal(out.code, 0, out.stderr);
    assert.match(out.stdout, /Checking\./);
    assert.match(out.stdout, /bash/);
    assert.match(out.stdout, /hi-from-cli/);
    assert.match(out.stdout, /end_turn/);
    // A view-only live view to watch it, which opens as the page.
    const live = /watch it live: (http\S+)/.exec(out.stdout);
    assert.ok(live, out.stdout);
    const page = await fetch(live[1] as string);
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-type') ?? '', /text\/html/);
  });
});

describe('runs without an API key', { timeout: 120_000 }, () => {
  it('is a 503 saying what to set, and no sandbox is made', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-runs-nokey-'));
    const s = await startServe(dir, 20_000 + Math.floor(Math.random() * 20_000), undefined, [], { ANTHROPIC_API_KEY: '' });
    try {
      const res = await fetch(`${s.url}/v1/runs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ task: 'x' }) });
      assert.equal(res.status, 503);
      assert.match(await res.text(), /ANTHROPIC_API_KEY/);
      const list = (await (await fetch(`${s.url}/v1/sessions`)).json()) as { sessions: unknown[] };
      assert.deepEqual(list.sessions, []);
    } finally {
      s.child.kill('SIGTERM');
      await new Promise((r) => s.child.once('exit', r));
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("runs are the tenant's own", { timeout: 180_000 }, () => {
  it("another tenant cannot see, follow, stop a run or run on the tenant's session", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-runs-tenants-'));
    const keyOf = async (tenant: string) => (await runCli(['keys', 'create', '--tenant', tenant, '--state-dir', dir], 'http://127.0.0.1:1')).stdout.trim();
    const [keyA, keyB] = [await keyOf('alpha'), await keyOf('beta')];
    const tenantStand = new MessagesStandIn();
    await tenantStand.start();
    const s = await startServe(dir, 20_000 + Math.floor(Math.random() * 20_000), undefined, ['--auth', 'on'], {
      ANTHROPIC_API_KEY: 'sk-test-key',
      ANTHROPIC_BASE_URL: tenantStand.url,
    });
    const as = (key: string) => async (method: string, url: string, body?: unknown) => {
      const headers: Record<string, string> = { authorization: `Bearer ${key}` };
      if (body !== undefined) headers['content-type'] = 'application/json';
      const res = await fetch(`${s.url}${url}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
      return { status: res.status, json: (await res.json()) as Record<string, unknown> };
    };
    const [a, b] = [as(keyA), as(keyB)];
    try {
      tenantStand.script('alpha task', [{ hang: true }]);
      const run = await a('POST', '/v1/runs', { task: 'alpha task' });
      assert.equal(run.status, 201, JSON.stringify(run.json));
      const id = run.json.id as string;
      assert.equal((await b('GET', `/v1/runs/${id}`)).status, 404);
      assert.equal((await b('GET', `/v1/runs/${id}/events`)).status, 404);
      assert.equal((await b('DELETE', `/v1/runs/${id}`)).status, 404);
      const onTheirs = await b('POST', '/v1/runs', { task: 'beta task', sessionId: run.json.sessionId });
      assert.equal(onTheirs.status, 404);
      assert.equal(tenantStand.requestsOf('beta task').length, 0);
      assert.equal((await a('GET', `/v1/runs/${id}`)).json.state, 'running', 'still running');
      const stopped = await a('DELETE', `/v1/runs/${id}`);
      assert.deepEqual([stopped.status, stopped.json.stopReason], [200, 'cancelled']);
    } finally {
      s.child.kill('SIGTERM');
      await new Promise((r) => s.child.once('exit', r));
      await tenantStand.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('runs and event streams: per-tenant caps that hold under concurrency (issue 21)', { timeout: 300_000 }, () => {
  let dir = '';
  let s: ServeProcess;
  const capsStand = new MessagesStandIn();
  const keys: Record<string, string> = {};
  const as = (tenant: string) => async (method: string, url: string, body?: unknown) => {
    const headers: Record<string, string> = { authorization: `Bearer ${keys[tenant]}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(`${s.url}${url}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: res.status, json: (await res.json()) as Record<string, unknown> };
  };
  const errorOf = (json: Record<string, unknown>) => json.error as { code: string; message: string };
  const sessionsOf = async (tenant: string) => ((await as(tenant)('GET', '/v1/sessions')).json.sessions as unknown[]).length;
  const ended = async (tenant: string, id: string) => {
    for (;;) {
      const { json } = await as(tenant)('GET', `/v1/runs/${id}`);
      if (json.state !== 'running') return json;
      await new Promise((r) => setTimeout(r, 100));
    }
  };

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-runs-caps-'));
    for (const tenant of ['burst', 'budget', 'streamer']) {
      keys[tenant] = (await runCli(['keys', 'create', '--tenant', tenant, '--state-dir', dir], 'http://127.0.0.1:1')).stdout.trim();
    }
    await capsStand.start();
    s = await startServe(dir, 20_000 + Math.floor(Math.random() * 20_000), undefined, ['--auth', 'on'], {
      ANTHROPIC_API_KEY: 'sk-test-key',
      ANTHROPIC_BASE_URL: capsStand.url,
      SBX_TENANT_RUN_LIMITS: 'burst=2/50000000/86400,budget=4/5000/100',
      SBX_TENANT_RUN_MODELS: 'budget=claude-haiku-4-5',
      SBX_TENANT_REQUEST_LIMITS: 'streamer=2/1000/1000',
      SBX_TENANT_MAX_STREAMS: '3',
    });
  });
  after(async () => {
    if (s) {
      s.child.kill('SIGTERM');
      await new Promise((r) => s.child.once('exit', r));
    }
    await capsStand.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('red team: 10 runs started at once by a tenant allowed 2 start exactly 2 (and 2 sandboxes); a run that ends frees its place', async () => {
    capsStand.script('burst task', [{ hang: true }, { hang: true }]);
    const burst = as('burst');
    const answers = await Promise.all(Array.from({ length: 10 }, () => burst('POST', '/v1/runs', { task: 'burst task', session: {} })));
    const started = answers.filter((a) => a.status === 201);
    const refused = answers.filter((a) => a.status !== 201);
    // Before the fix there was no cap: every one made its sandbox and ran.
    assert.equal(started.length, 2, JSON.stringify(answers.map((a) => a.status)));
    assert.ok(
      refused.every((a) => a.status === 429 && errorOf(a.json).code === 'tenant_run_limit'),
      JSON.stringify(refused[0]?.json),
    );
    assert.match(errorOf(refused[0]!.json).message, /SBX_TENANT_MAX_RUNS/);
    assert.equal(await sessionsOf('burst'), 2, 'no sandbox was made for a refused run');
    for (const run of started) assert.equal((await burst('DELETE', `/v1/runs/${run.json.id as string}`)).json.stopReason, 'cancelled');
    capsStand.script('burst after', [{ content: [{ type: 'text', text: 'done' }], stop_reason: 'end_turn' }]);
    const after = await burst('POST', '/v1/runs', { task: 'burst after', sessionId: started[0]!.json.sessionId });
    assert.equal(after.status, 201, JSON.stringify(after.json));
    assert.equal((await ended('burst', after.json.id as string)).state, 'completed');
  });

  it("models and budgets: the tenant's allow-list; maxTokens and maxSeconds over the day's budget are 400s naming the field; over what is left, 429 tenant_run_budget; an ended run gives back what it did not use", async () => {
    const budget = as('budget');
    const noDefault = await budget('POST', '/v1/runs', { task: 'x', session: {} });
    assert.equal(noDefault.status, 400);
    assert.match(errorOf(noDefault.json).message, /^model: the default "claude-sonnet-4-6" is not allowed for tenant "budget"; allowed: claude-haiku-4-5/);
    const unknown = await budget('POST', '/v1/runs', { task: 'x', model: 'gpt-4o', session: {} });
    assert.equal(unknown.status, 400);
    assert.match(errorOf(unknown.json).message, /^model: "gpt-4o" is not allowed/);
    const tooMany = await budget('POST', '/v1/runs', { task: 'x', model: 'claude-haiku-4-5', maxTokens: 100_000_000 });
    assert.deepEqual([tooMany.status, errorOf(tooMany.json).code], [400, 'invalid_request']);
    assert.match(errorOf(tooMany.json).message, /^maxTokens must be at most 5000/);
    const tooLong = await budget('POST', '/v1/runs', { task: 'x', model: 'claude-haiku-4-5', maxSeconds: 86_400 });
    assert.equal(tooLong.status, 400);
    assert.match(errorOf(tooLong.json).message, /^maxSeconds must be at most 100/);
    assert.equal(await sessionsOf('budget'), 0, 'nothing was made for a refused run');

    const session = await budget('POST', '/v1/sessions', {});
    assert.equal(session.status, 201, JSON.stringify(session.json));
    const sessionId = session.json.id as string;
    capsStand.script('budget hang', [{ hang: true }]);
    const first = await budget('POST', '/v1/runs', { task: 'budget hang', model: 'claude-haiku-4-5-20251001', maxTokens: 3000, maxSeconds: 50, sessionId });
    assert.equal(first.status, 201, JSON.stringify(first.json));
    const overTokens = await budget('POST', '/v1/runs', { task: 'x', model: 'claude-haiku-4-5', maxTokens: 3000, session: {} });
    assert.deepEqual([overTokens.status, errorOf(overTokens.json).code], [429, 'tenant_run_budget']);
    assert.match(errorOf(overTokens.json).message, /2000 tokens left of its 5000 today \(0 used, 3000 reserved by running runs\)/);
    const overSeconds = await budget('POST', '/v1/runs', { task: 'x', model: 'claude-haiku-4-5', maxTokens: 1000, maxSeconds: 60, session: {} });
    assert.deepEqual([overSeconds.status, errorOf(overSeconds.json).code], [429, 'tenant_run_budget']);
    assert.match(errorOf(overSeconds.json).message, /maxSeconds 60 is more than the 50 seconds left/);
    assert.equal(await sessionsOf('budget'), 1, 'no sandbox was made for a run over the budget');
    // Stopped having used nothing: its reservation comes back, less the seconds it ran.
    await budget('DELETE', `/v1/runs/${first.json.id as string}`);
    capsStand.script('budget once', [{ content: [{ type: 'text', text: 'done' }], stop_reason: 'end_turn' }]);
    const second = await budget('POST', '/v1/runs', { task: 'budget once', model: 'claude-haiku-4-5', maxTokens: 3000, maxSeconds: 10, sessionId });
    assert.equal(second.status, 201, JSON.stringify(second.json));
    const end = await ended('budget', second.json.id as string);
    // The stand-in's one answer: 1000 + 50 + 800 + 100 tokens.
    assert.deepEqual([end.state, end.usage], ['completed', { inputTokens: 1000, outputTokens: 50, cacheReadInputTokens: 800, cacheCreationInputTokens: 100 }]);
    const left = await budget('POST', '/v1/runs', { task: 'x', model: 'claude-haiku-4-5', maxTokens: 3051, maxSeconds: 1, sessionId });
    assert.equal(left.status, 429);
    assert.match(errorOf(left.json).message, /3050 tokens left of its 5000 today \(1950 used, 0 reserved/);
  });

  it('event streams hold no request slot: with 2 requests allowed, 3 streams are open and requests still pass; a 4th stream is 429 tenant_stream_limit; a closed stream frees its slot', async () => {
    const streamer = as('streamer');
    const made = await streamer('POST', '/v1/sessions', {});
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const id = made.json.id as string;
    capsStand.script('streamer run', [{ hang: true }]);
    const run = await streamer('POST', '/v1/runs', { task: 'streamer run', sessionId: id });
    assert.equal(run.status, 201, JSON.stringify(run.json));
    const open = async (url: string) => {
      const controller = new AbortController();
      const res = await fetch(`${s.url}${url}`, { headers: { authorization: `Bearer ${keys.streamer}` }, signal: controller.signal });
      // A screen stream is streaming once its first frame arrived (a run's events may not have begun).
      if (res.status === 200 && url.includes('/screen/')) await res.body!.getReader().read();
      return { status: res.status, res, abort: () => controller.abort() };
    };
    const streams = [
      await open(`/v1/sessions/${id}/screen/stream`),
      await open(`/v1/sessions/${id}/screen/stream`),
      await open(`/v1/runs/${run.json.id as string}/events`),
    ];
    assert.deepEqual(
      streams.map((st) => st.status),
      [200, 200, 200],
    );
    // Before the fix each stream held one of the 2 request slots: the second stream already left none.
    const requests = await Promise.all([streamer('GET', '/v1/sessions'), streamer('GET', `/v1/sessions/${id}`)]);
    assert.deepEqual(
      requests.map((r) => r.status),
      [200, 200],
    );
    const fourth = await open(`/v1/sessions/${id}/screen/stream`);
    assert.equal(fourth.status, 429);
    const refusal = (await fourth.res.json()) as { error: { code: string; message: string } };
    assert.equal(refusal.error.code, 'tenant_stream_limit');
    assert.match(refusal.error.message, /SBX_TENANT_MAX_STREAMS/);
    streams[0]!.abort();
    let again = await open(`/v1/sessions/${id}/screen/stream`);
    for (let i = 0; i < 20 && again.status === 429; i++) {
      await new Promise((r) => setTimeout(r, 100));
      again = await open(`/v1/sessions/${id}/screen/stream`);
    }
    assert.equal(again.status, 200, 'the closed stream gave its slot back');
    again.abort();
    for (const st of streams) st.abort();
    assert.equal((await streamer('DELETE', `/v1/runs/${run.json.id as string}`)).status, 200);
    // Every cap's refusals are counted for the operator (the earlier tests' too).
    const metrics = await (await fetch(`${s.url}/metrics`)).text();
    const refused = (limit: string) => Number(new RegExp(`^sandbox_api_requests_refused_total\\{limit="${limit}"\\} (\\d+)`, 'm').exec(metrics)?.[1] ?? 0);
    assert.ok(refused('streams') >= 1, metrics);
    assert.equal(refused('runs'), 8);
    assert.equal(refused('run_budget'), 3);
  });
});

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { SandboxClient, type Sandbox } from '../src/client/index.js';
import { ERROR_CODES } from '../src/error-codes.js';
import { SESSION_ID_PATTERN } from '../src/network/names.js';
import { run } from '../src/util/exec.js';
import { pngSize } from './helpers/guest.js';
import { requestArbitrary, routesOf, type FuzzRequest, type RouteShape } from './helpers/fuzz-requests.js';
import { TEST_PREFIX } from './helpers/orchestrator.js';
import { startServe, type ServeProcess } from './helpers/serve.js';

/**
 * Random requests to every route of the OpenAPI document, against a real `sbx serve` with
 * one real session, for FUZZ_SECONDS (default 60). FUZZ_SEED replays a run: the seed is
 * printed at the start, and fast-check prints the failing request (and its replay path).
 */
const SECONDS = Number(process.env.FUZZ_SECONDS || 60);
const SEED = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : Math.floor(Math.random() * 2 ** 31);
/**
 * How long any request may take, beyond the seconds it asks to take (a valid `wait` or
 * `hold_key` of up to 100 s). One that takes longer never answers: a failure, with its route.
 */
const REQUEST_TIMEOUT_MS = 15_000;

/** The seconds a request asks the sandbox to spend: every numeric `duration` in its JSON body. */
function askedSeconds(body: string | undefined): number {
  let total = 0;
  const visit = (value: unknown): void => {
    if (Array.isArray(value)) value.forEach(visit);
    else if (value && typeof value === 'object') {
      for (const [key, inner] of Object.entries(value)) {
        if (key === 'duration' && typeof inner === 'number' && Number.isFinite(inner) && inner > 0) total += Math.min(inner, 100);
        else visit(inner);
      }
    }
  };
  try {
    visit(JSON.parse(body ?? 'null'));
  } catch {
    // not JSON: asks for no time
  }
  return total;
}
/** Whether an answer is a JSON error whose code the registry files under `unavailable`. */
function unavailableCode(text: string): boolean {
  try {
    const code = (JSON.parse(text) as { error?: { code?: unknown } }).error?.code;
    return typeof code === 'string' && Object.hasOwn(ERROR_CODES, code) && ERROR_CODES[code as keyof typeof ERROR_CODES].category === 'unavailable';
  } catch {
    return false;
  }
}
/**
 * Settings that keep valid-but-slow inputs short: a bash command, the settle wait. And no
 * request-rate limit to speak of: the fuzzer sends its requests back to back (hundreds a
 * second when most are refused at once), and a 429 before validation would test nothing.
 */
const SERVE_ENV = { SBX_BASH_TIMEOUT_SECONDS: '5', SBX_SETTLE_MAX_MS: '300', SBX_TENANT_REQUESTS_PER_SECOND: '100000', SBX_TENANT_REQUEST_BURST: '100000' };

describe('fuzzing the HTTP API', () => {
  let stateDir: string;
  let serve: ServeProcess;
  let client: SandboxClient;
  let sandbox: Sandbox;
  let routes: RouteShape[];

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-fuzz-'));
    serve = await startServe(stateDir, 19_000 + Math.floor(Math.random() * 900), undefined, [], SERVE_ENV);
    client = new SandboxClient({ baseUrl: serve.url });
    sandbox = await client.create({});
    routes = routesOf((await (await fetch(`${serve.url}/openapi.json`)).json()) as Parameters<typeof routesOf>[0]);
  });

  after(async () => {
    if (serve && serve.child.exitCode === null) {
      serve.child.kill('SIGTERM');
      await once(serve.child, 'exit');
    }
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it(`answers random input with no 5xx and a JSON error for every 4xx (seed ${SEED})`, async () => {
    console.log(`fuzz: seed ${SEED} (FUZZ_SEED=${SEED} replays it), ${SECONDS} s, ${routes.length} routes`);
    assert.ok(routes.length >= 12, `the OpenAPI document lists the routes (${routes.length})`);
    // DELETE with the real id would end the fuzzing; it gets random ids only.
    const idSafe = (route: RouteShape) => !(route.method === 'DELETE' && route.path === '/v1/sessions/{id}');
    const statuses = new Map<number, number>();
    let sent = 0;
    const neverAnswered: string[] = [];
    let created = 0;

    const send = async (req: FuzzRequest): Promise<void> => {
      sent++;
      let response: Response;
      // Whole milliseconds: a tiny random duration (5e-239 s) makes 15000.000000000004, which AbortSignal.timeout refuses.
      const boundMs = Math.ceil(REQUEST_TIMEOUT_MS + askedSeconds(req.body) * 1000);
      try {
        response = await fetch(serve.url + req.url, {
          method: req.method,
          headers: req.headers,
          body: req.body,
          signal: AbortSignal.timeout(boundMs),
        });
      } catch (err) {
        assert.equal(serve.child.exitCode, null, `the orchestrator died on ${req.note}:\n${serve.output().slice(-3000)}`);
        if ((err as Error).name === 'TimeoutError') {
          // Noted, not thrown: fast-check would replay it while shrinking, a minute each time.
          neverAnswered.push(`${req.note} ${req.url.slice(0, 200)} ${req.body?.slice(0, 200) ?? ''}: no answer in ${boundMs / 1000} s`);
          return;
        }
        return assert.fail(`${req.note} ${req.url}: no answer: ${(err as Error).message} (${String((err as Error).cause)})`);
      }
      // The screen stream answers for as long as the session lives: its head is the answer.
      if (response.ok && response.headers.get('content-type') === 'text/event-stream') {
        await response.body?.cancel();
        statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
        return;
      }
      // A body cut short (shorter than its content-length, say) fails the read: named here, as
      // fast-check prints the error it ends on without its message.
      const text = await response
        .text()
        .catch((err: Error) => assert.fail(`${req.note} ${req.url}: ${response.status}, its body failed: ${err.message} (${String(err.cause)})`));
      statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
      // A 503 of the registry's `unavailable` category is a deliberate answer (a run with no model
      // key configured: this server has none); any other 5xx is a bug of ours.
      const deliberate = response.status === 503 && unavailableCode(text);
      assert.ok(response.status < 500 || deliberate, `${req.note} ${req.url}: ${response.status} ${text.slice(0, 500)}`);
      if (response.status >= 400) {
        assert.match(response.headers.get('content-type') ?? '', /application\/json/, `${req.note}: a ${response.status} in JSON`);
        const error = (JSON.parse(text) as { error?: { code?: unknown; message?: unknown } }).error;
        assert.ok(
          typeof error?.code === 'string' && typeof error.message === 'string' && error.message.length > 0,
          `${req.note}: ${response.status} ${text.slice(0, 300)}`,
        );
      }
      if (response.status === 201 && req.method === 'POST' && req.url.split('?')[0] === '/v1/sessions') {
        // A valid create made a real sandbox: give it back, so only the one session remains.
        created++;
        await client.destroy((JSON.parse(text) as { id: string }).id);
      }
      if (response.ok && req.method === 'POST' && req.url.split('?')[0] === `/v1/sessions/${sandbox.id}/pause`) {
        // A valid pause stopped the session: resume it, so the rest of the run fuzzes a running one.
        const resumed = await fetch(`${serve.url}/v1/sessions/${sandbox.id}/resume`, { method: 'POST' });
        assert.equal(resumed.status, 200, await resumed.text());
      }
      if (response.status === 200 && (req.method === 'PATCH' || req.url.includes('/keepalive'))) {
        // A valid PATCH may have shortened the session's lifetime or timeout: restore them.
        await client.updateTimeouts(sandbox.id, { timeoutSeconds: 3600, maxLifetimeSeconds: 3600 });
      }
    };

    // fast-check's time limit abandons the request in flight (races it, does not wait): the last
    // one is awaited below, so that a create and its destroy cut off there are done before the
    // host is checked, and its failure, if any, is this test's.
    let last: Promise<void> = Promise.resolve();
    await fc.assert(
      fc.asyncProperty(requestArbitrary(routes, sandbox.id, idSafe), async (req) => {
        last = send(req);
        await last;
      }),
      { seed: SEED, numRuns: 1_000_000, interruptAfterTimeLimit: SECONDS * 1000, markInterruptAsFailure: false, endOnFailure: true },
    );
    await last;
    console.log(
      `fuzz: ${sent} requests (seed ${SEED}); statuses ${JSON.stringify(Object.fromEntries([...statuses].sort()))}; ${neverAnswered.length} never answered; ${created} valid creates destroyed`,
    );
    assert.ok(sent > 100, `fuzzed ${sent} requests`);
    assert.deepEqual(neverAnswered, [], 'every request is answered within its bound');

    // The process lives, the session works, and the host holds exactly that one session.
    assert.equal(serve.child.exitCode, null);
    assert.equal((await sandbox.refresh()).state, 'ready');
    assert.equal(pngSize(await sandbox.screenshot()).width, 1024);
    const live = await client.list();
    const others = live
      .filter((s) => s.id !== sandbox.id)
      .map((s) => ({ id: s.id, state: s.state, createdAt: s.createdAt, endReason: s.endReason, error: s.error }));
    assert.deepEqual(
      live.map((s) => s.id),
      [sandbox.id],
      `no session but the one; also: ${JSON.stringify(others)}`,
    );
    const netns = (await run(['ip', 'netns', 'list'])).stdout.split('\n').filter((l) => l.startsWith(TEST_PREFIX));
    assert.equal(netns.length, 1, `one netns: ${netns.join(', ')}`);
    const links = (await run(['ip', '-o', 'link', 'show'])).stdout.split('\n').filter((l) => l.includes(`: ${TEST_PREFIX}`));
    assert.equal(links.length, 1, `one host veth: ${links.join('\n')}`);
    const dirs = (await readdir(stateDir, { withFileTypes: true })).filter((e) => e.isDirectory() && SESSION_ID_PATTERN.test(e.name));
    assert.deepEqual(
      dirs.map((d) => d.name),
      [sandbox.id],
      'one session directory',
    );
  });
});

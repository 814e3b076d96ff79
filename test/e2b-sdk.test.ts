/**
 * The E2B-compatible surface (issue 26) driven by the `e2b` SDK from npm, unmodified, against a
 * real `sbx serve` and a real sandbox of the `minimal` template: the program below is the kind
 * E2B's docs show, pointed at us by E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY and E2B_DOMAIN
 * only. Each effect is checked through our own API. Then its error cases, another tenant's key,
 * and two attacks on the envd surface with the orchestrator's memory measured.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import http from 'node:http';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import * as e2b from 'e2b';
import { FileType, Filesystem } from '../src/e2b/gen/filesystem/filesystem_pb.js';
import { Process } from '../src/e2b/gen/process/process_pb.js';
import { openKeyStore } from '../src/api/auth/key-store-file.js';
import { memoryOf } from './helpers/raw-http.js';
import { startServe, type ServeProcess } from './helpers/serve.js';

const DOMAIN = 'sbx.test';
const RUN = `run-${process.pid}`;
type Json = Record<string, unknown>;

/** A request with any Host header (fetch will not set one). */
function request(
  url: string,
  opts: { method?: string; headers?: Record<string, string>; body?: Buffer; host?: string } = {},
): Promise<{ status: number; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const target = new URL(url);
    const req = http.request(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname + target.search,
        method: opts.method ?? 'GET',
        headers: { ...(opts.host ? { host: opts.host } : {}), ...opts.headers },
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** CPU time (user + system) a process has used, in ms. */
async function cpuMsOf(pid: number): Promise<number> {
  const fields = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]?.split(' ') ?? [];
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
}

/** Announces `length` bytes of body, sends 64 KiB of them, and waits for the answer. */
function announce(url: string, headers: Record<string, string>, length: number): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const target = new URL(url);
    const req = http.request({
      host: target.hostname,
      port: target.port,
      path: target.pathname,
      method: 'POST',
      headers: { ...headers, 'content-length': String(length) },
      agent: false,
    });
    req.on('response', (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => {
        req.destroy();
        resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts).toString() });
      });
    });
    req.on('error', reject);
    req.write(Buffer.alloc(64 * 1024, 0x20));
  });
}

/** Posts `total` bytes (chunked unless a content-length is given) until the server answers; what it answered, and how much was sent by then. */
function sendChunked(url: string, headers: Record<string, string>, total: number): Promise<{ body: string; sent: number }> {
  return new Promise((resolve, reject) => {
    const target = new URL(url);
    const req = http.request({ host: target.hostname, port: target.port, path: target.pathname, method: 'POST', headers, agent: false });
    let sent = 0;
    let answered = false;
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    const pump = () => {
      while (!answered && sent < total) {
        sent += chunk.length;
        if (!req.write(chunk)) return void req.once('drain', pump);
      }
      if (!answered) req.end();
    };
    req.on('response', (res) => {
      answered = true;
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => {
        req.destroy();
        resolve({ body: Buffer.concat(parts).toString(), sent });
      });
    });
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (answered) return;
      // The server hung up on the body it refused: its answer may or may not have been read.
      if (err.code !== 'EPIPE' && err.code !== 'ECONNRESET') return reject(err);
      answered = true;
      setTimeout(() => resolve({ body: '', sent }), 500);
    });
    pump();
  });
}

describe('the e2b SDK against sbx serve', { timeout: 300_000 }, () => {
  let stateDir = '';
  let serve: ServeProcess;
  let key = '';
  let otherKey = '';
  let sbx: e2b.Sandbox;
  /** The sandbox's envd access token (protected in the SDK: the raw requests below need it). */
  const token = (): string => Reflect.get(sbx, 'envdAccessToken') as string;

  const api = async (method: string, route: string): Promise<{ status: number; json: Json }> => {
    const res = await fetch(`${serve.url}${route}`, { method, headers: { authorization: `Bearer ${key}` } });
    const text = await res.text();
    return { status: res.status, json: text.startsWith('{') ? (JSON.parse(text) as Json) : { text } };
  };

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-e2b-'));
    const store = openKeyStore(stateDir);
    key = store.keys.create('tenant-a').key;
    otherKey = store.keys.create('tenant-b').key;
    store.close();
    serve = await startServe(stateDir, 19_500 + Math.floor(Math.random() * 400), undefined, [], {
      SBX_TENANT_REQUEST_LIMITS: 'tenant-a=1000/100000/100000',
      SBX_PORTS_DOMAIN: DOMAIN,
      SBX_MAX_FILE_BYTES: String(32 * 1024 * 1024),
    });
    // The only change a program needs: where E2B is.
    process.env.E2B_API_URL = serve.url;
    process.env.E2B_SANDBOX_URL = serve.url;
    process.env.E2B_API_KEY = key;
    process.env.E2B_DOMAIN = DOMAIN;
    sbx = await e2b.Sandbox.create({ metadata: { run: RUN, purpose: 'docs-example' }, envs: { GREETING: 'hello from E2B' }, timeoutMs: 300_000 });
  });

  after(async () => {
    if (serve && serve.child.exitCode === null) {
      serve.child.kill('SIGTERM');
      await once(serve.child, 'exit');
    }
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it('Sandbox.create makes an ordinary session of the tenant: listed in GET /v1/sessions with its metadata', async () => {
    const listed = await api('GET', '/v1/sessions');
    const sessions = (listed.json.sessions ?? listed.json) as Array<Json>;
    const mine = (Array.isArray(sessions) ? sessions : []).find((s) => s.id === sbx.sandboxId);
    assert.ok(mine, JSON.stringify(listed.json).slice(0, 400));
    assert.deepEqual(mine.metadata, { run: RUN, purpose: 'docs-example' });
    assert.equal(mine.template, 'minimal', "E2B's base template is our minimal");
    const info = await sbx.getInfo();
    assert.equal(info.sandboxId, sbx.sandboxId);
    assert.equal(info.state, 'running');
    assert.equal(info.metadata.run, RUN);
  });

  it('commands.run streams stdout as it comes, with the env vars of the sandbox and of the call', async () => {
    const chunks: string[] = [];
    const result = await sbx.commands.run('echo "$GREETING"; echo "$EXTRA"; echo oops >&2; for i in 1 2 3; do echo line$i; sleep 0.2; done; id -un', {
      envs: { EXTRA: "it's $(data)" },
      onStdout: (data) => void chunks.push(data),
    });
    assert.equal(result.exitCode, 0);
    assert.equal(result.stdout, `hello from E2B\nit's $(data)\nline1\nline2\nline3\nuser\n`);
    assert.equal(result.stderr, 'oops\n');
    assert.ok(chunks.length >= 3, `stdout came in pieces as it was written (${chunks.length})`);
    await assert.rejects(sbx.commands.run('exit 3'), (err: unknown) => err instanceof e2b.CommandExitError && err.exitCode === 3);
  });

  it('a background command runs until killed; commands.list shows it, then not', async () => {
    const handle = await sbx.commands.run('sleep 300', { background: true });
    assert.ok((await sbx.commands.list()).some((p) => p.pid === handle.pid));
    assert.equal(await handle.kill(), true);
    await assert.rejects(handle.wait(), (err: unknown) => err instanceof e2b.CommandExitError);
    assert.ok(!(await sbx.commands.list()).some((p) => p.pid === handle.pid));
  });

  it('stdin: sendStdin then closeStdin reaches a command started with stdin', async () => {
    const cat = await sbx.commands.run('tr a-z A-Z', { background: true, stdin: true });
    await sbx.commands.sendStdin(cat.pid, 'quiet words\n');
    await sbx.commands.closeStdin(cat.pid);
    const result = await cat.wait();
    assert.equal(result.stdout, 'QUIET WORDS\n');
  });

  it('pty: a terminal takes input, is resized, and its output comes back', async () => {
    const seen: Buffer[] = [];
    const text = () => Buffer.concat(seen).toString();
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (data) => void seen.push(Buffer.from(data)) });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo pty-$((6*7))\n'));
    for (let i = 0; i < 50 && !text().includes('pty-42'); i++) await sleep(100);
    assert.match(text(), /pty-42/);
    await sbx.pty.resize(term.pid, { cols: 100, rows: 30 });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size\n'));
    for (let i = 0; i < 50 && !text().includes('30 100'); i++) await sleep(100);
    assert.match(text(), /30 100/);
    assert.equal(await sbx.pty.kill(term.pid), true);
  });

  it('files: write (parents made), read, list, makeDir, rename, remove; each checked in the guest through our API', async () => {
    const written = await sbx.files.write('notes/a.txt', 'hello e2b\n');
    assert.equal(written.path, '/home/user/notes/a.txt', 'a relative path is from the home directory');
    const ours = await api('GET', `/v1/sessions/${sbx.sandboxId}/files?path=/home/user/notes/a.txt`);
    assert.equal(ours.json.text, 'hello e2b\n');
    assert.equal(await sbx.files.read('/home/user/notes/a.txt'), 'hello e2b\n');
    assert.deepEqual(
      (await sbx.files.list('/home/user/notes')).map((e) => [e.name, e.type]),
      [['a.txt', 'file']],
    );
    assert.equal(await sbx.files.makeDir('/home/user/notes/sub'), true);
    assert.equal(await sbx.files.makeDir('/home/user/notes/sub'), false, 'an existing directory: false, as on E2B');
    await sbx.files.rename('/home/user/notes/a.txt', '/home/user/notes/sub/b.txt');
    assert.equal((await api('GET', `/v1/sessions/${sbx.sandboxId}/files?path=/home/user/notes/sub/b.txt`)).json.text, 'hello e2b\n');
    assert.equal(await sbx.files.exists('/home/user/notes/a.txt'), false);
    await sbx.files.remove('/home/user/notes/sub');
    assert.equal((await api('GET', `/v1/sessions/${sbx.sandboxId}/fs/stat?path=/home/user/notes/sub`)).status, 404);
  });

  it('watchDir sees a file made in the guest', async () => {
    await sbx.files.makeDir('/home/user/w');
    const seen: Array<{ name: string; type: string }> = [];
    const watch = await sbx.files.watchDir('/home/user/w', (event) => void seen.push({ name: event.name, type: event.type }));
    await sbx.commands.run('echo x > /home/user/w/new.txt');
    for (let i = 0; i < 40 && !seen.some((e) => e.name === 'new.txt'); i++) await sleep(100);
    await watch.stop();
    assert.ok(
      seen.some((e) => e.name === 'new.txt' && e.type === 'create'),
      JSON.stringify(seen),
    );
  });

  it('getHost(port) reaches a server started in the guest, through our host-based port routing', async () => {
    await sbx.files.write('/home/user/site/index.txt', 'served by the guest\n');
    const server = await sbx.commands.run('cd /home/user/site && exec python3 -m http.server 8000', { background: true });
    const host = sbx.getHost(8000);
    assert.equal(host, `8000-${sbx.sandboxId}.${DOMAIN}`);
    let answer: { status: number; body: Buffer } = { status: 0, body: Buffer.alloc(0) };
    for (let i = 0; i < 50 && answer.status !== 200; i++) {
      answer = await request(`${serve.url}/index.txt`, { host: `${host}:${new URL(serve.url).port}`, headers: { authorization: `Bearer ${key}` } });
      if (answer.status !== 200) await sleep(100);
    }
    assert.equal(answer.status, 200);
    assert.equal(answer.body.toString(), 'served by the guest\n');
    await server.kill();
  });

  it('the envd host form 49983-<id>.<domain> routes like the E2b-Sandbox-Id header', async () => {
    const health = await request(`${serve.url}/health`, { host: `49983-${sbx.sandboxId}.${DOMAIN}`, headers: { 'x-access-token': token() } });
    assert.equal(health.status, 204);
    const wrong = await request(`${serve.url}/health`, {
      host: `49983-${sbx.sandboxId}.${DOMAIN}`,
      headers: { 'x-access-token': 'eat_aaaaaaaaaaaa_' + 'a'.repeat(43) },
    });
    assert.equal(wrong.status, 401);
  });

  it('Sandbox.list filters by metadata; setTimeout changes the session timeout', async () => {
    const found = await e2b.Sandbox.list({ query: { metadata: { run: RUN } } }).nextItems();
    assert.deepEqual(
      found.map((s) => s.sandboxId),
      [sbx.sandboxId],
    );
    assert.equal((await e2b.Sandbox.list({ query: { metadata: { run: 'another' } } }).nextItems()).length, 0);
    await sbx.setTimeout(600_000);
    assert.equal((await api('GET', `/v1/sessions/${sbx.sandboxId}`)).json.timeoutSeconds, 600);
  });

  it("errors are the SDK's own: unknown sandbox, wrong access token, a missing path; another tenant's key reaches nothing", async () => {
    await assert.rejects(e2b.Sandbox.connect('zzzzzzzzzz'), e2b.NotFoundError);
    await assert.rejects(e2b.Sandbox.list({ apiKey: `sbx_aaaaaaaaaaaa_${'c'.repeat(43)}` }).nextItems(), e2b.AuthenticationError);
    await assert.rejects(sbx.files.read('/home/user/nope.txt'), e2b.NotFoundError);
    await assert.rejects(sbx.files.getInfo('/nope'), e2b.NotFoundError);
    const stolen = await e2b.Sandbox.connect(sbx.sandboxId);
    Reflect.set(stolen, 'envdAccessToken', 'eat_aaaaaaaaaaaa_' + 'b'.repeat(43));
    await assert.rejects(stolen.commands.run('true'), e2b.AuthenticationError);
    // Another tenant: the sandbox does not exist for it.
    await assert.rejects(e2b.Sandbox.getInfo(sbx.sandboxId, { apiKey: otherKey }), e2b.NotFoundError);
    await assert.rejects(e2b.Sandbox.connect(sbx.sandboxId, { apiKey: otherKey }), e2b.NotFoundError);
    assert.equal(await e2b.Sandbox.kill(sbx.sandboxId, { apiKey: otherKey }), false);
    assert.equal((await e2b.Sandbox.list({ apiKey: otherKey }).nextItems()).length, 0);
    assert.equal((await api('GET', `/v1/sessions/${sbx.sandboxId}`)).status, 200, 'still there');
    // An unknown sandbox on the envd side: Connect's not_found (the SDK's NotFoundError).
    const ghost = await request(`${serve.url}/filesystem.Filesystem/Stat`, {
      method: 'POST',
      headers: { 'e2b-sandbox-id': 'zzzzzzzzzz', 'x-access-token': token(), 'content-type': 'application/json' },
      body: Buffer.from('{"path":"/"}'),
    });
    assert.equal(ghost.status, 404);
    assert.equal((JSON.parse(ghost.body.toString()) as Json).code, 'not_found');
  });

  it('a Connect client with the binary codec (connect-node, from the same generated code) runs a process, feeds it by StreamInput, lists a directory', async () => {
    const transport = createConnectTransport({
      baseUrl: serve.url,
      httpVersion: '1.1',
      useBinaryFormat: true,
      interceptors: [
        (next) => (req) => {
          req.header.set('e2b-sandbox-id', sbx.sandboxId);
          req.header.set('x-access-token', token());
          return next(req);
        },
      ],
    });
    const processes = createClient(Process, transport);
    const events: string[] = [];
    let stdout = '';
    for await (const res of processes.start({ process: { cmd: '/bin/bash', args: ['-c', 'echo binary-$((6*7)); echo err >&2'], envs: {} } })) {
      const event = res.event?.event;
      events.push(event?.case ?? '?');
      if (event?.case === 'data' && event.value.output.case === 'stdout') stdout += Buffer.from(event.value.output.value).toString();
      if (event?.case === 'end') assert.equal(event.value.exitCode, 0);
    }
    assert.equal(stdout, 'binary-42\n');
    assert.equal(events[0], 'start');
    assert.equal(events.at(-1), 'end');

    // Client streaming over HTTP/1.1: a start naming the process, then its stdin in order.
    const cat = processes.start({ process: { cmd: '/usr/bin/tr', args: ['a-z', 'A-Z'], envs: {} }, stdin: true });
    const it = cat[Symbol.asyncIterator]();
    const first = await it.next();
    assert.equal(first.value?.event?.event.case, 'start');
    const pid = (first.value?.event?.event.value as { pid: number }).pid;
    const input = (async function* () {
      yield { event: { case: 'start' as const, value: { process: { selector: { case: 'pid' as const, value: pid } } } } };
      for (const word of ['streamed ', 'input\n'])
        yield { event: { case: 'data' as const, value: { input: { input: { case: 'stdin' as const, value: Buffer.from(word) } } } } };
    })();
    await processes.streamInput(input);
    await processes.closeStdin({ process: { selector: { case: 'pid', value: pid } } });
    let upper = '';
    for (let next = await it.next(); next.done !== true; next = await it.next()) {
      const event = next.value.event?.event;
      if (event?.case === 'data' && event.value.output.case === 'stdout') upper += Buffer.from(event.value.output.value).toString();
    }
    assert.equal(upper, 'STREAMED INPUT\n');

    const filesystem = createClient(Filesystem, transport);
    await sbx.files.write('/home/user/bin-codec/one.txt', '1');
    const listed = await filesystem.listDir({ path: '/home/user/bin-codec', depth: 1 });
    assert.deepEqual(
      listed.entries.map((e) => [e.name, e.type, e.size]),
      [['one.txt', FileType.FILE, 1n]],
    );
    await assert.rejects(filesystem.stat({ path: '/home/user/bin-codec/none' }), (err: unknown) => err instanceof ConnectError && err.code === Code.NotFound);
  });

  it('red team: multipart uploads stream to the guest: four 24 MiB uploads at once cost little memory; a file over the cap and more fields than allowed are 413s', async () => {
    const headers = { 'e2b-sandbox-id': sbx.sandboxId, 'x-access-token': token(), 'content-type': 'multipart/form-data; boundary=sbxboundary' };
    const pid = serve.child.pid as number;
    const size = 24 * 1024 * 1024;
    // The peak (VmHWM) counted from here, not from whatever came before.
    await writeFile(`/proc/${pid}/clear_refs`, '5');
    const before = await memoryOf(pid);
    const target = new URL(serve.url);
    const upload = (i: number, bytes = size) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = http.request({ host: target.hostname, port: target.port, path: '/files', method: 'POST', headers, agent: false });
        req.on('response', (res) => {
          const parts: Buffer[] = [];
          res.on('data', (c: Buffer) => parts.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts).toString() }));
        });
        req.on('error', reject);
        const chunk = Buffer.alloc(64 * 1024, 0x41 + i);
        let sent = 0;
        const pump = () => {
          while (sent < bytes) {
            sent += chunk.length;
            if (!req.write(chunk)) return void req.once('drain', pump);
          }
          req.end('\r\n--sbxboundary--\r\n');
        };
        req.write(`--sbxboundary\r\nContent-Disposition: form-data; name="file"; filename="/home/user/big-${i}.bin"\r\n\r\n`);
        pump();
      });
    const answers = await Promise.all([0, 1, 2, 3].map((i) => upload(i)));
    const after = await memoryOf(pid);
    for (const answer of answers) assert.equal(answer.status, 200, answer.body);
    for (const i of [0, 1, 2, 3]) {
      const stat = await api('GET', `/v1/sessions/${sbx.sandboxId}/fs/stat?path=/home/user/big-${i}.bin`);
      assert.equal(stat.json.size, size, JSON.stringify(stat.json));
    }
    console.log(`e2b red team: four 24 MiB multipart uploads at once: peak RSS +${after.peakMiB - before.rssMiB} MiB`);
    // Held whole, the four would be 96 MiB and their copies; streamed, +32-34 MiB in CI runs (sockets, heap).
    assert.ok(after.peakMiB - before.rssMiB < 64, `peak RSS grew ${after.peakMiB - before.rssMiB} MiB for 96 MiB of uploads`);
    await sbx.commands.run('rm -f /home/user/big-*.bin');
    // A file over SBX_MAX_FILE_BYTES (32 MiB here): 413 file_too_large, and nothing of it left in the guest.
    const over = await upload(9, 33 * 1024 * 1024);
    assert.equal(over.status, 413, over.body);
    assert.match(over.body, /file_too_large/);
    assert.equal((await sbx.commands.run('ls -a /home/user | grep -c -e big-9 -e sbx-upload || true')).stdout, '0\n');
    // Parts are counted as they come: 17 fields (16 allowed) are refused.
    const fields = Array.from({ length: 17 }, (_, i) => `--sbxboundary\r\nContent-Disposition: form-data; name="f${i}"\r\n\r\nx\r\n`).join('');
    const tooMany = await request(`${serve.url}/files?path=/home/user/fields.txt`, {
      method: 'POST',
      headers,
      body: Buffer.from(`${fields}--sbxboundary--\r\n`),
    });
    assert.equal(tooMany.status, 413, tooMany.body.toString());
    // The SDK's own uploads still go through.
    await sbx.files.write('/home/user/after-the-flood.txt', 'fits');
    assert.equal(await sbx.files.read('/home/user/after-the-flood.txt'), 'fits');
  });

  it('red team: an oversized Connect message is refused before it is parsed; an unread output stream stays bounded', async () => {
    const headers = { 'e2b-sandbox-id': sbx.sandboxId, 'x-access-token': token(), 'content-type': 'application/connect+json' };
    const pid = serve.child.pid as number;
    const before = await memoryOf(pid);
    // 64 MiB announced: answered at once, nothing read.
    // 64 MiB announced, 64 KiB sent: answered from the length, without waiting for the rest.
    const refused = await announce(`${serve.url}/process.Process/Start`, headers, 64 * 1024 * 1024);
    assert.equal(refused.status, 200, 'a streaming call fails in its end-of-stream message');
    assert.match(refused.body, /resource_exhausted.*larger than configured readMaxBytes 1048576/);
    const afterBig = await memoryOf(pid);
    assert.ok(afterBig.peakMiB - before.peakMiB < 32, `peak RSS grew ${afterBig.peakMiB - before.peakMiB} MiB for a 64 MiB body`);
    // The same 64 MiB without a length (chunked): counted as it comes, cut off at the cap.
    const cpuBefore = await cpuMsOf(pid);
    const chunked = await sendChunked(`${serve.url}/process.Process/Start`, headers, 64 * 1024 * 1024);
    const cpuChunked = (await cpuMsOf(pid)) - cpuBefore;
    const afterChunked = await memoryOf(pid);
    if (chunked.body !== '') assert.match(chunked.body, /resource_exhausted.*larger than configured readMaxBytes 1048576/);
    assert.ok(chunked.sent < 16 * 1024 * 1024, `the server stopped reading after ${chunked.sent} bytes`);
    assert.ok(afterChunked.peakMiB - before.peakMiB < 32, `peak RSS grew ${afterChunked.peakMiB - before.peakMiB} MiB for a chunked 64 MiB body`);
    assert.ok(cpuChunked < 1000, `the orchestrator spent ${cpuChunked} ms of CPU on it`);

    // A command that writes without end, its stream never read.
    const envelope = (json: unknown) => {
      const body = Buffer.from(JSON.stringify(json));
      const head = Buffer.alloc(5);
      head.writeUInt32BE(body.length, 1);
      return Buffer.concat([head, body]);
    };
    const target = new URL(serve.url);
    const req = http.request({ host: target.hostname, port: target.port, path: '/process.Process/Start', method: 'POST', headers, agent: false });
    req.end(envelope({ process: { cmd: '/bin/bash', args: ['-l', '-c', 'yes e2b-flood'] } }));
    const [res] = (await once(req, 'response')) as [http.IncomingMessage];
    res.pause();
    await sleep(4000);
    const flooded = await api('GET', `/v1/sessions/${sbx.sandboxId}/processes`);
    const yes = (flooded.json.processes as Array<Json>).find((p) => String(p.argv).includes('yes e2b-flood'));
    assert.ok(yes, JSON.stringify(flooded.json).slice(0, 300));
    const atFour = Number(yes.outputBytes);
    await sleep(2000);
    const again = (await api('GET', `/v1/sessions/${sbx.sandboxId}/processes`)).json.processes as Array<Json>;
    const atSix = Number(again.find((p) => p.pid === yes.pid)?.outputBytes);
    const mem = await memoryOf(pid);
    assert.equal((await sbx.commands.run('echo still-served')).stdout, 'still-served\n');
    console.log(
      `e2b red team: 64 MiB announced: peak RSS +${afterBig.peakMiB - before.peakMiB} MiB; chunked: ${chunked.sent} B taken, peak +${afterChunked.peakMiB - before.peakMiB} MiB, ${cpuChunked} ms CPU; unread flood: ${atFour} B read at 4 s, ${atSix} B at 6 s, RSS +${mem.rssMiB - before.rssMiB} MiB`,
    );
    res.destroy();
    await sbx.commands.kill(Number(yes.pid));
    assert.ok(atSix - atFour < 1024 * 1024, `the unread process was held back (${atFour} then ${atSix} bytes read from it)`);
    assert.ok(mem.rssMiB - before.rssMiB < 48, `RSS grew ${mem.rssMiB - before.rssMiB} MiB with an unread flood`);
  });

  it('red team: a Start body that is not exactly one plain envelope starts nothing (a second message, a compressed flag, a cut one)', async () => {
    const headers = { 'e2b-sandbox-id': sbx.sandboxId, 'x-access-token': token(), 'content-type': 'application/connect+json' };
    const envelope = (json: unknown, flags = 0) => {
      const body = Buffer.from(JSON.stringify(json));
      const head = Buffer.alloc(5);
      head[0] = flags;
      head.writeUInt32BE(body.length, 1);
      return Buffer.concat([head, body]);
    };
    const start = (marker: string) => ({ process: { cmd: '/usr/bin/touch', args: [`/tmp/${marker}`] } });
    const post = (body: Buffer) => request(`${serve.url}/process.Process/Start`, { method: 'POST', headers, body });
    const twice = await post(Buffer.concat([envelope(start('e2b-first')), envelope(start('e2b-second'))]));
    assert.equal(twice.status, 200);
    assert.match(twice.body.toString(), /unimplemented.*extra input message/);
    const compressed = await post(envelope(start('e2b-compressed'), 1));
    assert.match(compressed.body.toString(), /invalid_argument/);
    const cut = await post(envelope(start('e2b-cut')).subarray(0, 12));
    assert.match(cut.body.toString(), /invalid_argument.*incomplete envelope/);
    for (const marker of ['e2b-first', 'e2b-second', 'e2b-compressed', 'e2b-cut']) assert.equal(await sbx.files.exists(`/tmp/${marker}`), false, marker);
    // The plain case still runs.
    assert.match((await post(envelope(start('e2b-plain')))).body.toString(), /"end"/);
    assert.equal(await sbx.files.exists('/tmp/e2b-plain'), true);
  });

  it('pause and connect: the sandbox pauses and resumes, or the SDK says why it cannot', async () => {
    let paused = false;
    try {
      paused = await sbx.pause();
    } catch (err) {
      // A runtime without pause: a clear SandboxError, not a silent false.
      assert.ok(err instanceof e2b.SandboxError, String(err));
      assert.match(String(err), /e2b_unsupported: pause/);
      console.log(`e2b pause on this runtime: ${String(err).slice(0, 200)}`);
      return;
    }
    assert.equal(paused, true);
    console.log('e2b pause: paused');
    assert.equal((await sbx.getInfo()).state, 'paused');
    const again = await e2b.Sandbox.connect(sbx.sandboxId);
    assert.equal((await again.getInfo()).state, 'running');
    assert.equal((await again.commands.run('echo back')).stdout, 'back\n');
  });

  it('kill ends the session: gone from GET /v1/sessions, and from E2B', async () => {
    await sbx.kill();
    assert.equal(await e2b.Sandbox.kill(sbx.sandboxId), false, 'a second kill finds nothing');
    await assert.rejects(e2b.Sandbox.connect(sbx.sandboxId), e2b.NotFoundError);
    const got = await api('GET', `/v1/sessions/${sbx.sandboxId}`);
    assert.notEqual(got.json.state, 'ready');
    const listed = await api('GET', '/v1/sessions');
    const sessions = (listed.json.sessions ?? []) as Array<Json>;
    assert.ok(!sessions.some((s) => s.id === sbx.sandboxId && s.state === 'ready'));
  });
});

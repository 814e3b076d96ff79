/**
 * Red team, issue 11 point 2: a hostile guest against a real `sbx serve` (its own process,
 * real runc sandboxes). The guest's desktop user plants code where Python, bash and sshd
 * would once have run it for the capture helper; then the helpers themselves are replaced
 * from the host, as a guest root could, with ones that lie: a forged 16383x16383 header, a
 * length of 0xFFFFFFF0, a 10 MB stderr flood, a list of 0xFFFFFFFF changed rectangles, a
 * zip bomb for a rectangle, a bash whose end marker never ends. Each must
 * fail only its own request (a 502 naming the guest, or a tool error), the other session must
 * keep answering, and the orchestrator must not pay for it: its RSS growth (VmHWM, reset
 * before each attack) stays under 50 MiB and /healthz, polled every 20 ms meanwhile, answers
 * within 50 ms at the 99th percentile. The figures are printed as test diagnostics.
 */
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { appendFile, chmod, mkdtemp, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { after, before, describe, it, type TestContext } from 'node:test';
import { vncServerCommand } from '../src/guest/contract.js';
import { pngSize } from './helpers/guest.js';
import { healthzP99Limit, percentile } from './helpers/host-cost.js';
import { TEST_PREFIX, TEST_SUBNET } from './helpers/orchestrator.js';

const execFileAsync = promisify(execFile);
const REPO = path.resolve(import.meta.dirname, '..');
const SCREEN = { width: 1024, height: 768 };
const MAX_RSS_GROWTH = 50 * 1024 * 1024;
const HEALTHZ_INTERVAL_MS = 20;
/** How long each attack on the capture channel is repeated. */
const ATTACK_MS = 4_000;

let port = 0;
let stateDir = '';
let server: ChildProcess | undefined;

async function freePort(): Promise<number> {
  const probe = net.createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port: free } = probe.address() as net.AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return free;
}

async function startServer(): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(REPO, 'src/cli/main.ts'), 'serve', '--host', '127.0.0.1', '--port', String(port), '--state-dir', stateDir, '--runtime', 'container'], {
    cwd: REPO,
    env: {
      ...process.env,
      SBX_RESOURCE_PREFIX: TEST_PREFIX,
      SBX_SUBNET: TEST_SUBNET,
      SBX_IMAGES_DIR: process.env.SBX_IMAGES_DIR || '/var/lib/sandboxes/images',
      SBX_TEMPLATE: 'minimal',
      SBX_LOG_LEVEL: process.env.SBX_TEST_LOG_LEVEL || 'error',
      // /healthz every 20 ms and screenshots back to back measure the host's cost, not the
      // tenant request limits (test/redteam-api.test.ts tests those).
      SBX_TENANT_REQUEST_LIMITS: 'local=1000/10000/10000',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`sbx serve exited with ${child.exitCode}`);
    if (await fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false)) return child;
    await sleep(200);
  }
  child.kill('SIGKILL');
  throw new Error('sbx serve did not come up');
}

interface Answer {
  status: number;
  body: Buffer;
  json(): Record<string, unknown>;
}

async function api(method: string, url: string, body?: unknown): Promise<Answer> {
  const res = await fetch(`http://127.0.0.1:${port}${url}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const bytes = Buffer.from(await res.arrayBuffer());
  return { status: res.status, body: bytes, json: () => JSON.parse(bytes.toString('utf8')) as Record<string, unknown> };
}

async function createSession(): Promise<string> {
  const res = await api('POST', '/v1/sessions', { ...SCREEN, timeoutSeconds: 600 });
  assert.equal(res.status, 201, res.body.toString());
  return res.json().id as string;
}

async function bash(id: string, input: { command: string } | { restart: true }): Promise<{ isError: boolean; text: string }> {
  const res = await api('POST', `/v1/sessions/${id}/tools/bash`, input);
  assert.equal(res.status, 200, res.body.toString());
  const result = res.json() as { is_error?: boolean; content: Array<{ text?: string }> };
  return { isError: result.is_error === true, text: result.content.map((c) => c.text ?? '').join('') };
}

/** The full screen as a PNG: asserts a 200 of the screen's size. */
async function screenshotOk(id: string): Promise<void> {
  const res = await api('GET', `/v1/sessions/${id}/screenshot`);
  assert.equal(res.status, 200, `the neighbour's screenshot: ${res.body.toString().slice(0, 300)}`);
  assert.deepEqual(pngSize(res.body), SCREEN);
}

/** A screenshot the guest answers with a lie: a 502 that names the guest, at once. */
async function screenshotRefused(id: string, message: RegExp): Promise<void> {
  const res = await api('GET', `/v1/sessions/${id}/screenshot`);
  assert.equal(res.status, 502, res.body.toString().slice(0, 300));
  const error = res.json().error as { code: string; message: string };
  assert.equal(error.code, 'guest_protocol_error');
  assert.match(error.message, message);
}

function statusField(text: string, field: string): number {
  const kb = new RegExp(`^${field}:\\s+(\\d+) kB$`, 'm').exec(text)?.[1];
  assert.ok(kb, `${field} in /proc/<pid>/status`);
  return Number(kb) * 1024;
}

/**
 * Watches the orchestrator while an attack runs: its peak RSS (VmHWM, reset first through
 * clear_refs) against the RSS before, and /healthz latency, one request every 20 ms.
 */
async function measured<T>(t: TestContext, name: string, attacked: string, attack: () => Promise<T>): Promise<T> {
  const pid = server?.pid as number;
  await writeFile(`/proc/${pid}/clear_refs`, '5'); // resets VmHWM to the current RSS
  const baseline = statusField(await readFile(`/proc/${pid}/status`, 'utf8'), 'VmRSS');
  await api('GET', '/metrics'); // starts the orchestrator's own event-loop delay histogram afresh
  const cpuBefore = await cpuMs(pid);
  const guestCpuBefore = await guestCpuMs(attacked);
  // The same polling without the attack first: this host's own noise sets the latency limit.
  const control: number[] = [];
  let quiet = true;
  const controlPoller = pollHealthz(control, () => quiet);
  await sleep(1_500);
  quiet = false;
  await controlPoller;
  const latencies: number[] = [];
  let running = true;
  const poller = pollHealthz(latencies, () => running);
  let result: T;
  try {
    result = await attack();
    await sleep(300); // whatever the guest still sends after the answer
  } finally {
    running = false;
    await poller;
  }
  const peak = statusField(await readFile(`/proc/${pid}/status`, 'utf8'), 'VmHWM');
  const lag = eventLoopLag((await api('GET', '/metrics')).body.toString());
  const cpu = (await cpuMs(pid)) - cpuBefore;
  const guestCpu = Math.round((await guestCpuMs(attacked)) - guestCpuBefore);
  latencies.sort((a, b) => a - b);
  const p99 = latencies[Math.min(latencies.length - 1, Math.ceil(latencies.length * 0.99) - 1)] as number;
  const growthMiB = (peak - baseline) / 1024 / 1024;
  t.diagnostic(`${name}: RSS ${(baseline / 1048576).toFixed(1)} MiB, peak +${growthMiB.toFixed(1)} MiB; /healthz p99 ${p99.toFixed(1)} ms, max ${latencies.at(-1)?.toFixed(1)} ms over ${latencies.length} requests; event-loop delay p99 ${lag.p99} ms, max ${lag.max} ms; CPU: orchestrator ${cpu} ms, attacked sandbox ${guestCpu} ms`);
  assert.ok(latencies.length >= 5, 'healthz was polled during the attack');
  assert.ok(peak - baseline < MAX_RSS_GROWTH, `RSS grew by ${growthMiB.toFixed(1)} MiB`);
  assert.ok(p99 < healthzP99Limit(control), `/healthz p99 ${p99.toFixed(1)} ms (limit ${healthzP99Limit(control).toFixed(1)} ms, without the attack p99 ${percentile(control, 0.99).toFixed(1)} ms)`);
  return result;
}

/** /healthz, one request every HEALTHZ_INTERVAL_MS while `go()` says so: the latencies in ms. */
async function pollHealthz(latencies: number[], go: () => boolean): Promise<void> {
  while (go()) {
    const started = performance.now();
    const res = await fetch(`http://127.0.0.1:${port}/healthz`);
    await res.arrayBuffer();
    latencies.push(performance.now() - started);
    await sleep(Math.max(0, HEALTHZ_INTERVAL_MS - (performance.now() - started)));
  }
}

/** CPU time (user and system) a process has used, in ms (clock ticks of 10 ms). */
async function cpuMs(pid: number): Promise<number> {
  const fields = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]?.split(' ') ?? [];
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** CPU time a container sandbox has used, in ms (its cgroup's cpuacct; NaN where there is none). */
async function guestCpuMs(id: string): Promise<number> {
  const usage = `/sys/fs/cgroup/cpuacct/${TEST_PREFIX.slice(0, -1)}/${TEST_PREFIX}${id}/cpuacct.usage`;
  return readFile(usage, 'utf8').then((ns) => Number(ns) / 1e6, () => Number.NaN);
}

/** The orchestrator's event-loop delay since the previous scrape (prom-client resets it on each). */
function eventLoopLag(metrics: string): { p99: string; max: string } {
  const read = (name: string) => {
    const seconds = new RegExp(`^sandbox_orchestrator_nodejs_eventloop_lag_${name}_seconds (\\S+)$`, 'm').exec(metrics)?.[1];
    return seconds === undefined ? '?' : (Number(seconds) * 1000).toFixed(1);
  };
  return { p99: read('p99'), max: read('max') };
}

/** Replaces a file in a container sandbox's root from the host, as a guest root could. */
async function plantFromHost(id: string, guestPath: string, content: string): Promise<void> {
  // Through its init's view of its root: the overlay's mount point is the runtime's business.
  const target = await inGuestRoot(id, guestPath);
  const temporary = `${target}.planted`;
  await writeFile(temporary, content);
  await chmod(temporary, 0o755);
  await rename(temporary, target);
}

/** A path in a container sandbox's root as its init sees it (its /run is its own tmpfs). */
async function inGuestRoot(id: string, guestPath: string): Promise<string> {
  const { stdout } = await execFileAsync('runc', ['--root', `/run/${TEST_PREFIX}runc`, 'state', `${TEST_PREFIX}${id}`]);
  const { pid } = JSON.parse(stdout) as { pid: number };
  return `/proc/${pid}/root${guestPath}`;
}

/** Python 3 in the guest, isolated, with the session's screen size filled in. */
function fakeCapture(body: string): string {
  return `#!/usr/bin/python3 -I\nimport struct, sys, time\nW, H, STRIDE = ${SCREEN.width}, ${SCREEN.height}, ${SCREEN.width * 4}\n${body}`;
}

const FORGED_HEADER = fakeCapture(`
for _ in sys.stdin.buffer:
    sys.stdout.buffer.write(struct.pack('<4sIIII', b'SBXF', 16383, 16383, 0, 65536) + bytes(65536))
    sys.stdout.buffer.flush()
`);

const HUGE_LENGTH = fakeCapture(`
sys.stdin.buffer.readline()
sys.stdout.buffer.write(struct.pack('<4sIIII', b'SBXF', W, H, STRIDE, 0xFFFFFFF0))
chunk = bytes(1 << 20)
while True:
    sys.stdout.buffer.write(chunk)
    sys.stdout.buffer.flush()
`);

const STDERR_FLOOD = fakeCapture(`
sys.stdin.buffer.readline()
chunk = b'E' * 65536
for _ in range(160):  # 10 MiB
    sys.stderr.buffer.write(chunk)
    sys.stderr.buffer.flush()
time.sleep(60)
`);

/**
 * Helpers that answer the first request honestly (a whole frame of the screen's size, all
 * black), then send changed rectangles that lie: `second()` makes that message.
 */
function afterFirstFrame(second: string): string {
  return fakeCapture(`
import os, zlib
FULL = struct.pack('<4sIIII', b'SBXF', W, H, STRIDE, STRIDE * H) + bytes(STRIDE * H)
${second}
first = True
for _ in sys.stdin.buffer:
    sys.stdout.buffer.write(FULL if first else second())
    sys.stdout.buffer.flush()
    first = False
`);
}

/** A rectangle list of 0xFFFFFFFF entries in 2 MiB (a length the header allows), then an endless stream. */
const HUGE_RECT_LIST = afterFirstFrame(`
def second():
    body = struct.pack('<II', 3, 0xFFFFFFFF) + struct.pack('<IIIII', 0, 0, 1, 1, 1) * ((2 * 1024 * 1024 - 8) // 20)
    sys.stdout.buffer.write(struct.pack('<4sIIII', b'SBXR', W, H, STRIDE, len(body)) + body)
    chunk = bytes(1 << 20)
    while True:
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
`);

/** One full-screen rectangle whose zlib stream inflates to 256 MiB (the rectangle is 3 MiB). */
const ZIP_BOMB = afterFirstFrame(`
BOMB_FILE = '/tmp/.sbx-zip-bomb'
if not os.path.exists(BOMB_FILE):
    c = zlib.compressobj(9)
    with open(BOMB_FILE + '.new', 'wb') as f:
        for _ in range(256):
            f.write(c.compress(bytes(1 << 20)))
        f.write(c.flush())
    os.rename(BOMB_FILE + '.new', BOMB_FILE)
BOMB = open(BOMB_FILE, 'rb').read()
def second():
    body = struct.pack('<IIIIIII', 3, 1, 0, 0, W, H, len(BOMB)) + BOMB
    return struct.pack('<4sIIII', b'SBXR', W, H, STRIDE, len(body)) + body
`);

/**
 * A bash that speaks the bash tool's framing (see src/tools/bash/bash-shell.ts) just well
 * enough to start, then answers a command with the start of its end marker, nonce and all,
 * followed by megabytes of digits, and never the end.
 */
const UNTERMINATED_MARKER = `#!/usr/bin/python3 -I
import os, re, sys, time
NONCE = re.compile(rb"<<sbx:%s:%d>>[^']*' ([0-9a-f]{32})")
def next_nonce():
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            sys.exit(0)
        found = NONCE.search(line)
        if found:
            return found.group(1)
out = sys.stdout.buffer
out.write(b'\\n<<sbx:' + next_nonce() + b':' + str(os.getpid()).encode() + b'>>\\n')
out.flush()
nonce = next_nonce()
while sys.stdin.buffer.read(1) not in (b'\\0', b''):
    pass
out.write(b'\\n<<sbx:' + nonce + b':')
chunk = b'7' * 65536
for _ in range(128):  # 8 MiB
    out.write(chunk)
    out.flush()
time.sleep(60)
`;

describe('a hostile guest fails only its own session, and the host does not pay for it', { timeout: 600_000 }, () => {
  let victim = '';
  let neighbour = '';

  before(async () => {
    port = await freePort();
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-redteam-'));
    server = await startServer();
    [victim, neighbour] = await Promise.all([createSession(), createSession()]);
    await screenshotOk(neighbour);
  });

  after(async () => {
    if (server && server.exitCode === null) {
      for (const id of [victim, neighbour].filter(Boolean)) await api('DELETE', `/v1/sessions/${id}`).catch(() => undefined);
      server.kill('SIGTERM');
      await Promise.race([once(server, 'exit'), sleep(30_000)]);
      if (server.exitCode === null) server.kill('SIGKILL');
    }
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it("code the desktop user plants for the helpers (usercustomize.py, ~/.bashrc, ~/.ssh/rc, ~/.x11vncrc) never runs", async () => {
    const plant = await bash(victim, {
      command: [
        'site=$(python3 -c "import site; print(site.getusersitepackages())")',
        'mkdir -p "$site" ~/.ssh || exit 1',
        // Would answer the forged header that once took the orchestrator to 900 MB.
        `cat > "$site/usercustomize.py" <<'PY'
import os, struct, sys
open('/tmp/usercustomize-ran', 'w').close()
if sys.argv and sys.argv[0].endswith('sbx-capture'):
    for _ in sys.stdin.buffer:
        sys.stdout.buffer.write(struct.pack('<4sIIII', b'SBXF', 16383, 16383, 0, 65536) + bytes(65536))
        sys.stdout.buffer.flush()
    sys.exit(0)
PY`,
        // First in ~/.bashrc: Debian's returns at once when not interactive.
        `{ printf '%s\\n' 'case $BASH_EXECUTION_STRING in *sbx-capture*) : > /tmp/bashrc-ran ;; esac'; cat ~/.bashrc; } > ~/.bashrc.new`,
        'mv ~/.bashrc.new ~/.bashrc',
        "printf '%s\\n' ': > /tmp/sshrc-ran' > ~/.ssh/rc",
        // The plants work: an ordinary python imports usercustomize, a bash run by sshd (which
        // it tells by SSH_CLIENT and a shell level below 2) reads ~/.bashrc.
        'python3 -c pass && test -e /tmp/usercustomize-ran && echo python-imports-it',
        "SHLVL=0 SSH_CLIENT='1 2 3' /bin/bash -c ': sbx-capture' && test -e /tmp/bashrc-ran && echo bash-reads-it",
        'rm -f /tmp/usercustomize-ran /tmp/bashrc-ran',
        // A capture helper already running would not see the plants: the next capture starts one.
        'pkill -u "$(id -u)" -f /usr/local/bin/sbx-capture || true',
      ].join('\n'),
    });
    assert.equal(plant.isError, false, plant.text);
    assert.match(plant.text, /python-imports-it/);
    assert.match(plant.text, /bash-reads-it/);

    for (let i = 0; i < 2; i++) await screenshotOk(victim);
    const ran = await bash(victim, { command: 'ls /tmp/usercustomize-ran /tmp/bashrc-ran /tmp/sshrc-ran 2>/dev/null; pgrep -fa sbx-capture' });
    assert.doesNotMatch(ran.text, /-ran/, 'no planted file ran');
    assert.match(ran.text, /python3 -I \/usr\/local\/bin\/sbx-capture/, `the helper runs isolated: ${ran.text}`);

    // x11vnc (the views' server, started as the user when a view opens) would read
    // ~/.x11vncrc: one that sends its log to a file of the user's choosing shows whether it
    // was read. The view's command is run as the orchestrator will: as the user, over SSH.
    const vnc = await bash(victim, {
      command: [
        "printf '%s\\n' 'o /tmp/x11vncrc-ran' > ~/.x11vncrc",
        'timeout 3 x11vnc -display :99 -localhost -rfbport 5977 -quiet >/dev/null 2>&1; test -e /tmp/x11vncrc-ran && echo x11vnc-reads-it',
        'rm -f /tmp/x11vncrc-ran',
        `timeout 3 sh -c '${vncServerCommand(99)}' > /tmp/view-vnc.out 2>&1`,
        'ls /tmp/x11vncrc-ran 2>/dev/null; cat /tmp/view-vnc.out',
      ].join('\n'),
    });
    assert.match(vnc.text, /x11vnc-reads-it/);
    assert.doesNotMatch(vnc.text, /x11vncrc-ran/, "the view's x11vnc did not read it");
    assert.match(vnc.text, /PORT=5900/, `the view's x11vnc served port 5900: ${vnc.text}`);
  });

  it('control: the same load without an attack (both sessions take screenshots)', async (t) => {
    await measured(t, 'no attack', victim, async () => {
      const until = performance.now() + ATTACK_MS;
      while (performance.now() < until) await Promise.all([screenshotOk(victim), screenshotOk(neighbour)]);
    });
  });

  const attacks: Array<[string, string, RegExp]> = [
    ['a forged 16383x16383 header (stride 0, 64 KiB of payload)', FORGED_HEADER, /bad frame: its size 16383x16383 is not the screen's 1024x768/],
    ['a header announcing 0xFFFFFFF0 bytes, then an endless stream', HUGE_LENGTH, /bad frame: a whole frame of 1024x768 is 3145728 bytes, not 4294967280/],
    ['a 10 MiB stderr flood', STDERR_FLOOD, /wrote more than 4096 bytes of errors/],
  ];
  for (const [name, script, message] of attacks) {
    it(`a capture helper replaced with one sending ${name}: 502 for its session only`, async (t) => {
      await plantFromHost(victim, '/usr/local/bin/sbx-capture', script);
      // The helper already running keeps the old file: stop it, and let its channel close.
      await bash(victim, { command: 'pkill -u "$(id -u)" -f /usr/local/bin/sbx-capture; true' });
      await sleep(500);
      await measured(t, name, victim, async () => {
        // Each failure closes the channel; the next request starts the (replaced) helper again.
        // Attacked for a few seconds, so that /healthz's 99th percentile is one of many.
        const until = performance.now() + ATTACK_MS;
        while (performance.now() < until) {
          const started = performance.now();
          await Promise.all([screenshotRefused(victim, message), screenshotOk(neighbour)]);
          assert.ok(performance.now() - started < 10_000, 'failed at once, not at the capture timeout');
        }
      });
    });
  }

  const rectAttacks: Array<[string, string, RegExp]> = [
    ['a list of 0xFFFFFFFF changed rectangles in 2 MiB, then an endless stream', HUGE_RECT_LIST, /bad frame: 4294967295 rectangles in a payload of \d+ bytes \(at most 64\)/],
    ['a zip bomb: a full-screen rectangle whose stream inflates to 256 MiB', ZIP_BOMB, /bad frame: rectangle 1024x768 at 0,0 does not inflate to its 3145728 bytes/],
  ];
  for (const [name, script, message] of rectAttacks) {
    it(`a capture helper replaced with one sending ${name}: 502 for its session only`, async (t) => {
      await plantFromHost(victim, '/usr/local/bin/sbx-capture', script);
      await bash(victim, { command: 'pkill -u "$(id -u)" -f /usr/local/bin/sbx-capture; true' });
      await sleep(500);
      await measured(t, name, victim, async () => {
        // The lie comes in the helper's second answer; each failure starts a new helper, whose
        // first (honest) frame is a 200.
        const until = performance.now() + ATTACK_MS;
        while (performance.now() < until) {
          const started = performance.now();
          await Promise.all([(async () => {
            await screenshotOk(victim);
            await screenshotRefused(victim, message);
          })(), screenshotOk(neighbour)]);
          assert.ok(performance.now() - started < 10_000, 'failed at once, not at the capture timeout');
        }
      });
    });
  }

  it('a bash whose end-of-command marker never ends (then 8 MiB): a tool error, the shell closed', async (t) => {
    await plantFromHost(victim, '/usr/local/bin/bash', UNTERMINATED_MARKER);
    // The next shell is found on PATH (/usr/local/bin first): the fake.
    assert.equal((await bash(victim, { restart: true })).isError, false);
    const result = await measured(t, 'an unterminated marker and 8 MiB', victim, async () => {
      const [answer] = await Promise.all([bash(victim, { command: 'echo hello' }), screenshotOk(neighbour)]);
      return answer;
    });
    assert.equal(result.isError, true);
    assert.match(result.text, /the shell in the guest sent an end-of-command marker that never ends, which no shell of ours does, so it was closed/);
    assert.equal((await bash(neighbour, { command: 'echo still here' })).text, 'still here');
  });

  it('a command whose output passes its cap (a find printing 10 MiB for a directory view): a tool error', async (t) => {
    await plantFromHost(victim, '/usr/bin/find', '#!/bin/sh\nexec head -c 10485760 /dev/zero\n');
    const answer = await measured(t, 'a 10 MiB directory listing', victim, async () => {
      const [res] = await Promise.all([
        api('POST', `/v1/sessions/${victim}/tools/str_replace_based_edit_tool`, { command: 'view', path: '/tmp' }),
        screenshotOk(neighbour),
      ]);
      return res;
    });
    assert.equal(answer.status, 200, answer.body.toString());
    const result = answer.json() as { is_error?: boolean; content: Array<{ text?: string }> };
    assert.equal(result.is_error, true);
    assert.match(result.content[0]?.text ?? '', /printed more than 8388608 bytes while listing \/tmp/);
  });

  it('every overrun is counted by channel and reason', async () => {
    const metrics = (await api('GET', '/metrics')).body.toString();
    for (const [channel, reason] of [
      ['capture', 'bad_size'],
      ['capture', 'bad_length'],
      ['capture', 'stderr_overrun'],
      ['capture', 'bad_rects'],
      ['bash', 'marker_overrun'],
      ['exec', 'output_overrun'],
    ]) {
      const line = new RegExp(`^sandbox_guest_protocol_errors_total\\{channel="${channel}",reason="${reason}"\\} (\\d+)$`, 'm').exec(metrics);
      assert.ok(line && Number(line[1]) >= 1, `${channel}/${reason} counted`);
    }
  });

  it("sshd's logins stay in the guest: a burst of connections to port 22 adds nothing to the console log", async () => {
    const consoleLog = path.join(stateDir, neighbour, 'console.log');
    const sshdLog = await inGuestRoot(neighbour, '/run/sandbox/sshd.log');
    const before = { console: (await stat(consoleLog)).size, sshd: (await stat(sshdLog)).size };
    const loop = await bash(neighbour, {
      command: "for i in $(seq 200); do exec 3<>/dev/tcp/127.0.0.1/22 && printf 'SSH-2.0-probe\\r\\n' >&3 && exec 3<&-; done; sleep 1",
    });
    assert.equal(loop.isError, false, loop.text);
    const grown = { console: (await stat(consoleLog)).size - before.console, sshd: (await stat(sshdLog)).size - before.sshd };
    assert.ok(grown.sshd > 0, 'sshd logged the connections, in the guest');
    assert.equal(grown.console, 0, 'the console log did not grow');
    // A flood that outran it all: the guest's init empties the log once it passes 1 MiB.
    await appendFile(sshdLog, Buffer.alloc(2 * 1024 * 1024, 0x2e));
    const deadline = Date.now() + 5_000;
    while ((await stat(sshdLog)).size > 1024 * 1024 && Date.now() < deadline) await sleep(100);
    assert.ok((await stat(sshdLog)).size <= 1024 * 1024, 'emptied by sandbox-init');
  });
});

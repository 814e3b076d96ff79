/**
 * Red team, issue 11 point 2: a hostile guest against a real `sbx serve` (its own process,
 * real runc sandboxes). The guest's desktop user plants code where Python, bash and sshd
 * would once have run it for the capture helper; then the helpers themselves are replaced
 * from the host, as a guest root could, with ones that lie: a forged 16383x16383 header, a
 * length of 0xFFFFFFF0, a 10 MB stderr flood, a list of 0xFFFFFFFF changed rectangles, a
 * zip bomb for a rectangle, a bash whose end marker never ends. Each must
 * fail only its own request (a 502 naming the guest, or a tool error), the other session must
 * keep answering, and the orchestrator must not pay for it. What it pays is measured against a
 * control in the same run (helpers/attack-cost.ts; issue 21: wall-clock limits on a shared
 * 2-core machine measured its neighbours): per attack, its main thread's CPU and the bytes it
 * read stay within what the protocol lets through; its peak RSS grows less than 50 MiB; and
 * its event-loop delay p99 under attack stays within 8 ms (of the loop's own time) of the
 * control's. The figures are printed as test diagnostics.
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
import { measureAttackCost, ORCHESTRATOR_NICE, type AttackCost, type AttackCostOptions } from './helpers/attack-cost.js';
import { GRABBER_RESTART_AFTER_LIE_MS } from '../src/computer/desktop.js';
import { raisePriority } from './helpers/host-cost.js';
import { TEST_PREFIX, TEST_SUBNET } from './helpers/orchestrator.js';

const execFileAsync = promisify(execFile);
const REPO = path.resolve(import.meta.dirname, '..');
const SCREEN = { width: 1024, height: 768 };
const MAX_RSS_GROWTH = 50 * 1024 * 1024;

let port = 0;
let stateDir = '';
let server: ChildProcess | undefined;
let neighbour = '';

async function freePort(): Promise<number> {
  const probe = net.createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port: free } = probe.address() as net.AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return free;
}

async function startServer(): Promise<ChildProcess> {
  const command = [
    process.execPath,
    '--import',
    'tsx',
    path.join(REPO, 'src/cli/main.ts'),
    'serve',
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '--state-dir',
    stateDir,
    '--runtime',
    'container',
  ];
  const child = spawn(command[0]!, command.slice(1), {
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
    if (
      await fetch(`http://127.0.0.1:${port}/healthz`).then(
        (r) => r.ok,
        () => false,
      )
    )
      return child;
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

/** What one attack may cost the orchestrator beyond the control (see measured). */
interface Bounds {
  /** Main-thread (event-loop) CPU per attack, ms. */
  mainCpuMs: number;
  /** Bytes read per attack (what the guest sends until it is cut off, decrypted on the event loop). */
  readBytes: number;
  /** Whether the event-loop delay under attack is held to the control's (LOOP_DELAY_MARGIN_MS); see TOOL_OUTPUT. */
  loopDelay?: false;
}

/**
 * How much more the event loop may be delayed while an attack runs than in the control
 * windows of the same run (the median over windows of the orchestrator's own event-loop
 * delay p99), in ms of the loop's own time: multiplied by how much the machine's other work
 * stretched the main thread's time meanwhile (AttackCost.stretch, measured: 1 when idle, 5
 * and more on a 2-core machine shared with other test runs). "A few ms": these attacks once
 * cost it tens on a quiet machine (issue 21: 43.7 ms against 15.9 without an attack).
 */
const LOOP_DELAY_MARGIN_MS = 8;

/**
 * Measures an attack against its control in the same run (helpers/attack-cost.ts): windows
 * of the neighbour's screenshots alone, alternating with windows where `attack` is also
 * repeated. Asserts the orchestrator's peak RSS growth (VmHWM, reset first), its main-thread
 * CPU and the bytes it read per attack beyond the control, and its event-loop delay under
 * attack within a few ms of the control's. The figures are printed as a test diagnostic.
 */
async function measured(
  t: TestContext,
  name: string,
  attacked: string,
  attack: () => Promise<void>,
  bounds: Bounds,
  options: Partial<AttackCostOptions> = {},
): Promise<AttackCost> {
  const pid = server?.pid as number;
  await writeFile(`/proc/${pid}/clear_refs`, '5'); // resets VmHWM to the current RSS
  const baseline = statusField(await readFile(`/proc/${pid}/status`, 'utf8'), 'VmRSS');
  const guestCpuBefore = await guestCpuMs(attacked);
  const cost = await measureAttackCost({
    pid,
    url: `http://127.0.0.1:${port}`,
    metricsPrefix: 'sandbox_orchestrator_',
    background: () => screenshotOk(neighbour),
    attack,
    ...options,
  });
  const peak = statusField(await readFile(`/proc/${pid}/status`, 'utf8'), 'VmHWM');
  const guestCpu = Math.round((await guestCpuMs(attacked)) - guestCpuBefore);
  const growthMiB = (peak - baseline) / 1024 / 1024;
  t.diagnostic(`${name}: RSS ${(baseline / 1048576).toFixed(1)} MiB, peak +${growthMiB.toFixed(1)} MiB; attacked sandbox CPU ${guestCpu} ms; ${cost.summary}`);
  assert.ok(cost.attack.steps >= 5, `the attack ran ${cost.attack.steps} times`);
  assert.ok(peak - baseline < MAX_RSS_GROWTH, `RSS grew by ${growthMiB.toFixed(1)} MiB`);
  assert.ok(
    cost.perAttack.mainCpuMs < bounds.mainCpuMs,
    `${cost.perAttack.mainCpuMs.toFixed(1)} ms of the event loop's CPU per attack (at most ${bounds.mainCpuMs})`,
  );
  assert.ok(
    cost.perAttack.readBytes < bounds.readBytes,
    `${(cost.perAttack.readBytes / 1024).toFixed(0)} KiB read per attack (at most ${(bounds.readBytes / 1024).toFixed(0)})`,
  );
  const { lagP99, stretch } = cost;
  const margin = LOOP_DELAY_MARGIN_MS * stretch;
  if (bounds.loopDelay !== false)
    assert.ok(
      lagP99.attack < lagP99.control + margin,
      `event-loop delay p99 ${lagP99.attack.toFixed(1)} ms under attack, ${lagP99.control.toFixed(1)} ms in the control windows (medians over windows; at most ${margin.toFixed(1)} ms more, ${LOOP_DELAY_MARGIN_MS} ms stretched ${stretch.toFixed(1)}x)`,
    );
  assert.ok(cost.attack.healthz.length >= 50, `/healthz answered ${cost.attack.healthz.length} times during the attacks`);
  return cost;
}

/** CPU time a container sandbox has used, in ms (its cgroup's cpuacct; NaN where there is none). */
async function guestCpuMs(id: string): Promise<number> {
  const usage = `/sys/fs/cgroup/cpuacct/${TEST_PREFIX.slice(0, -1)}/${TEST_PREFIX}${id}/cpuacct.usage`;
  return readFile(usage, 'utf8').then(
    (ns) => Number(ns) / 1e6,
    () => Number.NaN,
  );
}

const MiB = 1024 * 1024;
/** What the guest can still send once the orchestrator stops reading a channel: one SSH channel window (ssh2's, 2 MiB). */
const WINDOW = 2 * MiB;
/** A whole frame of the screen, as a new grabber's first answer. */
const FRAME = SCREEN.width * SCREEN.height * 4;
/**
 * Per attack (per lie for the capture helper, whose lies a pause follows: desktop.ts), beyond
 * the control. Bytes: what the protocol lets through, at most one SSH window after the
 * orchestrator stops reading (measured on a 2-core machine under load 10-50: 67 KiB for the
 * forged header, 0.5-0.6 MiB for the endless streams, 3.7 MiB for the rectangles' lie after
 * an honest frame, 3.3 MiB for the zip bomb's, 3.3 MiB for the marker, 9 MiB for the listing).
 * CPU: the main thread's, a stall detector (measured 1-25 ms, requests refused meanwhile included; a synchronous inflate of the
 * bomb or a byte-by-byte scan of the stream would be hundreds).
 */
const HONEST: Bounds = { mainCpuMs: 5, readBytes: 64 * 1024 };
const LIE: Bounds = { mainCpuMs: 40, readBytes: 256 * 1024 };
const LIE_AND_A_WINDOW: Bounds = { mainCpuMs: 40, readBytes: WINDOW + 256 * 1024 };
const FRAME_LIE_AND_A_WINDOW: Bounds = { mainCpuMs: 60, readBytes: FRAME + WINDOW + 256 * 1024 };
const FRAME_AND_BOMB: Bounds = { mainCpuMs: 60, readBytes: FRAME + MiB };
/**
 * The tools' attacks cost what their caps let through, megabytes a request, as an honest
 * output that size would. Their CPU and bytes are bounded; their event-loop delay is printed,
 * not bounded yet: their output cost V8 a full collection every ~9 MiB read (measured: 9 in
 * 27 attacks of the marker, 6 in 6 listings; the capture channel, which copies each chunk as
 * it arrives, caused none for 24 MiB of lies), tens of ms of the loop each on a loaded
 * machine. Where exec and the bash tool keep those bytes (issue 21 item 5's part) decides it.
 */
const TOOL_OUTPUT = { loopDelay: false } as const;
/** The fake bash writes 8 MiB; the shell is closed within a few bytes of the marker, a new one started. */
const MARKER_OVERRUN: Bounds = { mainCpuMs: 60, readBytes: 6 * MiB, ...TOOL_OUTPUT };
/** The listing's cap (8 MiB) and what is in flight when it is reached. */
const OUTPUT_OVERRUN: Bounds = { mainCpuMs: 60, readBytes: 8 * MiB + WINDOW + 256 * 1024, ...TOOL_OUTPUT };
/** The tools' attacks (bash, the editor), 4 requests a second, as a busy client would make them. */
const ATTACK_PACE_MS = 250;

/** The capture channel's protocol errors, whatever the reason: the lies that reached a helper. */
const CAPTURE_LIES = /^sandbox_guest_protocol_errors_total\{channel="capture",reason="[^"]+"\} (\S+)$/gm;
/**
 * The capture helper's attacks, 10 requests a second (each one that fails at once costs what
 * any request does): costs per lie, and at most one lie per pause (desktop.ts) in a window.
 */
const CAPTURE_ATTACK: Partial<AttackCostOptions> = { events: CAPTURE_LIES, attackPaceMs: 100 };

/** The grabber lied at most once per pause: the first request after it starts a new one, the others fail at once. */
function assertPaced(cost: AttackCost): void {
  for (const { ms, events } of cost.attack.windows) {
    const most = Math.floor(ms / GRABBER_RESTART_AFTER_LIE_MS) + 1;
    assert.ok(events <= most, `${events} lies in ${ms.toFixed(0)} ms (at most ${most}, one per ${GRABBER_RESTART_AFTER_LIE_MS} ms pause)`);
  }
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

  before(async () => {
    port = await freePort();
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-redteam-'));
    server = await startServer();
    [victim, neighbour] = await Promise.all([createSession(), createSession()]);
    await screenshotOk(neighbour);
    // Above the machine's other work, once the sandboxes run (helpers/host-cost.ts): the
    // event-loop delay measured is then the orchestrator's own, not its host neighbours'.
    await raisePriority(server.pid as number, ORCHESTRATOR_NICE);
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

  it('code the desktop user plants for the helpers (usercustomize.py, ~/.bashrc, ~/.ssh/rc, ~/.x11vncrc) never runs', async () => {
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

  it("control: the victim's own screenshots, measured as an attack would be (what an honest request costs)", async (t) => {
    // At the capture attacks' pace: a client asking back to back measures its own queue.
    await measured(t, 'no attack (honest screenshots)', victim, () => screenshotOk(victim), HONEST, { attackPaceMs: CAPTURE_ATTACK.attackPaceMs });
  });

  const attacks: Array<[string, string, RegExp, Bounds]> = [
    ['a forged 16383x16383 header (stride 0, 64 KiB of payload)', FORGED_HEADER, /bad frame: its size 16383x16383 is not the screen's 1024x768/, LIE],
    [
      'a header announcing 0xFFFFFFF0 bytes, then an endless stream',
      HUGE_LENGTH,
      /bad frame: a whole frame of 1024x768 is 3145728 bytes, not 4294967280/,
      LIE_AND_A_WINDOW,
    ],
    ['a 10 MiB stderr flood', STDERR_FLOOD, /wrote more than 4096 bytes of errors/, LIE_AND_A_WINDOW],
  ];
  for (const [name, script, message, bounds] of attacks) {
    it(`a capture helper replaced with one sending ${name}: 502 for its session only`, async (t) => {
      await plantFromHost(victim, '/usr/local/bin/sbx-capture', script);
      // The helper already running keeps the old file: stop it, let its channel close, and let
      // the previous attack's pause pass (desktop.ts: a grabber that lied waits to start again).
      await bash(victim, { command: 'pkill -u "$(id -u)" -f /usr/local/bin/sbx-capture; true' });
      await sleep(GRABBER_RESTART_AFTER_LIE_MS + 500);
      // Each lie closes the channel; the next request after the pause starts the (replaced)
      // helper again, those meanwhile fail at once with its error. Costs are per lie.
      const cost = await measured(
        t,
        name,
        victim,
        async () => {
          const started = performance.now();
          await screenshotRefused(victim, message);
          assert.ok(performance.now() - started < 10_000, 'failed at once, not at the capture timeout');
        },
        bounds,
        CAPTURE_ATTACK,
      );
      assertPaced(cost);
    });
  }

  const rectAttacks: Array<[string, string, RegExp, Bounds]> = [
    [
      'a list of 0xFFFFFFFF changed rectangles in 2 MiB, then an endless stream',
      HUGE_RECT_LIST,
      /bad frame: 4294967295 rectangles in a payload of \d+ bytes \(at most 64\)/,
      FRAME_LIE_AND_A_WINDOW,
    ],
    [
      'a zip bomb: a full-screen rectangle whose stream inflates to 256 MiB',
      ZIP_BOMB,
      /bad frame: rectangle 1024x768 at 0,0 does not inflate to its 3145728 bytes/,
      FRAME_AND_BOMB,
    ],
  ];
  for (const [name, script, message, bounds] of rectAttacks) {
    it(`a capture helper replaced with one sending ${name}: 502 for its session only`, async (t) => {
      await plantFromHost(victim, '/usr/local/bin/sbx-capture', script);
      await bash(victim, { command: 'pkill -u "$(id -u)" -f /usr/local/bin/sbx-capture; true' });
      await sleep(GRABBER_RESTART_AFTER_LIE_MS + 500);
      // The lie comes in the helper's second answer: a screenshot is a 200 (a new helper's
      // first, honest frame), the lie, or, during the pause that follows it, the lie again.
      let frames = 0;
      let refused = 0;
      const cost = await measured(
        t,
        name,
        victim,
        async () => {
          const started = performance.now();
          const res = await api('GET', `/v1/sessions/${victim}/screenshot`);
          if (res.status === 200) {
            assert.deepEqual(pngSize(res.body), SCREEN);
            frames++;
          } else {
            assert.equal(res.status, 502, res.body.toString().slice(0, 300));
            assert.match((res.json().error as { message: string }).message, message);
            refused++;
          }
          assert.ok(performance.now() - started < 10_000, 'failed at once, not at the capture timeout');
        },
        bounds,
        CAPTURE_ATTACK,
      );
      assertPaced(cost);
      assert.ok(frames >= 3 && refused >= 3, `${frames} honest first frames, ${refused} refusals`);
    });
  }

  it('a bash whose end-of-command marker never ends (then 8 MiB): a tool error, the shell closed', async (t) => {
    await plantFromHost(victim, '/usr/local/bin/bash', UNTERMINATED_MARKER);
    await measured(
      t,
      'an unterminated marker and 8 MiB',
      victim,
      async () => {
        // The next shell is found on PATH (/usr/local/bin first): the fake.
        assert.equal((await bash(victim, { restart: true })).isError, false);
        const result = await bash(victim, { command: 'echo hello' });
        assert.equal(result.isError, true);
        assert.match(result.text, /the shell in the guest sent an end-of-command marker that never ends, which no shell of ours does, so it was closed/);
      },
      MARKER_OVERRUN,
      { attackPaceMs: ATTACK_PACE_MS },
    );
    assert.equal((await bash(neighbour, { command: 'echo still here' })).text, 'still here');
  });

  it('a command whose output passes its cap (a find printing 10 MiB for a directory view): a tool error', async (t) => {
    await plantFromHost(victim, '/usr/bin/find', '#!/bin/sh\nexec head -c 10485760 /dev/zero\n');
    await measured(
      t,
      'a 10 MiB directory listing',
      victim,
      async () => {
        const answer = await api('POST', `/v1/sessions/${victim}/tools/str_replace_based_edit_tool`, { command: 'view', path: '/tmp' });
        assert.equal(answer.status, 200, answer.body.toString());
        const result = answer.json() as { is_error?: boolean; content: Array<{ text?: string }> };
        assert.equal(result.is_error, true);
        assert.match(result.content[0]?.text ?? '', /printed more than 8388608 bytes while listing \/tmp/);
      },
      OUTPUT_OVERRUN,
      { attackPaceMs: ATTACK_PACE_MS },
    );
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

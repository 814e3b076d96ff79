import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import sharp from 'sharp';
import { qemuSettingsFromEnv } from '../src/runtimes/qemu/settings.js';
import { QemuRuntime } from '../src/runtimes/qemu/qemu-runtime.js';
import { ResourceNames } from '../src/network/names.js';
import { cgroupDirsOf } from './helpers/host.js';
import { startTestOrchestrator, TEST_PREFIX, type TestOrchestrator } from './helpers/orchestrator.js';

/**
 * The `desktop` template as a user sees it, on real sandboxes: the panel and background, Firefox
 * on a page served inside the guest, Unicode typed into the editor and saved, xdg-open picking
 * the right application, the browser inside the sandbox's limits, and a boot on qemu. One
 * container session serves the container checks (each starts what it needs and closes it).
 */

interface ToolResult {
  content: Array<{ type: string; text?: string }>;
  is_error: boolean;
}

const WIDTH = 1024;
const HEIGHT = 768;

async function createSession(orch: TestOrchestrator, payload: Record<string, unknown> = {}): Promise<string> {
  const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { width: WIDTH, height: HEIGHT, timeoutSeconds: 900, ...payload } });
  assert.equal(res.statusCode, 201, res.body);
  return res.json().id as string;
}

async function tool(orch: TestOrchestrator, id: string, name: string, input: Record<string, unknown>): Promise<ToolResult> {
  const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/tools/${name}`, payload: input });
  assert.equal(res.statusCode, 200, res.body);
  return res.json<ToolResult>();
}

function text(result: ToolResult): string {
  return result.content.map((c) => c.text ?? '').join('\n');
}

/** Runs a command through the bash tool (as the model would); it must succeed. */
async function sh(orch: TestOrchestrator, id: string, command: string): Promise<string> {
  const result = await tool(orch, id, 'bash', { command });
  assert.equal(result.is_error, false, text(result));
  return text(result);
}

/** Starts a program in the background through the bash tool, detached from the tool's shell. */
async function launch(orch: TestOrchestrator, id: string, command: string): Promise<void> {
  await sh(orch, id, `setsid ${command} >/dev/null 2>&1 < /dev/null &`);
}

/**
 * The id of the first visible window whose title matches (xdotool's regex), waiting up to
 * `seconds`; undefined if none appears.
 */
async function waitForWindow(
  orch: TestOrchestrator,
  id: string,
  titlePattern: string,
  seconds = 60,
  by: 'name' | 'class' = 'name',
): Promise<string | undefined> {
  // A loop rather than `xdotool search --sync`: a window that closes while xdotool walks the
  // tree (the previous check's program exiting) makes it die of BadWindow, with no answer.
  const out = await sh(
    orch,
    id,
    `end=$(($(date +%s) + ${seconds})); while [ "$(date +%s)" -lt "$end" ]; do ` +
      `w=$(xdotool search --onlyvisible --${by} '${titlePattern}' 2>/dev/null | head -n 1); [ -n "$w" ] && { echo "$w"; break; }; sleep 0.3; done; true`,
  );
  const window = out.trim();
  return /^\d+$/.test(window) ? window : undefined;
}

async function windowTitle(orch: TestOrchestrator, id: string, window: string): Promise<string> {
  return (await sh(orch, id, `xdotool getwindowname ${window}`)).trim();
}

/** Ends a program (by its process name) and waits until it is gone, so the next check starts clean. */
async function quit(orch: TestOrchestrator, id: string, name: string): Promise<void> {
  await sh(orch, id, `pkill -x ${name}; for i in $(seq 50); do pgrep -x ${name} >/dev/null || break; sleep 0.2; done; pkill -9 -x ${name}; true`);
}

/** The screenshot as raw RGB pixels. */
async function screenPixels(orch: TestOrchestrator, id: string): Promise<{ rgb: Buffer; width: number }> {
  const res = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/screenshot` });
  assert.equal(res.statusCode, 200);
  const { data, info } = await sharp(res.rawPayload).removeAlpha().raw().toBuffer({ resolveWithObject: true });
  return { rgb: data, width: info.width };
}

function pixelAt(screen: { rgb: Buffer; width: number }, x: number, y: number): [number, number, number] {
  const i = (y * screen.width + x) * 3;
  return [screen.rgb[i]!, screen.rgb[i + 1]!, screen.rgb[i + 2]!];
}

/** Waits until the pixel at (x, y) is close to `rgb` in the screenshot; returns the last one seen. */
async function waitForPixel(
  orch: TestOrchestrator,
  id: string,
  x: number,
  y: number,
  rgb: [number, number, number],
  seconds = 30,
): Promise<[number, number, number]> {
  let seen: [number, number, number] = [0, 0, 0];
  for (const deadline = Date.now() + seconds * 1000; Date.now() < deadline; await sleep(500)) {
    seen = pixelAt(await screenPixels(orch, id), x, y);
    if (seen.every((value, i) => Math.abs(value - rgb[i]!) <= 8)) return seen;
  }
  return seen;
}

describe('the desktop template on the container runtime', () => {
  let orch: TestOrchestrator;
  let id: string;

  before(async () => {
    orch = await startTestOrchestrator({ template: 'desktop' });
    id = await createSession(orch);
  });
  after(async () => {
    await orch?.stop();
  });

  it('has what its panel and default applications name: every .desktop file is in the image', async () => {
    const rootfs = orch.image.rootfs;
    const files = path.join(import.meta.dirname, '../src/guest/files/desktop');
    const named = [...[...(await readFile(path.join(files, 'mimeapps.list'), 'utf8')).matchAll(/=([\w.-]+\.desktop)$/gm)].map((m) => m[1]!)].map(
      (name) => `/usr/share/applications/${name}`,
    );
    const launchers = [...(await readFile(path.join(files, 'tint2rc'), 'utf8')).matchAll(/^launcher_item_app = (\/.+)$/gm)].map((m) => m[1]!);
    assert.ok(named.length > 10 && launchers.length >= 6);
    for (const file of new Set([...named, ...launchers])) assert.ok(existsSync(path.join(rootfs, file)), `${file} is in the image`);
  });

  it('boots to a desktop: a panel with launchers along the bottom, a background that is not black, no browser running', async () => {
    // The panel is tint2, docked at the bottom edge across the screen.
    const panel = (await waitForWindow(orch, id, 'tint2', 20, 'class')) ?? '';
    assert.match(panel, /^\d+$/, 'a tint2 window is mapped');
    const geometry = await sh(orch, id, `xdotool getwindowgeometry --shell ${panel}`);
    assert.match(geometry, /^Y=7[0-9]{2}$/m, geometry);
    assert.match(geometry, new RegExp(`^WIDTH=${WIDTH}$`, 'm'), geometry);
    const screen = await screenPixels(orch, id);
    for (const [x, y] of [
      [100, 100],
      [900, 400],
      [512, 600],
    ] as const) {
      const [r, g, b] = pixelAt(screen, x, y);
      assert.ok(r + g + b > 60, `the background at (${x}, ${y}) is not black: ${r},${g},${b}`);
    }
    assert.notDeepEqual(pixelAt(screen, 900, 757), pixelAt(screen, 900, 700), 'the panel differs from the background');
    // Nothing heavy at boot: an idle desktop stays small.
    assert.equal((await sh(orch, id, 'pgrep -c -f "firefox|soffice" || true')).trim(), '0');
    // The session bus's machine id is the session's own (the image's D-Bus package made one at build, the same in every guest).
    assert.match((await sh(orch, id, 'cat /var/lib/dbus/machine-id')).trim(), /^[0-9a-f]{32}$/);
    assert.equal((await sh(orch, id, 'readlink /var/lib/dbus/machine-id')).trim(), '/etc/machine-id');
  });

  it('brings the panel back when it dies (sandbox-init supervises the desktop session)', async () => {
    const before = (await sh(orch, id, 'pgrep -x tint2')).trim();
    assert.match(before, /^\d+$/);
    await sh(orch, id, 'pkill -x tint2; true');
    let after = '';
    // The old one may take a moment to exit: wait for another pid, not just any.
    for (let i = 0; i < 40 && !(/^\d+$/.test(after) && after !== before); i++, await sleep(250)) after = (await sh(orch, id, 'pgrep -x tint2 || true')).trim();
    assert.ok(/^\d+$/.test(after) && after !== before, `a new tint2 runs (before: ${before}, now: ${after || 'none'})`);
    const panel = (await waitForWindow(orch, id, 'tint2', 20, 'class')) ?? '';
    assert.match(panel, /^\d+$/, 'and its window is mapped');
  });

  it('Firefox opens a page served inside the guest; clicking its link through the computer tool shows the linked page', async () => {
    // Two pages on the guest's loopback: a green one that is all link, and a red one.
    await sh(
      orch,
      id,
      [
        'mkdir -p /tmp/site',
        `printf '%s' '<!doctype html><title>Page One</title><body style="margin:0"><a href="two.html" style="position:fixed;inset:0;background:#00a000;color:#fff;font-size:40px">Go to page two</a>' > /tmp/site/index.html`,
        `printf '%s' '<!doctype html><title>Page Two</title><body style="margin:0;background:#c00000;height:100vh"><h1 style="color:#fff">Linked page</h1>' > /tmp/site/two.html`,
      ].join('\n'),
    );
    await launch(orch, id, 'python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/site');
    await sh(
      orch,
      id,
      'for i in $(seq 50); do python3 -c "import urllib.request; urllib.request.urlopen(\'http://127.0.0.1:8000/\')" 2>/dev/null && break; sleep 0.2; done',
    );
    await launch(orch, id, 'firefox-esr http://127.0.0.1:8000/index.html');
    const window = await waitForWindow(orch, id, 'Page One', 90);
    assert.ok(window, 'a Firefox window titled "Page One" appears');
    // The middle of the window's page area (the page is all link), from its geometry.
    const geometry = await sh(orch, id, `xdotool getwindowgeometry --shell ${window}`);
    const value = (name: string) => Number(new RegExp(`^${name}=(\\d+)$`, 'm').exec(geometry)?.[1]);
    const x = value('X') + Math.floor(value('WIDTH') / 2);
    const y = value('Y') + Math.floor(value('HEIGHT') * 0.7);
    assert.deepEqual(await waitForPixel(orch, id, x, y, [0, 160, 0]), [0, 160, 0], 'the green link is on the screen');

    const click = await tool(orch, id, 'computer', { action: 'left_click', coordinate: [x, y] });
    assert.equal(click.is_error, false, text(click));
    const seen = await waitForPixel(orch, id, x, y, [192, 0, 0]);
    assert.deepEqual(seen, [192, 0, 0], 'the screenshot shows the red linked page where the link was');
    assert.match(await windowTitle(orch, id, window), /^Page Two/);
    await quit(orch, id, 'firefox-esr');
    await sh(orch, id, 'pkill -f "http.server 8000"; true');
  });

  it('starts Firefox on a blank page: no first-run, welcome, privacy or default-browser page, no warning bar', async () => {
    // A profile of its own, never used: what every new session's Firefox sees the first time.
    await sh(orch, id, 'rm -rf /tmp/ff-fresh && mkdir /tmp/ff-fresh');
    await launch(orch, id, 'firefox-esr --no-remote --profile /tmp/ff-fresh');
    const window = await waitForWindow(orch, id, 'Mozilla Firefox', 90);
    assert.ok(window, 'Firefox started');
    const geometry = await sh(orch, id, `xdotool getwindowgeometry --shell ${window}`);
    const value = (name: string) => Number(new RegExp(`^${name}=(\\d+)$`, 'm').exec(geometry)?.[1]);
    // Below the tab strip and toolbar (about 110 px), the page area: all white when blank. A
    // welcome page, a notification bar or a bookmarks-toolbar hint would put colour or text there.
    await sleep(3000); // what first-run shows, it shows within a second or two of the window
    const screen = await screenPixels(orch, id);
    const notWhite: string[] = [];
    // (The window may reach under the panel, 36 px along the bottom, which stays on top.)
    const bottom = Math.min(value('Y') + value('HEIGHT'), HEIGHT - 36) - 10;
    for (let y = value('Y') + 130; y < bottom; y += 8) {
      for (let x = value('X') + 10; x < value('X') + value('WIDTH') - 10; x += 8) {
        const [r, g, b] = pixelAt(screen, x, y);
        if (Math.min(r, g, b) < 235) notWhite.push(`(${x},${y})=${r},${g},${b}`);
      }
    }
    assert.deepEqual(notWhite.slice(0, 5), [], `${notWhite.length} pixels of the page area are not white`);
    assert.equal(await windowTitle(orch, id, window), 'Mozilla Firefox');
    await quit(orch, id, 'firefox-esr');
  });

  it('keeps Firefox inside the sandbox: its processes are in the session cgroup, under its memory and pids limits', async () => {
    // A title of its own, so that no window of an earlier Firefox is taken for this one.
    await sh(orch, id, "printf '%s' '<title>cgroup-check</title>' > /tmp/cgroup-check.html");
    await launch(orch, id, 'firefox-esr file:///tmp/cgroup-check.html');
    assert.ok(await waitForWindow(orch, id, 'cgroup-check', 90), 'Firefox started');
    const dirs = await cgroupDirsOf(orch.names.cgroup(id));
    assert.ok(dirs.length > 0, 'the session has a cgroup');
    // Firefox's processes, as the host sees them in the session's cgroup: the browser and
    // its content processes (they start a moment after the window).
    const firefoxInCgroup = async (): Promise<number[]> => {
      const pids = new Set<number>();
      for (const dir of dirs) {
        for (const line of (await readFile(path.join(dir, 'cgroup.procs'), 'utf8').catch(() => '')).split('\n')) if (line) pids.add(Number(line));
      }
      const firefox: number[] = [];
      for (const pid of pids) if ((await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).includes('/firefox-esr')) firefox.push(pid);
      return firefox;
    };
    let found: number[] = [];
    for (let i = 0; i < 60 && found.length < 3; i++, await sleep(500)) found = await firefoxInCgroup();
    assert.ok(found.length >= 3, `Firefox and its content processes are in the session's cgroup (${found.length} found)`);
    // And no Firefox of this sandbox runs outside it: the guest's count equals the cgroup's.
    const inGuest = Number((await sh(orch, id, 'pgrep -c -f /firefox-esr || true')).trim());
    assert.equal((await firefoxInCgroup()).length >= inGuest, true, `all ${inGuest} of the guest's Firefox processes are in the cgroup`);
    const limit = async (v1: [controller: string, file: string], v2: string) =>
      existsSync('/sys/fs/cgroup/cgroup.controllers')
        ? (await readFile(path.join('/sys/fs/cgroup', orch.names.cgroup(id), v2), 'utf8')).trim()
        : (await readFile(path.join('/sys/fs/cgroup', v1[0], orch.names.cgroup(id), v1[1]), 'utf8')).trim();
    assert.equal(Number(await limit(['memory', 'memory.limit_in_bytes'], 'memory.max')), orch.config.memoryLimitMiB * 1024 * 1024, 'the session memory limit');
    assert.equal(Number(await limit(['pids', 'pids.max'], 'pids.max')), orch.config.pidsLimit, 'the session pids limit');
    await quit(orch, id, 'firefox-esr');
  });

  it('saves CJK and emoji typed into the text editor exactly as typed', async () => {
    const typed = '漢字かなカナ 한국어 Ελληνικά Кириллица 🎉😀';
    await sh(orch, id, 'rm -f /tmp/unicode.txt');
    await launch(orch, id, 'mousepad /tmp/unicode.txt');
    const window = await waitForWindow(orch, id, 'unicode.txt', 60);
    assert.ok(window, 'Mousepad opened /tmp/unicode.txt');
    await sh(orch, id, `xdotool windowactivate --sync ${window}`);
    const type = await tool(orch, id, 'computer', { action: 'type', text: typed });
    assert.equal(type.is_error, false, text(type));
    const save = await tool(orch, id, 'computer', { action: 'key', text: 'ctrl+s' });
    assert.equal(save.is_error, false, text(save));
    let saved = '';
    for (let i = 0; i < 40 && saved !== typed; i++, await sleep(250)) saved = await sh(orch, id, 'cat /tmp/unicode.txt 2>/dev/null; true');
    assert.equal(saved, typed);
    // Byte for byte, through the files API: UTF-8, no newline added.
    const res = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/files?path=/tmp/unicode.txt` });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.rawPayload, Buffer.from(typed, 'utf8'));
    await quit(orch, id, 'mousepad');
  });

  it('xdg-open opens a URL in Firefox and a .txt file in the text editor', async () => {
    await sh(orch, id, "printf 'hello from xdg-open\\n' > /tmp/note.txt");
    await sh(orch, id, 'xdg-open /tmp/note.txt >/dev/null 2>&1 &');
    const editor = await waitForWindow(orch, id, 'note.txt', 60);
    assert.ok(editor, 'a window titled note.txt appears');
    assert.match((await sh(orch, id, `xprop -id ${editor} WM_CLASS`)).trim(), /mousepad/i);

    await sh(orch, id, 'xdg-open http://127.0.0.1:9/xdg-open-test >/dev/null 2>&1 &');
    const browser = await waitForWindow(orch, id, 'Mozilla Firefox', 90);
    assert.ok(browser, 'a Firefox window appears');
    assert.match((await sh(orch, id, `xprop -id ${browser} WM_CLASS`)).trim(), /firefox/i);
    await quit(orch, id, 'mousepad');
    await quit(orch, id, 'firefox-esr');
  });
});

describe('the desktop template on the qemu runtime', () => {
  let orch: TestOrchestrator | undefined;
  after(async () => {
    await orch?.stop();
  });

  it('boots and shows the desktop (panel and background)', async () => {
    const runtime = await QemuRuntime.create(new ResourceNames(TEST_PREFIX), qemuSettingsFromEnv(process.env));
    // Under TCG (no KVM) the boot takes tens of seconds: a generous boot timeout, no timing asserted.
    orch = await startTestOrchestrator({ runtime: 'qemu', template: 'desktop', bootTimeoutMs: 180_000 }, false, { runtime, reason: 'test' });
    const id = await createSession(orch, { timeoutSeconds: 300 });
    const panel = (await waitForWindow(orch, id, 'tint2', 60, 'class')) ?? '';
    assert.match(panel, /^\d+$/, 'a tint2 window is mapped');
    const screen = await screenPixels(orch, id);
    const [r, g, b] = pixelAt(screen, 512, 300);
    assert.ok(r + g + b > 60, `the background is not black: ${r},${g},${b}`);
  });
});

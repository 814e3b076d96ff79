import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ResourceNames } from '../src/network/names.js';
import type { GuestTransport } from '../src/transport/index.js';
import { connectToGuest, guestAddress, guestSh } from './helpers/guest.js';
import { TEST_PREFIX } from './helpers/orchestrator.js';
import { guestProcesses, newProcesses } from './helpers/guest-processes.js';
import { cpuMsPerRequest, cpuSecondsOf, healthzStallLimit, percentile, sampleHealthz } from './helpers/host-cost.js';
import { memoryOf } from './helpers/raw-http.js';
import { startServe, type ServeProcess } from './helpers/serve.js';
import { clearXev, parseXev, startXev, waitForXev, type XEvent } from './helpers/xev.js';

/**
 * Red team, issue 11 point 1: a prompt-injected model sends xdotool's own command names
 * wherever a key name goes (`{"action":"key","text":"exec yes"}` used to start `yes` in the
 * guest and take the orchestrator from 100 MB to 689 MB). Against a real `sbx serve` (its
 * own process, so its memory is its own) and real sandboxes, one per computer tool version:
 * every such input is refused by field, nothing starts in the guest, nothing reaches the
 * desktop, and the orchestrator's memory and /healthz latency stay flat. Real input still
 * arrives as it should (xev in the guest sees it).
 */
const NAMES = new ResourceNames(TEST_PREFIX);
const VERSIONS = ['computer_20250124', 'computer_20241022', 'computer_20251124'] as const;
/** The bounds for a red-team attack: orchestrator memory growth and /healthz p99. */
const MAX_GROWTH_MIB = 50;
/**
 * The peak while thousands of refusals go by: the garbage of requests before a major
 * collection (+39-52 MiB for 5,016, and no more a second time; in-process, the heap after a
 * collection grows 1.5 MiB once and then not at all). The bug made it +589 MB for one request.
 */
const MAX_PEAK_GROWTH_MIB = 100;
/** Orchestrator CPU a refused hostile request may cost (1.6 ms measured, as any 400). */
const REFUSAL_CPU_MS = 5;
/**
 * The strictest common multi-click interval: Xt's default multiClickTime (xterm, Xaw) is
 * 250 ms; GTK's is 400, Qt's 400. Clicks of one double or triple click must fall inside it.
 */
const DOUBLE_CLICK_MS = 250;

interface Sandbox {
  id: string;
  version: string;
  guest: GuestTransport;
}
type Json = Record<string, unknown>;

describe('red team: no xdotool command reachable from any key field', () => {
  let stateDir: string;
  let serve: ServeProcess;
  const sandboxes: Sandbox[] = [];
  let main: Sandbox;
  let commands: string[] = [];
  const pid = () => serve.child.pid as number;

  const post = async (id: string, route: 'actions' | 'tools/computer', body: Json) => {
    const response = await fetch(`${serve.url}/v1/sessions/${id}/${route}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as Json };
  };
  const act = async (body: Json) => {
    const res = await post(main.id, 'actions', body);
    assert.equal(res.status, 200, `${JSON.stringify(body)}: ${JSON.stringify(res.body)}`);
    return res.body;
  };
  const events = async (until: (e: XEvent[]) => boolean) => parseXev(await waitForXev(main.guest, (log) => until(parseXev(log))));
  /** Sends every attack to every session on both routes; each must be refused by field. */
  const attack = async (): Promise<number> => {
    let refused = 0;
    for (const command of commands) {
      for (const [input, field] of hostileInputs(command)) {
        for (const sandbox of sandboxes) {
          const what = `${sandbox.version} ${JSON.stringify(input)}`;
          const plain = await post(sandbox.id, 'actions', input);
          assert.equal(plain.status, 400, `${what}: ${JSON.stringify(plain.body)}`);
          const error = plain.body.error as { code: string; message: string };
          assert.equal(error.code, 'invalid_request', what);
          assert.ok(error.message.startsWith(`${field} `), `${what}: the error names ${field}: ${error.message}`);
          const tool = await post(sandbox.id, 'tools/computer', input);
          assert.equal(tool.status, 200, what);
          assert.equal(tool.body.is_error, true, `${what}: ${JSON.stringify(tool.body)}`);
          const text = (tool.body.content as Array<{ text?: string }>)[0]?.text ?? '';
          assert.ok(text.startsWith(`${field} `), `${what}: the tool error names ${field}: ${text}`);
          refused += 2;
        }
      }
    }
    return refused;
  };

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-redteam-input-'));
    // Thousands of refused requests from one tenant: what is measured is the host's cost, not
    // the per-tenant request limits (test/redteam-api.test.ts tests those).
    serve = await startServe(stateDir, 18_900 + Math.floor(Math.random() * 600), undefined, [], { SBX_TENANT_REQUEST_LIMITS: 'local=1000/100000/100000' });
    for (const version of VERSIONS) {
      const response = await fetch(`${serve.url}/v1/sessions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ width: 1024, height: 768, toolVersion: version }),
      });
      const created = (await response.json()) as Json;
      assert.equal(response.status, 201, JSON.stringify(created));
      const id = created.id as string;
      sandboxes.push({ id, version, guest: await connectToGuest(stateDir, id, await guestAddress(NAMES, id)) });
    }
    main = sandboxes[0] as Sandbox;
    await startXev(main.guest, 1024, 768);
    // xdotool's own list of its commands, from the guest's xdotool.
    const help = await guestSh(main.guest, 'DISPLAY=:99 xdotool help 2>&1');
    commands = help.text
      .split('\n')
      .filter((line) => /^ {2}\w+$/.test(line))
      .map((line) => line.trim());
  });

  after(async () => {
    for (const sandbox of sandboxes) sandbox.guest.close();
    if (serve && serve.child.exitCode === null) {
      serve.child.kill('SIGTERM');
      await once(serve.child, 'exit');
    }
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it("knows xdotool's commands from the guest", () => {
    for (const name of [
      'exec',
      'behave',
      'windowkill',
      'search',
      'sleep',
      'set_desktop',
      'type',
      'mousemove',
      'key',
      'keydown',
      'keyup',
      'click',
      'getmouselocation',
      'windowactivate',
    ]) {
      assert.ok(commands.includes(name), `xdotool help lists ${name}: ${commands.join(' ')}`);
    }
    assert.ok(commands.length >= 40, `${commands.length} commands`);
  });

  it("every xdotool command as a key, in a combo, as hold_key's key and as a modifier: refused by field, nothing runs, memory and latency flat", async () => {
    // Warm up what every session has (input and capture helpers, the tool route) before the baseline.
    for (const sandbox of sandboxes) {
      assert.equal((await post(sandbox.id, 'actions', { action: 'cursor_position' })).status, 200);
      assert.equal((await post(sandbox.id, 'tools/computer', { action: 'mouse_move', coordinate: [10, 10] })).status, 200);
    }
    // The whole attack once before the baseline: the heap V8 grows to for thousands of requests
    // of any kind (30 to 52 MiB over one attack, with or without a shorter warm-up first) is
    // then in it, and the bound sees what a second attack adds: a leak grows again, V8's
    // heap does not.
    await attack();
    await clearXev(main.guest);
    const before = await Promise.all(sandboxes.map((s) => guestProcesses(s.guest)));
    await writeFile(`/proc/${pid()}/clear_refs`, '5'); // the peak (VmHWM) counted from here
    const baseline = await memoryOf(pid());
    // The same sampling with no attack: this machine's own noise, for the log.
    const quiet = sampleHealthz(serve.url);
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    const control = await quiet.stop();

    const cpuBefore = await cpuSecondsOf(pid());
    const sampler = sampleHealthz(serve.url);
    let refused: number;
    let healthz: number[];
    try {
      refused = await attack();
    } finally {
      healthz = await sampler.stop();
    }
    const now = await memoryOf(pid());
    const cpuMs = ((await cpuSecondsOf(pid())) - cpuBefore) * 1000;
    const p99 = percentile(healthz, 0.99);
    console.log(
      `redteam-input: ${refused} hostile requests refused (${commands.length} xdotool commands), ${(cpuMs / refused).toFixed(2)} ms of orchestrator CPU each; ` +
        `orchestrator rss ${baseline.rssMiB} -> ${now.rssMiB} MiB, peak ${baseline.peakMiB} -> ${now.peakMiB} MiB; ` +
        `/healthz meanwhile: ${healthz.length} samples, p50 ${percentile(healthz, 0.5).toFixed(1)} ms, p99 ${p99.toFixed(1)} ms ` +
        `(without the attack: p50 ${percentile(control, 0.5).toFixed(1)} ms, p99 ${percentile(control, 0.99).toFixed(1)} ms; load average ${os.loadavg()[0]?.toFixed(1)})`,
    );
    assert.ok(now.rssMiB - baseline.rssMiB < MAX_GROWTH_MIB, `memory grew by ${now.rssMiB - baseline.rssMiB} MiB`);
    assert.ok(now.peakMiB - baseline.peakMiB < MAX_PEAK_GROWTH_MIB, `peak memory grew by ${now.peakMiB - baseline.peakMiB} MiB`);
    // A refusal costs what any 400 costs (1.6 ms measured); no stall meanwhile.
    assert.ok(cpuMsPerRequest(cpuMs, refused) < REFUSAL_CPU_MS, `${cpuMsPerRequest(cpuMs, refused).toFixed(2)} ms of orchestrator CPU per refused request`);
    assert.ok(
      p99 < healthzStallLimit(control),
      `/healthz p99 ${p99.toFixed(1)} ms while under attack (stall limit ${healthzStallLimit(control).toFixed(1)} ms)`,
    );

    for (const [index, sandbox] of sandboxes.entries()) {
      const started = newProcesses(before[index] as Map<number, string>, await guestProcesses(sandbox.guest));
      assert.deepEqual(started, [], `${sandbox.version}: processes started in the guest`);
    }
    // Nothing reached the desktop either: xev saw no key or button (it does see the next one).
    await act({ action: 'key', text: 'Escape' });
    const seen = (await events((e) => e.some((x) => x.keyName === 'Escape'))).filter((e) => /Press|Release/.test(e.type));
    assert.deepEqual(
      seen.map((e) => `${e.type} ${e.keyName ?? e.button}`),
      ['KeyPress Escape', 'KeyRelease Escape'],
    );
  });

  it('keys still arrive: combos, Return, F5, a, A (shifted), plus (shifted), eacute (no keycode)', async () => {
    await clearXev(main.guest);
    for (const text of ['ctrl+shift+t', 'Return', 'F5', 'a', 'A', 'plus', 'eacute', 'ctrl++']) await act({ action: 'key', text });
    const log = (await events((e) => e.filter((x) => x.type === 'KeyRelease' && x.keyName === 'Control_L').length >= 2)).filter((e) =>
      e.type.startsWith('Key'),
    );
    assert.deepEqual(
      log.map((e) => `${e.type === 'KeyPress' ? '+' : '-'}${e.keyName}`),
      [
        '+Control_L',
        '+Shift_L',
        '+T',
        '-T',
        '-Shift_L',
        '-Control_L',
        '+Return',
        '-Return',
        '+F5',
        '-F5',
        '+a',
        '-a',
        '+Shift_L',
        '+A',
        '-A',
        '-Shift_L',
        '+Shift_L',
        '+plus',
        '-plus',
        '-Shift_L',
        '+eacute',
        '-eacute',
        '+Control_L',
        '+Shift_L',
        '+plus',
        '-plus',
        '-Shift_L',
        '-Control_L',
      ],
    );
    const eacute = log.find((e) => e.keyName === 'eacute');
    assert.equal(eacute?.keysym, 0xe9);
  });

  it("every name the host accepts is a keysym the guest's X library knows", async () => {
    const { KEYSYM_NAMES } = await import('../src/computer/keysym-names.js');
    // A release of a key that is not down changes nothing, but the name is still resolved.
    const requests = [...KEYSYM_NAMES].map((name) => `key ${name} up\n`).join('');
    const result = await main.guest.exec('DISPLAY=:99 /usr/bin/python3 -I /usr/local/bin/sbx-input', { stdin: requests, timeoutMs: 60_000 });
    const answers = result.stdout.toString('utf8').trimEnd().split('\n');
    assert.equal(answers.length, KEYSYM_NAMES.size);
    const unknown = [...KEYSYM_NAMES].filter((_, i) => answers[i] !== 'ok');
    assert.deepEqual(unknown, [], 'names the guest does not know');
  });

  it('single (each button), double and triple clicks arrive as such, with a held modifier', async () => {
    await clearXev(main.guest);
    await act({ action: 'left_click', coordinate: [100, 200] });
    await act({ action: 'double_click', coordinate: [300, 200] });
    await act({ action: 'triple_click', coordinate: [500, 200], key: 'shift' });
    await act({ action: 'right_click', coordinate: [600, 200] });
    await act({ action: 'middle_click', coordinate: [700, 200] });
    const log = await events((e) => e.filter((x) => x.type === 'ButtonRelease').length >= 8);
    const buttons = log.filter((e) => e.type === 'ButtonPress' || e.type === 'ButtonRelease');
    // Each click is a press then its release, never two presses in a row: a toolkit counts
    // a double or triple click from press-release pairs.
    assert.deepEqual(
      buttons.map((e) => `${e.type === 'ButtonPress' ? '+' : '-'}${e.button}`),
      ['+1', '-1', '+1', '-1', '+1', '-1', '+1', '-1', '+1', '-1', '+1', '-1', '+3', '-3', '+2', '-2'],
    );
    const presses = log.filter((e) => e.type === 'ButtonPress');
    assert.deepEqual(
      presses.map((p) => [p.button, p.root?.x, p.root?.y]),
      [
        [1, 100, 200],
        [1, 300, 200],
        [1, 300, 200],
        [1, 500, 200],
        [1, 500, 200],
        [1, 500, 200],
        [3, 600, 200],
        [2, 700, 200],
      ],
    );
    const span = (from: number, to: number) => (presses[to]?.time ?? Infinity) - (presses[from]?.time ?? 0);
    assert.ok(span(1, 2) < DOUBLE_CLICK_MS, `double click: ${span(1, 2)} ms apart`);
    assert.ok(span(3, 5) < DOUBLE_CLICK_MS, `triple click: ${span(3, 5)} ms from first to last`);
    for (const press of presses.slice(3, 6)) assert.equal((press.state ?? 0) & 1, 1, 'shift held during the triple click');
    assert.equal((presses[6]?.state ?? 0) & 1, 0, 'and released after it');
  });

  it('rapid clicks are not lost: 8 triple clicks and 20 single clicks back to back all arrive whole', async () => {
    await clearXev(main.guest);
    for (let i = 0; i < 8; i++) await act({ action: 'triple_click', coordinate: [300 + i, 400] });
    for (let i = 0; i < 20; i++) await act({ action: 'left_click', coordinate: [500 + (i % 2), 400] });
    const log = await events((e) => e.filter((x) => x.type === 'ButtonRelease').length >= 44);
    const presses = log.filter((e) => e.type === 'ButtonPress');
    assert.equal(presses.length, 44, `presses seen: ${presses.map((p) => p.root?.x).join(' ')}`);
    for (let i = 0; i < 8; i++) {
      const triple = presses.slice(i * 3, i * 3 + 3);
      assert.deepEqual(
        triple.map((p) => p.root?.x),
        [300 + i, 300 + i, 300 + i],
      );
      const span = (triple[2]?.time ?? Infinity) - (triple[0]?.time ?? 0);
      assert.ok(span < DOUBLE_CLICK_MS, `triple click ${i}: ${span} ms from first to last press`);
    }
  });

  it('drag and scroll still work', async () => {
    await clearXev(main.guest);
    await act({ action: 'left_click_drag', start_coordinate: [200, 300], coordinate: [400, 350] });
    let log = await events((e) => e.some((x) => x.type === 'ButtonRelease'));
    assert.deepEqual(log.find((e) => e.type === 'ButtonPress')?.root, { x: 200, y: 300 });
    assert.deepEqual(log.find((e) => e.type === 'ButtonRelease')?.root, { x: 400, y: 350 });
    assert.ok(
      log.some((e) => e.type === 'MotionNotify' && ((e.state ?? 0) & 0x100) !== 0),
      'moved with button 1 held',
    );

    await clearXev(main.guest);
    await act({ action: 'scroll', scroll_direction: 'down', scroll_amount: 3, coordinate: [512, 384] });
    await act({ action: 'scroll', scroll_direction: 'left', scroll_amount: 2, text: 'ctrl' });
    log = await events((e) => e.filter((x) => x.type === 'ButtonRelease').length >= 5);
    const presses = log.filter((e) => e.type === 'ButtonPress');
    assert.deepEqual(
      presses.map((p) => p.button),
      [5, 5, 5, 6, 6],
    );
    assert.deepEqual(presses[0]?.root, { x: 512, y: 384 });
    assert.equal((presses[3]?.state ?? 0) & 4, 4, 'ctrl held during the scroll left');
  });

  it('hold_key holds for its duration on the host and releases', async () => {
    await clearXev(main.guest);
    const started = Date.now();
    await act({ action: 'hold_key', text: 'ctrl+A', duration: 0.5 });
    assert.ok(Date.now() - started >= 500);
    const log = (await events((e) => e.some((x) => x.type === 'KeyRelease' && x.keyName === 'Control_L'))).filter((e) => e.type.startsWith('Key'));
    assert.deepEqual(
      log.map((e) => `${e.type === 'KeyPress' ? '+' : '-'}${e.keyName}`),
      ['+Control_L', '+Shift_L', '+A', '-A', '-Shift_L', '-Control_L'],
    );
    const held = (log[3]?.time ?? 0) - (log[2]?.time ?? 0);
    assert.ok(held >= 450, `held for ${held} ms`);
  });

  it('a guest that answers for the input helper with endless lines fails its own input only, with bounded memory', async () => {
    const victim = sandboxes[2] as Sandbox;
    // A compromised guest: the helper the orchestrator starts next answers with endless
    // 100 KB lines (replaced from the host through the sandbox init's view of its root, as a
    // guest root could; the user's shell start-up files no longer run for SSH commands).
    const helper = await guestRootPath(victim.id, '/usr/local/bin/sbx-input');
    const original = await readFile(helper);
    await writeFile(helper, "import sys\nline = 'k' * 100000 + '\\n'\nwhile True:\n    sys.stdout.write(line)\n    sys.stdout.flush()\n");
    await guestSh(victim.guest, 'pkill -u "$(id -u)" -f "^/usr/bin/python3 -I /usr/local/bin/sbx-input" || true');
    const baseline = await memoryOf(pid());
    // The helper killed above may take this one with it (its channel closes under it).
    assert.equal((await post(victim.id, 'actions', { action: 'left_click', coordinate: [10, 10] })).status, 502);
    for (let i = 0; i < 5; i++) {
      const res = await post(victim.id, 'actions', { action: 'left_click', coordinate: [10, 10] });
      assert.equal(res.status, 502, JSON.stringify(res.body));
      assert.match((res.body.error as { message: string }).message, /input helper.*longer than 256 bytes/);
      // The other sessions do not notice.
      await act({ action: 'mouse_move', coordinate: [20 + i, 20] });
    }
    const now = await memoryOf(pid());
    console.log(`redteam-input: hostile input helper (endless 100 KB lines, 5 actions): orchestrator peak ${baseline.peakMiB} -> ${now.peakMiB} MiB`);
    assert.ok(now.peakMiB - baseline.peakMiB < MAX_GROWTH_MIB, `peak memory grew by ${now.peakMiB - baseline.peakMiB} MiB`);
    // Each closed channel took its hostile helper with it (no leaked process), and the
    // session recovers once the helper is itself again.
    await writeFile(helper, original);
    let left = '';
    for (let i = 0; i < 50; i++) {
      const count = Number((await guestSh(victim.guest, 'pgrep -cf "^/usr/bin/python3 -I /usr/local/bin/sbx-input" || true')).text.trim() || '0');
      left = count > 0 ? `${count} helper processes` : '';
      if (!left) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert.equal(left, '', 'no hostile helper left running in the guest');
    assert.equal((await post(victim.id, 'actions', { action: 'left_click', coordinate: [10, 10] })).status, 200);
  });

  it('a hold_key in progress ends at once when its session is destroyed, not when its duration is up', async () => {
    const doomed = sandboxes[1] as Sandbox;
    const started = Date.now();
    const holding = post(doomed.id, 'actions', { action: 'hold_key', text: 'shift', duration: 60 });
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    assert.equal((await fetch(`${serve.url}/v1/sessions/${doomed.id}`, { method: 'DELETE' })).status < 300, true);
    const answer = await holding;
    const tookMs = Date.now() - started;
    console.log(`redteam-input: hold_key of 60 s answered ${answer.status} ${tookMs} ms after it started, its session destroyed at 1 s`);
    assert.ok(answer.status >= 400, JSON.stringify(answer.body));
    assert.ok(tookMs < 10_000, `answered after ${tookMs} ms`);
  });

  it('click latency over the API (30 clicks; reported, not asserted)', async () => {
    const times: number[] = [];
    for (let i = 0; i < 32; i++) {
      const started = performance.now();
      await act({ action: 'left_click', coordinate: [100 + (i % 2) * 10, 100] });
      if (i >= 2) times.push(performance.now() - started);
    }
    console.log(
      `redteam-input: left_click over the API: p50 ${percentile(times, 0.5).toFixed(1)} ms, p90 ${percentile(times, 0.9).toFixed(1)} ms (${times.length} clicks)`,
    );
  });
});

/**
 * The attacks for one xdotool command name, with the field each must be refused by. The
 * name alone, chained after a real key as the reproduction did, inside a combo,
 * as hold_key's key and as the modifier of every click and of scroll.
 */
/** A path in a container sandbox's root as its init sees it. */
async function guestRootPath(id: string, guestPath: string): Promise<string> {
  const { stdout } = await promisify(execFile)('runc', ['--root', NAMES.runcRoot, 'state', NAMES.container(id)]);
  return `/proc/${(JSON.parse(stdout) as { pid: number }).pid}/root${guestPath}`;
}

function hostileInputs(command: string): Array<[Json, string]> {
  const inputs: Array<[Json, string]> = [
    [{ action: 'key', text: command }, 'text'],
    [{ action: 'key', text: `${command} yes` }, 'text'],
    [{ action: 'key', text: `Return ${command} yes` }, 'text'],
    [{ action: 'key', text: `ctrl+${command}` }, 'text'],
    [{ action: 'key', text: `${command}+a` }, 'text'],
    [{ action: 'hold_key', text: command, duration: 0 }, 'text'],
    [{ action: 'hold_key', text: `shift+${command}`, duration: 0 }, 'text'],
    [{ action: 'scroll', scroll_direction: 'down', scroll_amount: 1, text: command }, 'text'],
    [{ action: 'scroll', scroll_direction: 'down', scroll_amount: 1, text: `shift+${command}` }, 'text'],
  ];
  for (const click of ['left_click', 'right_click', 'middle_click', 'double_click', 'triple_click']) {
    inputs.push([{ action: click, coordinate: [5, 5], key: command }, 'key']);
    inputs.push([{ action: click, key: `ctrl+${command}` }, 'key']);
  }
  return inputs;
}

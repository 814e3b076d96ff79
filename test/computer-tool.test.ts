import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import type { GuestTransport } from '../src/transport/index.js';
import { connectToGuest, guestAddress, guestSh, pngSize } from './helpers/guest.js';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';
import { clearXev, parseXev, startXev, typedText, waitForXev, type XEvent } from './helpers/xev.js';

interface ToolResult {
  content: Array<{ type: 'text'; text: string } | { type: 'image'; source: { type: string; media_type: string; data: string } }>;
  is_error: boolean;
}

/**
 * The computer tool as an agent loop uses it, on a real 1920x1080 sandbox that the model
 * sees as 1366x768: every action arrives in the guest as the right X events at the right
 * (scaled) place, and hostile input is refused or typed literally, never executed.
 */
describe('the computer tool, every action, scaled', () => {
  let orch: TestOrchestrator;
  let id: string;
  let guest: GuestTransport;

  const tool = async (input: Record<string, unknown>) => {
    const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/tools/computer`, payload: input });
    assert.equal(res.statusCode, 200, res.body);
    return { result: res.json<ToolResult>(), headers: res.headers };
  };
  const ok = async (input: Record<string, unknown>) => {
    const { result } = await tool(input);
    assert.equal(result.is_error, false, JSON.stringify(result.content));
    return result;
  };
  const image = (result: ToolResult) => {
    const block = result.content.find((c) => c.type === 'image');
    assert.ok(block && block.type === 'image', 'the result carries a screenshot');
    assert.equal(block.source.media_type, 'image/png');
    return Buffer.from(block.source.data, 'base64');
  };
  const events = async (until: (e: XEvent[]) => boolean) => parseXev(await waitForXev(guest, (log) => until(parseXev(log))));

  before(async () => {
    orch = await startTestOrchestrator({ settleMaxMs: 1_000, settleIntervalMs: 50 });
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { width: 1920, height: 1080 } });
    assert.equal(res.statusCode, 201, res.body);
    id = res.json().id;
    assert.deepEqual(res.json().computerTool, { type: 'computer_20250124', name: 'computer', display_width_px: 1366, display_height_px: 768 });
    guest = await connectToGuest(orch.stateDir, id, await guestAddress(orch.names, id));
    await startXev(guest, 1920, 1080);
  });
  after(async () => {
    guest?.close();
    await orch?.stop();
  });

  it('screenshots come in the model space; the raw route gives the real screen', async () => {
    assert.deepEqual(pngSize(image(await ok({ action: 'screenshot' }))), { width: 1366, height: 768 });
    const raw = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/screenshot` });
    assert.deepEqual(pngSize(raw.rawPayload), { width: 1920, height: 1080 });
    const scaled = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/screenshot?scaled=true` });
    assert.deepEqual(pngSize(scaled.rawPayload), { width: 1366, height: 768 });
  });

  it('mouse_move scales up, cursor_position scales down, and a settled screenshot follows', async () => {
    const { result, headers } = await tool({ action: 'mouse_move', coordinate: [683, 384] });
    assert.equal(result.is_error, false);
    assert.deepEqual(pngSize(image(result)), { width: 1366, height: 768 });
    assert.ok(Number(headers['x-settle-ms']) < 1_000, `settled in ${String(headers['x-settle-ms'])} ms, not the reference's fixed 2 s`);
    assert.equal((await guestSh(guest, 'DISPLAY=:99 xdotool getmouselocation')).text.split(' ').slice(0, 2).join(' '), 'x:960 y:540');
    const pos = await ok({ action: 'cursor_position' });
    assert.deepEqual(pos.content, [{ type: 'text', text: 'X=683,Y=384' }]);
  });

  it('clicks: each button, double and triple, with a held modifier, at the scaled point', async () => {
    await clearXev(guest);
    await ok({ action: 'left_click', coordinate: [100, 200] });
    await ok({ action: 'right_click', coordinate: [101, 200] });
    await ok({ action: 'middle_click', coordinate: [102, 200] });
    await ok({ action: 'double_click', coordinate: [103, 200] });
    await ok({ action: 'triple_click', coordinate: [104, 200] });
    await ok({ action: 'left_click', coordinate: [105, 200], key: 'shift' });
    const presses = (await events((e) => e.filter((x) => x.type === 'ButtonPress').length >= 9)).filter((e) => e.type === 'ButtonPress');
    const scaled = (x: number) => Math.round((x * 1920) / 1366);
    assert.deepEqual(
      presses.map((p) => [p.button, p.root?.x, p.root?.y]),
      [
        [1, scaled(100), 281],
        [3, scaled(101), 281],
        [2, scaled(102), 281],
        [1, scaled(103), 281],
        [1, scaled(103), 281],
        [1, scaled(104), 281],
        [1, scaled(104), 281],
        [1, scaled(104), 281],
        [1, scaled(105), 281],
      ],
    );
    assert.equal((presses[8]?.state ?? 0) & 1, 1, 'shift was held during the last click');
  });

  it('scroll: wheel buttons in each direction, with amount and modifier', async () => {
    await clearXev(guest);
    await ok({ action: 'scroll', scroll_direction: 'down', scroll_amount: 3, coordinate: [683, 384] });
    await ok({ action: 'scroll', scroll_direction: 'up', scroll_amount: 1, text: 'ctrl' });
    await ok({ action: 'scroll', scroll_direction: 'left', scroll_amount: 1 });
    await ok({ action: 'scroll', scroll_direction: 'right', scroll_amount: 2 });
    const presses = (await events((e) => e.filter((x) => x.type === 'ButtonPress').length >= 7)).filter((e) => e.type === 'ButtonPress');
    assert.deepEqual(
      presses.map((p) => p.button),
      [5, 5, 5, 4, 6, 7, 7],
    );
    assert.deepEqual(presses[0]?.root, { x: 960, y: 540 });
    assert.equal((presses[3]?.state ?? 0) & 4, 4, 'ctrl was held during the scroll up');
  });

  it('left_click_drag, left_mouse_down and left_mouse_up', async () => {
    await clearXev(guest);
    await ok({ action: 'left_click_drag', start_coordinate: [200, 200], coordinate: [300, 250] });
    let log = await events((e) => e.some((x) => x.type === 'ButtonRelease'));
    const press = log.find((e) => e.type === 'ButtonPress');
    const release = log.find((e) => e.type === 'ButtonRelease');
    assert.deepEqual(press?.root, { x: 281, y: 281 });
    assert.deepEqual(release?.root, { x: 422, y: 352 });
    assert.ok(
      log.some((e) => e.type === 'MotionNotify' && ((e.state ?? 0) & 0x100) !== 0),
      'the pointer moved with button 1 held',
    );

    await clearXev(guest);
    // Inside xev's window, away from the title bar (a press there would start a window move).
    await ok({ action: 'mouse_move', coordinate: [400, 300] });
    await ok({ action: 'left_mouse_down' });
    await ok({ action: 'mouse_move', coordinate: [420, 320] });
    await ok({ action: 'left_mouse_up' });
    log = await events((e) => e.some((x) => x.type === 'ButtonRelease'));
    assert.deepEqual(log.find((e) => e.type === 'ButtonPress')?.root, { x: 562, y: 422 });
    assert.deepEqual(log.find((e) => e.type === 'ButtonRelease')?.root, { x: 590, y: 450 });
  });

  it('key: xdotool combos and the names models use', async () => {
    await clearXev(guest);
    await ok({ action: 'key', text: 'ctrl+shift+t' });
    await ok({ action: 'key', text: 'Enter' });
    await ok({ action: 'key', text: 'PageDown' });
    await ok({ action: 'key', text: 'cmd' });
    await ok({ action: 'key', text: 'F5' });
    const pressed = (await events((e) => e.some((x) => x.keyName === 'F5'))).filter((e) => e.type === 'KeyPress').map((e) => e.keyName);
    assert.deepEqual(pressed, ['Control_L', 'Shift_L', 'T', 'Return', 'Next', 'Super_L', 'F5']);
  });

  it('hold_key holds for the duration; wait waits and then shows the screen', async () => {
    await clearXev(guest);
    await ok({ action: 'hold_key', text: 'shift', duration: 0.5 });
    const log = await events((e) => e.some((x) => x.type === 'KeyRelease'));
    const down = log.find((e) => e.type === 'KeyPress' && e.keyName === 'Shift_L');
    const up = log.find((e) => e.type === 'KeyRelease' && e.keyName === 'Shift_L');
    assert.ok(down && up && down.time !== undefined && up.time !== undefined);
    assert.ok(up.time - down.time >= 450, `held for ${up.time - down.time} ms`);
    const started = Date.now();
    const waited = await ok({ action: 'wait', duration: 0.3 });
    assert.ok(Date.now() - started >= 300);
    image(waited);
  });

  it("zoom returns the region at the screen's full resolution", async () => {
    const zoomed = await ok({ action: 'zoom', region: [0, 0, 683, 384] });
    assert.deepEqual(pngSize(image(zoomed)), { width: 960, height: 540 });
  });

  it('bad input is a tool error the model can read, never an HTTP failure', async () => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ action: 'left_click', coordinate: [1366, 10] }, /outside the screen \(1366x768/],
      [{ action: 'scroll', scroll_direction: 'up', scroll_amount: -1 }, /scroll_amount/],
      [{ action: 'hold_key', text: 'a', duration: 101 }, /too long/],
      [{ action: 'zoom', region: [5, 5, 1, 1] }, /x1 > x0/],
      [{ action: 'fly' }, /unknown/],
      [{}, /action is required/],
      [{ action: 'key', text: 'NoSuchKey' }, /unknown key name "NoSuchKey"/],
    ];
    for (const [input, message] of cases) {
      const { result } = await tool(input);
      assert.equal(result.is_error, true, JSON.stringify(input));
      assert.equal(result.content[0]?.type, 'text');
      assert.match((result.content[0] as { text: string }).text, message);
    }
    // The plain API says the same with a 400.
    const plain = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/actions`, payload: { action: 'wait', duration: 500 } });
    assert.equal(plain.statusCode, 400);
    assert.match(plain.json().error.message, /duration=500 is too long/);
  });

  it('hostile input is refused or typed literally: nothing runs in the guest or on the host', async () => {
    const marker = '/tmp/pwned';
    const hostile = [
      '; touch /tmp/pwned',
      '$(touch /tmp/pwned)',
      '`touch /tmp/pwned`',
      "'; touch /tmp/pwned; '",
      '"$(touch /tmp/pwned)"',
      '--help',
      '-x',
      'a\ntouch /tmp/pwned',
    ];
    for (const text of hostile) {
      for (const input of [
        { action: 'key', text },
        { action: 'hold_key', text, duration: 0 },
        { action: 'scroll', scroll_direction: 'down', scroll_amount: 1, text },
        { action: 'left_click', key: text },
      ]) {
        const { result } = await tool(input);
        assert.equal(result.is_error, true, `${JSON.stringify(input)} must be refused`);
      }
    }
    for (const input of [
      { action: 'type', text: 'a\0b' },
      { action: 'type', text: 'x'.repeat(100_000) },
      { action: 'key', text: 'k'.repeat(100_000) },
    ]) {
      assert.equal((await tool(input)).result.is_error, true);
    }
    await clearXev(guest);
    const literal = "'; touch /tmp/pwned; echo '$(id)` -- --help";
    await ok({ action: 'type', text: literal });
    assert.equal(typedText(await waitForXev(guest, (log) => typedText(log) === literal)), literal);
    assert.equal((await guestSh(guest, `test -e ${marker} && echo yes || echo no`)).text.trim(), 'no');
    assert.equal(existsSync(marker), false);
  });

  it('a dead display is a clear tool error, not a hang, and the guest brings it back', async () => {
    await guestSh(guest, 'pkill -KILL -x Xvfb');
    const started = Date.now();
    const { result } = await tool({ action: 'screenshot' });
    assert.equal(result.is_error, true);
    assert.match((result.content[0] as { text: string }).text, /scrot failed in the guest|display/i);
    assert.ok(Date.now() - started < 5_000, 'answered at once');
    const sick = (await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/health` })).json();
    assert.equal(sick.healthy, false);
    assert.equal(sick.display, 'down');
    assert.equal(sick.ssh, 'ok');
    // sandbox-init restarts the desktop within a couple of seconds.
    let back = false;
    for (let i = 0; i < 50 && !back; i++) {
      back = !(await tool({ action: 'screenshot' })).result.is_error;
      if (!back) await new Promise((r) => setTimeout(r, 200));
    }
    assert.ok(back, 'the display came back');
    const healthy = (await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/health` })).json();
    assert.deepEqual(healthy, { state: 'ready', healthy: true, ssh: 'ok', display: 'ok' });
  });
});

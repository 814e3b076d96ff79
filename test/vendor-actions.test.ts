import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { SandboxClient } from '../src/client/index.js';
import type { GuestTransport } from '../src/transport/index.js';
import { connectToGuest, guestAddress, guestSh, pngSize } from './helpers/guest.js';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';
import { clearXev, parseXev, startXev, typedText, waitForXev, type XEvent } from './helpers/xev.js';

/**
 * OpenAI's and Gemini's computer-use calls on a real 1920x1080 sandbox (minimal template)
 * that the model sees as 1366x768: every action arrives in the guest as the X events xev
 * reports (buttons incl. back/forward 8/9, keysyms, held modifiers, positions after scaling
 * or grid mapping), and hostile calls are refused with nothing reaching the guest.
 */
describe("other vendors' computer-use actions, in a real guest", () => {
  let orch: TestOrchestrator;
  let id: string;
  let guest: GuestTransport;

  const post = (vendor: 'openai' | 'gemini', payload: unknown) =>
    orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/tools/${vendor}-computer`, payload: payload as Record<string, unknown> });
  const openai = async (payload: unknown) => {
    const res = await post('openai', payload);
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json<{ type: string; call_id?: string; output: { type: string; image_url: string } }>();
    assert.equal(body.type, 'computer_call_output');
    assert.equal(body.output.type, 'computer_screenshot');
    const prefix = 'data:image/png;base64,';
    assert.ok(body.output.image_url.startsWith(prefix), body.output.image_url.slice(0, 40));
    return { body, png: Buffer.from(body.output.image_url.slice(prefix.length), 'base64') };
  };
  const gemini = async (name: string, args?: Record<string, unknown>) => {
    const res = await post('gemini', { name, args, id: 'fc-1' });
    assert.equal(res.statusCode, 200, res.body);
    return res.json<{
      name: string;
      id?: string;
      response: { url?: string; error?: string };
      parts?: Array<{ inlineData: { mimeType: string; data: string } }>;
    }>();
  };
  const geminiOk = async (name: string, args?: Record<string, unknown>) => {
    const answer = await gemini(name, args);
    assert.equal(answer.response.error, undefined, JSON.stringify(answer.response));
    assert.equal(answer.name, name);
    assert.equal(answer.id, 'fc-1');
    const part = answer.parts?.[0]?.inlineData;
    assert.equal(part?.mimeType, 'image/png');
    return Buffer.from(part.data, 'base64');
  };
  const events = async (until: (e: XEvent[]) => boolean) => parseXev(await waitForXev(guest, (log) => until(parseXev(log))));
  const presses = async (n: number) => (await events((e) => e.filter((x) => x.type === 'ButtonPress').length >= n)).filter((e) => e.type === 'ButtonPress');
  const scaledX = (x: number) => Math.round((x * 1920) / 1366);
  const scaledY = (y: number) => Math.round((y * 1080) / 768);

  before(async () => {
    orch = await startTestOrchestrator({ settleMaxMs: 1_000, settleIntervalMs: 50 }, true);
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { width: 1920, height: 1080 } });
    assert.equal(res.statusCode, 201, res.body);
    id = res.json().id;
    guest = await connectToGuest(orch.stateDir, id, await guestAddress(orch.names, id));
    await startXev(guest, 1920, 1080);
  });
  after(async () => {
    guest?.close();
    await orch?.stop();
  });

  it("the session view offers each vendor's tool definition, sized to the model space", async () => {
    const view = (await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}` })).json();
    assert.deepEqual(view.tools.anthropic, view.computerTool);
    assert.deepEqual(view.tools.openai, { type: 'computer_use_preview', display_width: 1366, display_height: 768, environment: 'linux' });
    assert.deepEqual(view.tools.gemini, { computerUse: { environment: 'ENVIRONMENT_BROWSER' } });
  });

  it('OpenAI click: every button (back and forward are 8 and 9) at the scaled point, keys held', async () => {
    await clearXev(guest);
    await openai({ action: { type: 'click', x: 100, y: 300 } });
    await openai({ action: { type: 'click', x: 101, y: 300, button: 'right' } });
    await openai({ action: { type: 'click', x: 102, y: 300, button: 'wheel' } });
    await openai({ action: { type: 'click', x: 103, y: 300, button: 'back' } });
    await openai({ action: { type: 'click', x: 104, y: 300, button: 'forward', keys: ['SHIFT'] } });
    const { png } = await openai({ action: { type: 'double_click', x: 105, y: 300, keys: ['CTRL'] } });
    assert.deepEqual(pngSize(png), { width: 1366, height: 768 });
    const got = await presses(7);
    assert.deepEqual(
      got.map((p) => [p.button, p.root?.x, p.root?.y]),
      [1, 3, 2, 8, 9, 1, 1].map((b, i) => [b, scaledX(100 + Math.min(i, 5)), scaledY(300)]),
    );
    assert.equal((got[4]?.state ?? 0) & 1, 1, 'shift held during the forward click');
    assert.equal((got[5]?.state ?? 0) & 4, 4, 'ctrl held during the double click');
    assert.equal((got[0]?.state ?? 0) & 5, 0, 'nothing held during the plain click');
  });

  it('OpenAI move, drag along a path, scroll in pixels', async () => {
    await clearXev(guest);
    await openai({ action: { type: 'move', x: 683, y: 384 } });
    assert.equal((await guestSh(guest, 'DISPLAY=:99 xdotool getmouselocation')).text.split(' ').slice(0, 2).join(' '), 'x:960 y:540');
    await openai({
      action: {
        type: 'drag',
        path: [
          { x: 200, y: 300 },
          { x: 250, y: 320 },
          { x: 300, y: 350 },
        ],
      },
    });
    const log = await events((e) => e.some((x) => x.type === 'ButtonRelease'));
    assert.deepEqual(log.find((e) => e.type === 'ButtonPress')?.root, { x: scaledX(200), y: scaledY(300) });
    assert.deepEqual(log.find((e) => e.type === 'ButtonRelease')?.root, { x: scaledX(300), y: scaledY(350) });
    // Said with every event xev saw: CI missed this point once in some thirty runs, unexplained.
    assert.ok(
      log.some((e) => e.type === 'MotionNotify' && e.root?.x === scaledX(250) && ((e.state ?? 0) & 0x100) !== 0),
      `through the middle point with button 1 held; xev saw ${JSON.stringify(log)}`,
    );

    await clearXev(guest);
    await openai({ action: { type: 'scroll', x: 683, y: 384, scroll_x: -100, scroll_y: 300, keys: ['CTRL'] } });
    const wheel = await presses(4);
    assert.deepEqual(
      wheel.map((p) => p.button),
      [5, 5, 5, 6],
    );
    assert.deepEqual(wheel[0]?.root, { x: 960, y: 540 });
    assert.equal((wheel[3]?.state ?? 0) & 4, 4, 'ctrl held while scrolling');
  });

  it('OpenAI keypress, type, wait and screenshot, batched, with the call_id echoed', async () => {
    await clearXev(guest);
    const { body, png } = await openai({
      type: 'computer_call',
      call_id: 'call_abc-1',
      actions: [
        { type: 'keypress', keys: ['CTRL', 'C'] },
        { type: 'keypress', keys: ['ARROWLEFT'] },
        { type: 'type', text: 'Hi there!' },
        { type: 'wait' },
        { type: 'screenshot' },
      ],
    });
    assert.equal(body.call_id, 'call_abc-1');
    assert.deepEqual(pngSize(png), { width: 1366, height: 768 });
    const log = await waitForXev(guest, (l) => typedText(l).endsWith('Hi there!'));
    const keys = parseXev(log).filter((e) => e.type === 'KeyPress');
    assert.deepEqual(
      keys.slice(0, 3).map((e) => e.keyName),
      ['Control_L', 'c', 'Left'],
    );
    assert.equal((keys[1]?.state ?? 0) & 4, 4, 'c pressed with ctrl held');
    assert.equal((keys[1]?.state ?? 0) & 1, 0, 'and without shift: "C" is the c key');
    assert.ok(typedText(log).endsWith('Hi there!'));
  });

  it('Gemini: grid points on the real screen, each click, hover, drag and drop', async () => {
    await clearXev(guest);
    await geminiOk('click_at', { x: 500, y: 500 });
    await geminiOk('click', { x: 10, y: 300 });
    await geminiOk('right_click', { x: 999, y: 999, intent: 'open the context menu' });
    const shot = await geminiOk('double_click', { x: 250, y: 400 });
    assert.deepEqual(pngSize(shot), { width: 1366, height: 768 });
    const got = await presses(5);
    assert.deepEqual(
      got.map((p) => [p.button, p.root?.x, p.root?.y]),
      [
        [1, 960, 540],
        [1, 19, 324], // 10/1000 of 1920 = 19.2
        [3, 1918, 1079],
        [1, 480, 432],
        [1, 480, 432],
      ],
    );
    await geminiOk('hover_at', { x: 750, y: 500 });
    assert.equal((await guestSh(guest, 'DISPLAY=:99 xdotool getmouselocation')).text.split(' ').slice(0, 2).join(' '), 'x:1440 y:540');
    await clearXev(guest);
    await geminiOk('drag_and_drop', { x: 300, y: 300, destination_x: 400, destination_y: 500 });
    const log = await events((e) => e.some((x) => x.type === 'ButtonRelease'));
    assert.deepEqual(log.find((e) => e.type === 'ButtonPress')?.root, { x: 576, y: 324 });
    assert.deepEqual(log.find((e) => e.type === 'ButtonRelease')?.root, { x: 768, y: 540 });
  });

  it('Gemini: type_text_at clears, types and presses Enter; key combinations; scrolls', async () => {
    await clearXev(guest);
    await geminiOk('type_text_at', { x: 500, y: 500, text: 'héllo' });
    let log = await waitForXev(guest, (l) => parseXev(l).some((e) => e.type === 'KeyPress' && e.keyName === 'Return'));
    let keys = parseXev(log).filter((e) => e.type === 'KeyPress');
    assert.deepEqual(
      keys.slice(0, 3).map((e) => e.keyName),
      ['Control_L', 'a', 'Delete'],
    );
    assert.equal(keys.at(-1)?.keyName, 'Return');
    assert.ok(typedText(log).includes('héllo'), typedText(log));
    assert.deepEqual(parseXev(log).find((e) => e.type === 'ButtonPress')?.root, { x: 960, y: 540 });

    await clearXev(guest);
    await geminiOk('type_text_at', { x: 500, y: 500, text: 'ok', press_enter: false, clear_before_typing: false });
    await geminiOk('key_combination', { keys: 'Control+Shift+T' });
    await geminiOk('hotkey', { keys: ['Control', 'F2'] }); // not alt+F4: that would close xev
    await geminiOk('scroll_document', { direction: 'down' });
    log = await waitForXev(guest, (l) => parseXev(l).some((e) => e.keyName === 'Next'));
    keys = parseXev(log).filter((e) => e.type === 'KeyPress');
    assert.deepEqual(
      keys.map((e) => e.keyName),
      ['o', 'k', 'Control_L', 'Shift_L', 'T', 'Control_L', 'F2', 'Next'],
    ); // xev names the keysym with shift held
    assert.equal((keys[4]?.state ?? 0) & 5, 5, 't pressed with ctrl and shift held');

    await clearXev(guest);
    await geminiOk('scroll_at', { x: 500, y: 500, direction: 'up', magnitude: 200 });
    const wheel = await presses(2);
    assert.deepEqual(
      wheel.map((p) => [p.button, p.root?.x, p.root?.y]),
      [
        [4, 960, 540],
        [4, 960, 540],
      ],
    ); // 200/1000 of 1080 px: 2 notches
  });

  it('Gemini wait_5_seconds waits; browser-only calls are a clear error without a browser, and send nothing', async () => {
    const started = Date.now();
    await geminiOk('wait_5_seconds');
    assert.ok(Date.now() - started >= 5_000);
    await clearXev(guest);
    for (const [name, args, message] of [
      ['navigate', { url: 'https://example.com/' }, /navigate needs a web browser, and this sandbox has none/],
      ['search', {}, /search needs a web browser/],
      ['open_web_browser', {}, /open_web_browser needs a web browser/],
      ['go_back', {}, /go_back needs an open web browser window, and none is open/],
      ['go_forward', {}, /go_forward needs an open web browser window/],
    ] as const) {
      const answer = await gemini(name, args);
      assert.match(answer.response.error ?? '', message, JSON.stringify(answer));
      assert.equal(answer.parts, undefined);
    }
    assert.equal((await guestSh(guest, 'cat /tmp/xev.log')).text.trim(), '', 'no key reached the guest');
  });

  it('the TypeScript client: openaiComputer and geminiComputer forward a call and return the answer to send back', async () => {
    const client = new SandboxClient({ baseUrl: `http://127.0.0.1:${(orch.server.server.address() as AddressInfo).port}` });
    const sandbox = await client.connect(id);
    assert.deepEqual(sandbox.info.tools?.openai, { type: 'computer_use_preview', display_width: 1366, display_height: 768, environment: 'linux' });
    await clearXev(guest);
    const output = await sandbox.openaiComputer({ call_id: 'call_1', action: { type: 'click', x: 683, y: 384, button: 'back' } });
    assert.equal(output.call_id, 'call_1');
    assert.match(output.output.image_url, /^data:image\/png;base64,/);
    const response = await sandbox.geminiComputer({ name: 'click_at', args: { x: 250, y: 500 }, id: 'g1' });
    assert.equal(response.id, 'g1');
    assert.equal(response.parts?.[0]?.inlineData.mimeType, 'image/png');
    assert.deepEqual(
      (await presses(2)).map((p) => [p.button, p.root?.x, p.root?.y]),
      [
        [8, 960, 540],
        [1, 480, 540],
      ],
    );
    const refused = await sandbox.geminiComputer({ name: 'key_combination', args: { keys: 'exec yes' } });
    assert.match(refused.response.error ?? '', /args\.keys has an invalid key name/);
    await assert.rejects(
      sandbox.openaiComputer({ action: { type: 'keypress', keys: ['exec yes'] } }),
      (err: Error & { status?: number }) => err.status === 400 && /action\.keys\[0\]/.test(err.message),
    );
  });

  it('red team: hostile names and values are refused by field, and nothing reaches the guest', async () => {
    await clearXev(guest);
    const before = (await guestSh(guest, 'DISPLAY=:99 xdotool getmouselocation')).text;
    const openaiBad: Array<[unknown, RegExp]> = [
      [{ action: { type: 'keypress', keys: ['exec yes'] } }, /action\.keys\[0\] has an invalid key name/],
      [{ action: { type: 'keypress', keys: ['CTRL', 'exec'] } }, /action\.keys\[1\] has an unknown key name "exec"/],
      [{ action: { type: 'keypress', keys: Array(10_000).fill('a') } }, /at most 10/],
      [{ actions: Array(1_000).fill({ type: 'wait' }) }, /at most 50/],
      [
        {
          actions: [
            { type: 'move', x: 1, y: 1 },
            { type: 'click', x: Infinity, y: 1 },
          ],
        },
        /actions\[1\]\.x must be an integer/,
      ],
      [{ action: { type: 'click', x: 'NaN', y: 1 } }, /action\.x must be an integer/],
      [{ action: { type: 'click', x: 1, y: 1, button: { $ne: 1 } } }, /action\.button must be one of/],
      [{ action: { type: 'click', x: 1, y: 1, keys: [[['SHIFT']]] } }, /action\.keys\[0\]/],
      [{ action: { type: 'drag', path: Array(5_000).fill({ x: 1, y: 1 }) } }, /at most 100/],
      [{ action: { type: 'type', text: 'a', __proto__x: 1 } }, /action\.__proto__x is not accepted/],
      [{ action: { type: 'click', x: 1, y: 1 }, call_id: 'x; rm -rf /' }, /call_id must be an id/],
      [{ action: 'click' }, /action must be a JSON object/],
      [[1, 2], /body must be a JSON object/],
    ];
    for (const [payload, message] of openaiBad) {
      const res = await post('openai', payload);
      assert.equal(res.statusCode, 400, `${JSON.stringify(payload).slice(0, 80)}: ${res.body.slice(0, 200)}`);
      assert.match(res.json().error.message, message);
    }
    const geminiBad: Array<[Record<string, unknown>, RegExp]> = [
      [{ name: 'key_combination', args: { keys: 'Control+exec yes' } }, /args\.keys has an invalid key name/],
      [{ name: 'key_combination', args: { keys: '$(touch /tmp/pwned)' } }, /args\.keys has an invalid key name/],
      [{ name: 'click_at', args: { x: 1000, y: 0 } }, /args\.x=1000 is out of range/],
      [{ name: 'click_at', args: { x: 1, y: { nested: { junk: [1] } } } }, /args\.y must be an integer/],
      [{ name: 'navigate', args: { url: 'javascript:alert(1)' } }, /args\.url must be/],
      [{ name: 'exec', args: {} }, /not a computer-use function/],
      [{ name: 'type_text_at', args: { x: 1, y: 1, text: 'x'.repeat(20_001) } }, /at most 20000/],
    ];
    for (const [payload, message] of geminiBad) {
      const res = await post('gemini', payload);
      assert.equal(res.statusCode, 200, res.body.slice(0, 200));
      assert.match(res.json().response.error, message);
    }
    const notACall = await post('gemini', { args: {} });
    assert.equal(notACall.statusCode, 400);
    assert.match(notACall.json().error.message, /body\.name is required/);
    assert.equal((await guestSh(guest, 'test -e /tmp/pwned && echo yes || echo no')).text.trim(), 'no');
    assert.equal((await guestSh(guest, 'cat /tmp/xev.log')).text.trim(), '', 'no event reached the guest');
    assert.equal((await guestSh(guest, 'DISPLAY=:99 xdotool getmouselocation')).text, before, 'the pointer did not move');
  });
});

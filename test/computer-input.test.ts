import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { describe, it } from 'node:test';
import { parseAction } from '../src/computer/actions.js';
import { InputChannel, InputChannelError, requestLine } from '../src/computer/input-channel.js';
import { inputPlan, isPointerOrKeyAction, type InputRequest } from '../src/computer/input-requests.js';
import { ALIASES, keyCombo, parseKeySequence } from '../src/computer/keyboard-keys.js';
import { KEYSYM_NAMES } from '../src/computer/keysym-names.js';
import { modelSize, Scaler } from '../src/computer/scaling.js';
import { InvalidRequestError } from '../src/errors.js';
import type { GuestTransport } from '../src/transport/index.js';

const scaler = (w: number, h: number) => new Scaler({ width: w, height: h }, modelSize({ width: w, height: h }));

describe('scaling to the model space', () => {
  const cases: Array<[[number, number], [number, number]]> = [
    [
      [1024, 768],
      [1024, 768],
    ],
    [
      [1920, 1080],
      [1366, 768],
    ],
    [
      [2560, 1600],
      [1280, 800],
    ],
    [
      [1280, 800],
      [1280, 800],
    ],
    [
      [1600, 1200],
      [1024, 768],
    ],
    [
      [800, 600],
      [800, 600],
    ],
    [
      [1000, 500],
      [1000, 500],
    ],
  ];
  for (const [[w, h], [mw, mh]] of cases) {
    it(`auto: ${w}x${h} is seen as ${mw}x${mh}`, () => {
      assert.deepEqual(modelSize({ width: w, height: h }), { width: mw, height: mh });
    });
  }
  it('none and explicit sizes', () => {
    assert.deepEqual(modelSize({ width: 1920, height: 1080 }, 'none'), { width: 1920, height: 1080 });
    assert.deepEqual(modelSize({ width: 1920, height: 1080 }, { width: 960, height: 540 }), { width: 960, height: 540 });
    assert.throws(() => modelSize({ width: 800, height: 600 }, { width: 1024, height: 768 }), /only scale down/);
  });
  it('scales coordinates up and positions down', () => {
    const s = scaler(1920, 1080);
    assert.deepEqual(s.toScreen({ x: 683, y: 384 }), { x: 960, y: 540 });
    assert.deepEqual(s.toScreen({ x: 1365, y: 767 }), { x: 1919, y: 1079 });
    assert.deepEqual(s.toModel({ x: 960, y: 540 }), { x: 683, y: 384 });
    assert.deepEqual(s.toModel({ x: 1919, y: 1079 }), { x: 1365, y: 767 });
  });
});

describe('key names', () => {
  const mapped: Array<[string, string[][]]> = [
    ['Enter', [['Return']]],
    ['Return', [['Return']]],
    ['Escape', [['Escape']]],
    ['cmd+c', [['Super_L', 'c']]],
    ['win', [['Super_L']]],
    ['super', [['Super_L']]],
    ['PageDown', [['Page_Down']]],
    ['Page_Down', [['Page_Down']]],
    ['ctrl+shift+t', [['Control_L', 'Shift_L', 't']]],
    ['Ctrl+Alt+Delete', [['Control_L', 'Alt_L', 'Delete']]],
    ['F5', [['F5']]],
    ['f12', [['F12']]],
    ['ctrl++', [['Control_L', 'plus']]],
    ['ctrl+-', [['Control_L', 'minus']]],
    ['+', [['plus']]],
    ['ctrl+a Delete', [['Control_L', 'a'], ['Delete']]],
    ['alt+Tab', [['Alt_L', 'Tab']]],
    ['XF86AudioPlay', [['XF86AudioPlay']]],
    ['eacute', [['eacute']]],
    ['A', [['A']]],
    ['KP_Enter', [['KP_Enter']]],
  ];
  for (const [input, expected] of mapped) {
    it(`${JSON.stringify(input)} -> ${JSON.stringify(expected)}`, () => assert.deepEqual(parseKeySequence(input, 'text'), expected));
  }
  for (const bad of ['$(touch /tmp/pwned)', 'ctrl+s;rm', '`id`', '--version', 'ctrl+', 'a+ +b', 'x'.repeat(65), "it's"]) {
    it(`refuses ${JSON.stringify(bad)} as invalid`, () => {
      assert.throws(
        () => parseKeySequence(bad, 'text'),
        (err: unknown) => err instanceof InvalidRequestError && /text has an invalid key name|empty key name/.test(err.message),
      );
    });
  }
  // Shaped like keysym names but not X's: xdotool took these as its own commands.
  for (const word of ['exec', 'sleep', 'type', 'key', 'keydown', 'search', 'behave', 'windowkill', 'mousemove', 'NoSuchKey', 'return_', 'Retrun']) {
    it(`refuses ${JSON.stringify(word)} as unknown, by field`, () => {
      assert.throws(
        () => parseKeySequence(`ctrl+${word}`, 'text'),
        (err: unknown) => err instanceof InvalidRequestError && err.message.startsWith(`text has an unknown key name "${word}"`),
      );
      assert.throws(
        () => keyCombo(word, 'key'),
        (err: unknown) => err instanceof InvalidRequestError && err.message.startsWith(`key has an unknown key name "${word}"`),
      );
    });
  }
  it('modifiers are single combos', () => assert.deepEqual(keyCombo('shift', 'key'), ['Shift_L']));
  it('every alias names a real keysym', () => {
    for (const [alias, keysym] of Object.entries(ALIASES)) assert.ok(KEYSYM_NAMES.has(keysym), `${alias} -> ${keysym}`);
  });
  it("the generated list holds X's names and nothing like a word of xdotool's", () => {
    for (const name of ['Return', 'a', 'A', 'eacute', 'plus', 'F35', 'Super_L', 'XF86AudioPlay', 'KP_Enter', 'dead_acute'])
      assert.ok(KEYSYM_NAMES.has(name), name);
    assert.ok(KEYSYM_NAMES.size > 2000);
    for (const name of KEYSYM_NAMES) assert.match(name, /^[A-Za-z0-9_]{1,64}$/);
  });
});

describe('every action of the contract', () => {
  const s = scaler(1920, 1080); // model space 1366x768
  const ok: Array<[Record<string, unknown>, string]> = [
    [{ action: 'mouse_move', coordinate: [683, 384] }, 'move 960 540'],
    [{ action: 'left_click' }, 'button 1 down|button 1 up'],
    [{ action: 'left_click', coordinate: [0, 0] }, 'move 0 0|button 1 down|button 1 up'],
    [{ action: 'left_click', coordinate: [10, 10], key: 'shift' }, 'move 14 14|key Shift_L down|button 1 down|button 1 up|key Shift_L up'],
    [{ action: 'right_click', coordinate: [1, 1] }, 'move 1 1|button 3 down|button 3 up'],
    [{ action: 'middle_click' }, 'button 2 down|button 2 up'],
    [{ action: 'double_click' }, 'button 1 down|button 1 up|button 1 down|button 1 up'],
    [
      { action: 'triple_click', key: 'ctrl+shift' },
      'key Control_L down|key Shift_L down|button 1 down|button 1 up|button 1 down|button 1 up|button 1 down|button 1 up|key Shift_L up|key Control_L up',
    ],
    [{ action: 'left_click_drag', coordinate: [100, 100] }, 'button 1 down|move 141 141|button 1 up'],
    [{ action: 'left_click_drag', start_coordinate: [0, 0], coordinate: [100, 100] }, 'move 0 0|button 1 down|move 141 141|button 1 up'],
    [{ action: 'left_mouse_down' }, 'button 1 down'],
    [{ action: 'left_mouse_up' }, 'button 1 up'],
    [{ action: 'scroll', scroll_direction: 'down', scroll_amount: 3 }, 'button 5 down|button 5 up|button 5 down|button 5 up|button 5 down|button 5 up'],
    [
      { action: 'scroll', scroll_direction: 'up', scroll_amount: 2, coordinate: [683, 384], text: 'ctrl' },
      'move 960 540|key Control_L down|button 4 down|button 4 up|button 4 down|button 4 up|key Control_L up',
    ],
    [{ action: 'scroll', scroll_direction: 'left', scroll_amount: 1 }, 'button 6 down|button 6 up'],
    [{ action: 'scroll', scroll_direction: 'right', scroll_amount: 0 }, ''],
    [{ action: 'scroll', scroll_direction: 'right', scroll_amount: 0, coordinate: [1, 1], text: 'ctrl' }, 'move 1 1'],
    [
      { action: 'key', text: 'ctrl+shift+t Return' },
      'key Control_L down|key Shift_L down|key t down|key t up|key Shift_L up|key Control_L up|key Return down|key Return up',
    ],
    [{ action: 'hold_key', text: 'shift', duration: 1.5 }, 'key Shift_L down|hold 1500|key Shift_L up'],
    [{ action: 'hold_key', text: 'ctrl+alt', duration: 0 }, 'key Control_L down|key Alt_L down|hold 0|key Alt_L up|key Control_L up'],
    [{ action: 'type', text: 'hi' }, 'none'],
    [{ action: 'wait', duration: 0 }, 'none'],
    [{ action: 'screenshot' }, 'none'],
    [{ action: 'cursor_position' }, 'none'],
    [{ action: 'zoom', region: [0, 0, 683, 384] }, 'none'],
  ];
  for (const [input, lines] of ok) {
    it(`${JSON.stringify(input)}`, () => {
      const action = parseAction(input, s);
      if (lines === 'none') assert.equal(isPointerOrKeyAction(action), false);
      else {
        assert.ok(isPointerOrKeyAction(action));
        const plan = inputPlan(action);
        const text = (requests: Parameters<typeof requestLine>[0][]) => requests.map((r) => requestLine(r).trimEnd());
        const all = [...text(plan.requests), ...(plan.hold ? [`hold ${plan.hold.ms}`, ...text(plan.hold.release)] : [])];
        assert.equal(all.join('|'), lines);
      }
    });
  }
  it('key requests carry the field their name came from', () => {
    const click = inputPlan(parseAction({ action: 'left_click', key: 'alt' }, s) as Parameters<typeof inputPlan>[0]);
    assert.deepEqual(click.requests[0], { verb: 'key', keysym: 'Alt_L', down: true, field: 'key' });
    const scroll = inputPlan(parseAction({ action: 'scroll', scroll_direction: 'up', scroll_amount: 1, text: 'alt' }, s) as Parameters<typeof inputPlan>[0]);
    assert.deepEqual(scroll.requests[0], { verb: 'key', keysym: 'Alt_L', down: true, field: 'text' });
  });
  it('a request line is only ever a verb, numbers and a keysym name', () => {
    for (const keysym of ['exec yes', 'a\nexec yes', '', 'x'.repeat(65), 'a;b']) {
      assert.throws(() => requestLine({ verb: 'key', keysym, down: true, field: 'text' }), /not a keysym name/);
    }
    for (const [x, y] of [
      [-1, 0],
      [0, 1.5],
      [40_000, 0],
      [Number.NaN, 0],
    ] as Array<[number, number]>) {
      assert.throws(() => requestLine({ verb: 'move', x, y }), /out of range/);
    }
    assert.throws(() => requestLine({ verb: 'button', button: 0, down: true }), /no mouse button/);
    assert.equal(requestLine({ verb: 'where' }), 'where\n');
  });
  it('zoom regions are scaled to the screen with an exclusive far corner', () => {
    assert.deepEqual(parseAction({ action: 'zoom', region: [0, 0, 683, 384] }, s), { action: 'zoom', region: { x0: 0, y0: 0, x1: 960, y1: 540 } });
    assert.deepEqual(parseAction({ action: 'zoom', region: [0, 0, 1366, 768] }, s), { action: 'zoom', region: { x0: 0, y0: 0, x1: 1920, y1: 1080 } });
  });

  const bad: Array<[Record<string, unknown>, RegExp]> = [
    [{ action: 'mouse_move', coordinate: [1366, 0] }, /outside the screen \(1366x768/],
    [{ action: 'mouse_move', coordinate: [0, 768] }, /outside the screen/],
    [{ action: 'left_click', coordinate: [1, -1] }, /coordinate y must be a non-negative integer/],
    [{ action: 'left_click', coordinate: [1.5, 1] }, /coordinate x must be a non-negative integer/],
    [{ action: 'left_click', coordinate: '1,1' }, /array of two integers/],
    [{ action: 'left_click', text: 'x' }, /text is not accepted for left_click/],
    [{ action: 'left_click_drag' }, /coordinate is required for left_click_drag/],
    [{ action: 'left_click_drag', coordinate: [1, 1], start_coordinate: [1] }, /start_coordinate must be an array/],
    [{ action: 'left_mouse_down', coordinate: [1, 1] }, /coordinate is not accepted for left_mouse_down/],
    [{ action: 'left_mouse_up', key: 'shift' }, /key is not accepted for left_mouse_up/],
    [{ action: 'scroll', scroll_direction: 'down' }, /scroll_amount is required for scroll/],
    [{ action: 'scroll', scroll_amount: 1 }, /scroll_direction is required/],
    [{ action: 'scroll', scroll_direction: 'sideways', scroll_amount: 1 }, /scroll_direction must be one of up, down, left, right/],
    [{ action: 'scroll', scroll_direction: 'up', scroll_amount: -1 }, /scroll_amount must be a non-negative integer/],
    [{ action: 'scroll', scroll_direction: 'up', scroll_amount: 1.5 }, /scroll_amount must be a non-negative integer/],
    [{ action: 'scroll', scroll_direction: 'up', scroll_amount: 1, text: '$(id)' }, /text has an invalid key name/],
    [{ action: 'hold_key', text: 'shift' }, /duration is required for hold_key/],
    [{ action: 'hold_key', text: 'shift', duration: 101 }, /duration=101 is too long/],
    [{ action: 'hold_key', text: 'shift', duration: -1 }, /must be non-negative/],
    [{ action: 'hold_key', text: 'shift\nctrl', duration: 1 }, /single key or combo/],
    [{ action: 'wait', duration: '1' }, /duration must be a number/],
    [{ action: 'wait', duration: 100.5 }, /too long/],
    [{ action: 'wait' }, /duration is required for wait/],
    [{ action: 'zoom', region: [10, 10, 5, 20] }, /x1 > x0/],
    [{ action: 'zoom', region: [10, 10, 20, 10] }, /y1 > y0/],
    [{ action: 'zoom', region: [0, 0, 1367, 10] }, /outside the screen/],
    [{ action: 'zoom', region: [0, 0, 10] }, /four non-negative integers/],
    [{ action: 'zoom' }, /region is required for zoom/],
    [{ action: 'screenshot', text: 'x' }, /text is not accepted for screenshot/],
    [{ action: 'type', text: 'x'.repeat(100_000) }, /at most 20000/],
    [{ action: 'key', text: 'a'.repeat(2_000) }, /too long/],
    [{ action: 5 }, /action must be a string/],
  ];
  for (const [input, message] of bad) {
    it(`refuses ${JSON.stringify(input).slice(0, 80)}`, () => {
      assert.throws(
        () => parseAction(input, s),
        (err: unknown) => err instanceof InvalidRequestError && message.test(err.message),
      );
    });
  }
});

describe('raw frames from the capture channel', () => {
  it('converts BGRX rows (with padding) to RGB', async () => {
    const { framePng, framePngRegion } = await import('../src/computer/frame-image.js');
    const sharp = (await import('sharp')).default;
    // 2x2, stride 12 (4 bytes of padding per row): B,G,R,X per pixel.
    const pixels = Buffer.from([1, 2, 3, 0, 4, 5, 6, 0, 9, 9, 9, 9, 7, 8, 9, 0, 10, 11, 12, 0, 9, 9, 9, 9]);
    const frame = { width: 2, height: 2, stride: 12, pixels };
    const rgb = await sharp(await framePng(frame))
      .raw()
      .toBuffer();
    assert.deepEqual([...rgb], [3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10]);
    const region = await sharp(await framePngRegion(frame, { x0: 1, y0: 1, x1: 2, y1: 2 }))
      .raw()
      .toBuffer();
    assert.deepEqual([...region], [12, 11, 10]);
  });
});

describe('the input channel reads a hostile helper with a bounded buffer', () => {
  /** A stand-in for the SSH channel to sbx-input: what the host writes, and a way to answer. */
  class FakeHelper extends EventEmitter {
    readonly stderr = new EventEmitter();
    written = '';
    closed = false;
    command = '';
    write(data: string): boolean {
      this.written += data;
      return true;
    }
    close(): void {
      if (this.closed) return;
      this.closed = true;
      // As ssh2 does: the close event comes later, not inside close().
      setImmediate(() => this.emit('close'));
    }
    say(text: string | Buffer): void {
      this.emit('data', Buffer.isBuffer(text) ? text : Buffer.from(text));
    }
  }
  const open = async () => {
    const helper = new FakeHelper();
    const connection = {
      spawn: async (command: string) => {
        helper.command = command;
        return helper;
      },
    } as unknown as GuestTransport;
    return { helper, channel: await InputChannel.open(connection, 99) };
  };
  const click: InputRequest[] = [
    { verb: 'move', x: 1, y: 2 },
    { verb: 'button', button: 1, down: true },
    { verb: 'button', button: 1, down: false },
  ];

  it('runs the helper isolated, writes one line per request, and settles on the last answer, however it is cut', async () => {
    const { helper, channel } = await open();
    assert.equal(helper.command, 'DISPLAY=:99 exec /usr/bin/python3 -I /usr/local/bin/sbx-input');
    const answered = channel.run([...click, { verb: 'where' }], 1_000);
    assert.equal(helper.written, 'move 1 2\nbutton 1 down\nbutton 1 up\nwhere\n');
    helper.say('ok\no');
    helper.say('k\nok\nok 1');
    helper.say('2 34\n');
    assert.deepEqual(await answered, [{ ok: true }, { ok: true }, { ok: true }, { ok: true, position: { x: 12, y: 34 } }]);
    const refused = channel.run([{ verb: 'key', keysym: 'nosuch', down: true, field: 'text' }], 1_000);
    helper.say('err unknown keysym nosuch\n');
    assert.deepEqual(await refused, [{ ok: false, reason: 'unknown keysym nosuch' }]);
    assert.equal(channel.isOpen, true);
  });

  const hostile: Array<[string, string | Buffer, RegExp]> = [
    ['an endless line', Buffer.alloc(1 << 20, 'o'), /longer than 256 bytes/],
    ['a long line cut in pieces', 'ok' + ' '.repeat(200), /longer than 256 bytes/],
    ['something that is not an answer', 'y\n', /not one/],
    ['a position too large to be one', 'ok 123456 1\n', /not one/],
    ['control characters in a refusal', 'err \x1b[2J\n', /not one/],
  ];
  for (const [what, text, message] of hostile) {
    it(`${what} closes the channel and fails the action`, async () => {
      const { helper, channel } = await open();
      const answered = channel.run(click, 1_000);
      helper.say(text);
      if (what === 'a long line cut in pieces') helper.say(' '.repeat(100));
      await assert.rejects(answered, (err: unknown) => err instanceof InputChannelError && message.test(err.message));
      assert.equal(helper.closed, true);
      assert.equal(channel.isOpen, false);
    });
  }

  it('an answer nobody asked for closes the channel too', async () => {
    const { helper, channel } = await open();
    helper.say('ok\n');
    assert.equal(helper.closed, true);
    await assert.rejects(channel.run(click, 1_000), /closed/);
    // More answers than requests: the action had its answers, the channel goes after it.
    const second = await open();
    const answered = second.channel.run(click, 1_000);
    second.helper.say('ok\nok\nok\nok\n');
    assert.equal((await answered).length, 3);
    assert.equal(second.helper.closed, true);
  });

  it('nothing but a clean request line is ever written', async () => {
    const { helper, channel } = await open();
    await assert.rejects(
      channel.run(
        [
          { verb: 'move', x: 1, y: 1 },
          { verb: 'key', keysym: 'a\nexec yes', down: true, field: 'text' },
        ],
        1_000,
      ),
      /not a keysym name/,
    );
    assert.equal(helper.written, '');
    assert.equal(channel.isOpen, true);
  });
});

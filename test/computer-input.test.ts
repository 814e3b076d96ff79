import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseAction } from '../src/computer/actions.js';
import { keyCombo, parseKeySequence } from '../src/computer/keys.js';
import { modelSize, Scaler } from '../src/computer/scaling.js';
import { isPointerOrKeyAction, xdotoolArgs } from '../src/computer/xdotool-commands.js';
import { InvalidRequestError } from '../src/errors.js';

const scaler = (w: number, h: number) => new Scaler({ width: w, height: h }, modelSize({ width: w, height: h }));

describe('scaling to the model space', () => {
  const cases: Array<[[number, number], [number, number]]> = [
    [[1024, 768], [1024, 768]],
    [[1920, 1080], [1366, 768]],
    [[2560, 1600], [1280, 800]],
    [[1280, 800], [1280, 800]],
    [[1600, 1200], [1024, 768]],
    [[800, 600], [800, 600]],
    [[1000, 500], [1000, 500]],
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
  const mapped: Array<[string, string[]]> = [
    ['Enter', ['Return']],
    ['Return', ['Return']],
    ['Escape', ['Escape']],
    ['cmd+c', ['super+c']],
    ['win', ['super']],
    ['super', ['super']],
    ['PageDown', ['Page_Down']],
    ['Page_Down', ['Page_Down']],
    ['ctrl+shift+t', ['ctrl+shift+t']],
    ['F5', ['F5']],
    ['f12', ['F12']],
    ['ctrl++', ['ctrl+plus']],
    ['ctrl+-', ['ctrl+minus']],
    ['+', ['plus']],
    ['ctrl+a Delete', ['ctrl+a', 'Delete']],
    ['alt+Tab', ['alt+Tab']],
    ['XF86AudioPlay', ['XF86AudioPlay']],
  ];
  for (const [input, expected] of mapped) {
    it(`${JSON.stringify(input)} -> ${expected.join(' ')}`, () => assert.deepEqual(parseKeySequence(input, 'text'), expected));
  }
  for (const bad of ['$(touch /tmp/pwned)', 'ctrl+s;rm', '`id`', '--version', 'ctrl+', 'a+ +b', 'x'.repeat(65), "it's"]) {
    it(`refuses ${JSON.stringify(bad)}`, () => {
      assert.throws(() => parseKeySequence(bad, 'text'), InvalidRequestError);
    });
  }
  it('modifiers are single combos', () => assert.equal(keyCombo('shift', 'key'), 'shift'));
});

describe('every action of the contract', () => {
  const s = scaler(1920, 1080); // model space 1366x768
  const ok: Array<[Record<string, unknown>, string[] | 'none']> = [
    [{ action: 'mouse_move', coordinate: [683, 384] }, ['mousemove', '960', '540']],
    [{ action: 'left_click' }, ['click', '1']],
    [{ action: 'left_click', coordinate: [0, 0] }, ['mousemove', '0', '0', 'click', '1']],
    [{ action: 'left_click', coordinate: [10, 10], key: 'shift' }, ['mousemove', '14', '14', 'keydown', 'shift', 'click', '1', 'keyup', 'shift']],
    [{ action: 'right_click', coordinate: [1, 1] }, ['mousemove', '1', '1', 'click', '3']],
    [{ action: 'middle_click' }, ['click', '2']],
    [{ action: 'double_click' }, ['click', '--repeat', '2', '--delay', '10', '1']],
    [{ action: 'triple_click', key: 'ctrl' }, ['keydown', 'ctrl', 'click', '--repeat', '3', '--delay', '10', '1', 'keyup', 'ctrl']],
    [{ action: 'left_click_drag', coordinate: [100, 100] }, ['mousedown', '1', 'mousemove', '141', '141', 'mouseup', '1']],
    [
      { action: 'left_click_drag', start_coordinate: [0, 0], coordinate: [100, 100] },
      ['mousemove', '0', '0', 'mousedown', '1', 'mousemove', '141', '141', 'mouseup', '1'],
    ],
    [{ action: 'left_mouse_down' }, ['mousedown', '1']],
    [{ action: 'left_mouse_up' }, ['mouseup', '1']],
    [{ action: 'scroll', scroll_direction: 'down', scroll_amount: 3 }, ['click', '--repeat', '3', '--delay', '10', '5']],
    [
      { action: 'scroll', scroll_direction: 'up', scroll_amount: 2, coordinate: [683, 384], text: 'ctrl' },
      ['mousemove', '960', '540', 'keydown', 'ctrl', 'click', '--repeat', '2', '--delay', '10', '4', 'keyup', 'ctrl'],
    ],
    [{ action: 'scroll', scroll_direction: 'left', scroll_amount: 1 }, ['click', '--repeat', '1', '--delay', '10', '6']],
    [{ action: 'scroll', scroll_direction: 'right', scroll_amount: 0 }, []],
    [{ action: 'key', text: 'ctrl+shift+t' }, ['key', '--', 'ctrl+shift+t']],
    [{ action: 'hold_key', text: 'shift', duration: 1.5 }, ['keydown', 'shift', 'sleep', '1.5', 'keyup', 'shift']],
    [{ action: 'type', text: 'hi' }, 'none'],
    [{ action: 'wait', duration: 0 }, 'none'],
    [{ action: 'screenshot' }, 'none'],
    [{ action: 'cursor_position' }, 'none'],
    [{ action: 'zoom', region: [0, 0, 683, 384] }, 'none'],
  ];
  for (const [input, args] of ok) {
    it(`${JSON.stringify(input)}`, () => {
      const action = parseAction(input, s);
      if (args === 'none') assert.equal(isPointerOrKeyAction(action), false);
      else {
        assert.ok(isPointerOrKeyAction(action));
        assert.deepEqual(xdotoolArgs(action), args);
      }
    });
  }
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
      assert.throws(() => parseAction(input, s), (err: unknown) => err instanceof InvalidRequestError && message.test(err.message));
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
    const rgb = await sharp(await framePng(frame)).raw().toBuffer();
    assert.deepEqual([...rgb], [3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10]);
    const region = await sharp(await framePngRegion(frame, { x0: 1, y0: 1, x1: 2, y1: 2 })).raw().toBuffer();
    assert.deepEqual([...region], [12, 11, 10]);
  });
  it('patches changed rows into a copy, and reuses the frame when nothing changed', async () => {
    const { applyDelta } = await import('../src/computer/capture-channel.js');
    const previous = { width: 1, height: 3, stride: 4, pixels: Buffer.from([1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]) };
    const none = Buffer.alloc(4);
    assert.equal(applyDelta(previous, none), previous);
    const delta = Buffer.concat([u32(1), u32(1), u32(2), Buffer.from([5, 5, 5, 5, 6, 6, 6, 6])]);
    const next = applyDelta(previous, delta);
    assert.deepEqual([...next.pixels], [1, 1, 1, 1, 5, 5, 5, 5, 6, 6, 6, 6]);
    assert.deepEqual([...previous.pixels], [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3], 'the previous frame is untouched');
  });
});

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n);
  return b;
}

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ComputerAction } from '../../src/computer/actions.js';
import { inputPlan, isPointerOrKeyAction, type InputRequest } from '../../src/computer/input-requests.js';
import { modelSize, Scaler } from '../../src/computer/scaling.js';
import { InvalidRequestError } from '../../src/errors.js';
import { gridToScreen, translateGemini } from '../../src/vendors/gemini.js';
import { vendorKeyCombo, vendorKeyList } from '../../src/vendors/key-names.js';
import { openaiActionList, translateOpenAI } from '../../src/vendors/openai.js';
import { geminiToolDefinition, openaiToolDefinition } from '../../src/vendors/tool-definitions.js';

const scaler = (w: number, h: number) => new Scaler({ width: w, height: h }, modelSize({ width: w, height: h }));
const scaled = scaler(1920, 1080); // model space 1366x768
const plain = scaler(1000, 500);

/** The guest input requests of a list of actions, one line per request, as computer-input.test.ts reads them. */
function requests(actions: ComputerAction[]): string {
  return actions.flatMap((a) => (isPointerOrKeyAction(a) ? inputPlan(a).requests.map(line) : [a.action])).join('|');
}
function line(r: InputRequest): string {
  switch (r.verb) {
    case 'move':
      return `move ${r.x} ${r.y}`;
    case 'button':
      return `button ${r.button} ${r.down ? 'down' : 'up'}`;
    case 'key':
      return `key ${r.keysym} ${r.down ? 'down' : 'up'}`;
    case 'where':
      return 'where';
  }
}
const openai = (action: unknown, s = scaled) => requests(translateOpenAI([action], s));
const gemini = (name: string, args?: unknown, s = scaled) => requests(translateGemini({ name, args }, s).actions);
const refused = (fn: () => unknown, pattern: RegExp) =>
  assert.throws(fn, (err: unknown) => err instanceof InvalidRequestError && pattern.test(err.message), String(pattern));

describe('vendor key names', () => {
  const lists: Array<[string[], string[]]> = [
    [
      ['CTRL', 'C'],
      ['Control_L', 'c'],
    ],
    [['ENTER'], ['Return']],
    [['ARROWLEFT'], ['Left']],
    [
      ['ALT', 'SHIFT', 'TAB'],
      ['Alt_L', 'Shift_L', 'Tab'],
    ],
    [
      ['CMD', 'SPACE'],
      ['Super_L', 'space'],
    ],
    [['PAGEDOWN'], ['Page_Down']],
    [['ESC'], ['Escape']],
    [['F5'], ['F5']],
    [['BACKSPACE'], ['BackSpace']],
    [['/'], ['slash']],
  ];
  for (const [input, expected] of lists)
    it(`OpenAI ${JSON.stringify(input)} -> ${expected.join('+')}`, () => assert.deepEqual(vendorKeyList(input, 'keys'), expected));
  const combos: Array<[string, string[]]> = [
    ['Control+C', ['Control_L', 'c']],
    ['control+shift+t', ['Control_L', 'Shift_L', 't']],
    ['Enter', ['Return']],
    ['Meta+ArrowDown', ['Super_L', 'Down']],
    ['Control++', ['Control_L', 'plus']],
    ['+', ['plus']],
    ['ControlOrMeta+a', ['Control_L', 'a']],
  ];
  for (const [input, expected] of combos)
    it(`Gemini ${JSON.stringify(input)} -> ${expected.join('+')}`, () => assert.deepEqual(vendorKeyCombo(input, 'args.keys'), expected));
  it('an array works for Gemini hotkey too', () => assert.deepEqual(vendorKeyCombo(['Control', 'v'], 'args.keys'), ['Control_L', 'v']));
  for (const bad of ['exec yes', '$(id)', 'exec', 'sleep', 'ctrl;rm', 'Retrun', 'x'.repeat(65), '']) {
    it(`refuses ${JSON.stringify(bad.slice(0, 20))}, naming the field`, () => {
      refused(() => vendorKeyList(['CTRL', bad], 'action.keys'), /^action\.keys\[1\] /);
      refused(() => vendorKeyCombo(`Control+${bad}`, 'args.keys'), /^args\.keys /);
    });
  }
  it('refuses non-strings, empty and very long lists', () => {
    refused(() => vendorKeyList([1], 'keys'), /keys\[0\] must be a non-empty key name/);
    refused(() => vendorKeyList([{ a: 1 }], 'keys'), /keys\[0\]/);
    refused(() => vendorKeyList([], 'keys'), /non-empty array/);
    refused(() => vendorKeyList('CTRL', 'keys'), /non-empty array/);
    refused(() => vendorKeyList(Array(11).fill('a'), 'keys'), /at most 10/);
    refused(() => vendorKeyCombo(Array(11).fill('a').join('+'), 'args.keys'), /at most 10/);
    refused(() => vendorKeyCombo(Array(100_000).fill('a'), 'args.keys'), /at most 10/);
    refused(() => vendorKeyCombo('Control++a', 'args.keys'), /empty key name/);
  });
});

describe('OpenAI computer_call actions', () => {
  const ok: Array<[Record<string, unknown>, string]> = [
    [{ type: 'click', x: 683, y: 384 }, 'move 960 540|button 1 down|button 1 up'],
    [{ type: 'click', x: 683, y: 384, button: 'left' }, 'move 960 540|button 1 down|button 1 up'],
    [{ type: 'click', x: 0, y: 0, button: 'right' }, 'move 0 0|button 3 down|button 3 up'],
    [{ type: 'click', x: 1365, y: 767, button: 'wheel' }, 'move 1919 1079|button 2 down|button 2 up'],
    [{ type: 'click', x: 10, y: 10, button: 'back' }, 'move 14 14|button 8 down|button 8 up'],
    [{ type: 'click', x: 10, y: 10, button: 'forward', keys: ['SHIFT'] }, 'move 14 14|key Shift_L down|button 9 down|button 9 up|key Shift_L up'],
    [
      { type: 'click', x: 10, y: 10, keys: ['CTRL', 'ALT'] },
      'move 14 14|key Control_L down|key Alt_L down|button 1 down|button 1 up|key Alt_L up|key Control_L up',
    ],
    [{ type: 'double_click', x: 100, y: 100 }, 'move 141 141|button 1 down|button 1 up|button 1 down|button 1 up'],
    [{ type: 'move', x: 683, y: 384 }, 'move 960 540'],
    [
      {
        type: 'drag',
        path: [
          { x: 0, y: 0 },
          { x: 100, y: 100 },
          { x: 200, y: 100 },
        ],
      },
      'move 0 0|button 1 down|move 141 141|move 281 141|button 1 up',
    ],
    [{ type: 'keypress', keys: ['CTRL', 'C'] }, 'key Control_L down|key c down|key c up|key Control_L up'],
    [
      { type: 'scroll', x: 683, y: 384, scroll_x: 0, scroll_y: 300 },
      'move 960 540|move 960 540|button 5 down|button 5 up|button 5 down|button 5 up|button 5 down|button 5 up',
    ],
    [{ type: 'scroll', x: 0, y: 0, scroll_x: -100, scroll_y: -20 }, 'move 0 0|move 0 0|button 4 down|button 4 up|move 0 0|button 6 down|button 6 up'],
    [{ type: 'scroll', x: 0, y: 0, scroll_x: 0, scroll_y: 0 }, 'move 0 0'],
    [
      { type: 'scroll', x: 0, y: 0, scroll_x: 100, scroll_y: 0, keys: ['CTRL'] },
      'move 0 0|move 0 0|key Control_L down|button 7 down|button 7 up|key Control_L up',
    ],
    [{ type: 'type', text: 'hello' }, 'type'],
    [{ type: 'wait' }, 'wait'],
    [{ type: 'screenshot' }, 'screenshot'],
  ];
  for (const [action, expected] of ok) it(`${JSON.stringify(action)}`, () => assert.equal(openai(action), expected));
  it('without scaling, x and y are screen pixels', () => assert.equal(openai({ type: 'move', x: 999, y: 499 }, plain), 'move 999 499'));
  it('the batched form runs every action in order', () => {
    const list = openaiActionList({
      actions: [
        { type: 'move', x: 1, y: 1 },
        { type: 'keypress', keys: ['ENTER'] },
      ],
    });
    assert.equal(requests(translateOpenAI(list, plain)), 'move 1 1|key Return down|key Return up');
  });
  it('refuses bad input by field, before anything runs', () => {
    refused(() => openai({ type: 'click', x: 1366, y: 0 }), /^action\.x=1366 is out of range \(0 to 1365\)/);
    refused(() => openai({ type: 'click', x: -1, y: 0 }), /^action\.x=-1 is out of range/);
    refused(() => openai({ type: 'click', x: Number.NaN, y: 0 }), /^action\.x must be an integer/);
    refused(() => openai({ type: 'click', x: '10', y: 0 }), /^action\.x must be an integer/);
    refused(() => openai({ type: 'click', x: 1.5, y: 0 }), /^action\.x must be an integer/);
    refused(() => openai({ type: 'click', x: 1, y: 1, button: 'middle' }), /^action\.button must be one of left, right, wheel, back, forward/);
    refused(() => openai({ type: 'click', x: 1, y: 1, extra: { nested: [1] } }), /^action\.extra is not accepted/);
    refused(() => openai({ type: 'exec', cmd: 'yes' }), /^action\.type must be one of/);
    refused(() => openai({ type: 'keypress', keys: ['exec yes'] }), /^action\.keys\[0\] has an invalid key name/);
    refused(() => openai({ type: 'keypress', keys: [['CTRL']] }), /^action\.keys\[0\] must be a non-empty key name/);
    refused(() => openai({ type: 'type', text: 'a\0b' }), /^action\.text cannot contain a NUL/);
    refused(() => openai({ type: 'type', text: 'x'.repeat(20_001) }), /^action\.text is 20001 characters long; at most 20000/);
    refused(() => openai({ type: 'type', text: 5 }), /^action\.text must be a non-empty string/);
    refused(() => gemini('type_text_at', { x: 1, y: 1, text: '' }), /^args\.text must be a non-empty string/);
    refused(() => openai({ type: 'drag', path: [{ x: 0, y: 0 }] }), /^action\.path must be an array of at least two points/);
    refused(() => openai({ type: 'drag', path: Array(101).fill({ x: 0, y: 0 }) }), /at most 100/);
    refused(
      () =>
        openai({
          type: 'drag',
          path: [
            { x: 0, y: 0 },
            { x: 0, y: 0, z: 1 },
          ],
        }),
      /^action\.path\[1\]\.z is not accepted/,
    );
    refused(() => openai({ type: 'scroll', x: 0, y: 0, scroll_x: 0, scroll_y: 1e9 }), /scroll_y=1000000000 is out of range/);
    refused(() => openai({ type: 'move', x: 0 }), /^action\.y is required/);
    refused(() => openai(null), /^action must be a JSON object/);
    refused(
      () => translateOpenAI([{ type: 'wait' }, { type: 'click', x: 0, y: 0, button: 'back', keys: ['nope'] }], plain),
      /^actions\[1\]\.keys\[0\] has an unknown key name "nope"/,
    );
    refused(() => openaiActionList({ actions: Array(51).fill({ type: 'wait' }) }), /at most 50/);
    refused(() => openaiActionList({ actions: [] }), /must not be empty/);
    refused(() => openaiActionList({}), /action \(an object\) or actions \(an array\) is required/);
    refused(() => openaiActionList({ action: { type: 'wait' }, actions: [] }), /either action or actions/);
  });
});

describe('Gemini function calls', () => {
  it('the 0-999 grid maps onto the screen: 0 to the first pixel, 999 to the last cell, rounded', () => {
    assert.equal(gridToScreen(0, 1920), 0);
    assert.equal(gridToScreen(999, 1920), 1918); // 1918.08
    assert.equal(gridToScreen(999, 1000), 999);
    assert.equal(gridToScreen(999, 1080), 1079); // 1078.92, rounded up
    assert.equal(gridToScreen(500, 1080), 540);
    assert.equal(gridToScreen(999, 10), 9); // kept on screen
    assert.equal(gridToScreen(1, 1920), 2); // 1.92
  });
  const ok: Array<[string, Record<string, unknown> | undefined, string]> = [
    ['click_at', { x: 500, y: 500 }, 'move 960 540|button 1 down|button 1 up'],
    ['click', { x: 0, y: 0 }, 'move 0 0|button 1 down|button 1 up'],
    ['double_click', { x: 999, y: 999 }, 'move 1918 1079|button 1 down|button 1 up|button 1 down|button 1 up'],
    ['right_click', { x: 500, y: 500, intent: 'open the menu' }, 'move 960 540|button 3 down|button 3 up'],
    ['hover_at', { x: 250, y: 250 }, 'move 480 270'],
    [
      'type_text_at',
      { x: 500, y: 500, text: 'hi' },
      'move 960 540|button 1 down|button 1 up|key Control_L down|key a down|key a up|key Control_L up|key Delete down|key Delete up|type|key Return down|key Return up',
    ],
    ['type_text_at', { x: 500, y: 500, text: 'hi', press_enter: false, clear_before_typing: false }, 'move 960 540|button 1 down|button 1 up|type'],
    ['key_combination', { keys: 'Control+C' }, 'key Control_L down|key c down|key c up|key Control_L up'],
    ['hotkey', { keys: ['Alt', 'F4'] }, 'key Alt_L down|key F4 down|key F4 up|key Alt_L up'],
    ['scroll_document', { direction: 'down' }, 'key Page_Down down|key Page_Down up'],
    ['scroll_document', { direction: 'up' }, 'key Page_Up down|key Page_Up up'],
    [
      'scroll_document',
      { direction: 'right' },
      'move 960 540|button 7 down|button 7 up'.replace('button 7 down|button 7 up', Array(10).fill('button 7 down|button 7 up').join('|')),
    ],
    ['scroll_at', { x: 500, y: 500, direction: 'down' }, `move 960 540|move 960 540|${Array(9).fill('button 5 down|button 5 up').join('|')}`],
    ['scroll_at', { x: 500, y: 500, direction: 'left', magnitude: 100 }, `move 960 540|move 960 540|${Array(2).fill('button 6 down|button 6 up').join('|')}`],
    ['scroll_at', { x: 500, y: 500, direction: 'up', magnitude: 0 }, 'move 960 540'],
    ['drag_and_drop', { x: 0, y: 0, destination_x: 500, destination_y: 500 }, 'move 0 0|button 1 down|move 960 540|button 1 up'],
    ['wait_5_seconds', undefined, 'wait'],
    ['go_back', {}, 'key Alt_L down|key Left down|key Left up|key Alt_L up'],
    ['go_forward', {}, 'key Alt_L down|key Right down|key Right up|key Alt_L up'],
  ];
  for (const [name, args, expected] of ok) it(`${name} ${JSON.stringify(args)}`, () => assert.equal(gemini(name, args), expected));
  it('scaling changes nothing: the grid is of the real screen', () =>
    assert.equal(
      gemini('hover_at', { x: 250, y: 250 }, scaler(1920, 1080)),
      gemini('hover_at', { x: 250, y: 250 }, new Scaler({ width: 1920, height: 1080 }, { width: 1920, height: 1080 })),
    ));
  it('browser-only calls say what the browser must do', () => {
    assert.deepEqual(translateGemini({ name: 'navigate', args: { url: 'example.com/a?b=1' } }, plain).browser, {
      kind: 'open',
      target: 'https://example.com/a?b=1',
    });
    assert.equal(translateGemini({ name: 'navigate', args: { url: 'http://x.test/' } }, plain).url, 'http://x.test/');
    assert.deepEqual(translateGemini({ name: 'search' }, plain).browser, { kind: 'open', target: 'https://www.google.com/' });
    assert.deepEqual(translateGemini({ name: 'open_web_browser', args: {} }, plain).browser, { kind: 'launch' });
    assert.deepEqual(translateGemini({ name: 'go_back' }, plain).browser, { kind: 'window' });
  });
  it('refuses bad calls by field', () => {
    refused(() => gemini('click_at', { x: 1000, y: 0 }), /^args\.x=1000 is out of range \(0 to 999\)/);
    refused(() => gemini('click_at', { x: Number.NaN, y: 0 }), /^args\.x must be an integer/);
    refused(() => gemini('click_at', { x: 1 }), /^args\.y is required/);
    refused(() => gemini('click_at', { x: 1, y: 1, button: 8 }), /^args\.button is not accepted/);
    refused(() => gemini('key_combination', { keys: 'exec yes' }), /^args\.keys has an invalid key name/);
    refused(() => gemini('key_combination', { keys: { $: 1 } }), /^args\.keys must be a key combination/);
    refused(() => gemini('type_text_at', { x: 1, y: 1, text: 'a', press_enter: 'yes' }), /^args\.press_enter must be true or false/);
    refused(() => gemini('scroll_at', { x: 1, y: 1, direction: 'sideways' }), /^args\.direction must be one of up, down, left, right/);
    refused(() => gemini('navigate', { url: 'javascript:alert(1)' }), /^args\.url must be an absolute path or a URL/);
    refused(() => gemini('navigate', { url: 'https://a b' }), /^args\.url must be/);
    refused(() => gemini('navigate', { url: ['x'] }), /^args\.url must be a string/);
    refused(() => gemini('run_shell', {}), /^name "run_shell" is not a computer-use function/);
    refused(() => gemini('click_at', [1, 2]), /^args must be a JSON object/);
    refused(() => gemini('click_at', { x: 1, y: 1, intent: 'x'.repeat(5_000) }), /^args\.intent is too long/);
  });
});

describe('tool definitions', () => {
  it('OpenAI: the model space, linux', () =>
    assert.deepEqual(openaiToolDefinition({ width: 1366, height: 768 }), {
      type: 'computer_use_preview',
      display_width: 1366,
      display_height: 768,
      environment: 'linux',
    }));
  it('Gemini: the computer_use tool', () => assert.deepEqual(geminiToolDefinition(), { computerUse: { environment: 'ENVIRONMENT_BROWSER' } }));
});

describe('navigating an open browser window', () => {
  it('its address bar: ctrl+L, a pause for the bar to take the focus, the URL typed, Enter', async () => {
    const { addressBarActions } = await import('../../src/vendors/gemini.js');
    assert.deepEqual(addressBarActions('http://x.test/'), [
      { action: 'key', combos: [['Control_L', 'l']] },
      { action: 'wait', seconds: 0.5 },
      { action: 'type', text: 'http://x.test/' },
      { action: 'key', combos: [['Return']] },
    ]);
  });
});

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GuestProtocolError, InvalidRequestError } from '../../src/errors.js';
import { AppNotFoundError, ClipboardTooLargeError, parseAnswer, parseWindows, WindowNotFoundError } from '../../src/computer/desktop-actions/answers.js';
import { appId, clipboardText, MAX_CLIPBOARD_BYTES, openTarget, windowId } from '../../src/computer/desktop-actions/requests.js';

/** The desktop actions' validators (issue 14): what reaches the guest, and what comes back. */
const refusedNaming = (field: string) => (err: unknown) => err instanceof InvalidRequestError && err.message.startsWith(`${field} `);

describe('desktop action requests', () => {
  it('open: URLs of the allowed schemes and absolute paths pass verbatim', () => {
    for (const target of [
      'https://example.com/a?b=1&c=$(id)',
      'http://x',
      'file:///etc/hosts',
      'mailto:a@b.c',
      'HTTPS://X',
      '/home/user/a b/$(touch x);-e.txt',
      '/ünï ✓',
    ]) {
      assert.equal(openTarget(target), target);
    }
  });

  it('open: options, shell text, other schemes, spaces, NUL, newlines, long strings are refused naming target', () => {
    for (const target of [
      '--help',
      '-e',
      '$(touch /tmp/pwned)',
      ';id',
      'relative/path',
      'javascript:alert(1)',
      'ftp://x',
      'https://a b',
      ' https://x',
      'https://x\n',
      'https:',
      '/a\nb',
      '/a\0b',
      '/a\rb',
      `/${'a'.repeat(4096)}`,
      '',
      42,
      undefined,
      '/\uD800',
    ]) {
      assert.throws(() => openTarget(target), refusedNaming('target'), JSON.stringify(target));
    }
  });

  it('launch: desktop-file ids pass (without .desktop); paths, dots, spaces and options do not', () => {
    assert.equal(appId('debian-xterm'), 'debian-xterm');
    assert.equal(appId('org.gnome.Calculator.desktop'), 'org.gnome.Calculator');
    for (const app of ['../../bin/sh', 'a/b', '..', 'a..b', '.hidden', '-e', 'a b', 'xterm;id', '$(id)', 'x'.repeat(256), '', 'é', null]) {
      assert.throws(() => appId(app), refusedNaming('app'), JSON.stringify(app));
    }
  });

  it('window ids: positive integers up to 32 bits, as numbers or digits', () => {
    assert.equal(windowId('4194316'), 4194316);
    assert.equal(windowId(7), 7);
    for (const id of ['0', '-1', 'abc', '1e3', '0x10', '01', '99999999999', 0, 2 ** 32, 1.5, '']) {
      assert.throws(() => windowId(id), refusedNaming('windowId'), JSON.stringify(id));
    }
  });

  it('clipboard text: UTF-8 up to 1 MiB; a lone surrogate or more is refused naming text', () => {
    assert.equal(clipboardText('日本語 🎉'), '日本語 🎉');
    assert.equal(clipboardText('a'.repeat(MAX_CLIPBOARD_BYTES)).length, MAX_CLIPBOARD_BYTES);
    for (const text of ['a'.repeat(MAX_CLIPBOARD_BYTES + 1), '€'.repeat(MAX_CLIPBOARD_BYTES / 3 + 1), 'a\uDC00b', 5]) {
      assert.throws(() => clipboardText(text), refusedNaming('text'));
    }
  });
});

describe('desktop helper answers', () => {
  const answer = (value: unknown) => Buffer.from(`${JSON.stringify(value)}\n`);
  const window = { id: 5, title: 't', app: 'XTerm', instance: 'xterm', x: 0, y: 0, width: 10, height: 10, focused: false };

  it('errors the helper names become the errors a client reads', () => {
    assert.throws(() => parseAnswer(answer({ ok: false, error: 'no_such_window', message: '' }), { verb: 'focus', window: 5 }), WindowNotFoundError);
    assert.throws(() => parseAnswer(answer({ ok: false, error: 'no_such_app', message: 'x' }), { verb: 'launch', app: 'x' }), AppNotFoundError);
    assert.throws(() => parseAnswer(answer({ ok: false, error: 'clipboard_too_large' }), { verb: 'clipboard-get' }), ClipboardTooLargeError);
  });

  it('anything the protocol does not allow is a guest protocol error', () => {
    const broken = [
      Buffer.from('not json\n'),
      Buffer.from('{"ok":true}'),
      Buffer.from('{"ok":true}\n{}\n'),
      answer([1]),
      answer({ ok: 'yes' }),
      answer({ ok: false, error: 'other' }),
    ];
    for (const bytes of broken) assert.throws(() => parseAnswer(bytes, { verb: 'windows' }), GuestProtocolError);
    const lists = [
      [{ ...window, id: 'x' }],
      [{ ...window, id: 0 }],
      [{ ...window, title: 'x'.repeat(257) }],
      [{ ...window, focused: 1 }],
      [{ ...window, width: -1 }],
      Array(129).fill(window),
      [{ ...window, app: 'x'.repeat(65) }],
      'x',
    ];
    for (const windows of lists) assert.throws(() => parseWindows({ windows }), GuestProtocolError);
    assert.deepEqual(parseWindows({ windows: [window] }), [window]);
  });

  it('a clipboard read is a header line and exactly the bytes it announces', () => {
    const text = 'héllo\n日本 🎉';
    const bytes = Buffer.from(text);
    const frame = (announced: number, body: Buffer) => Buffer.concat([answer({ ok: true, bytes: announced }), body]);
    assert.equal(parseAnswer(frame(bytes.length, bytes), { verb: 'clipboard-get' }).text, text);
    assert.equal(parseAnswer(frame(0, Buffer.alloc(0)), { verb: 'clipboard-get' }).text, '');
    for (const [announced, body] of [
      [bytes.length + 1, bytes],
      [bytes.length - 1, bytes],
      [-1, Buffer.alloc(0)],
    ] as const) {
      assert.throws(() => parseAnswer(frame(announced, body), { verb: 'clipboard-get' }), GuestProtocolError);
    }
  });
});

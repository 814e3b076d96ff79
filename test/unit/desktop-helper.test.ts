import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';

/**
 * The guest's desktop helper (src/guest/files/sbx-desktopd) checks every request by its
 * shape again, before it asks anything of the X server or runs anything: the second layer
 * behind the host's checks (test/unit/desktop-actions.test.ts). Run here as the guest runs
 * it (`python3 -I`, one request per line on stdin, one answer frame each on stdout), with no
 * display and an empty home: no root, no sandbox.
 */
const HELPER = path.resolve(import.meta.dirname, '../../src/guest/files/sbx-desktopd');
const home = mkdtempSync(path.join(os.tmpdir(), 'sbx-desktop-helper-'));
type Answer = { ok: boolean; error?: string; message?: string };

/** Runs one helper for all the request lines; its answers, one frame each, in order. */
function askAll(lines: Array<string | Buffer>): Answer[] {
  const result = spawnSync('/usr/bin/python3', ['-I', HELPER], {
    input: Buffer.concat(lines.map((line) => Buffer.concat([Buffer.from(line), Buffer.from('\n')]))),
    env: { HOME: home, DISPLAY: ':65000', PATH: '/nonexistent' },
    timeout: 20_000,
  });
  assert.equal(result.status, 0, result.stderr.toString());
  const answers: Answer[] = [];
  const out = result.stdout;
  let at = 0;
  while (at < out.length) {
    assert.equal(out.subarray(at, at + 4).toString('latin1'), 'SBXD', `a frame at byte ${at}`);
    const length = out.readUInt32BE(at + 4);
    const payload = out.subarray(at + 8, at + 8 + length);
    assert.equal(payload.length, length, 'the whole payload');
    assert.equal(payload.indexOf(0x0a), length - 1, 'one JSON line');
    answers.push(JSON.parse(payload.toString('utf8')) as Answer);
    at += 8 + length;
  }
  assert.equal(answers.length, lines.length, 'one answer per request');
  return answers;
}

function ask(request: string | Buffer): Answer {
  return askAll([request])[0] as Answer;
}

describe('sbx-desktop, the guest helper', () => {
  after(() => rmSync(home, { recursive: true, force: true }));

  it('refuses open targets that are options, shell code, other schemes or not text, without running anything', () => {
    // PATH has no gio: a target that passed the check would fail as "failed", not "bad_request".
    for (const target of ['--help', '-e', '$(touch /tmp/pwned)', ';id', 'javascript:x', 'https://a b', '/a\nb', '/a\u0000b', `/${'a'.repeat(5000)}`, 7, null]) {
      const answer = ask(JSON.stringify({ verb: 'open', target }));
      assert.equal(answer.error, 'bad_request', `${JSON.stringify(target)}: ${JSON.stringify(answer)}`);
    }
    assert.equal(ask(JSON.stringify({ verb: 'open', target: 'https://example.test/' })).error, 'failed');
  });

  it('refuses app ids that could leave the applications directories; an unknown id is no_such_app', () => {
    for (const app of ['../../bin/sh', 'a/b', '..', 'a..b', '.x', '-e', 'a b', '', 3]) {
      assert.equal(ask(JSON.stringify({ verb: 'launch', app })).error, 'bad_request', JSON.stringify(app));
    }
    assert.equal(ask(JSON.stringify({ verb: 'launch', app: 'no-such-app-here' })).error, 'no_such_app');
  });

  it('refuses window ids that are not numbers and clipboard text that is not text, before opening the display', () => {
    for (const window of ['1', 0, -1, 1.5, 2 ** 32, null]) {
      assert.equal(ask(JSON.stringify({ verb: 'focus', window })).error, 'bad_request', JSON.stringify(window));
    }
    assert.equal(ask(JSON.stringify({ verb: 'close', window: '1' })).error, 'bad_request');
    for (const text of ['\\ud800', 5, null]) {
      assert.equal(
        ask(`{"verb": "clipboard-set", "text": ${typeof text === 'string' ? `"${text}"` : JSON.stringify(text)}}`).error,
        'bad_request',
        String(text),
      );
    }
    assert.equal(ask(JSON.stringify({ verb: 'clipboard-set', text: 'a'.repeat(1024 * 1024 + 1) })).error, 'bad_request');
  });

  it('answers anything else with one line: not JSON, unknown verbs, too long, nesting, no display', () => {
    for (const request of ['not json', '[]', '{"verb": "exec"}', '{"verb": ["open"]}', '[['.repeat(100_000)]) {
      assert.equal(ask(request).error, 'bad_request', request.slice(0, 40));
    }
    assert.equal(ask(Buffer.alloc(8 * 1024 * 1024 + 10, 0x20)).error, 'bad_request');
    const noDisplay = ask(JSON.stringify({ verb: 'windows' }));
    assert.deepEqual([noDisplay.error, noDisplay.message], ['failed', 'cannot open the display']);
  });

  it('answers many requests in one process, in order, a refused or too long one included, and ends with its stdin', () => {
    const answers = askAll([
      JSON.stringify({ verb: 'launch', app: 'no-such-app-here' }),
      Buffer.alloc(9 * 1024 * 1024, 0x20),
      'not json',
      JSON.stringify({ verb: 'open', target: '--help' }),
      JSON.stringify({ verb: 'windows' }),
      JSON.stringify({ verb: 'launch', app: 'no-such-app-here' }),
    ]);
    assert.deepEqual(
      answers.map((a) => a.error),
      ['no_such_app', 'bad_request', 'bad_request', 'bad_request', 'failed', 'no_such_app'],
    );
    assert.equal(answers[1]?.message, 'request too long');
  });
});

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';

/**
 * The guest's desktop helper (src/guest/files/sbx-desktop) checks every request by its
 * shape again, before it asks anything of the X server or runs anything: the second layer
 * behind the host's checks (test/unit/desktop-actions.test.ts). Run here as the guest runs
 * it (`python3 -I`, request on stdin), with no display and an empty home: no root, no sandbox.
 */
const HELPER = path.resolve(import.meta.dirname, '../../src/guest/files/sbx-desktop');
const home = mkdtempSync(path.join(os.tmpdir(), 'sbx-desktop-helper-'));

function ask(request: string | Buffer): { ok: boolean; error?: string; message?: string } {
  const result = spawnSync('/usr/bin/python3', ['-I', HELPER], {
    input: request,
    env: { HOME: home, DISPLAY: ':65000', PATH: '/nonexistent' },
    timeout: 20_000,
  });
  assert.equal(result.status, 0, result.stderr.toString());
  const lines = result.stdout.toString('utf8').split('\n');
  assert.equal(lines.length, 2, 'one answer line');
  return JSON.parse(lines[0] as string) as { ok: boolean; error?: string; message?: string };
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
      assert.equal(ask(`{"verb": "clipboard-set", "text": ${typeof text === 'string' ? `"${text}"` : JSON.stringify(text)}}`).error, 'bad_request', String(text));
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
});

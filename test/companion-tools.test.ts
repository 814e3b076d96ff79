import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { MarkerScanner } from '../src/tools/bash/marker.js';
import { ShellOutput } from '../src/tools/bash/shell-output.js';
import { hostTrace, rememberNetns } from './helpers/host.js';
import { startTestOrchestrator, TEST_PREFIX, type TestOrchestrator } from './helpers/orchestrator.js';
import { ResourceNames } from '../src/network/names.js';

interface ToolResult {
  content: Array<{ type: string; text?: string }>;
  is_error: boolean;
}

/** A short command timeout for the timeout tests; the tools read it when the server is built. */
const BASH_TIMEOUT_SECONDS = 3;

describe('companion tools: bash and the text editor, on a real sandbox', () => {
  let orch: TestOrchestrator;
  let id: string;
  const savedTimeout = process.env.SBX_BASH_TIMEOUT_SECONDS;

  before(async () => {
    process.env.SBX_BASH_TIMEOUT_SECONDS = String(BASH_TIMEOUT_SECONDS);
    // A /24 of this process's own: another test file's orchestrator leases from 10.242/16.
    orch = await startTestOrchestrator();
    id = await createSession(orch);
  });
  after(async () => {
    if (savedTimeout === undefined) delete process.env.SBX_BASH_TIMEOUT_SECONDS;
    else process.env.SBX_BASH_TIMEOUT_SECONDS = savedTimeout;
    await orch?.stop();
  });

  const bash = (input: unknown, session = id) => tool(orch, session, 'bash', input);
  const edit = (input: unknown, session = id) => tool(orch, session, 'str_replace_based_edit_tool', input);
  /** Runs a command that must succeed and returns its output. */
  const sh = async (command: string): Promise<string> => {
    const result = await bash({ command });
    assert.equal(result.is_error, false, text(result));
    return text(result);
  };

  describe('bash', () => {
    it('keeps the working directory and variables between commands', async () => {
      assert.equal(await sh('cd /tmp; export X=1; Y=2; f() { echo "f:$1"; }'), '(no output)');
      assert.equal(await sh('pwd; echo $X $Y; f arg'), '/tmp\n1 2\nf:arg');
    });

    it('runs as the guest user with DISPLAY set, and can reach the display', async () => {
      assert.equal(await sh('id -un; echo $DISPLAY; echo $LANG'), 'user\n:99\nC.UTF-8');
      assert.equal(await sh('xdotool getdisplaygeometry'), '1024 768');
    });

    it('returns stdout and stderr interleaved as written, without the last newline', async () => {
      assert.equal(await sh('echo out1; echo err1 >&2; echo out2; echo err2 1>&2'), 'out1\nerr1\nout2\nerr2');
      assert.equal(await sh('printf "no newline"'), 'no newline');
      assert.equal(await sh('printf "two\\n\\n"'), 'two\n');
    });

    it('shows a non-zero exit status', async () => {
      const result = await bash({ command: 'ls /no/such/dir' });
      assert.equal(result.is_error, false);
      assert.match(text(result), /^ls: cannot access '\/no\/such\/dir': No such file or directory\n<exit code: 2>$/);
      assert.equal(await sh('false'), '<exit code: 1>');
      assert.equal(await sh('(exit 7); echo $?'), '7');
    });

    it('runs quotes, substitutions, here-docs and unicode as bash would, nothing more', async () => {
      const command = [
        `echo "$(echo sub)" 'single '\\''q'\\'' ' "double \\"q\\"" \`echo back\``,
        "cat <<'EOF'",
        'literal $HOME `id` $(id)',
        'EOF',
        'echo "Grüße 漢字 🎉"',
      ].join('\n');
      assert.equal(await sh(command), 'sub single \'q\'  double "q" back\nliteral $HOME `id` $(id)\nGrüße 漢字 🎉');
    });

    it('reports a syntax error and keeps the shell', async () => {
      const result = await bash({ command: 'echo "unterminated' });
      assert.equal(result.is_error, false);
      assert.match(text(result), /unexpected EOF while looking for matching `"'[^]*<exit code: 2>/);
      assert.equal(await sh('echo $X still'), '1 still');
      // Each malformed command, then commands that start with a keyword: the shell must
      // parse its own framing correctly after any of them.
      for (const broken of ['echo "x', 'echo `x', "echo 'x", 'echo $(', 'if', 'fi', '(', 'case x in', '}', 'f() {', 'echo a |']) {
        const failed = await bash({ command: broken });
        assert.equal(failed.is_error, false, `${broken}: ${text(failed)}`);
        assert.match(text(failed), /syntax error|unexpected EOF/, broken);
        assert.equal(await sh('{ echo brace; }; if true; then echo $X; fi'), 'brace\n1', broken);
      }
      // bash 5.2.15 corrupts its heap once eval fails on an unclosed `$(` and aborts a few
      // command substitutions later: the shell must never have parsed one.
      assert.equal(await sh("printf '€%.0s' $(seq 40000) | wc -c"), '120000');
      assert.equal(await sh('cd /tmp; export W=1; echo "$W $(pwd)"'), '1 /tmp');
    });

    it('is not fooled by output that looks like the end marker', async () => {
      const command = "echo '<<exit>>'; printf '\\n<<sbx:0123456789abcdef0123456789abcdef:0>>\\n'; echo after";
      assert.equal(await sh(command), '<<exit>>\n\n<<sbx:0123456789abcdef0123456789abcdef:0>>\nafter');
      // Tracing left on shows the command, not the framing around it (beyond the eval).
      assert.equal(await sh('set -x; echo traced'), '++ echo traced\ntraced');
      assert.equal(await sh('echo still; set +x'), "+ builtin eval 'echo still; set +x'\n++ echo still\nstill\n++ set +x");
      assert.equal(await sh('echo fine'), 'fine');
      assert.equal(await sh('false; echo "status survives: $?"'), 'status survives: 1');
    });

    it('gives commands an empty standard input, so reading it cannot hang or eat the next command', async () => {
      assert.equal(await sh('cat; read -r line; echo "read: $? [$line]"'), 'read: 1 []');
    });

    it('rejects a NUL character as a tool error', async () => {
      const result = await bash({ command: 'echo a\0b' });
      assert.equal(result.is_error, true);
      assert.match(text(result), /`command` contains a NUL character/);
    });

    it('clips long output with a marker saying how much is missing', async () => {
      const result = await bash({ command: "head -c 100000 /dev/zero | tr '\\0' a" });
      assert.equal(result.is_error, false);
      const out = text(result);
      assert.ok(out.startsWith('a'.repeat(30_000) + '\n<response clipped: 70000 more characters.'), out.slice(29_990, 30_100));
      assert.ok(out.length < 30_200);
      // Multi-byte characters are counted as characters, not bytes.
      const wide = text(await bash({ command: "printf '€%.0s' $(seq 40000)" }));
      assert.ok(wide.startsWith('€'.repeat(30_000) + '\n<response clipped: 10000 more characters.'), wide.slice(29_990, 30_100));
    });

    it('times out, says so with the output so far, and restarts the shell', async () => {
      await sh('cd /tmp; export Z=before');
      const started = Date.now();
      const result = await bash({ command: 'echo started; sleep 30; echo never' });
      const elapsed = Date.now() - started;
      assert.equal(result.is_error, true);
      assert.match(
        text(result),
        new RegExp(`^started\ntimed out: bash has not returned in ${BASH_TIMEOUT_SECONDS} seconds, so the shell was killed and restarted`),
      );
      assert.ok(elapsed < BASH_TIMEOUT_SECONDS * 1000 + 3000, `took ${elapsed} ms`);
      assert.equal(await sh('pwd; echo "[${Z:-}]"; pgrep -u user -x sleep || echo no sleep left'), '/home/user\n[]\nno sleep left');
    });

    it('restart replaces the shell: state is reset and the old shell is gone', async () => {
      const oldPid = await sh('export R=1; cd /tmp; echo $$');
      const restarted = await bash({ restart: true });
      assert.deepEqual(restarted, { content: [{ type: 'text', text: 'tool has been restarted.' }], is_error: false });
      const after = await sh(`echo "[\${R:-}] $(pwd) $$"; kill -0 ${oldPid} 2>/dev/null && echo alive || echo gone`);
      const [line, status] = after.split('\n');
      assert.match(line as string, /^\[\] \/home\/user \d+$/);
      assert.notEqual(line?.split(' ')[2], oldPid);
      assert.equal(status, 'gone');
    });

    it('restart also stops a command that is still running', async () => {
      // The session's commands queue behind this one, so only a restart can get in meanwhile.
      const running = bash({ command: 'sleep 20' });
      await new Promise((resolve) => setTimeout(resolve, 500));
      const restart = await bash({ restart: true });
      assert.equal(restart.is_error, false);
      const stopped = await running;
      assert.equal(stopped.is_error, true);
      assert.match(text(stopped), /the command was stopped because the tool was restarted/);
      assert.equal(await sh('pgrep -u user -x sleep || echo none'), 'none');
    });

    it('survives `exit`: says the shell ended, and the next command gets a new one', async () => {
      const result = await bash({ command: 'echo bye; exit 3' });
      assert.equal(result.is_error, true);
      assert.match(text(result), /^bye\nbash has exited with returncode 3; a new shell will be started/);
      assert.equal(await sh('echo again'), 'again');
    });

    it('runs one command at a time per session, in order', async () => {
      const started = Date.now();
      const results = await Promise.all([0, 1, 2, 3, 4].map((n) => bash({ command: `echo start ${n}; sleep 0.2; echo end ${n}` })));
      assert.deepEqual(
        results.map(text),
        [0, 1, 2, 3, 4].map((n) => `start ${n}\nend ${n}`),
      );
      assert.ok(Date.now() - started >= 1000, 'the five commands overlapped');
    });

    it('answers bad input with an is_error result that names the field', async () => {
      const cases: Array<[unknown, RegExp]> = [
        [{}, /^no command provided\.$/],
        [{ command: '' }, /^no command provided\.$/],
        [{ restart: false }, /^no command provided\.$/],
        [{ command: 5 }, /Parameter `command` must be a string of shell code, got number 5/],
        [{ command: ['ls'] }, /`command` must be a string of shell code, got an array/],
        [{ restart: 'yes' }, /Parameter `restart` must be a boolean, got string "yes"/],
        [{ command: 'ls', cwd: '/tmp' }, /Unknown parameter `cwd` for the bash tool/],
        [{ command: 'ls', restart: true }, /either `command` or `restart: true`, not both/],
        [['ls'], /must be a JSON object/],
      ];
      for (const [input, message] of cases) {
        const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/tools/bash`, payload: input as object });
        assert.equal(res.statusCode, 200, res.body);
        assert.equal(res.json().is_error, true, JSON.stringify(input));
        assert.match(text(res.json()), message, JSON.stringify(input));
      }
    });

    it('is a 404 for an unknown session and a 400 for a malformed id', async () => {
      const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions/nosuchsess/tools/bash', payload: { command: 'true' } });
      assert.equal(res.statusCode, 404);
      assert.equal(res.json().error.code, 'not_found');
      const long = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${'x'.repeat(65)}/tools/bash`, payload: { command: 'true' } });
      assert.equal(long.statusCode, 400);
    });

    it('both tools are described in the OpenAPI document', async () => {
      const doc = (await orch.server.inject({ method: 'GET', url: '/openapi.json' })).json();
      for (const name of ['bash', 'str_replace_based_edit_tool']) {
        const route = doc.paths[`/v1/sessions/{id}/tools/${name}`]?.post;
        assert.ok(route, name);
        assert.ok(route.requestBody.content['application/json'].schema.properties, name);
        assert.ok(route.responses['200'] && route.responses['404'] && route.responses['409'], name);
      }
    });

    it('p50 of `true` over the API (measured)', async (t) => {
      const times: number[] = [];
      for (let i = 0; i < 40; i++) {
        const started = performance.now();
        assert.equal(await sh('true'), '(no output)');
        times.push(performance.now() - started);
      }
      const editTimes: number[] = [];
      for (let i = 0; i < 20; i++) {
        const started = performance.now();
        assert.equal((await edit({ command: 'view', path: '/etc/hostname' })).is_error, false);
        editTimes.push(performance.now() - started);
      }
      t.diagnostic(`bash true: p50 ${percentile(times, 50).toFixed(1)} ms, p95 ${percentile(times, 95).toFixed(1)} ms`);
      t.diagnostic(`editor view: p50 ${percentile(editTimes, 50).toFixed(1)} ms, p95 ${percentile(editTimes, 95).toFixed(1)} ms`);
    });
  });

  describe('text editor', () => {
    const tricky = 'quotes \' " `backticks` $(id) ${HOME} \\n not a newline\n\ttab-indented\r\nCRLF line\nGrüße 漢字 🎉\n$& $1 $$\n';

    it('create refuses a missing directory, then writes the text exactly', async () => {
      const missing = await edit({ command: 'create', path: '/tmp/ed/new/a.txt', file_text: 'x' });
      assert.equal(missing.is_error, true);
      assert.match(text(missing), /^Ran into No such file or directory \(does \/tmp\/ed\/new exist\? Create it first, e\.g\. with `mkdir -p \/tmp\/ed\/new`/);
      await sh('mkdir -p /tmp/ed');
      const created = await edit({ command: 'create', path: '/tmp/ed/tricky.txt', file_text: tricky });
      assert.deepEqual(created, { content: [{ type: 'text', text: 'File created successfully at: /tmp/ed/tricky.txt' }], is_error: false });
      assert.equal(await sh('base64 -w0 /tmp/ed/tricky.txt'), Buffer.from(tricky).toString('base64'));
      assert.equal(await sh('cat /tmp/ed/tricky.txt'), tricky.slice(0, -1));
      assert.equal(await sh('stat -c "%U %a" /tmp/ed/tricky.txt'), 'user 644');
    });

    it('create does not overwrite', async () => {
      const again = await edit({ command: 'create', path: '/tmp/ed/tricky.txt', file_text: 'other' });
      assert.equal(again.is_error, true);
      assert.equal(text(again), 'File already exists at: /tmp/ed/tricky.txt. Cannot overwrite files using command `create`.');
      assert.equal(await sh('base64 -w0 /tmp/ed/tricky.txt'), Buffer.from(tricky).toString('base64'));
    });

    it('view numbers the lines as cat -n does, showing the text as it is', async () => {
      const lines = tricky.slice(0, -1).split('\n');
      const expected = `Here's the result of running \`cat -n\` on /tmp/ed/tricky.txt:\n${lines.map((l, i) => `${String(i + 1).padStart(6)}\t${l}`).join('\n')}\n`;
      assert.equal(text(await edit({ command: 'view', path: '/tmp/ed/tricky.txt' })), expected);
    });

    it('view_range shows a part, -1 meaning to the end, and checks the range', async () => {
      await edit({ command: 'create', path: '/tmp/ed/five.txt', file_text: 'one\ntwo\nthree\nfour\nfive\n' });
      assert.equal(
        text(await edit({ command: 'view', path: '/tmp/ed/five.txt', view_range: [2, 3] })),
        "Here's the result of running `cat -n` on /tmp/ed/five.txt:\n     2\ttwo\n     3\tthree\n",
      );
      assert.equal(
        text(await edit({ command: 'view', path: '/tmp/ed/five.txt', view_range: [4, -1] })),
        "Here's the result of running `cat -n` on /tmp/ed/five.txt:\n     4\tfour\n     5\tfive\n",
      );
      const bad: Array<[unknown, string]> = [
        [[0, 2], 'Invalid `view_range`: [0, 2]. Its first element `0` should be within the range of lines of the file: [1, 5]'],
        [[2, 9], 'Invalid `view_range`: [2, 9]. Its second element `9` should be smaller than the number of lines in the file: `5`'],
        [[3, 2], 'Invalid `view_range`: [3, 2]. Its second element `2` should be larger or equal than its first `3`'],
        [[1], 'Invalid `view_range`. It should be a list of two integers.'],
        [[1, 2.5], 'Invalid `view_range`. It should be a list of two integers.'],
        ['1-2', 'Invalid `view_range`. It should be a list of two integers.'],
      ];
      for (const [range, message] of bad) {
        const result = await edit({ command: 'view', path: '/tmp/ed/five.txt', view_range: range });
        assert.equal(result.is_error, true);
        assert.equal(text(result), message);
      }
    });

    it('str_replace replaces a unique occurrence and shows the snippet', async () => {
      await edit({ command: 'create', path: '/tmp/ed/code.py', file_text: 'a = 1\nb = 2\nc = 3\nd = 4\ne = 5\nf = 6\ng = 7\nh = 8\ni = 9\nj = 10\n' });
      const result = await edit({ command: 'str_replace', path: '/tmp/ed/code.py', old_str: 'e = 5', new_str: 'e = "$&"\nee = 55' });
      assert.equal(result.is_error, false);
      assert.equal(
        text(result),
        'The file /tmp/ed/code.py has been edited. ' +
          "Here's the result of running `cat -n` on a snippet of /tmp/ed/code.py:\n" +
          '     1\ta = 1\n     2\tb = 2\n     3\tc = 3\n     4\td = 4\n     5\te = "$&"\n     6\tee = 55\n     7\tf = 6\n     8\tg = 7\n     9\th = 8\n    10\ti = 9\n' +
          'Review the changes and make sure they are as expected. Edit the file again if necessary.',
      );
      assert.equal(await sh('cat /tmp/ed/code.py'), 'a = 1\nb = 2\nc = 3\nd = 4\ne = "$&"\nee = 55\nf = 6\ng = 7\nh = 8\ni = 9\nj = 10');
    });

    it('str_replace without new_str deletes, and keeps tabs and everything else byte for byte', async () => {
      const result = await edit({ command: 'str_replace', path: '/tmp/ed/tricky.txt', old_str: 'CRLF line\n' });
      assert.equal(result.is_error, false, text(result));
      assert.equal(await sh('base64 -w0 /tmp/ed/tricky.txt'), Buffer.from(tricky.replace('CRLF line\n', '')).toString('base64'));
    });

    it('str_replace refuses text that is missing or not unique, and changes nothing', async () => {
      const before = await sh('base64 -w0 /tmp/ed/code.py');
      const missing = await edit({ command: 'str_replace', path: '/tmp/ed/code.py', old_str: 'z = 26', new_str: 'x' });
      assert.equal(missing.is_error, true);
      assert.equal(text(missing), 'No replacement was performed, old_str `z = 26` did not appear verbatim in /tmp/ed/code.py.');
      const many = await edit({ command: 'str_replace', path: '/tmp/ed/code.py', old_str: ' = 1', new_str: 'x' });
      assert.equal(many.is_error, true);
      assert.equal(text(many), 'No replacement was performed. Multiple occurrences of old_str ` = 1` in lines [1, 11]. Please ensure it is unique');
      const empty = await edit({ command: 'str_replace', path: '/tmp/ed/code.py', old_str: '' });
      assert.match(text(empty), /`old_str` must not be empty/);
      assert.equal(await sh('base64 -w0 /tmp/ed/code.py'), before);
    });

    it('insert adds lines after the given one, at the top with 0, and checks the range', async () => {
      const top = await edit({ command: 'insert', path: '/tmp/ed/five.txt', insert_line: 0, insert_text: 'zero' });
      assert.equal(
        text(top),
        "The file /tmp/ed/five.txt has been edited. Here's the result of running `cat -n` on a snippet of the edited file:\n" +
          '     1\tzero\n     2\tone\n     3\ttwo\n     4\tthree\n     5\tfour\n' +
          'Review the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary.',
      );
      const end = await edit({ command: 'insert', path: '/tmp/ed/five.txt', insert_line: 6, insert_text: 'six\nseven' });
      assert.equal(end.is_error, false, text(end));
      assert.equal(await sh('cat -A /tmp/ed/five.txt'), 'zero$\none$\ntwo$\nthree$\nfour$\nfive$\nsix$\nseven$');
      const bad = await edit({ command: 'insert', path: '/tmp/ed/five.txt', insert_line: 99, insert_text: 'x' });
      assert.equal(bad.is_error, true);
      assert.equal(text(bad), 'Invalid `insert_line` parameter: 99. It should be within the range of lines of the file: [0, 8]');
      const wrongField = await edit({ command: 'insert', path: '/tmp/ed/five.txt', insert_line: 1, new_str: 'x' });
      assert.match(text(wrongField), /`new_str` is not used by command: insert; give the text to insert as `insert_text`/);
    });

    it('view of a directory lists two levels, without hidden entries, also inside a hidden directory', async () => {
      await sh(
        'mkdir -p /tmp/tree/sub/deeper /tmp/tree/.hidden ~/.cfg/inner && touch /tmp/tree/a /tmp/tree/.dot /tmp/tree/sub/b /tmp/tree/sub/deeper/c "/tmp/tree/with space" ~/.cfg/inner/x',
      );
      assert.equal(
        text(await edit({ command: 'view', path: '/tmp/tree' })),
        "Here's the files and directories up to 2 levels deep in /tmp/tree, excluding hidden items:\n" +
          '/tmp/tree\n/tmp/tree/a\n/tmp/tree/sub\n/tmp/tree/sub/b\n/tmp/tree/sub/deeper\n/tmp/tree/with space\n',
      );
      assert.equal(
        text(await edit({ command: 'view', path: '/home/user/.cfg' })),
        "Here's the files and directories up to 2 levels deep in /home/user/.cfg, excluding hidden items:\n" +
          '/home/user/.cfg\n/home/user/.cfg/inner\n/home/user/.cfg/inner/x\n',
      );
      const ranged = await edit({ command: 'view', path: '/tmp/tree', view_range: [1, 2] });
      assert.equal(text(ranged), 'The `view_range` parameter is not allowed when `path` points to a directory.');
      const replaced = await edit({ command: 'str_replace', path: '/tmp/tree', old_str: 'a' });
      assert.equal(text(replaced), 'The path /tmp/tree is a directory and only the `view` command can be used on directories');
    });

    it('clips a long view and says how to see the rest', async () => {
      await sh('seq 1 5000 > /tmp/ed/long.txt');
      const out = text(await edit({ command: 'view', path: '/tmp/ed/long.txt' }));
      assert.ok(out.length < 16_500, String(out.length));
      assert.match(out, /\n<response clipped: \d+ more lines not shown\. View the rest with `view_range`/);
      const tail = text(await edit({ command: 'view', path: '/tmp/ed/long.txt', view_range: [4999, -1] }));
      assert.equal(tail, "Here's the result of running `cat -n` on /tmp/ed/long.txt:\n  4999\t4999\n  5000\t5000\n");
    });

    it('refuses what it cannot or must not read', async () => {
      const hostname = await sh('cat /etc/hostname');
      assert.ok(hostname.length > 0, 'the guest has a hostname to replace');
      const cases: Array<[Record<string, unknown>, RegExp]> = [
        [{ command: 'view', path: '/no/such/file' }, /^The path \/no\/such\/file does not exist\. Please provide a valid path\.$/],
        [
          { command: 'view', path: 'tmp/ed/five.txt' },
          /^The path tmp\/ed\/five\.txt is not an absolute path, it should start with `\/`\. Maybe you meant \/tmp\/ed\/five\.txt\?$/,
        ],
        [{ command: 'view', path: '/usr/bin/true' }, /is not UTF-8 text/],
        [{ command: 'view', path: '/dev/zero' }, /is not a regular file/],
        [{ command: 'view', path: '/tmp/ed/big.txt' }, /larger than 10485760 bytes/],
        [
          { command: 'create', path: '/etc/owned', file_text: 'x' },
          /^Ran into Permission denied \(the tool runs as the sandbox user "user"\) while trying to write to \/etc\/owned$/,
        ],
        // Text that is there, so the write (not the search) is what fails.
        [
          { command: 'str_replace', path: '/etc/hostname', old_str: hostname, new_str: 'b' },
          /^Ran into Permission denied \(the tool runs as the sandbox user "user"\) while trying to write to \/etc\/hostname$/,
        ],
      ];
      await sh("head -c 11000000 /dev/zero | tr '\\0' a > /tmp/ed/big.txt");
      for (const [input, message] of cases) {
        const result = await edit(input);
        assert.equal(result.is_error, true, JSON.stringify(input));
        assert.match(text(result), message, JSON.stringify(input));
      }
    });

    it('answers bad input with an is_error result that names the field', async () => {
      const cases: Array<[unknown, RegExp]> = [
        [{ path: '/tmp' }, /^Parameter `command` is required; it is one of: view, create, str_replace, insert\.$/],
        [
          { command: 'undo_edit', path: '/tmp/ed/five.txt' },
          /^Unrecognized command undo_edit\. The allowed commands for the str_replace_based_edit_tool tool are: view, create, str_replace, insert$/,
        ],
        [{ command: 'view' }, /^Parameter `path` is required for command: view$/],
        [{ command: 'view', path: 5 }, /^Parameter `path` must be a string, got number 5\.$/],
        [{ command: 'create', path: '/tmp/ed/x' }, /^Parameter `file_text` is required for command: create$/],
        [{ command: 'create', path: '/tmp/ed/x', file_text: 3 }, /^Parameter `file_text` must be a string, got number 3\.$/],
        [{ command: 'str_replace', path: '/tmp/ed/x' }, /^Parameter `old_str` is required for command: str_replace$/],
        [{ command: 'insert', path: '/tmp/ed/x', insert_text: 'a' }, /^Parameter `insert_line` is required for command: insert$/],
        [{ command: 'insert', path: '/tmp/ed/x', insert_line: '1', insert_text: 'a' }, /^Parameter `insert_line` must be an integer, got string "1"\.$/],
        [
          { command: 'view', path: '/tmp', file_text: 'x' },
          /^Parameter `file_text` is not accepted by command: view; it takes `path` and optional `view_range`\.$/,
        ],
        [{ command: 'view', path: '/tmp\0x' }, /NUL/],
        ['view /tmp', /must be a JSON object/],
      ];
      for (const [input, message] of cases) {
        const res = await orch.server.inject({
          method: 'POST',
          url: `/v1/sessions/${id}/tools/str_replace_based_edit_tool`,
          headers: { 'content-type': 'application/json' },
          payload: JSON.stringify(input),
        });
        assert.equal(res.statusCode, 200, res.body);
        assert.equal(res.json().is_error, true, JSON.stringify(input));
        assert.match(text(res.json()), message, JSON.stringify(input));
      }
      // null is "not given", as some clients send every optional field.
      const nulls = await edit({ command: 'view', path: '/tmp/ed/five.txt', view_range: null, file_text: null });
      assert.equal(nulls.is_error, false, text(nulls));
    });

    it('files written by bash read back exactly through view, and the reverse', async () => {
      await sh('printf \'x\\ty $(id) `id` "q" \\x27s\\x27\\n\\xc3\\xa9\\n\' > /tmp/ed/from-bash.txt');
      assert.equal(
        text(await edit({ command: 'view', path: '/tmp/ed/from-bash.txt' })),
        "Here's the result of running `cat -n` on /tmp/ed/from-bash.txt:\n     1\tx\ty $(id) `id` \"q\" 's'\n     2\té\n",
      );
      assert.equal(await sh('test -e /tmp/pwned && echo pwned || echo clean'), 'clean');
    });
  });

  describe('lifecycle', () => {
    it('another session is not held up by a busy one', async () => {
      const other = await createSession(orch);
      const busy = bash({ command: 'sleep 2; echo slow' });
      const started = Date.now();
      const quick = await bash({ command: 'echo quick' }, other);
      assert.equal(text(quick), 'quick');
      assert.ok(Date.now() - started < 1500, `took ${Date.now() - started} ms`);
      assert.equal(text(await busy), 'slow');
      await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${other}` });
    });

    it('destroying a session stops its shell, even mid-command, and leaves nothing running', async () => {
      const doomed = await createSession(orch);
      await rememberNetns(new ResourceNames(TEST_PREFIX), doomed);
      const pid = text(await bash({ command: 'echo $$' }, doomed));
      assert.match(pid, /^\d+$/);
      const running = bash({ command: 'sleep 60' }, doomed);
      await new Promise((resolve) => setTimeout(resolve, 300));
      const started = Date.now();
      const res = await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${doomed}` });
      assert.equal(res.statusCode, 200);
      const stopped = await running;
      assert.ok(Date.now() - started < 10_000);
      assert.equal(stopped.is_error, true);
      assert.match(text(stopped), /stopped because the session is ending|connection to the sandbox was lost/);
      const trace = await hostTrace(new ResourceNames(TEST_PREFIX), doomed, path.join(orch.stateDir, doomed));
      assert.deepEqual(trace.processes, []);
      const after = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${doomed}/tools/bash`, payload: { command: 'true' } });
      assert.equal(after.statusCode, 409);
      assert.equal(after.json().error.code, 'session_not_ready');
      const editAfter = await orch.server.inject({
        method: 'POST',
        url: `/v1/sessions/${doomed}/tools/str_replace_based_edit_tool`,
        payload: { command: 'view', path: '/tmp' },
      });
      assert.equal(editAfter.statusCode, 409);
    });
  });
});

describe('bash tool output framing (no sandbox)', () => {
  it('finds the marker across chunk boundaries and passes on everything before it', () => {
    const nonce = 'ab'.repeat(16);
    const passed: Buffer[] = [];
    const scanner = new MarkerScanner(nonce, (b) => passed.push(b));
    const stream = Buffer.from(`hello\n<<sbx:${'cd'.repeat(16)}:0>>\nworld\n<<sbx:${nonce}:42>>\nlate`);
    let found: { value: number; rest: Buffer } | undefined;
    for (let i = 0; i < stream.length && !found; i += 3) found = scanner.feed(stream.subarray(i, i + 3));
    assert.equal(found?.value, 42);
    assert.equal(Buffer.concat(passed).toString(), `hello\n<<sbx:${'cd'.repeat(16)}:0>>\nworld\n`);
  });

  it('keeps the first characters and counts the rest, in characters', () => {
    const output = new ShellOutput(5);
    output.push(Buffer.from('héllo wörld 🎉\n'));
    assert.deepEqual(output.finish(), { text: 'héllo', clippedChars: 8 }); // the final newline goes, as always
    const short = new ShellOutput(50);
    short.push(Buffer.from('a\n'));
    assert.deepEqual(short.finish(), { text: 'a', clippedChars: 0 });
    const big = new ShellOutput(3);
    for (let i = 0; i < 1000; i++) big.push(Buffer.from('€€€€€€€€€€'));
    assert.deepEqual(big.finish(), { text: '€€€', clippedChars: 9997 });
  });
});

async function createSession(orch: TestOrchestrator): Promise<string> {
  const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { timeoutSeconds: 600 } });
  assert.equal(res.statusCode, 201, res.body);
  return res.json().id as string;
}

async function tool(orch: TestOrchestrator, id: string, name: string, input: unknown): Promise<ToolResult> {
  const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/tools/${name}`, payload: input as object });
  assert.equal(res.statusCode, 200, res.body);
  return res.json<ToolResult>();
}

function text(result: ToolResult): string {
  return result.content.map((c) => c.text ?? '').join('\n');
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

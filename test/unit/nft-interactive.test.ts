import assert from 'node:assert/strict';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { InteractiveNftList } from '../../src/network/policy/nft-interactive.js';

/**
 * The drift check's listing from one long-lived `nft --json --interactive`. A stand-in nft (a
 * shell script) answers each line as told by a file, and logs each start, so the tests see how
 * many processes ran and when the one-shot listing (a recorded stand-in here) took over.
 */
const TABLE_LINE = '{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"table": {"family": "inet", "name": "t", "handle": 1}}]}';

describe('InteractiveNftList', () => {
  let dir: string;
  let nftBin: string;
  const mode = (m: string) => writeFile(path.join(dir, 'mode'), m);
  const starts = async () => (await readFile(path.join(dir, 'starts'), 'utf8').catch(() => '')).split('\n').filter(Boolean).length;

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-nfti-'));
    nftBin = path.join(dir, 'nft');
    // Answers each command by the mode file: ok (one line), err (stderr), two (two lines), hang, exit.
    await writeFile(
      nftBin,
      `#!/bin/sh
[ "$1 $2" = "--json --interactive" ] || exit 64
echo start >> "${dir}/starts"
while IFS= read -r line; do
  echo "$line" >> "${dir}/commands"
  case "$(cat "${dir}/mode")" in
    ok) echo '${TABLE_LINE}' ;;
    err) echo 'Error: No such file or directory' >&2 ;;
    two) printf '%s\\n%s\\n' '${TABLE_LINE}' '${TABLE_LINE}' ;;
    hang) exec sleep 30 ;;
    late) echo '${TABLE_LINE}'; (sleep 0.1; echo '${TABLE_LINE}') ;;
    exit) exit 1 ;;
  esac
done
`,
    );
    await chmod(nftBin, 0o755);
  });
  after(() => rm(dir, { recursive: true, force: true }));

  function lister(fallbackCalls: string[], answerTimeoutMs = 300) {
    const fallback = async (family: string, table: string) => {
      fallbackCalls.push(`${family} ${table}`);
      return undefined;
    };
    return new InteractiveNftList({ nftBin, fallback, answerTimeoutMs });
  }

  it('answers listings from one process, metainfo left out, without the one-shot nft', async () => {
    await rm(path.join(dir, 'starts'), { force: true });
    await mode('ok');
    const calls: string[] = [];
    const list = lister(calls);
    for (let i = 0; i < 3; i++) assert.deepEqual(await list.listTable('inet', 't'), [{ table: { family: 'inet', name: 't', handle: 1 } }]);
    list.close();
    assert.equal(await starts(), 1);
    assert.deepEqual(calls, []);
    assert.match(await readFile(path.join(dir, 'commands'), 'utf8'), /^list table inet t\n/);
  });

  for (const [what, how] of [
    ['an answer on stderr (a table gone)', 'err'],
    ['two lines for one command', 'two'],
    ['no answer within the deadline', 'hang'],
    ['an exit', 'exit'],
  ] as const) {
    it(`${what}: the one-shot nft answers, and the next listing starts a new process`, async () => {
      await rm(path.join(dir, 'starts'), { force: true });
      const calls: string[] = [];
      // Only a silent nft waits for the deadline: the others are given up as soon as they misbehave.
      const list = lister(calls, how === 'hang' ? 300 : 10_000);
      await mode(how);
      const started = performance.now();
      assert.equal(await list.listTable('inet', 't'), undefined);
      assert.ok(performance.now() - started < 2_000, `given up after ${performance.now() - started} ms`);
      assert.deepEqual(calls, ['inet t']);
      await mode('ok');
      assert.equal((await list.listTable('inet', 't'))?.length, 1);
      list.close();
      assert.equal(await starts(), 2);
      assert.deepEqual(calls, ['inet t']);
    });
  }

  it('a line nobody asked for (a late second answer) ends the process: it is never read as the next answer', async () => {
    await rm(path.join(dir, 'starts'), { force: true });
    const calls: string[] = [];
    const list = lister(calls);
    await mode('late');
    assert.equal((await list.listTable('inet', 't'))?.length, 1);
    await new Promise((resolve) => setTimeout(resolve, 300));
    await mode('ok');
    assert.equal((await list.listTable('inet', 't'))?.length, 1);
    list.close();
    assert.equal(await starts(), 2);
    assert.deepEqual(calls, []);
  });

  it('a name that is not a word never reaches nft (no second command on the line)', async () => {
    await rm(path.join(dir, 'commands'), { force: true });
    const list = lister([]);
    await assert.rejects(list.listTable('inet', 't\nflush ruleset'), /not a table name/);
    await assert.rejects(list.listTable('inet', 't; flush ruleset'), /not a table name/);
    list.close();
    assert.equal(await readFile(path.join(dir, 'commands'), 'utf8').catch(() => ''), '');
  });

  it('after close, listings use the one-shot nft', async () => {
    const calls: string[] = [];
    const list = lister(calls);
    list.close();
    await list.listTable('inet', 't');
    assert.deepEqual(calls, ['inet t']);
  });
});

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { describe, it } from 'node:test';
import v8 from 'node:v8';
import vm from 'node:vm';
import { OutputLog } from '../../src/processes/output-log.js';
import { guestCommand, parseProcessSpec } from '../../src/processes/process-request.js';

/** The process API's pieces that need no sandbox: the bounded output log, the request checks, the guest command. */
describe('process output log', () => {
  it('keeps the newest output within its cap and tells a reader exactly what it missed', () => {
    let held = 0;
    const log = new OutputLog(10, (delta) => (held += delta));
    log.push('stdout', Buffer.from('abcd'));
    log.push('stderr', Buffer.from('efgh'));
    log.push('stdout', Buffer.from('ijkl'));
    assert.deepEqual({ start: log.start, end: log.end, held, dropped: log.droppedBytes }, { start: 4, end: 12, held: 8, dropped: 4 });
    const fromZero = log.read(0, 100);
    assert.equal(fromZero.dropped, 4);
    assert.deepEqual(
      fromZero.chunks.map((c) => [c.offset, c.stream, c.data.toString()]),
      [
        [4, 'stderr', 'efgh'],
        [8, 'stdout', 'ijkl'],
      ],
    );
    // From the middle of a chunk: the chunk is cut at the offset.
    const mid = log.read(6, 100);
    assert.deepEqual(
      mid.chunks.map((c) => [c.offset, c.data.toString()]),
      [
        [6, 'gh'],
        [8, 'ijkl'],
      ],
    );
    assert.equal(mid.dropped, 0);
    assert.equal(log.read(12, 100).chunks.length, 0);
    // A chunk larger than the cap is kept whole (the newest is never dropped).
    log.push('stdout', Buffer.from('0123456789abcdef'));
    assert.deepEqual({ start: log.start, held }, { start: 12, held: 16 });
    log.clear();
    assert.equal(held, 0);
  });
  it('lets go of a dropped chunk at once, not at its next compaction', async () => {
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as () => void;
    const log = new OutputLog(64 * 1024, () => undefined);
    const first = new WeakRef(Buffer.alloc(32 * 1024, 1).buffer);
    log.push('stdout', Buffer.from(first.deref() as ArrayBuffer));
    for (let i = 0; i < 100; i++) log.push('stdout', Buffer.alloc(32 * 1024));
    await new Promise((resolve) => setImmediate(resolve));
    gc();
    assert.equal(first.deref(), undefined, 'the first chunk, dropped 99 chunks ago, is still referenced');
    assert.equal(log.heldBytes, 64 * 1024);
  });
});

describe('process requests', () => {
  it('names the field it refuses', () => {
    assert.throws(() => parseProcessSpec({ argv: ['x'], env: { 'A;B': '1' } }), /env/);
    assert.throws(() => parseProcessSpec({ argv: ['x'], env: { A: 1 } }), /env\.A/);
    assert.throws(() => parseProcessSpec({ argv: ['x', 1] }), /argv\[1\]/);
    assert.throws(() => parseProcessSpec({ cmd: 'x', argv: ['x'] }), /exactly one/);
    assert.throws(() => parseProcessSpec({ argv: ['x'], user: 'root' }), /user/);
    assert.throws(() => parseProcessSpec({ argv: ['x'], pty: { cols: 5000, rows: 1 } }), /pty\.cols/);
    assert.throws(() => parseProcessSpec({ argv: ['x'], other: 1 }), /"other"/);
  });

  it('builds a guest command in which every client string is one word (checked by a real sh)', () => {
    const hostile = ["'; echo pwned; '", '$(echo pwned)', '`echo pwned`', '"', '\\', '\n', '-n', '*', 'a b'];
    const command = guestCommand(parseProcessSpec({ argv: ['printf', '%s|', ...hostile], cwd: '/', env: { X: '$(echo pwned)' } }), 99);
    // Run by a POSIX shell as sshd would (bash), on this machine: the words arrive as they were.
    const out = execFileSync('bash', ['-c', command], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    assert.equal(out, hostile.map((h) => `${h}|`).join(''));
    const env = execFileSync('bash', ['-c', guestCommand(parseProcessSpec({ argv: ['printenv', 'X'], cwd: '/', env: { X: '$(echo pwned)`x`' } }), 99)], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    assert.equal(env, '$(echo pwned)`x`\n');
  });
});

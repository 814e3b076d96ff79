/**
 * The process layer's spawner (src/processes/spawner.ts) is a program in the guest, so the
 * guest can replace what it answers. Here hostile spawners run for real in a real sandbox in
 * its place (a `python3 -c` of the test's, on the session's own SSH connection) and the host
 * side must stay bounded: a flood past what the host granted, frames for processes never
 * started or acknowledgements of stdin never sent, a frame announcing a gigabyte, a pid
 * that is not one, an exit status that is not one. Plus the real spawner's own behaviour
 * that the process API's tests do not show: PWD follows cwd, exit codes and signals.
 */
import assert from 'node:assert/strict';
import v8 from 'node:v8';
import vm from 'node:vm';
import { describe, it } from 'node:test';
import { DEFAULT_PROCESS_LIMITS } from '../src/processes/limits.js';
import { GuestProcess, ProcessStartError } from '../src/processes/guest-process.js';
import { OUTPUT_WINDOW, Spawner } from '../src/processes/spawner.js';
import { commandLine } from '../src/transport/quote.js';
import { sessionConnection } from './helpers/session-connection.js';

const MiB = 1024 * 1024;

/** A hostile spawner: says hello, then runs `body` (Python, with `send(kind, id, payload)` and the first request's id in `ident`). */
function hostile(body: string): string {
  const source = [
    'import os, struct, sys',
    'def send(kind, ident, payload=b""):',
    '    os.write(1, struct.pack(">cII", kind, ident, len(payload)) + payload)',
    'send(b"h", 0)',
    'head = os.read(0, 9)',
    'ident = struct.unpack(">cII", head)[1]',
    body,
  ].join('\n');
  return `exec ${commandLine(['/usr/bin/python3', '-I', '-S', '-c', source])}`;
}

const hooks = { held: () => undefined, ended: () => undefined };
const spec = { argv: ['echo', 'hi'], env: [], stdin: false };

describe('red team: a hostile spawner in the guest', () => {
  const session = sessionConnection();

  it('a flood past the output granted ends the spawner at once, with what the host holds bounded', async () => {
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as () => void;
    gc();
    const before = process.memoryUsage().arrayBuffers;
    let peak = 0;
    const spawner = await Spawner.start(session(), hostile('send(b"p", ident, b"4242")\nchunk = b"x" * 60000\nwhile True: send(b"o", ident, chunk)'));
    const channel = spawner.spawn(spec, 0);
    // Nobody reads (a laggard reader paused it): no more is granted than the first window, and
    // the flood goes on past it. What reached the stream is what was granted, not a byte more.
    channel.pause();
    const began = performance.now();
    let held = 0;
    const closed = new Promise<void>((resolve) => channel.once('close', resolve));
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().arrayBuffers - before);
      held = Math.max(held, channel.readableLength);
    }, 5);
    await Promise.race([closed, new Promise((_, reject) => setTimeout(() => reject(new Error('the flood went on')), 20_000))]);
    clearInterval(sampler);
    console.log(
      `a spawner flooding past its grant: ended after ${(performance.now() - began).toFixed(0)} ms, the stream held at most ${(held / MiB).toFixed(2)} MiB, host Buffers peaked +${(peak / MiB).toFixed(1)} MiB`,
    );
    assert.equal(spawner.alive, false);
    assert.ok(held <= OUTPUT_WINDOW, `the stream held ${held} bytes`);
    // The grant, what the SSH window had in flight (2 MiB), and the frame being parsed.
    assert.ok(peak < 8 * MiB, `the host held ${(peak / MiB).toFixed(1)} MiB`);
  });

  it('frames for a process never started, or an acknowledgement of stdin or a signal never sent, end the spawner', async () => {
    for (const body of ['send(b"o", ident + 7, b"x")', 'send(b"x", 0, b"c 0")', 'send(b"a", ident)', 'send(b"k", ident)']) {
      const spawner = await Spawner.start(session(), hostile(`${body}\nimport time\ntime.sleep(30)`));
      const channel = spawner.spawn(spec, 0);
      await Promise.race([
        new Promise<void>((resolve) => channel.once('close', resolve)),
        new Promise((_, reject) => setTimeout(() => reject(new Error(`${body}: the spawner went on`)), 10_000)),
      ]);
      assert.equal(spawner.alive, false, body);
    }
  });

  it('a frame announcing a gigabyte ends it at once; nothing of it is waited for', async () => {
    const spawner = await Spawner.start(
      session(),
      hostile('os.write(1, struct.pack(">cII", b"o", ident, 1 << 30) + b"x" * 1000)\nimport time\ntime.sleep(30)'),
    );
    const channel = spawner.spawn(spec, 0);
    await new Promise<void>((resolve) => channel.once('close', resolve));
    assert.equal(spawner.alive, false);
  });

  it('a pid that is not one, or an exit status that is not one, is refused as such', async () => {
    const badPid = await Spawner.start(session(), hostile('send(b"p", ident, b"12\\nSBX-PID 1")\nimport time\ntime.sleep(30)'));
    await assert.rejects(GuestProcess.start(session(), spec, 0, DEFAULT_PROCESS_LIMITS, hooks, badPid), ProcessStartError);
    badPid.close();
    const badExit = await Spawner.start(
      session(),
      hostile('send(b"p", ident, b"4242")\nsend(b"x", ident, b"c 99999")\nsend(b"z", ident)\nimport time\ntime.sleep(30)'),
    );
    const process = await GuestProcess.start(session(), spec, 0, DEFAULT_PROCESS_LIMITS, hooks, badExit);
    assert.equal(process.pid, 4242);
    while (process.running) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(process.info().exitCode, null);
    badExit.close();
  });

  it('the real spawner: a reader that stops holds the process at the window, and gets every byte when it reads on', async () => {
    const spawner = await Spawner.start(session());
    const channel = spawner.spawn({ argv: ['head', '-c', String(8 * MiB), '/dev/zero'], env: [], stdin: false }, 0);
    channel.stderr.resume();
    channel.pause();
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    // A second and a half of a stopped reader: the guest sent what was granted, then waited.
    const heldWhilePaused = channel.readableLength;
    let received = 0;
    channel.on('data', (chunk: Buffer) => (received += chunk.length));
    const closed = new Promise<void>((resolve) => channel.once('close', resolve));
    channel.resume();
    await closed;
    console.log(`a stopped reader: ${(heldWhilePaused / MiB).toFixed(2)} MiB held while stopped; ${(received / MiB).toFixed(2)} MiB read in all`);
    assert.ok(heldWhilePaused > 0 && heldWhilePaused <= OUTPUT_WINDOW, `${heldWhilePaused} bytes held while the reader stopped`);
    assert.equal(received, 8 * MiB);
    assert.equal(spawner.alive, true);
    spawner.close();
  });

  it('the real spawner: PWD is the cwd, the exit code and signal come through, a missing program is 127, a pkill python3 in the guest spares it', async () => {
    const spawner = await Spawner.start(session());
    const run = async (argv: string[], cwd?: string) => {
      const process = await GuestProcess.start(session(), { argv, env: [], stdin: false, ...(cwd ? { cwd } : {}) }, 0, DEFAULT_PROCESS_LIMITS, hooks, spawner);
      while (process.running) await new Promise((resolve) => setTimeout(resolve, 10));
      const out = process
        .read(0, 4096)
        .chunks.map((c) => c.data.toString())
        .join('');
      return { out, info: process.info() };
    };
    const pwd = await run(['printenv', 'PWD'], '/tmp');
    assert.equal(pwd.out, '/tmp\n');
    const code = await run(['sh', '-c', 'exit 7']);
    assert.equal(code.info.exitCode, 7);
    const killed = await run(['sh', '-c', 'kill -TERM $$']);
    assert.equal(killed.info.signal, 'TERM');
    const missing = await run(['no-such-program-here']);
    assert.equal(missing.info.exitCode, 127);
    // A user's `pkill python3` (a dev server of theirs) does not take the spawner with it.
    await run(['pkill', '-x', 'python3']);
    assert.equal(spawner.alive, true);
    assert.equal((await run(['echo', 'still'])).out, 'still\n');
    spawner.close();
  });
});

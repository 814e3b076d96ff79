/**
 * The spawner's output flow control (src/processes/spawner.ts with spawner-script.ts), its
 * real Python run here as a local process in place of the guest's SSH channel: the guest sends
 * a process's output only as far as the host granted, so a reader that stops holds the
 * process at the window, and a spawner that sends past its grant is ended at that frame.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { Duplex } from 'node:stream';
import { describe, it } from 'node:test';
import { OUTPUT_WINDOW, Spawner, SPAWNER_COMMAND } from '../../src/processes/spawner.js';
import type { GuestChannel } from '../../src/transport/index.js';
import { commandLine } from '../../src/transport/quote.js';

const MiB = 1024 * 1024;

/** A local `bash -c` in place of an exec channel of the guest's sshd. */
const local = {
  spawn(command: string): Promise<GuestChannel> {
    const child = spawn('bash', ['-c', command], { stdio: 'pipe' });
    const channel = Object.assign(Duplex.from({ readable: child.stdout, writable: child.stdin }), {
      stderr: child.stderr,
      close: () => child.kill('SIGKILL'),
      setWindow: () => undefined,
    });
    child.on('exit', () => channel.destroy());
    return Promise.resolve(channel);
  },
};

const spec = (argv: string[]) => ({ argv, env: [], stdin: false, cwd: '/tmp' });
const within = <T>(promise: Promise<T>, ms: number) =>
  Promise.race([promise, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`not within ${ms} ms`)), ms).unref())]);
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
const closed = (channel: Duplex) => within(new Promise<void>((resolve) => channel.once('close', resolve)), 20_000);

describe('the spawner sends output only as far as it is granted', () => {
  it('a reader that stops holds the process at the window; it reads on and gets every byte', async () => {
    const spawner = await Spawner.start(local, SPAWNER_COMMAND);
    const channel = spawner.spawn(spec(['head', '-c', String(16 * MiB), '/dev/zero']), 0);
    channel.stderr.resume();
    channel.pause();
    await new Promise((resolve) => setTimeout(resolve, 500));
    const heldWhileStopped = channel.readableLength;
    let received = 0;
    channel.on('data', (chunk: Buffer) => (received += chunk.length));
    const done = closed(channel);
    channel.resume();
    await done;
    assert.ok(heldWhileStopped > 0 && heldWhileStopped <= OUTPUT_WINDOW, `${heldWhileStopped} bytes held while the reader stopped`);
    assert.equal(received, 16 * MiB);
    assert.equal(spawner.alive, true);
    spawner.close();
  });

  it('a reader at full speed is not slowed by the grants (reported)', async () => {
    const spawner = await Spawner.start(local, SPAWNER_COMMAND);
    const size = 128 * MiB;
    const started = performance.now();
    const channel = spawner.spawn(spec(['head', '-c', String(size), '/dev/zero']), 0);
    let received = 0;
    channel.stderr.resume();
    channel.on('data', (chunk: Buffer) => (received += chunk.length));
    await closed(channel);
    const seconds = (performance.now() - started) / 1000;
    console.log(
      `spawner output: ${size / MiB} MiB in ${seconds.toFixed(2)} s (${(size / MiB / seconds).toFixed(0)} MiB/s) through ${OUTPUT_WINDOW / 1024} KiB grants`,
    );
    assert.equal(received, size);
    spawner.close();
  });

  it("a signal reaches every process of the process's session, as pkill -s does, and resolves once sent", async () => {
    const spawner = await Spawner.start(local, SPAWNER_COMMAND);
    const channel = spawner.spawn(spec(['sh', '-c', 'sleep 30 & echo $!; wait']), 0);
    channel.stderr.resume();
    const exited = new Promise<[unknown, unknown]>((resolve) => channel.once('exit', (code, signal) => resolve([code, signal])));
    const [line] = (await within(new Promise<Buffer>((resolve) => channel.once('data', resolve)), 10_000)).toString().split('\n');
    const child = Number(line);
    assert.ok(Number.isInteger(child) && child > 1, `the background child: ${line}`);
    await channel.signal('TERM', 5_000);
    assert.deepEqual(await within(exited, 10_000), [null, 'TERM']);
    // The shell's background child went with it (same session), not just the shell.
    await within(
      (async () => {
        while (alive(child)) await new Promise((resolve) => setTimeout(resolve, 20));
      })(),
      5_000,
    );
    spawner.close();
  });

  it('a start and its first grant leave in one write (one SSH packet), and the process runs', async () => {
    const writes: Buffer[] = [];
    const counting = {
      async spawn(command: string): Promise<GuestChannel> {
        const channel = await local.spawn(command);
        const write = channel.write.bind(channel) as (chunk: Buffer) => boolean;
        channel.write = ((chunk: Buffer) => {
          writes.push(Buffer.from(chunk));
          return write(chunk);
        }) as GuestChannel['write'];
        return channel;
      },
    };
    const spawner = await Spawner.start(counting, SPAWNER_COMMAND);
    const channel = spawner.spawn(spec(['echo', 'hi']), 0);
    channel.stderr.resume();
    let output = '';
    channel.on('data', (chunk: Buffer) => (output += chunk.toString()));
    await new Promise((resolve) => setImmediate(resolve));
    const [start] = writes;
    assert.ok(start && writes.length === 1, 'one write for the start');
    // Frames: a type byte, an id (u32), a length (u32), the payload.
    const kinds: string[] = [];
    for (let at = 0; at < start.length; at += 9 + start.readUInt32BE(at + 5)) kinds.push(String.fromCharCode(start[at] as number));
    assert.deepEqual(kinds, ['S', 'G']);
    await closed(channel);
    assert.equal(output, 'hi\n');
    spawner.close();
  });

  it('a spawner that sends past its grant ends at that frame, having delivered no more than the grant', async () => {
    const flood = [
      'import os, struct',
      'def send(kind, ident, payload=b""):',
      '    os.write(1, struct.pack(">cII", kind, ident, len(payload)) + payload)',
      'send(b"h", 0)',
      'ident = struct.unpack(">cII", os.read(0, 9))[1]',
      'send(b"p", ident, b"4242")',
      'chunk = b"x" * 32768',
      'while True: send(b"o", ident, chunk)',
    ].join('\n');
    const spawner = await Spawner.start(local, `exec ${commandLine(['python3', '-I', '-S', '-c', flood])}`);
    const channel = spawner.spawn(spec(['true']), 0);
    // Nobody reads: no grant follows the first, and the flood goes on past it.
    channel.pause();
    let held = 0;
    await within(
      new Promise<void>((resolve) =>
        channel.once('close', () => {
          held = channel.readableLength;
          resolve();
        }),
      ),
      10_000,
    );
    assert.equal(spawner.alive, false);
    assert.ok(held > 0 && held <= OUTPUT_WINDOW, `${held} bytes delivered`);
  });

  for (const [what, frames] of [
    ['a second pid', ['send(b"p", ident, b"4242")', 'send(b"p", ident, b"1")']],
    ['a second exit status', ['send(b"p", ident, b"4242")', 'send(b"x", ident, b"c 0")', 'send(b"x", ident, b"c 1")']],
  ] as const) {
    it(`a spawner that sends ${what} for a process ends there: its process ends once, as first told`, async () => {
      const script = [
        'import os, struct, time',
        'def send(kind, ident, payload=b""):',
        '    os.write(1, struct.pack(">cII", kind, ident, len(payload)) + payload)',
        'send(b"h", 0)',
        'ident = struct.unpack(">cII", os.read(0, 9))[1]',
        ...frames,
        'time.sleep(30)',
      ].join('\n');
      const spawner = await Spawner.start(local, `exec ${commandLine(['python3', '-I', '-S', '-c', script])}`);
      const channel = spawner.spawn(spec(['true']), 0);
      const exits: unknown[] = [];
      channel.on('exit', (code: unknown) => exits.push(code));
      channel.resume();
      channel.stderr.resume();
      await closed(channel);
      assert.equal(spawner.alive, false, 'the spawner broke the protocol: it is not ours');
      assert.ok(exits.length <= 1 && (exits[0] ?? 0) === 0, `exits ${JSON.stringify(exits)}`);
    });
  }
});

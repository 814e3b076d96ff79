/**
 * The persistent desktop helper's channel without a sandbox (the real-tier file is
 * test/desktop-helper.test.ts): answer frames assembled from chunks of any size, a frame
 * refused at its header when its tag is not ours or it announces more than the request's
 * cap, bytes nobody asked for, and DesktopActions' use of it: one helper for every action,
 * a dead one started again at most once per interval, an old image's one-shot helper.
 */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { describe, it } from 'node:test';
import type { ClientChannel } from 'ssh2';
import { maxAnswerBytes } from '../../src/computer/desktop-actions/answers.js';
import { DesktopActions, DESKTOP_HELPER_START_INTERVAL_MS } from '../../src/computer/desktop-actions/desktop-actions.js';
import { DesktopChannel, HELPER_MISSING_EXIT } from '../../src/computer/desktop-actions/desktop-channel.js';
import { GuestProtocolError } from '../../src/errors.js';
import type { ExecResult, GuestTransport } from '../../src/transport/index.js';

/** An SSH channel stand-in: what the guest "sends" is emitted by the test. */
class FakeChannel extends EventEmitter {
  readonly stderr = new EventEmitter();
  readonly written: string[] = [];
  closed = false;
  /** Answers each request line, if set (else the test emits). */
  answer: ((line: string) => void) | undefined;
  write(data: string): boolean {
    this.written.push(data);
    if (this.answer) setImmediate(() => this.answer?.(data));
    return true;
  }
  close(): void {
    if (this.closed) return;
    this.closed = true;
    setImmediate(() => this.emit('close'));
  }
}

function frame(payload: string | Buffer, length?: number, tag = 'SBXD'): Buffer {
  const body = Buffer.from(payload);
  const head = Buffer.alloc(8);
  head.write(tag, 0, 'latin1');
  head.writeUInt32BE(length ?? body.length, 4);
  return Buffer.concat([head, body]);
}

function fakeConnection(make: () => FakeChannel, exec?: (command: string) => ExecResult) {
  const channels: FakeChannel[] = [];
  const spawnedAt: number[] = [];
  const reported: GuestProtocolError[] = [];
  const execs: string[] = [];
  const connection = {
    spawn: async () => {
      const channel = make();
      channels.push(channel);
      spawnedAt.push(performance.now());
      return channel as unknown as ClientChannel;
    },
    exec: async (command: string) => {
      execs.push(command);
      if (!exec) throw new Error('no exec here');
      return exec(command);
    },
    reportProtocolError: (err: GuestProtocolError) => reported.push(err),
  } as unknown as GuestTransport;
  return { connection, channels, spawnedAt, reported, execs };
}

function isProtocolError(reason: string) {
  return (err: unknown) => {
    assert.ok(err instanceof GuestProtocolError, `expected a GuestProtocolError, got ${String(err)}`);
    assert.equal(err.channel, 'desktop');
    assert.equal(err.reason, reason);
    return true;
  };
}

const SCREEN_ANSWER = '{"ok": true, "width": 1024, "height": 768}\n';

describe('the desktop channel', () => {
  it('assembles an answer frame from one chunk or byte by byte, and writes each request as one JSON line', async () => {
    const { connection, channels } = fakeConnection(() => new FakeChannel());
    const desktop = await DesktopChannel.open(connection, 99);
    const channel = channels[0] as FakeChannel;
    const first = desktop.ask('{"verb":"screen"}\n', 1024, 1_000);
    channel.emit('data', frame(SCREEN_ANSWER));
    assert.equal((await first).toString(), SCREEN_ANSWER);
    const second = desktop.ask('{"verb":"screen"}\n', 1024, 1_000);
    for (const byte of frame(SCREEN_ANSWER)) channel.emit('data', Buffer.from([byte]));
    assert.equal((await second).toString(), SCREEN_ANSWER);
    assert.deepEqual(channel.written, ['{"verb":"screen"}\n', '{"verb":"screen"}\n']);
    assert.equal(channel.closed, false);
    desktop.close();
  });

  const bad: Array<[string, Buffer, string]> = [
    [
      'a length past the cap (0xFFFFFFFF), with its payload flooding after it',
      Buffer.concat([frame('', 0xffff_ffff), Buffer.alloc(65_536, 0x78)]),
      'answer_too_large',
    ],
    ['a length one byte past the cap', frame('', 1025), 'answer_too_large'],
    ['a tag that is not ours (a helper writing text)', Buffer.alloc(65_536, 0x78), 'bad_frame'],
    ['bytes beyond the answer in the same chunk', Buffer.concat([frame(SCREEN_ANSWER), Buffer.from('SBXD')]), 'unrequested_output'],
  ];
  for (const [name, bytes, reason] of bad) {
    it(`fails the request at once on ${name}, closes the channel, reports it once`, async () => {
      const { connection, channels, reported } = fakeConnection(() => new FakeChannel());
      const desktop = await DesktopChannel.open(connection, 99);
      const channel = channels[0] as FakeChannel;
      const pending = desktop.ask('{"verb":"screen"}\n', 1024, 2_000);
      channel.emit('data', bytes);
      await assert.rejects(pending, isProtocolError(reason));
      assert.equal(channel.closed, true);
      assert.equal(desktop.isOpen, false);
      // What the guest sends after that costs nothing more and is not reported again.
      channel.emit('data', Buffer.alloc(65_536, 0x78));
      assert.equal(reported.length, 1);
    });
  }

  it('refuses bytes nobody asked for between requests', async () => {
    const { connection, channels, reported } = fakeConnection(() => new FakeChannel());
    const desktop = await DesktopChannel.open(connection, 99);
    (channels[0] as FakeChannel).emit('data', frame(SCREEN_ANSWER));
    assert.equal(desktop.isOpen, false);
    assert.equal(reported[0]?.reason, 'unrequested_output');
  });

  it("caps each request's answer at what its verb can answer: a clipboard read 1 MiB and a header, anything else 256 KiB", () => {
    assert.equal(maxAnswerBytes({ verb: 'clipboard-get' }), 4096 + 1024 * 1024);
    assert.equal(maxAnswerBytes({ verb: 'windows' }), 256 * 1024);
    assert.equal(maxAnswerBytes({ verb: 'screen' }), 256 * 1024);
  });
});

describe('desktop actions on the persistent helper', () => {
  const honest = () => {
    const channel = new FakeChannel();
    channel.answer = () => channel.emit('data', frame(SCREEN_ANSWER));
    return channel;
  };

  it('uses one helper for every action of the session', async () => {
    const { connection, channels } = fakeConnection(honest);
    const actions = new DesktopActions(connection, 99);
    for (let i = 0; i < 20; i++) assert.deepEqual(await actions.screen(), { width: 1024, height: 768 });
    assert.equal(channels.length, 1);
    assert.equal((channels[0] as FakeChannel).written.length, 20);
    actions.stop();
    assert.equal((channels[0] as FakeChannel).closed, true);
    await assert.rejects(actions.screen(), /closed/);
  });

  it(`starts a helper that died again, at most once per ${DESKTOP_HELPER_START_INTERVAL_MS} ms however fast the actions come`, async () => {
    // Each helper answers once, then dies.
    const { connection, spawnedAt } = fakeConnection(() => {
      const channel = new FakeChannel();
      channel.answer = () => {
        channel.emit('data', frame(SCREEN_ANSWER));
        channel.close();
      };
      return channel;
    });
    const actions = new DesktopActions(connection, 99);
    for (let i = 0; i < 3; i++) {
      assert.deepEqual(await actions.screen(), { width: 1024, height: 768 });
      await new Promise((resolve) => setImmediate(resolve));
    }
    assert.equal(spawnedAt.length, 3);
    for (let i = 1; i < spawnedAt.length; i++) {
      const gap = (spawnedAt[i] as number) - (spawnedAt[i - 1] as number);
      assert.ok(gap >= DESKTOP_HELPER_START_INTERVAL_MS - 5, `started again after ${gap.toFixed(0)} ms`);
    }
    actions.stop();
  });

  it('a lying helper fails its action with a 502 naming the guest; the next action gets a new helper', async () => {
    let lie = true;
    const { connection, channels } = fakeConnection(() => {
      const channel = new FakeChannel();
      channel.answer = () => channel.emit('data', lie ? frame('x', 0x7fff_ffff) : frame(SCREEN_ANSWER));
      return channel;
    });
    const actions = new DesktopActions(connection, 99);
    await assert.rejects(actions.windows(), isProtocolError('answer_too_large'));
    lie = false;
    assert.deepEqual(await actions.screen(), { width: 1024, height: 768 });
    assert.equal(channels.length, 2);
    actions.stop();
  });

  it('an answer that parses as no answer of ours drops the helper too', async () => {
    const { connection, channels, reported } = fakeConnection(() => {
      const channel = new FakeChannel();
      channel.answer = () => channel.emit('data', frame('{"ok": true, "width": "wide", "height": 768}\n'));
      return channel;
    });
    const actions = new DesktopActions(connection, 99);
    await assert.rejects(actions.screen(), isProtocolError('desktop_answer'));
    assert.equal((channels[0] as FakeChannel).closed, true);
    assert.equal(reported.length, 1);
    actions.stop();
  });

  it('stopped while its helper is being started (the session ends): the action fails, and the helper started is closed', async () => {
    const channel = honest();
    let release: () => void = () => undefined;
    const spawned = new Promise<void>((resolve) => (release = resolve));
    const connection = {
      spawn: async () => {
        await spawned;
        return channel as unknown as ClientChannel;
      },
      reportProtocolError: () => undefined,
    } as unknown as GuestTransport;
    const actions = new DesktopActions(connection, 99);
    const pending = actions.screen();
    await new Promise((resolve) => setImmediate(resolve));
    actions.stop();
    release();
    await assert.rejects(pending, /the session's desktop was closed/);
    assert.equal(channel.closed, true);
    await assert.rejects(actions.windows(), /the session's desktop was closed/);
  });

  it('an image without sbx-desktopd: the same action runs its one-shot helper, and so does every later one', async () => {
    const { connection, channels, execs } = fakeConnection(
      () => {
        const channel = new FakeChannel();
        // The start line's test fails: exit status first, then the close.
        setImmediate(() => {
          channel.emit('exit', HELPER_MISSING_EXIT);
          channel.close();
        });
        return channel;
      },
      () => ({ exitCode: 0, stdout: Buffer.from(SCREEN_ANSWER), stderr: Buffer.alloc(0) }) as ExecResult,
    );
    const actions = new DesktopActions(connection, 99);
    for (let i = 0; i < 3; i++) assert.deepEqual(await actions.screen(), { width: 1024, height: 768 });
    assert.equal(channels.length, 1, 'the persistent helper was tried once');
    assert.equal(execs.length, 3);
    assert.match(execs[0] as string, /exec \/usr\/bin\/python3 -I \/usr\/local\/bin\/sbx-desktop$/);
    actions.stop();
  });
});

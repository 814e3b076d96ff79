import assert from 'node:assert/strict';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { FrameExtractor, frameArgs } from '../../src/recording/frame-extract.js';
import { httpStatusOf } from '../../src/api/errors.js';
import type { OrchestratorError } from '../../src/errors.js';

/**
 * The recording-frame extractor (trajectory page): its argv is ours with a checked time, and
 * it runs a bounded number of ffmpegs at once, with turns fair between tenants. A stand-in program (a shell script that logs
 * its argv and sleeps) plays ffmpeg, so the cap is seen without decoding anything.
 */
describe('recording frames', () => {
  let dir: string;
  let program: string;

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-frames-'));
    program = path.join(dir, 'fake-ffmpeg');
    await writeFile(
      program,
      `#!/bin/sh\necho "$@" >> ${dir}/argv.log\necho "+ $(date +%s%N)" >> ${dir}/times.log\nsleep 0.2\necho "- $(date +%s%N)" >> ${dir}/times.log\nprintf 'JPEG'\n`,
    );
    await chmod(program, 0o755);
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it('takes the time as a checked number of ms, and the video as one argument', () => {
    const args = frameArgs('/state/session-recordings/abc.mp4', 1500);
    assert.deepEqual(args.slice(args.indexOf('-ss'), args.indexOf('-ss') + 4), ['-ss', '1.500', '-i', '/state/session-recordings/abc.mp4']);
    assert.equal(args.at(-1), 'pipe:1');
    for (const bad of [-1, Number.NaN, Number.POSITIVE_INFINITY]) assert.throws(() => frameArgs('/x.mp4', bad), /ms >= 0/);
  });

  it('runs two at once, queues sixteen (of four tenants), and refuses the next with a 503', async () => {
    const extractor = new FrameExtractor();
    // Two run at once, four tenants wait with four each, and a fifth tenant finds no place.
    const tenantOf = (i: number): string => (i < 2 ? 'running' : `t${Math.floor((i - 2) / 4)}`);
    const calls = Array.from({ length: 19 }, (_, i) => extractor.extract({ video: '/x.mp4', offsetMs: i * 100, tenant: tenantOf(i), program }));
    const settled = await Promise.allSettled(calls);
    const refused = settled.filter((s) => s.status === 'rejected');
    assert.equal(refused.length, 1);
    assert.equal(settled[18]?.status, 'rejected', 'the fifth tenant, past the sixteen waiting');
    assert.equal(httpStatusOf((refused[0] as PromiseRejectedResult).reason.code), 503);
    assert.match((refused[0] as PromiseRejectedResult).reason.message, /too many recording frames/);
    const frames = settled.filter((s): s is PromiseFulfilledResult<Buffer | undefined> => s.status === 'fulfilled');
    assert.equal(frames.length, 18);
    for (const f of frames) assert.equal(f.value?.toString(), 'JPEG');
    assert.equal((await readFile(path.join(dir, 'argv.log'), 'utf8')).trim().split('\n').length, 18, 'the refused one started nothing');
    // At most two ran at any moment: replay the starts and ends in time order.
    const events = (await readFile(path.join(dir, 'times.log'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => line.split(' ') as ['+' | '-', string]);
    events.sort((a, b) => (BigInt(a[1]) < BigInt(b[1]) ? -1 : BigInt(a[1]) > BigInt(b[1]) ? 1 : a[0] === '-' ? -1 : 1));
    let running = 0;
    let most = 0;
    for (const [kind] of events) most = Math.max(most, (running += kind === '+' ? 1 : -1));
    assert.equal(most, 2);
    // Once the queue drained, a new request runs at once.
    assert.equal((await extractor.extract({ video: '/x.mp4', offsetMs: 0, tenant: 't4', program }))?.toString(), 'JPEG');
  });

  it('a tenant holds at most four waiting places: its fifth request is refused naming its own limit, another tenant still queues', async () => {
    const extractor = new FrameExtractor();
    const flood = Array.from({ length: 7 }, (_, i) => extractor.extract({ video: '/x.mp4', offsetMs: i, tenant: 'a', program }));
    const other = extractor.extract({ video: '/x.mp4', offsetMs: 0, tenant: 'b', program });
    const settled = await Promise.allSettled(flood);
    assert.deepEqual(
      settled.map((s) => s.status),
      ['fulfilled', 'fulfilled', 'fulfilled', 'fulfilled', 'fulfilled', 'fulfilled', 'rejected'],
      'two run, four wait, the seventh is refused',
    );
    const reason = (settled[6] as PromiseRejectedResult).reason as OrchestratorError;
    assert.equal(httpStatusOf(reason.code), 503);
    assert.match(reason.message, /this tenant has 4 recording frames waiting to be extracted, its limit/);
    assert.equal((await other)?.toString(), 'JPEG', "the other tenant's frame is served");
  });

  it('turns go round the tenants: a long queue delays another tenant by one extraction at most', async () => {
    const order = path.join(dir, 'order.log');
    const logging = path.join(dir, 'fake-ffmpeg-order');
    // $6 is the time (-ss): it says whose request started. a's second runs longest, so the first
    // slot freed is freed while a still runs one: b, running none, is owed it.
    await writeFile(logging, `#!/bin/sh\necho "$6" >> ${order}\n[ "$6" = 1.001 ] && sleep 0.6 || sleep 0.15\nprintf 'JPEG'\n`);
    await chmod(logging, 0o755);
    const extractor = new FrameExtractor();
    const a = Array.from({ length: 6 }, (_, i) => extractor.extract({ video: '/x.mp4', offsetMs: 1000 + i, tenant: 'a', program: logging }));
    const b = extractor.extract({ video: '/x.mp4', offsetMs: 2000, tenant: 'b', program: logging });
    await Promise.all([...a, b]);
    const started = (await readFile(order, 'utf8')).trim().split('\n');
    // a's first two ran at once (in either order); the first slot freed went to b, not to a's queue.
    assert.deepEqual(started.slice(0, 2).sort(), ['1.000', '1.001']);
    assert.equal(started[2], '2.000', `b's frame started third: ${started.join(' ')}`);
    assert.deepEqual(started.slice(3).sort(), ['1.002', '1.003', '1.004', '1.005']);
  });

  it('red team: a tenant flooding the frames (40 clients retrying) does not refuse or starve another tenant', async (t) => {
    const extractor = new FrameExtractor();
    const frame = (tenant: string): Promise<Buffer | undefined> => extractor.extract({ video: '/x.mp4', offsetMs: 0, tenant, program });
    let bRefused = 0;
    /** b's frame: how long it took, or NaN when refused. */
    const timed = async (): Promise<number> => {
      const begun = performance.now();
      try {
        assert.equal((await frame('b'))?.toString(), 'JPEG');
      } catch (err) {
        assert.equal(httpStatusOf((err as OrchestratorError).code), 503);
        bRefused++;
        return Number.NaN;
      }
      return performance.now() - begun;
    };
    const control: number[] = [];
    for (let i = 0; i < 3; i++) control.push(await timed());
    let stop = false;
    let served = 0;
    let refused = 0;
    // As a trajectory page's requests would, retried 20 ms after each 503.
    const client = async (): Promise<void> => {
      while (!stop) {
        try {
          await frame('a');
          served++;
        } catch (err) {
          assert.equal(httpStatusOf((err as OrchestratorError).code), 503);
          refused++;
          await sleep(20);
        }
      }
    };
    const clients = Array.from({ length: 40 }, () => client());
    await sleep(300); // a's share is full, and both slots busy with its frames
    const flooded: number[] = [];
    try {
      for (let i = 0; i < 5; i++) flooded.push(await timed());
    } finally {
      stop = true;
      await Promise.all(clients);
    }
    const ms = (xs: number[]): string => xs.map((x) => x.toFixed(0)).join(', ');
    t.diagnostic(`b alone: ${ms(control)} ms; b under a's flood: ${ms(flooded)} ms (a: ${served} served, ${refused} refused)`);
    assert.ok(refused > 0, "the flood went past a's share");
    assert.equal(bRefused, 0, `b's frames refused under a's flood: ${bRefused} of ${flooded.length}`);
    // b waits for one of a's extractions (0.2 s) at most, then its own: the slack is for a busy host.
    assert.ok(Math.max(...flooded) < Math.max(...control) + 200 + 800, `b under the flood: ${ms(flooded)} ms, alone ${ms(control)} ms`);
  });

  it('a program that writes nothing is no frame, and one that is missing is an error', async () => {
    const extractor = new FrameExtractor();
    assert.equal(await extractor.extract({ video: '/x.mp4', offsetMs: 0, tenant: 't', program: '/bin/true' }), undefined);
    await assert.rejects(extractor.extract({ video: '/x.mp4', offsetMs: 0, tenant: 't', program: path.join(dir, 'no-such-ffmpeg') }), { code: 'ENOENT' });
  });
});

import assert from 'node:assert/strict';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { FrameExtractor, frameArgs } from '../../src/recording/frame-extract.js';
import { httpStatusOf } from '../../src/api/errors.js';

/**
 * The recording-frame extractor (trajectory page): its argv is ours with a checked time, and
 * it runs a bounded number of ffmpegs at once. A stand-in program (a shell script that logs
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

  it('runs two at once, queues sixteen, and refuses the next with a 503', async () => {
    const extractor = new FrameExtractor();
    const calls = Array.from({ length: 19 }, (_, i) => extractor.extract({ video: '/x.mp4', offsetMs: i * 100, program }));
    const settled = await Promise.allSettled(calls);
    const refused = settled.filter((s) => s.status === 'rejected');
    assert.equal(refused.length, 1);
    assert.equal(httpStatusOf((refused[0] as PromiseRejectedResult).reason.code), 503);
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
    assert.equal((await extractor.extract({ video: '/x.mp4', offsetMs: 0, program }))?.toString(), 'JPEG');
  });

  it('a program that writes nothing is no frame, and one that is missing is an error', async () => {
    const extractor = new FrameExtractor();
    assert.equal(await extractor.extract({ video: '/x.mp4', offsetMs: 0, program: '/bin/true' }), undefined);
    await assert.rejects(extractor.extract({ video: '/x.mp4', offsetMs: 0, program: path.join(dir, 'no-such-ffmpeg') }), { code: 'ENOENT' });
  });
});

import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm, stat, truncate, utimes, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { after, before, describe, it } from 'node:test';
import { CappedLogWriter, consoleLogTail, keepConsoleLog, readConsoleLogEnd } from '../../src/runtimes/console-log.js';

/** The capped console log, its tail reads and the kept logs of failed sessions, on real files. */
describe('console logs on the host disk', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-console-log-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('a console that prints 4 MB takes at most its cap on disk, and keeps the newest output', async () => {
    const log = path.join(dir, 'console.log');
    const cap = 64 * 1024;
    const lines = function* () {
      for (let i = 1; i <= 100_000; i++) yield Buffer.from(`line ${i} of a guest that will not stop talking\n`);
    };
    await pipeline(Readable.from(lines()), new CappedLogWriter(log, cap));
    const sizes = (await stat(log)).size + (await stat(`${log}.1`)).size;
    assert.ok(sizes <= cap, `${sizes} bytes on disk for a cap of ${cap}`);
    assert.match(await readFile(log, 'utf8'), /line 100000 of a guest that will not stop talking\n$/);
    assert.deepEqual((await readdir(dir)).sort(), ['console.log', 'console.log.1']);
  });

  it('a tail is read from the end of the file, never the whole of it', async () => {
    const huge = path.join(dir, 'huge.log');
    await writeFile(huge, '');
    await truncate(huge, 512 * 1024 * 1024); // half a GiB of zeros, sparse
    await writeFile(huge, 'the last words\n', { flag: 'a' });
    const before = process.memoryUsage().rss;
    const tail = await consoleLogTail(huge, 3);
    assert.ok(process.memoryUsage().rss - before < 64 * 1024 * 1024, 'the file was not read into memory');
    assert.ok(tail.endsWith('the last words'));
    assert.ok((await readConsoleLogEnd(huge, 1000)).length === 1000);
    assert.equal(await consoleLogTail(path.join(dir, 'missing.log')), '');
  });

  it('kept logs are capped in number and in total bytes, the oldest going first', async () => {
    const logsDir = path.join(dir, 'logs');
    const source = path.join(dir, 'source.log');
    await writeFile(source, 'x'.repeat(10_000));
    const limits = { maxBytes: 1024 * 1024, keptMaxCount: 5, keptMaxBytes: 1024 * 1024 };
    for (let i = 0; i < 8; i++) {
      const kept = await keepConsoleLog(source, logsDir, `session${i}`, limits);
      assert.equal(kept, path.join(logsDir, `session${i}.console.log`));
      // Distinct ages, oldest first, whatever the clock's resolution.
      const when = new Date(Date.now() - (100 - i) * 1000);
      await utimes(kept, when, when);
    }
    assert.deepEqual(
      (await readdir(logsDir)).sort(),
      [3, 4, 5, 6, 7].map((i) => `session${i}.console.log`),
      'at most 5, the newest',
    );

    // Now bytes bind first: 25 KB in all holds two logs of 10 KB.
    await keepConsoleLog(source, logsDir, 'session8', { ...limits, keptMaxBytes: 25_000 });
    assert.deepEqual((await readdir(logsDir)).sort(), ['session7.console.log', 'session8.console.log']);

    // A kept log is the newest part of a big console, no bigger than the cap.
    await writeFile(source, `${'y'.repeat(300_000)}the end\n`);
    const kept = await keepConsoleLog(source, logsDir, 'session9', { maxBytes: 100_000, keptMaxCount: 100, keptMaxBytes: 1024 * 1024 });
    const text = await readFile(kept as string, 'utf8');
    assert.equal(text.length, 100_000);
    assert.ok(text.endsWith('the end\n'));
    assert.equal(await keepConsoleLog(path.join(dir, 'none.log'), logsDir, 'nothing', limits), undefined);
  });
});

/**
 * The state file of a QEMU VM paused to disk (src/runtimes/qemu/disk-state.ts): written whole
 * or not at all, capped, read back as written; the resume recipe checked. The real migration is
 * covered by test/qemu-disk-pause.test.ts.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { buffer } from 'node:stream/consumers';
import { after, before, describe, it } from 'node:test';
import { ParallelGzip } from '../../src/runtimes/qemu/parallel-gzip.js';
import { loadState, memoryMiBOf, readRecipe, runAsOf, savedState, saveState, stateFileOf, writeRecipe } from '../../src/runtimes/qemu/disk-state.js';

let dir: string;
before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-unit-diskstate-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function fresh(name: string): Promise<string> {
  const sessionDir = path.join(dir, name);
  await rm(sessionDir, { recursive: true, force: true });
  await mkdir(sessionDir);
  return sessionDir;
}

describe('unit: the state file of a VM paused to disk', () => {
  it('is written compressed and read back byte for byte', async () => {
    const sessionDir = await fresh('roundtrip');
    // Half zero pages, half random: what a guest's RAM looks like to the stream.
    const data = Buffer.concat([Buffer.alloc(4 << 20), randomBytes(1 << 20)]);
    const { bytes, raw } = await saveState(Readable.from([data]), sessionDir, 16 << 20);
    assert.equal(raw, data.length);
    assert.ok(bytes < data.length / 3, `compressed: ${bytes} of ${data.length}`);
    assert.equal((await savedState(sessionDir))?.bytes, bytes);
    assert.deepEqual(await readdir(sessionDir), ['vm-state.gz'], 'no partial file left');
    const sink = new PassThrough();
    const chunks: Buffer[] = [];
    sink.on('data', (c: Buffer) => chunks.push(c));
    await loadState(sessionDir, sink, 16 << 20);
    assert.ok(Buffer.concat(chunks).equals(data));
  });

  it('is one gzip stream though its blocks are compressed side by side: gzip reads it whole, in order', async () => {
    // Random blocks compress slower than zero blocks after them: the order must not follow the finish.
    const data = Buffer.concat([randomBytes(3 << 20), Buffer.alloc(2 << 20), randomBytes(1 << 20), Buffer.alloc(12345)]);
    const compressed = await buffer(
      Readable.from([data.subarray(0, 1000), data.subarray(1000)]).pipe(new ParallelGzip({ blockBytes: 256 << 10, parallel: 3, zlib: { level: 1 } })),
    );
    assert.ok(compressed.length < data.length);
    const members = compressed.filter((_, i) => compressed[i] === 0x1f && compressed[i + 1] === 0x8b && compressed[i + 2] === 8).length;
    assert.ok(members >= 24, `${members} gzip members`);
    assert.ok(execFileSync('gzip', ['-dc'], { input: compressed, maxBuffer: 64 << 20 }).equals(data), "the system's gzip reads back what went in");
    const empty = await buffer(Readable.from([]).pipe(new ParallelGzip({ blockBytes: 1024, parallel: 2, zlib: {} })));
    assert.equal(execFileSync('gzip', ['-dc'], { input: empty }).length, 0, 'empty input is an empty gzip stream');
  });

  it('a stream that fails half-way leaves no state file, neither partial nor whole', async () => {
    const sessionDir = await fresh('broken');
    const source = new Readable({ read() {} });
    source.push(randomBytes(1 << 20));
    setTimeout(() => source.destroy(new Error('the socket was closed')), 20);
    await assert.rejects(() => saveState(source, sessionDir, 16 << 20), /socket was closed/);
    assert.deepEqual(await readdir(sessionDir), []);
    assert.equal(await savedState(sessionDir), undefined);
  });

  it('a stream over its cap is refused, and nothing is kept', async () => {
    const sessionDir = await fresh('capped');
    await assert.rejects(() => saveState(Readable.from([Buffer.alloc(3 << 20)]), sessionDir, 2 << 20), /over 2097152 bytes/);
    assert.deepEqual(await readdir(sessionDir), []);
  });

  it('a write that fails (the target not writable) keeps no state', async () => {
    const sessionDir = await fresh('unwritable');
    // The partial name taken by a directory: the write fails as a full or broken disk would.
    await mkdir(`${stateFileOf(sessionDir)}.partial`);
    await assert.rejects(() => saveState(Readable.from([Buffer.alloc(1024)]), sessionDir, 2 << 20));
    assert.equal(await savedState(sessionDir), undefined);
  });

  it('the resume recipe: written and read back; anything else refused; its user and memory found in the argv', async () => {
    const sessionDir = await fresh('recipe');
    const argv = ['-name', 'guest=sbx-x', '-m', '1024M', '-runas', '1234:1235'];
    const recipe = {
      netns: 'sbx-x',
      argv,
      limits: { memoryMiB: 1400, vcpus: 2 },
      logsDir: '/l',
      consoleLog: { maxBytes: 1, keptMaxBytes: 1, keptMaxCount: 1 },
      volumeFiles: ['/v/data.ext4'],
    };
    await writeRecipe(sessionDir, recipe);
    assert.deepEqual((await readRecipe(sessionDir)).argv, argv);
    assert.deepEqual((await readRecipe(sessionDir)).volumeFiles, ['/v/data.ext4']);
    // A recipe written before volumes were descriptors names none.
    await writeFile(path.join(sessionDir, 'qemu-resume.json'), JSON.stringify({ ...recipe, volumeFiles: undefined }));
    assert.deepEqual((await readRecipe(sessionDir)).volumeFiles, []);
    await writeFile(path.join(sessionDir, 'qemu-resume.json'), JSON.stringify({ ...recipe, volumeFiles: [3] }));
    await assert.rejects(() => readRecipe(sessionDir), /not a resume recipe/);
    assert.deepEqual(runAsOf(argv), { uid: 1234, gid: 1235 });
    assert.equal(runAsOf(['-runas', 'nobody']), undefined);
    assert.equal(memoryMiBOf(argv), 1024);
    await writeFile(path.join(sessionDir, 'qemu-resume.json'), JSON.stringify({ ...recipe, argv: [1, 2] }));
    await assert.rejects(() => readRecipe(sessionDir), /not a resume recipe/);
    await writeFile(path.join(sessionDir, 'qemu-resume.json'), 'x'.repeat(70_000));
    await assert.rejects(() => readRecipe(sessionDir), /not a resume recipe/);
  });
});

import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import type { FsCalls, FsEntry } from '../../src/files/fs-calls.js';
import { DirectoryWatch, type FsChange } from '../../src/files/fs-watch.js';

/** A directory of the guest as SFTP lists it, counting the reads. */
function fakeDir() {
  const entries = new Map<string, FsEntry>();
  let reads = 0;
  const fs = {
    readdir: async () => {
      reads++;
      return [...entries.values()];
    },
  } as unknown as FsCalls;
  const add = (name: string) => entries.set(name, { name, path: `/d/${name}`, type: 'file', size: 1, mode: '0644', mtime: new Date(0).toISOString() });
  return { fs, add, reads: () => reads };
}

describe('the directory watch', () => {
  it("listens to the guest's inotify: a burst of events costs one read, and the change is seen", async () => {
    const dir = fakeDir();
    let fire: () => void = () => undefined;
    let stopped = false;
    const changes: FsChange[] = [];
    const watch = new DirectoryWatch(
      dir.fs,
      '/d',
      (c) => changes.push(c),
      () => undefined,
      60_000, // no polling would ever see it within the test
      async (onEvent) => {
        fire = onEvent;
        return { stop: () => (stopped = true) };
      },
    );
    await watch.start();
    try {
      assert.equal(watch.listening, true);
      assert.equal(dir.reads(), 1);
      dir.add('new.txt');
      for (let i = 0; i < 10_000; i++) fire(); // a guest flooding events
      await sleep(200);
      assert.deepEqual(
        changes.map((c) => [c.type, c.entry.name]),
        [['created', 'new.txt']],
      );
      assert.equal(dir.reads(), 2, 'ten thousand events, one read');
    } finally {
      watch.stop();
    }
    assert.equal(stopped, true, 'the inotifywait channel is closed with the watch');
  });

  it('polls where the image has no inotifywait', async () => {
    const dir = fakeDir();
    const changes: FsChange[] = [];
    const watch = new DirectoryWatch(
      dir.fs,
      '/d',
      (c) => changes.push(c),
      () => undefined,
      20,
      async () => undefined,
    );
    await watch.start();
    assert.equal(watch.listening, false);
    dir.add('a');
    await sleep(150).finally(() => watch.stop());
    assert.deepEqual(
      changes.map((c) => c.type),
      ['created'],
    );
  });
});

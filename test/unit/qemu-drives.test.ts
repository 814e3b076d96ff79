import assert from 'node:assert/strict';
import { readdirSync, readlinkSync } from 'node:fs';
import { mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ROOT_DISK_IN_QEMU, volumesInQemu, withDrivesOpen, writableVolumeFiles } from '../../src/runtimes/qemu/drives.js';

/** The descriptors QEMU's writable drives are handed as (docs/pause.md): numbered, opened and closed as the spawn needs. */
describe('qemu drives as descriptors', () => {
  let dir: string;
  const volumes = [
    { name: 'a', file: '/v/a.ext4', path: '/a', readOnly: false },
    { name: 'b', file: '/v/b.ext4', path: '/b', readOnly: true },
    { name: 'c', file: '/v/c.ext4', path: '/c', readOnly: false },
  ];
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-drives-'));
    for (const name of ['root.qcow2', 'a.ext4', 'c.ext4']) await writeFile(path.join(dir, name), name);
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it('names the root disk fd 4 and each writable volume the next descriptor; a read-only one by its path', () => {
    assert.equal(ROOT_DISK_IN_QEMU, '/proc/self/fd/4');
    assert.deepEqual(volumesInQemu(volumes), [
      { file: '/proc/self/fd/5', readOnly: false },
      { file: '/v/b.ext4', readOnly: true },
      { file: '/proc/self/fd/6', readOnly: false },
    ]);
    assert.deepEqual(writableVolumeFiles(volumes), ['/v/a.ext4', '/v/c.ext4']);
  });

  it('opens the drives in descriptor order for the spawn and closes its copies after', () => {
    const files = [path.join(dir, 'a.ext4'), path.join(dir, 'c.ext4')];
    const opened = withDrivesOpen(path.join(dir, 'root.qcow2'), files, (fds) => {
      assert.deepEqual(
        fds.map((fd) => readlinkSync(`/proc/self/fd/${fd}`)),
        [path.join(dir, 'root.qcow2'), ...files],
      );
      return fds;
    });
    for (const fd of opened) assert.throws(() => readlinkSync(`/proc/self/fd/${fd}`), /ENOENT/);
  });

  it('refuses a relative path or a link, and closes what it opened before', async () => {
    await symlink('/etc/shadow', path.join(dir, 'link.ext4'));
    const before = readdirSync('/proc/self/fd').length;
    assert.throws(() => withDrivesOpen(path.join(dir, 'root.qcow2'), [path.join(dir, 'link.ext4')], () => 'spawned'), /ELOOP/);
    assert.throws(() => withDrivesOpen(path.join(dir, 'root.qcow2'), ['a.ext4'], () => 'spawned'), /absolute path/);
    assert.equal(readdirSync('/proc/self/fd').length, before);
  });
});

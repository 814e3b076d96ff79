import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { pauseFilesOf } from '../../src/runtimes/firecracker/disk-state.js';
import { chrootLayout } from '../../src/runtimes/firecracker/jailer/chroot-layout.js';
import { FORK_SNAPSHOT_IN_JAIL, forkSnapshotFiles } from '../../src/runtimes/firecracker/snapshot/session-snapshot.js';

/** Where a Firecracker session's snapshot is written and what a fork's jail is made of (snapshot/session-snapshot.ts, fork.ts). */
describe('firecracker fork snapshot files and a fork jail', () => {
  const base = {
    chrootBaseDir: '/srv/jails',
    firecrackerBin: '/usr/local/bin/firecracker',
    id: 'sbx-abc123',
    kernel: '/images/x/vmlinux',
    configDrive: '/state/abc123/config.ext4',
  };

  it("a fork snapshot is written at the jail's root, under names neither a pause to disk nor a snapshot base uses", () => {
    const pause = pauseFilesOf('/state/s', '/srv/jails/firecracker/sbx-s/root').vmPaths;
    const layout = chrootLayout({ ...base, rootfsSource: '/images/x/rootfs.ext4' });
    const taken = [
      pause.snapshotPath,
      pause.memFilePath,
      layout.snapshot.jailPaths.snapshotPath,
      layout.snapshot.jailPaths.memFilePath,
      layout.vmPaths.rootfsPath,
    ];
    for (const file of [FORK_SNAPSHOT_IN_JAIL.snapshotPath, FORK_SNAPSHOT_IN_JAIL.memFilePath]) {
      assert.ok(!taken.includes(file), `${file} is ours alone`);
      // At the root: only its last component is in a directory the VM's user could swap for a link.
      assert.match(file, /^\/[a-z-]+$/);
    }
  });

  it("a snapshot's files are named by its directory only", () => {
    assert.deepEqual(forkSnapshotFiles('/state/snapshots/snap-0123456789abcdef'), {
      files: { snapshotPath: '/state/snapshots/snap-0123456789abcdef/vmstate', memFilePath: '/state/snapshots/snap-0123456789abcdef/memory' },
      rootfs: '/state/snapshots/snap-0123456789abcdef/rootfs.ext4',
    });
  });

  it("a fork's jail copies the snapshot's rootfs (its own, the jail's) and links its state and memory (root's, read only), at the paths the snapshot names", () => {
    const snapshot = forkSnapshotFiles('/state/snapshots/snap-0123456789abcdef');
    const layout = chrootLayout({ ...base, rootfsSource: snapshot.rootfs, restoreFrom: snapshot.files });
    const placed = (source: string) => layout.files.find((f) => f.source === source);
    assert.deepEqual(placed(snapshot.rootfs), {
      source: snapshot.rootfs,
      target: '/srv/jails/firecracker/sbx-abc123/root/rootfs.ext4',
      method: 'copy',
      writable: true,
      ownedByJail: true,
    });
    for (const source of [snapshot.files.snapshotPath, snapshot.files.memFilePath]) {
      const file = placed(source);
      assert.equal(file?.method, 'link', `${source} is linked, never copied`);
      assert.equal(file?.writable, false);
      assert.equal(file?.ownedByJail, false, `${source} stays root's: the snapshot never changes`);
    }
    assert.equal(layout.vmPaths.rootfsPath, '/rootfs.ext4');
    assert.deepEqual(layout.snapshot.jailPaths, { snapshotPath: '/snapshot/vmstate', memFilePath: '/snapshot/memory' });
  });
});

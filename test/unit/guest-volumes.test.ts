import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { volumeDiskName, volumeTable } from '../../src/guest/config-drive.js';
import { mountVolumes } from '../../src/runtimes/container/volume-mounts.js';
import { CleanupStack } from '../../src/util/cleanup-stack.js';
import { run } from '../../src/util/exec.js';
import { markGuestWritten } from '../../src/volumes/volume-files.js';

/**
 * A VM's volumes as its guest mounts them (docs/volumes.md): the table the host writes on the
 * config drive (volumeTable), read by sandbox-init's own code (its Volumes section, cut out of
 * the script and run in sh with mount stubbed). No root, no VM: test/volumes-vm.test.ts boots them.
 */
const ROOT = path.resolve(import.meta.dirname, '../..');
let scratch: string;

before(async () => {
  scratch = await mkdtemp(path.join(os.tmpdir(), 'sbx-guest-volumes-'));
});
after(async () => {
  await rm(scratch, { recursive: true, force: true });
});

async function guestMounts(table: string): Promise<{ exitCode: number | null; mounts: string[]; log: string[] }> {
  const script = await readFile(path.join(ROOT, 'src/guest/files/sandbox-init'), 'utf8');
  const start = script.indexOf('# Volumes (VMs;');
  const end = script.indexOf('# Hostname and network');
  assert.ok(start > 0 && end > start);
  await writeFile(path.join(scratch, 'volumes'), table);
  const program = [
    'log() { echo "log: $*"; }',
    `CONFIG_DIR='${scratch}'`,
    script.slice(start, end),
    // After the section, so that these stand in for its device lookups and for mount(8).
    'mount() { echo "mount: $*"; }',
    'mkdir() { :; }',
    'disk_with_serial() { echo "/dev/by-serial-$1"; }',
    'wait_for_disk() { :; }',
    'mount_volumes',
  ].join('\n');
  const res = await run(['sh', '-c', program], { allowFailure: true });
  const lines = res.stdout.split('\n');
  return {
    exitCode: res.exitCode,
    mounts: lines.filter((l) => l.startsWith('mount: ')).map((l) => l.slice(7)),
    log: lines.filter((l) => l.startsWith('log: ')),
  };
}

describe('volumes of a VM: the table on the config drive and the guest that reads it', () => {
  it('mounts each disk at its path: by serial (QEMU) or by order (Firecracker), nosuid and nodev, read-only with noload', async () => {
    const table = volumeTable([
      { path: '/home/user/work_data', readOnly: false, drive: { serial: 'sbx-vol-0' } },
      { path: '/mnt/ref', readOnly: true, drive: { disk: volumeDiskName(1) } },
    ]);
    assert.equal(table, 'serial:sbx-vol-0 rw /home/user/work_data\ndisk:vdd ro /mnt/ref\n');
    const guest = await guestMounts(table);
    assert.equal(guest.exitCode, 0, guest.log.join('\n'));
    assert.deepEqual(guest.mounts, [
      '-t ext4 -o nosuid,nodev,noatime /dev/by-serial-sbx-vol-0 /home/user/work_data',
      '-t ext4 -o ro,noload,nosuid,nodev,noatime /dev/vdd /mnt/ref',
    ]);
  });

  it('the host writes nothing unchecked; the guest refuses every line that is not the form, and mounts nothing after it', async () => {
    assert.throws(() => volumeTable([{ path: '/etc/x y', readOnly: false, drive: { serial: 'sbx-vol-0' } }]), /bad volume/);
    assert.throws(() => volumeTable([{ path: '/data', readOnly: false, drive: { serial: 'x;reboot' } }]), /bad volume/);
    assert.throws(() => volumeDiskName(24), /no virtio disk/);
    for (const line of [
      'serial:sbx-vol-0 rw /etc/passwd', // the system's directories
      'serial:sbx-vol-0 rw /data/../etc', // not clean
      'serial:sbx-vol-0 rw relative',
      'disk:vdb rw /data', // the config drive
      'disk:vda rw /data', // the root
      'serial:$(reboot) rw /data',
      'serial:sbx-vol-0 rwx /data',
      'serial:sbx-vol-0 rw /data extra',
      `serial:sbx-vol-0 rw /${'x'.repeat(300)}`,
    ]) {
      const guest = await guestMounts(`${line}\nserial:sbx-vol-1 rw /fine\n`);
      assert.equal(guest.exitCode, 1, line);
      assert.deepEqual(guest.mounts, [], line);
      assert.match(guest.log.join('\n'), /error: volume/, line);
    }
    // A symbolic link on the way (mount would follow it out of the path).
    await symlink('/etc', path.join(scratch, 'link'));
    const linked = await guestMounts(`serial:sbx-vol-0 rw ${scratch}/link/x\n`);
    assert.equal(linked.exitCode, 1);
    assert.match(linked.log.join('\n'), /refused path/);
    assert.equal((await guestMounts(`serial:sbx-vol-0 rw ${scratch}/real/x\n`)).exitCode, 0, 'the same path without the link is fine');
  });

  it('a volume a VM has written is never loop-mounted on the host: the container runtime refuses it before anything', async () => {
    const file = path.join(scratch, 'v.ext4');
    await writeFile(file, '');
    await markGuestWritten(file);
    const cleanup = new CleanupStack();
    await assert.rejects(
      mountVolumes(scratch, [{ name: 'v', file, path: '/data', readOnly: false }], { first: 100000, count: 65536 } as never, cleanup, () => undefined),
      /written by a VM's kernel/,
    );
    await cleanup.run();
  });
});

import assert from 'node:assert/strict';
import { existsSync, statfsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { pino } from 'pino';
import { describe, it } from 'node:test';
import { OrchestratorError } from '../../src/errors.js';
import { DEFAULT_VOLUME_SETTINGS } from '../../src/volumes/settings.js';
import { VolumeHolds } from '../../src/volumes/volume-holds.js';
import { checkGuestPath, checkVolumeMounts, checkVolumeName, checkVolumeQuota, checkVolumeSize } from '../../src/volumes/volume-names.js';
import { volumeFile } from '../../src/volumes/volume-files.js';
import { VolumeStore } from '../../src/volumes/volume-store.js';
import { Volumes } from '../../src/volumes/volumes.js';

/** The rules of volumes that need no sandbox: names, guest paths, sizes, quotas, and the one-writer holds. */
function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    return err instanceof OrchestratorError ? err.code : 'not an OrchestratorError';
  }
  return undefined;
}

describe('volume names and paths', () => {
  it('takes plain names and refuses anything path-like', () => {
    for (const ok of ['data', 'a', 'Work_1', 'x-y', 'a'.repeat(63)]) assert.equal(checkVolumeName(ok), ok);
    for (const bad of ['', '.', '..', '../x', 'a/b', '/abs', '.hidden', '-flag', 'a b', 'a\u0000', 'é', 'a'.repeat(64), 7, null]) {
      assert.equal(
        codeOf(() => checkVolumeName(bad)),
        'invalid_request',
        String(bad),
      );
    }
  });

  it('a file name is joined only under a hashed tenant directory', () => {
    const file = volumeFile('/state/volumes', '../../etc', 'data');
    assert.match(file, /^\/state\/volumes\/[0-9a-f]{32}\/data\.ext4$/);
    assert.notEqual(volumeFile('/v', 'alpha', 'data'), volumeFile('/v', 'beta', 'data'));
  });

  it('guest paths are absolute, clean and outside the system directories', () => {
    assert.equal(checkGuestPath('/home/user/data', 'p'), '/home/user/data');
    assert.equal(checkGuestPath('/mnt/a.b', 'p'), '/mnt/a.b');
    for (const bad of [
      'relative',
      '/',
      '//x',
      '/mnt/../etc',
      '/mnt/./x',
      '/mnt//x',
      '/etc/x',
      '/proc',
      '/sandbox/config',
      '/usr/local/x',
      '/var/x',
      '/mnt/x/',
    ]) {
      assert.equal(
        codeOf(() => checkGuestPath(bad, 'volumes[0].path')),
        'invalid_request',
        bad,
      );
    }
  });

  it('a create names each volume once, at paths that do not overlap', () => {
    assert.deepEqual(checkVolumeMounts([{ name: 'a', path: '/mnt/a' }]), [{ name: 'a', path: '/mnt/a', readOnly: false }]);
    assert.deepEqual(checkVolumeMounts(undefined), []);
    assert.throws(
      () =>
        checkVolumeMounts([
          { name: 'a', path: '/mnt/a' },
          { name: 'a', path: '/mnt/b' },
        ]),
      /volumes\[1\]\.name/,
    );
    assert.throws(
      () =>
        checkVolumeMounts([
          { name: 'a', path: '/mnt/a' },
          { name: 'b', path: '/mnt/a/in' },
        ]),
      /volumes\[1\]\.path.*overlaps/,
    );
    assert.throws(() => checkVolumeMounts([{ name: 'a', path: '/mnt/a', readOnly: 'yes' }]), /volumes\[0\]\.readOnly/);
    assert.throws(() => checkVolumeMounts(Array.from({ length: 9 }, (_, i) => ({ name: `v${i}`, path: `/mnt/v${i}` }))), /at most 8/);
  });
});

describe('volume sizes and quotas', () => {
  const settings = { ...DEFAULT_VOLUME_SETTINGS, maxMiB: 1024, quotaMiB: 200, quotaCount: 2 };

  it('sizes are whole MiB within the bounds, the message naming the setting', () => {
    assert.equal(checkVolumeSize(16, settings), 16);
    assert.equal(checkVolumeSize(1024, settings), 1024);
    for (const bad of [15, 1025, 1.5, -1, '64', undefined]) assert.throws(() => checkVolumeSize(bad, settings), /sizeMiB.*SBX_VOLUME_MAX_MIB/);
  });

  it('the quota is of the total and of the count: 413 volume_quota_exceeded naming which', () => {
    checkVolumeQuota([{ sizeMiB: 100 }], 100, settings);
    assert.throws(
      () => checkVolumeQuota([{ sizeMiB: 100 }], 101, settings),
      (err: OrchestratorError) => {
        assert.equal(err.code, 'volume_quota_exceeded');
        assert.match(err.message, /SBX_VOLUME_QUOTA_MIB \(200 MiB\)/);
        return true;
      },
    );
    assert.throws(() => checkVolumeQuota([{ sizeMiB: 16 }, { sizeMiB: 16 }], 16, settings), /SBX_VOLUME_QUOTA_COUNT \(2\)/);
  });
});

describe('volume holds: one writer, or readers only', () => {
  const rw = (name: string) => ({ name, path: `/mnt/${name}`, readOnly: false });
  const ro = (name: string) => ({ name, path: `/mnt/${name}`, readOnly: true });

  it('a second writer, a reader of a written one, and a writer of a read one are refused; readers share', () => {
    const holds = new VolumeHolds();
    const writer = holds.take('t', 's1', [rw('a')]);
    assert.equal(
      codeOf(() => holds.take('t', 's2', [rw('a')])),
      'volume_in_use',
    );
    assert.equal(
      codeOf(() => holds.take('t', 's2', [ro('a')])),
      'volume_in_use',
    );
    writer.release();
    const r1 = holds.take('t', 's3', [ro('a')]);
    const r2 = holds.take('t', 's4', [ro('a')]);
    assert.equal(
      codeOf(() => holds.take('t', 's5', [rw('a')])),
      'volume_in_use',
    );
    r1.release();
    assert.equal(
      codeOf(() => holds.take('t', 's5', [rw('a')])),
      'volume_in_use',
    );
    r2.release();
    r2.release(); // idempotent
    holds.take('t', 's5', [rw('a')]);
  });

  it('all or none: a refused create holds nothing; tenants never share a name', () => {
    const holds = new VolumeHolds();
    holds.take('t', 's1', [rw('b')]);
    assert.equal(
      codeOf(() => holds.take('t', 's2', [rw('a'), rw('b')])),
      'volume_in_use',
    );
    assert.deepEqual(holds.users('t', 'a'), [], 'a was not taken by the refused create');
    holds.take('other', 's3', [rw('b')]);
    assert.deepEqual(holds.users('t', 'b'), [{ sessionId: 's1', readOnly: false }]);
  });

  it('a volume being deleted cannot be mounted, and one mounted cannot be deleted', () => {
    const holds = new VolumeHolds();
    const done = holds.mark('t', 'a', 'deleting');
    assert.equal(
      codeOf(() => holds.take('t', 's1', [ro('a')])),
      'volume_in_use',
    );
    done();
    holds.take('t', 's1', [ro('a')]);
    assert.equal(
      codeOf(() => holds.mark('t', 'a', 'deleting')),
      'volume_in_use',
    );
  });

  it('an adopted session holds its volume unchecked, and then keeps others out', () => {
    const holds = new VolumeHolds();
    holds.hold('t', 'adopted', [rw('a')]);
    assert.equal(
      codeOf(() => holds.take('t', 's2', [rw('a')])),
      'volume_in_use',
    );
  });
});

describe('the volume service (a real SQLite store and real files, no root)', () => {
  async function service(quotaMiB: number) {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-volumes-unit-'));
    const volumes = new Volumes({
      store: new VolumeStore(new Database(':memory:')),
      dir: path.join(dir, 'volumes'),
      settings: { ...DEFAULT_VOLUME_SETTINGS, maxMiB: 10 ** 9, quotaMiB, quotaCount: 10 },
      log: pino({ level: 'silent' }),
    });
    await volumes.prepare();
    return { volumes, dir };
  }

  it('racing creates cannot pass the quota together; a refused one leaves no row and no file', async () => {
    const { volumes, dir } = await service(48);
    const results = await Promise.allSettled([volumes.create('t', { name: 'a', sizeMiB: 32 }), volumes.create('t', { name: 'b', sizeMiB: 32 })]);
    assert.deepEqual(
      results.map((r) => r.status),
      ['fulfilled', 'rejected'],
    );
    assert.equal(((results[1] as PromiseRejectedResult).reason as OrchestratorError).code, 'volume_quota_exceeded');
    assert.deepEqual(
      volumes.list('t').map((v) => v.name),
      ['a'],
    );
    assert.deepEqual(volumes.list('other'), []);
    assert.equal(existsSync(volumeFile(path.join(dir, 'volumes'), 't', 'b')), false);
    assert.ok(existsSync(volumeFile(path.join(dir, 'volumes'), 't', 'a')));
    await rm(dir, { recursive: true, force: true });
  });

  it("promises the host what volumes have not used yet; a volume bigger than the host's free space is refused", async () => {
    const { volumes, dir } = await service(10 ** 9);
    const made = await volumes.create('t', { name: 'a', sizeMiB: 64 });
    assert.ok(made.usedBytes < 4 * 2 ** 20, `sparse (${made.usedBytes} bytes)`);
    assert.ok(volumes.promisedMiB() > 60 && volumes.promisedMiB() <= 64, String(volumes.promisedMiB()));
    const fs = statfsSync(dir);
    const freeMiB = Math.floor((fs.bavail * fs.bsize) / 2 ** 20);
    await assert.rejects(volumes.create('t', { name: 'huge', sizeMiB: freeMiB }), (err: OrchestratorError) => err.code === 'host_disk_low');
    assert.equal(volumes.list('t').length, 1);
    await volumes.delete('t', 'a');
    assert.equal(volumes.promisedMiB(), 0);
    await rm(dir, { recursive: true, force: true });
  });
});

/**
 * Disk admission (issue 21, item 5): every session is promised its writable disk and its
 * artifacts' caps, against the state directory's free space and a reserve. The real-tier
 * test (test/redteam-disk.test.ts) does it with real sandboxes and statfs.
 */
import assert from 'node:assert/strict';
import { mkdtemp, mkdir, rm, truncate, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { publicSummary } from '../../src/api/public-message.js';
import { HostCapacityError } from '../../src/errors.js';
import { CapacityGate } from '../../src/sessions/capacity.js';
import { sessionFilesMiB } from '../../src/sessions/disk-capacity.js';
import { httpStatusOf } from '../../src/api/errors.js';

const LIMITS = { maxSessions: 64, maxSessionsPerTenant: 64, sessionMemoryMiB: 1, memoryReserveMiB: 0 };

/** A gate whose filesystem has `free()` MiB free, a 1000 MiB reserve, 100 MiB of artifacts per session. */
function gate(free: () => number | undefined): CapacityGate {
  return new CapacityGate(LIMITS, () => 1e9, { limits: { reserveMiB: 1000, artifactsMiB: 100 }, freeMiB: free });
}

function refusedForDisk(err: unknown): boolean {
  assert.ok(err instanceof HostCapacityError, `expected a HostCapacityError, got ${String(err)}`);
  assert.equal(httpStatusOf(err.code), 503);
  assert.equal(err.code, 'host_disk_low');
  assert.match(err.message, /not enough disk for another session/);
  // A 503's message reaches the client only as its public summary: all of it, here.
  assert.equal(publicSummary(err.message), err.message);
  assert.match(err.message, /SBX_DISK_RESERVE_MIB/);
  assert.match(err.message, /retry later, or free disk space/);
  return true;
}

describe('disk admission', () => {
  it('promises each session its disk and artifacts: a create that would break a promise or the reserve is refused, having taken nothing', () => {
    const capacity = gate(() => 10_000);
    // 10000 free - 1000 reserve = 9000: two sessions of 4000 + 100, not three.
    capacity.reserve('a', { diskMiB: 4000 });
    capacity.reserve('b', { diskMiB: 4000 });
    assert.throws(() => capacity.reserve('c', { diskMiB: 4000 }), refusedForDisk);
    assert.deepEqual(capacity.usage().perTenant, { a: 1, b: 1 });
    // A smaller session still fits in what is left (800 MiB).
    capacity.reserve('c', { diskMiB: 700 });
  });

  it('counts only what a session may still take: what its files hold shows in the free space already', () => {
    let free = 10_000;
    const capacity = gate(() => free);
    const first = capacity.reserve('a', { diskMiB: 4000 });
    let written = 0;
    first.measureDisk(() => written);
    // The first session writes 3000 MiB: the disk has 3000 less free, its promise 3000 less outstanding.
    written = 3000;
    free = 7000;
    capacity.reserve('b', { diskMiB: 4000 }); // 7000 - 1000 - 1100 = 4900 >= 4100
    assert.throws(() => capacity.reserve('c', { diskMiB: 4000 }), refusedForDisk); // 4900 - 4100 = 800
  });

  it('gives a promise back with its slot, and does not check a filesystem it cannot read', () => {
    const capacity = gate(() => 5_200);
    const slot = capacity.reserve('a', { diskMiB: 4000 });
    assert.throws(() => capacity.reserve('b', { diskMiB: 4000 }), refusedForDisk);
    slot.release();
    slot.release(); // idempotent: the promise is not given back twice
    capacity.reserve('b', { diskMiB: 4000 });
    assert.throws(() => capacity.reserve('c', { diskMiB: 4000 }), refusedForDisk);
    gate(() => undefined).reserve('a', { diskMiB: 1e9 });
  });

  it('a huge reserve refuses every create, and says which setting to change', () => {
    const capacity = new CapacityGate(LIMITS, () => 1e9, { limits: { reserveMiB: 1e9, artifactsMiB: 0 }, freeMiB: () => 70_000 });
    assert.throws(
      () => capacity.reserve('a', { diskMiB: 64 }),
      (err: unknown) => refusedForDisk(err) && /1000000000 MiB kept \(SBX_DISK_RESERVE_MIB\)/.test((err as Error).message),
    );
  });

  it('adopted sessions hold their promise without a check (they run already)', () => {
    const capacity = gate(() => 5_000);
    capacity.hold('a', { diskMiB: 4000 });
    capacity.hold('b', { diskMiB: 4000 });
    assert.equal(capacity.usage().total, 2);
    assert.throws(() => capacity.reserve('c', { diskMiB: 64 }), refusedForDisk);
  });
});

describe("a session's files on the host", () => {
  const dirs: string[] = [];
  after(async () => {
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  it("are counted by the blocks they hold, not their apparent size, and nothing below the directory is walked, nor a pause's state", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-disk-'));
    dirs.push(dir);
    await writeFile(path.join(dir, 'layer.ext4'), '');
    await truncate(path.join(dir, 'layer.ext4'), 4 * 2 ** 30); // sparse: 4 GiB apparent, nothing held
    await writeFile(path.join(dir, 'console.log'), Buffer.alloc(2 * 2 ** 20, 1));
    await mkdir(path.join(dir, 'image'));
    await writeFile(path.join(dir, 'image', 'big'), Buffer.alloc(8 * 2 ** 20, 1)); // a mount's content in real life
    // A disk pause's state is not the session's disk: counted, it would free promised room for others.
    await writeFile(path.join(dir, 'vm-state.gz'), Buffer.alloc(4 * 2 ** 20, 1));
    await writeFile(path.join(dir, 'vm-state.gz.partial'), Buffer.alloc(4 * 2 ** 20, 1));
    const mib = sessionFilesMiB(dir);
    assert.ok(mib >= 2 && mib < 2.5, `${mib} MiB`);
    assert.equal(sessionFilesMiB(path.join(dir, 'gone')), 0);
  });
});

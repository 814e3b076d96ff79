import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, rm, rmdir, utimes } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { HostIdLeases, hostIdBase } from '../../src/runtimes/container/id-leases.js';
import { vmUserRange } from '../../src/runtimes/vm/vm-user-pool.js';
import { ID_RANGE_SIZE, MAX_ID_RANGES } from '../../src/runtimes/container/settings.js';
import { SessionStore } from '../../src/sessions/store.js';

/** Far above any range a sandbox on this host uses now: the staleness check looks at live processes. */
const BASE = 3_900_000_000;

describe('host id ranges across orchestrators', () => {
  let dir: string;
  let leaseDir: string;
  let stateA: string;
  let stateB: string;
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-id-leases-'));
    leaseDir = path.join(dir, 'leases');
    stateA = path.join(dir, 'state-a');
    stateB = path.join(dir, 'state-b');
    await mkdir(stateA);
    await mkdir(stateB);
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('start at a base of each prefix: 200000 for sbx-, blocks of their own below 2^32 for others', () => {
    assert.equal(hostIdBase('sbx-'), 200_000);
    const span = MAX_ID_RANGES * ID_RANGE_SIZE;
    const bases = new Set<number>();
    for (const prefix of ['tab-', 'tzz-', 'dev-', 'abc-', 'qqq-']) {
      const base = hostIdBase(prefix);
      assert.equal((base - 200_000) % span, 0, `${prefix}: a whole block`);
      assert.ok(base >= 200_000 + span, `${prefix}: above sbx-'s block`);
      assert.ok(base + span <= 2 ** 32 - 1, `${prefix}: every range below the kernel's "no id"`);
      assert.equal(hostIdBase(prefix), base, 'the same every time');
      bases.add(base);
    }
    assert.ok(bases.size >= 4, 'different prefixes mostly get different blocks');
  });

  it('are leased host-wide: two orchestrators with the same base and separate stores never get the same range', () => {
    const base = BASE;
    const storeA = new SessionStore(path.join(dir, 'a.db'));
    const storeB = new SessionStore(path.join(dir, 'b.db'));
    try {
      const a = new HostIdLeases(leaseDir, { stateDir: stateA, prefix: 'aaa-' });
      const b = new HostIdLeases(leaseDir, { stateDir: stateB, prefix: 'bbb-' });
      const got: number[] = [];
      // Interleaved, as two processes' creates would be.
      for (let i = 0; i < 3; i++) {
        got.push(storeA.leaseIdRange(`a${i}aaaaaaaa`, base, ID_RANGE_SIZE, 8, a.taker(`a${i}aaaaaaaa`, new Set())));
        got.push(storeB.leaseIdRange(`b${i}bbbbbbbb`, base, ID_RANGE_SIZE, 8, b.taker(`b${i}bbbbbbbb`, new Set())));
      }
      assert.equal(new Set(got).size, 6, `six different ranges: ${got.join(', ')}`);
      assert.deepEqual(
        [...got].sort((x, y) => x - y),
        [0, 1, 2, 3, 4, 5].map((k) => base + k * ID_RANGE_SIZE),
      );
      // Without the host-wide lease (the bug): B's store alone would hand out A's first range.
      const storeC = new SessionStore(path.join(dir, 'c.db'));
      assert.equal(storeC.leaseIdRange('cccccccccc', base, ID_RANGE_SIZE, 8), base);
      storeC.close();
    } finally {
      storeA.close();
      storeB.close();
    }
  });

  it('are given back by their holder only, and a crashed holder takes its own back', async () => {
    const a = new HostIdLeases(leaseDir, { stateDir: stateA, prefix: 'aaa-' });
    const b = new HostIdLeases(leaseDir, { stateDir: stateB, prefix: 'bbb-' });
    const first = BASE;
    const owner = JSON.parse(await readFile(path.join(leaseDir, String(first)), 'utf8')) as { stateDir: string; sessionId: string };
    assert.deepEqual(owner, { stateDir: stateA, prefix: 'aaa-', sessionId: 'a0aaaaaaaa' });
    await b.release(first, 'a0aaaaaaaa'); // not B's: kept
    assert.ok((await readdir(leaseDir)).includes(String(first)));
    assert.equal(b.taker('bxbbbbbbbb', new Set())(first), false, "B cannot take A's");
    // A restarted after a crash: its store no longer names the range, the file does: A's again.
    assert.equal(a.taker('a9aaaaaaaa', new Set())(first), true);
    await a.release(first, 'a0aaaaaaaa'); // the old session's release: no longer its file
    assert.ok((await readdir(leaseDir)).includes(String(first)));
    await a.releaseSession('a9aaaaaaaa');
    assert.ok(!(await readdir(leaseDir)).includes(String(first)));
  });

  it("take over another orchestrator's lease only when it is old and no process uses the range", async () => {
    const a = new HostIdLeases(leaseDir, { stateDir: stateA, prefix: 'aaa-' });
    const b = new HostIdLeases(leaseDir, { stateDir: stateB, prefix: 'bbb-' });
    const held = BASE + ID_RANGE_SIZE; // B's from the test above
    assert.deepEqual(await a.staleRanges(), new Set(), 'fresh leases of a state dir that exists are not stale');
    const old = new Date(Date.now() - 11 * 60_000);
    await utimes(path.join(leaseDir, String(held)), old, old);
    assert.ok((await a.staleRanges()).has(held), 'an old lease whose range no process maps is stale');
    assert.equal(a.taker('azaaaaaaaa', await a.staleRanges())(held), true);
    assert.ok(!(await b.staleRanges()).has(held), "A's lease, just taken, is not stale to B");
    // A's state dir removed (a finished test's orchestrator): its leases are stale at once.
    await rmdir(stateA);
    assert.ok((await b.staleRanges()).has(held));
  });

  it("never leases a container range holding a VMM's default uid, whatever the prefixes (a guest root there could signal that VM)", async () => {
    const leases = new HostIdLeases(path.join(dir, 'vm-window-leases'), { stateDir: stateA, prefix: 'sbx-' });
    const take = leases.taker('vmwindow00', new Set());
    const vms = ['sbx-', 'tab-', 'dev-', 'qqq-'].map((prefix) => vmUserRange({}, prefix));
    const store = new SessionStore(path.join(dir, 'vm-window.db'));
    const leased: number[] = [];
    try {
      // sbx-'s block, where the VMMs' defaults lie: the first 40 ranges leased one after another.
      for (let i = 0; i < 40; i++) leased.push(store.leaseIdRange(`vmwindow${String(i).padStart(2, '0')}`, 200_000, ID_RANGE_SIZE, MAX_ID_RANGES, take));
    } finally {
      store.close();
      for (const first of leased) await rm(path.join(dir, 'vm-window-leases', String(first)), { force: true });
    }
    for (const first of leased) {
      for (const vm of vms) {
        assert.ok(first + ID_RANGE_SIZE <= vm.base || first >= vm.base + vm.count, `range ${first} holds uids of the VMs of a prefix (from ${vm.base})`);
      }
    }
    assert.equal(leased[0], 200_000, 'the ranges below the VMs are still used');
    assert.ok(
      leased.some((first) => first > 900_000 + 256 * 4096),
      'and those above them',
    );
  });
});

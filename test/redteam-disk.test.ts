/**
 * Issue 21, item 5: disk is a capacity like memory. Admission promised memory and a count
 * only: 23 sessions with a 4 GiB sparse writable layer each could promise 92 GiB on a host
 * with 71 GB free. Now every session is promised its writable disk and its artifacts' caps
 * against the state directory's free space (statfs) and SBX_DISK_RESERVE_MIB; and the
 * writable disk cannot outgrow its size on the host. Real sandboxes, real statfs.
 */
import assert from 'node:assert/strict';
import { statfs, stat, readdir } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { defaultConfig } from '../src/config.js';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

const MiB = 2 ** 20;

describe('red team: disk is admitted like memory, and a sandbox cannot outgrow its disk', () => {
  it('a create beyond the disk reserve is refused with a 503 that says why and what to do, having taken nothing', async () => {
    const orch = await startTestOrchestrator({ diskReserveMiB: 1e9 });
    try {
      const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
      assert.equal(res.statusCode, 503, res.body);
      assert.equal(res.headers['retry-after'], '10');
      const { error } = res.json<{ error: { code: string; message: string } }>();
      assert.equal(error.code, 'host_disk_low');
      assert.match(
        error.message,
        /^not enough disk for another session: \d+ MiB free in the state dir, 0 MiB promised to 0 sessions, 1000000000 MiB kept \(SBX_DISK_RESERVE_MIB\); a session needs \d+ MiB/,
      );
      assert.match(error.message, /retry later, or free disk space$/);
      // Nothing was taken: no session, no session directory.
      assert.deepEqual((await orch.server.inject({ method: 'GET', url: '/v1/sessions' })).json().sessions ?? [], []);
      assert.deepEqual(
        (await readdir(orch.stateDir)).filter((name) => /^[a-z0-9]{10}$/.test(name)),
        [],
      );
    } finally {
      await orch.stop();
    }
  });

  it('sessions are promised their disk: with room for one, the second create is refused until the first is gone', async () => {
    // Large artifact caps make one session's promise ~20 GiB, so that the room for exactly
    // one (1.5 promises) tolerates what other processes write on this disk meanwhile.
    const base = defaultConfig(process.env);
    const recording = { ...base.recording, maxBytes: 16 * 1024 * MiB };
    const promiseMiB = base.runtimes.container.diskMiB + (recording.maxBytes + base.trajectory.maxSessionBytes) / MiB;
    const fs = await statfs(os.tmpdir()); // the test orchestrator's state dir is made there
    const freeMiB = (fs.bavail * fs.bsize) / MiB;
    const diskReserveMiB = Math.floor(freeMiB - 1.5 * promiseMiB);
    if (diskReserveMiB < 0) {
      console.log(`skipped: ${Math.floor(freeMiB)} MiB free, less than 1.5 promises of ${promiseMiB} MiB`);
      return;
    }
    const orch = await startTestOrchestrator({ diskReserveMiB, recording });
    try {
      const first = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
      assert.equal(first.statusCode, 201, first.body);
      const second = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
      assert.equal(second.statusCode, 503, second.body);
      assert.equal(second.json().error.code, 'host_disk_low');
      assert.match(second.json().error.message, new RegExp(`promised to 1 sessions.*a session needs ${Math.ceil(promiseMiB)} MiB`));
      const destroyed = await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${first.json().id}` });
      assert.equal(destroyed.json().state, 'destroyed');
      const third = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
      assert.equal(third.statusCode, 201, `the promise was given back with the session: ${third.body}`);
    } finally {
      await orch.stop();
    }
  });

  it("a guest writing past its disk gets ENOSPC inside; the host file holds at most the disk's size", async () => {
    const base = defaultConfig(process.env);
    const diskMiB = 256;
    const orch: TestOrchestrator = await startTestOrchestrator({ runtimes: { ...base.runtimes, container: { ...base.runtimes.container, diskMiB } } });
    try {
      const created = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
      assert.equal(created.statusCode, 201, created.body);
      const id = created.json().id as string;
      const bash = async (command: string) => {
        const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/tools/bash`, payload: { command } });
        assert.equal(res.statusCode, 200, res.body);
        return res
          .json<{ content: Array<{ text?: string }> }>()
          .content.map((c) => c.text ?? '')
          .join('');
      };
      // Written data, a preallocation and a sparse file's holes filled: every way to take blocks.
      const filled = await bash(
        'dd if=/dev/zero of=/home/user/a bs=1M count=512 2>&1 | grep -o "No space left on device" | head -1; ' +
          'fallocate -l 1G /home/user/b 2>&1 | grep -o "No space left on device" | head -1; ' +
          'df -m --output=size / | tail -1',
      );
      const [ddSaid, fallocateSaid, size] = filled.split('\n');
      assert.equal(ddSaid, 'No space left on device', filled);
      assert.equal(fallocateSaid, 'No space left on device', filled);
      assert.ok(Number(size) <= diskMiB, `the guest sees a ${size} MiB disk`);
      const layer = await stat(path.join(orch.stateDir, id, 'layer.ext4'));
      assert.equal(layer.size, diskMiB * MiB, 'the disk file keeps its size (a loop device does not grow it)');
      assert.ok(layer.blocks * 512 <= diskMiB * MiB, `the disk file holds ${(layer.blocks * 512) / MiB} MiB of the host, at most ${diskMiB}`);
      // The session's files, as admission measures them, include the filled disk.
      const screenshot = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/screenshot` });
      assert.equal(screenshot.statusCode, 200, 'the full sandbox still answers');
    } finally {
      await orch.stop();
    }
  });
});

/**
 * The runtime side of pause, without root: the CRIU version rule, the freezer's file protocol
 * (on a directory laid out as cgroup v1 and v2 are), and the QMP exchange against a stand-in
 * monitor on a Unix socket. The real freeze and QMP stop/cont: test/pause.test.ts and
 * test/qemu-pause.test.ts.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { cgroupThreads, freezeCgroup, freezerLayout, isCgroupFrozen, thawCgroup } from '../../src/host/freezer.js';
import { criuTooOld } from '../../src/runtimes/container/criu-check.js';
import { qmp, qmpStatus } from '../../src/runtimes/qemu/qmp.js';

let dir: string;
before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-unit-pause-rt-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('unit: pause, runtime side', () => {
  it('CRIU too old for the kernel (before 4.1 from 6.13, before 4.2 from 6.16) says so', () => {
    assert.match(criuTooOld([3, 17], '6.18.44-fc-v1045') ?? '', /criu 3\.17 cannot run on kernel 6\.18.*6\.16 need criu 4\.2 or newer/);
    // 4.1.1 passes `criu check` on 6.18 but cannot dump the guest's sshd socket there.
    assert.match(criuTooOld([4, 1], '6.18.44') ?? '', /criu 4\.1 cannot run on kernel 6\.18/);
    assert.equal(criuTooOld([4, 2], '6.18.44'), undefined);
    assert.equal(criuTooOld([4, 1], '6.15.2'), undefined);
    assert.match(criuTooOld([3, 19], '6.14.0') ?? '', /6\.13 need criu 4\.1 or newer/);
    assert.equal(criuTooOld([3, 17], '6.1.0-28-amd64'), undefined, 'Debian 12 on its own kernel');
    assert.notEqual(criuTooOld([3, 19], '7.0.1'), undefined);
  });

  it('the freezer: v1 freezer.state and v2 cgroup.freeze, written and read back', async () => {
    const v1 = path.join(dir, 'v1');
    await mkdir(path.join(v1, 'freezer', 'sbx', 'sbx-abc'), { recursive: true });
    await writeFile(path.join(v1, 'freezer', 'sbx', 'sbx-abc', 'freezer.state'), 'THAWED\n');
    assert.equal(freezerLayout(v1), 'v1');
    await freezeCgroup('/sbx/sbx-abc', 'v1', v1);
    assert.equal(await isCgroupFrozen('/sbx/sbx-abc', 'v1', v1), true);
    await thawCgroup('/sbx/sbx-abc', 'v1', v1);
    assert.equal(await isCgroupFrozen('/sbx/sbx-abc', 'v1', v1), false);
    assert.equal(await isCgroupFrozen('/sbx/missing', 'v1', v1), false, 'no cgroup: not frozen');

    const v2 = path.join(dir, 'v2');
    await mkdir(path.join(v2, 'sbx', 'sbx-abc'), { recursive: true });
    await writeFile(path.join(v2, 'cgroup.controllers'), 'cpu memory pids\n');
    await writeFile(path.join(v2, 'sbx', 'sbx-abc', 'cgroup.events'), 'populated 1\nfrozen 1\n');
    assert.equal(freezerLayout(v2), 'v2');
    await freezeCgroup('/sbx/sbx-abc', 'v2', v2);
    assert.equal((await readFile(path.join(v2, 'sbx', 'sbx-abc', 'cgroup.freeze'), 'utf8')).trim(), '1');
    await thawCgroup('/sbx/sbx-abc', 'v2', v2);
    assert.equal(await isCgroupFrozen('/sbx/sbx-abc', 'v2', v2), false);
  });

  it("the freezer's thread list: every thread of the cgroup and of those below it, v1 tasks and v2 cgroup.threads", async () => {
    const v1 = path.join(dir, 'threads-v1', 'freezer', 'sbx', 'sbx-t');
    await mkdir(path.join(v1, 'inner'), { recursive: true });
    await writeFile(path.join(v1, 'tasks'), '10\n11\n');
    await writeFile(path.join(v1, 'inner', 'tasks'), '12\nnot-a-pid\n');
    assert.deepEqual((await cgroupThreads('/sbx/sbx-t', 'v1', path.join(dir, 'threads-v1'))).sort(), [10, 11, 12]);
    const v2 = path.join(dir, 'threads-v2', 'sbx', 'sbx-t');
    await mkdir(v2, { recursive: true });
    await writeFile(path.join(v2, 'cgroup.threads'), '20\n');
    assert.deepEqual(await cgroupThreads('/sbx/sbx-t', 'v2', path.join(dir, 'threads-v2')), [20]);
    assert.deepEqual(await cgroupThreads('/sbx/gone', 'v2', path.join(dir, 'threads-v2')), [], 'no cgroup: no threads');
    for (let i = 0; i < 70; i++) await mkdir(path.join(v2, `below-${i}`));
    await assert.rejects(cgroupThreads('/sbx/sbx-t', 'v2', path.join(dir, 'threads-v2')), /more than 64 cgroups below it/);
  });

  it('QMP: greeting, capabilities, commands in order, events skipped, errors said', async () => {
    const socketPath = path.join(dir, 'qmp.sock');
    const seen: string[] = [];
    let status = 'running';
    const server = net.createServer((socket) => {
      socket.write('{"QMP": {"version": {}, "capabilities": []}}\r\n');
      let buffered = '';
      socket.on('data', (chunk) => {
        buffered += chunk.toString();
        for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
          const command = JSON.parse(buffered.slice(0, nl)) as { execute: string };
          buffered = buffered.slice(nl + 1);
          seen.push(command.execute);
          if (command.execute === 'stop') {
            status = 'paused';
            socket.write('{"timestamp": {}, "event": "STOP"}\r\n');
          }
          if (command.execute === 'query-status') socket.write(`{"return": {"status": "${status}", "running": false}}\r\n`);
          else if (command.execute === 'bogus') socket.write('{"error": {"class": "CommandNotFound", "desc": "The command bogus has not been found"}}\r\n');
          else socket.write('{"return": {}}\r\n');
        }
      });
    });
    await new Promise<void>((resolve) => server.listen(socketPath, resolve));
    try {
      await qmp(socketPath, [{ execute: 'stop' }]);
      assert.equal(await qmpStatus(socketPath), 'paused');
      await assert.rejects(() => qmp(socketPath, [{ execute: 'bogus' }]), /bogus has not been found/);
      assert.deepEqual(seen, ['qmp_capabilities', 'stop', 'qmp_capabilities', 'query-status', 'qmp_capabilities', 'bogus']);
      await assert.rejects(() => qmp(path.join(dir, 'nothing.sock'), [{ execute: 'cont' }]), /QMP at .*nothing\.sock/);
    } finally {
      server.close();
    }
  });
});

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { ResourceNames } from '../src/network/names.js';
import { run } from '../src/util/exec.js';
import { cgroupDirsOf, hostTrace, rememberNetns } from './helpers/host.js';
import { memoryOf } from './helpers/raw-http.js';
import { startTestOrchestrator, TEST_PREFIX, type TestOrchestrator } from './helpers/orchestrator.js';

/**
 * A guest that misbehaves (its sshd dies, it floods its output, fills its disk, forks or
 * allocates without end) stays its own problem: the orchestrator keeps answering, other
 * sessions keep working, the host's disk and memory are not touched beyond the limits.
 */
const NAMES = new ResourceNames(TEST_PREFIX);
const DISK_MIB = 256;

describe('guest faults stay inside their sandbox', () => {
  let orch: TestOrchestrator;
  let victim: string;
  let bystander: string;
  const previousDisk = process.env.SBX_DISK_MIB;

  before(async () => {
    process.env.SBX_DISK_MIB = String(DISK_MIB);
    orch = await startTestOrchestrator();
    victim = (await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} })).json().id;
    bystander = (await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} })).json().id;
  });
  after(async () => {
    await orch?.stop();
    if (previousDisk === undefined) delete process.env.SBX_DISK_MIB;
    else process.env.SBX_DISK_MIB = previousDisk;
  });

  const bash = async (id: string, command: string, timeoutMs = 60_000) => {
    const started = Date.now();
    const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/tools/bash`, payload: { command } });
    assert.ok(Date.now() - started < timeoutMs, 'answered in time');
    const body = res.json<{ content?: Array<{ text?: string }>; isError?: boolean }>();
    return { status: res.statusCode, text: (body.content ?? []).map((c) => c.text ?? '').join(''), isError: body.isError === true };
  };
  /** The bystander answers a screenshot quickly: the fault did not spread. */
  const bystanderFine = async () => {
    const started = Date.now();
    const res = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${bystander}/screenshot` });
    assert.equal(res.statusCode, 200);
    assert.ok(Date.now() - started < 5_000, `the other session answered in ${Date.now() - started} ms`);
  };

  it('sshd killed in the guest (listener and connections): restarted by its init, reconnected, the next action works', async () => {
    const { stdout } = await run(['ip', 'netns', 'pids', orch.names.netns(victim)]);
    let killed = 0;
    for (const pid of stdout.split('\n').filter(Boolean)) {
      const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
      if (cmdline.startsWith('sshd') || cmdline.startsWith('/usr/sbin/sshd')) {
        process.kill(Number(pid), 'SIGKILL');
        killed++;
      }
    }
    assert.ok(killed >= 2, `killed the listener and the connection (${killed})`);
    await sleep(300);
    const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${victim}/actions`, payload: { action: 'cursor_position' } });
    assert.equal(res.statusCode, 200, res.body);
    await bystanderFine();
  });

  it('a flood of output is clipped; the orchestrator does not buffer it', async () => {
    // The peak (VmHWM, reset to the current RSS first), not the RSS after: a buffer that was
    // filled and freed again before the answer would not show in the RSS afterwards.
    await writeFile('/proc/self/clear_refs', '5');
    const before = await memoryOf(process.pid);
    const flood = await bash(victim, "head -c 300000000 /dev/zero | tr '\\0' x; echo; echo done");
    assert.equal(flood.status, 200);
    assert.ok(flood.text.length < 100_000, `clipped to ${flood.text.length} characters`);
    const grown = (await memoryOf(process.pid)).peakMiB - before.rssMiB;
    assert.ok(grown < 150, `orchestrator peak RSS grew ${grown} MiB for 300 MB of output`);
    await bystanderFine();
  });

  it(`a full disk is the sandbox's own (${DISK_MIB} MiB): ENOSPC inside, the host's disk untouched`, async () => {
    const fill = await bash(victim, 'dd if=/dev/zero of=/home/user/fill bs=1M count=2048 2>&1 | grep -m1 -o "No space left on device"; df -m / | tail -1');
    assert.match(fill.text, /No space left on device/);
    // What the sandbox could take of the host's disk: the blocks its disk file really holds.
    const layer = await stat(path.join(orch.stateDir, victim, 'layer.ext4'));
    const allocatedMiB = (layer.blocks * 512) / 2 ** 20;
    assert.ok(allocatedMiB <= DISK_MIB + 8, `the sandbox's disk holds ${allocatedMiB.toFixed(0)} MiB of the host's, at most its ${DISK_MIB} MiB`);
    const shot = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${victim}/screenshot` });
    assert.equal(shot.statusCode, 200, 'the full sandbox still answers');
    await bash(victim, 'rm -f /home/user/fill');
    await bystanderFine();
  });

  it('a memory hog hits the memory limit, a fork storm the pids limit; the others are unaffected', async () => {
    // Written, not just reserved: untouched pages would never count against the limit.
    const hog = await bash(victim, `python3 -c "b = b'x' * (3 * 1024 ** 3)" 2>/dev/null; echo "exit $?"`);
    assert.match(hog.text, /exit (1|137)/, 'killed by the OOM killer (137) or refused (MemoryError: 1)');
    await bystanderFine();

    // A storm left running in the background (bash retries a failed fork, so it keeps pushing).
    await bash(victim, "setsid bash -c 'for ((i = 0; i < 3000; i++)); do sleep 60 & done' >/dev/null 2>&1 < /dev/null &");
    // The pids controller's directory on either hierarchy (v1's pids/, or the v2 tree).
    const pids = (await cgroupDirsOf(orch.names.cgroup(victim))).find((dir) => existsSync(path.join(dir, 'pids.max')));
    assert.ok(pids, 'the session has a pids cgroup');
    const max = Number((await readFile(path.join(pids, 'pids.max'), 'utf8')).trim());
    let hits = 0;
    for (let i = 0; i < 100 && hits === 0; i++) {
      await sleep(100);
      hits = Number(/max (\d+)/.exec(await readFile(path.join(pids, 'pids.events'), 'utf8'))?.[1] ?? 0);
    }
    assert.ok(hits > 0, 'the storm ran into the pids limit');
    const current = Number((await readFile(path.join(pids, 'pids.current'), 'utf8')).trim());
    assert.ok(current <= max, `${current} processes, at most the limit of ${max}`);
    await bystanderFine();
    const health = await orch.server.inject({ method: 'GET', url: '/healthz' });
    assert.equal(health.statusCode, 200);
  });

  it('destroying the sandbox frees its disk (loop device) with the rest', async () => {
    await rememberNetns(NAMES, victim);
    const res = await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${victim}` });
    assert.equal(res.json().state, 'destroyed');
    const loops = (await run(['losetup', '-a'])).stdout;
    assert.doesNotMatch(loops, new RegExp(path.join(orch.stateDir, victim).replace(/[/.]/g, '\\$&')));
    assert.deepEqual(await hostTrace(NAMES, victim, path.join(orch.stateDir, victim)), {
      netns: false,
      veth: false,
      mounts: [],
      container: false,
      processes: [],
      sessionDir: false,
    });
  });
});

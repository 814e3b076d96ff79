import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { ResourceNames } from '../src/network/names.js';
import { qmpStatus } from '../src/runtimes/qemu/qmp.js';
import { QemuRuntime, qmpSocketOf } from '../src/runtimes/qemu/qemu-runtime.js';
import { qemuSettingsFromEnv } from '../src/runtimes/qemu/settings.js';
import { TEST_PREFIX, startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

/**
 * Memory pause of a QEMU VM (TCG here: slow, so one compact test): a counter runs in the
 * guest; the VM is paused with QMP `stop` (QEMU says `paused`, its process gets next to no
 * CPU: only its main loop); the counter does not move; the resume (`cont`) finds it counting
 * on from where it stopped, and the next action works.
 */
const NAMES = new ResourceNames(TEST_PREFIX);

/** CPU time (user + system, clock ticks) of a process, from /proc/<pid>/stat. */
async function cpuTicks(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

describe('memory pause of a qemu VM', () => {
  let orch: TestOrchestrator;
  let id: string;

  before(async () => {
    // A TCG boot on a host this busy can take minutes: a longer boot timeout than the default 90 s.
    const runtime = await QemuRuntime.create(NAMES, qemuSettingsFromEnv({ SBX_QEMU_BOOT_TIMEOUT_MS: '300000', ...process.env }));
    orch = await startTestOrchestrator({ runtime: 'qemu' }, false, { runtime, reason: 'test' });
  });
  after(async () => {
    await orch?.stop();
  });

  async function bash(command: string): Promise<string> {
    const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/tools/bash`, payload: { command } });
    assert.equal(res.statusCode, 200, res.body);
    return (res.json().content as Array<{ text?: string }>).map((c) => c.text ?? '').join('');
  }

  it('pauses (QMP stop): no count and next to no CPU while paused; resumes where it stopped', async (t) => {
    const created = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { width: 800, height: 600, timeoutSeconds: 300 } });
    assert.equal(created.statusCode, 201, created.body);
    id = created.json().id;
    await bash(
      `setsid nohup sh -c 'i=0; while :; do i=$((i+1)); echo "$$ $i" > /var/tmp/counter.new; mv /var/tmp/counter.new /var/tmp/counter; sleep 0.1; done' >/dev/null 2>&1 < /dev/null &`,
    );
    await sleep(2_000);
    const running = (await bash('cat /var/tmp/counter')).trim().split(' ').map(Number);
    const runningAt = performance.now();
    const session = orch.manager.registry.find(id);
    const pid = session?.sandbox?.pid ?? 0;
    assert.ok(pid > 0);
    const cpuRun0 = await cpuTicks(pid);
    await sleep(2_000);
    const cpuRunning = (await cpuTicks(pid)) - cpuRun0;

    const readAt = performance.now();
    const beforePause = (await bash('cat /var/tmp/counter')).trim().split(' ').map(Number);
    // Counts per second while running, to know what a pause that did not stop it would show.
    const rate = ((beforePause[1] ?? 0) - (running[1] ?? 0)) / ((readAt - runningAt) / 1000);
    let started = performance.now();
    const paused = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/pause`, payload: { mode: 'memory' } });
    const pauseMs = performance.now() - started;
    assert.equal(paused.statusCode, 200, paused.body);
    assert.equal(paused.json().state, 'paused');
    assert.equal(await qmpStatus(qmpSocketOf(path.join(orch.stateDir, id))), 'paused');
    const cpuPaused0 = await cpuTicks(pid);
    await sleep(4_000);
    const cpuPaused = (await cpuTicks(pid)) - cpuPaused0;

    started = performance.now();
    const resumed = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/resume` });
    const resumeMs = performance.now() - started;
    assert.equal(resumed.statusCode, 200, resumed.body);
    assert.equal(resumed.json().state, 'ready');
    const atResume = (await bash('cat /var/tmp/counter')).trim().split(' ').map(Number);
    await sleep(1_500);
    const later = (await bash('cat /var/tmp/counter')).trim().split(' ').map(Number);
    t.diagnostic(
      `pause ${pauseMs.toFixed(0)} ms, resume ${resumeMs.toFixed(0)} ms; CPU ticks: ${cpuRunning} in 2 s running, ${cpuPaused} in 4 s paused; ` +
        `counter ${running[1]} -> ${beforePause[1]} (pause) -> ${atResume[1]} (resume) -> ${later[1]}; ${rate.toFixed(1)} counts/s running`,
    );
    assert.equal(atResume[0], running[0], 'the same process');
    assert.ok((atResume[1] ?? 0) >= (beforePause[1] ?? 0), 'not from zero');
    // Had it run through the 4 s pause, it would be rate * 4 further; from the resume to the read it runs a little.
    const ranFor = ((atResume[1] ?? 0) - (beforePause[1] ?? 0)) / rate;
    assert.ok(
      ranFor < (performance.now() - started) / 1000 + 1 && ranFor < 3.5,
      `it did not count through the pause (${beforePause[1]} -> ${atResume[1]}: ${ranFor.toFixed(1)} s of counting)`,
    );
    assert.ok((later[1] ?? 0) > (atResume[1] ?? 0), 'it counts again');
    assert.ok(cpuPaused * 5 < cpuRunning, `a stopped VM uses next to no CPU (${cpuPaused} ticks paused vs ${cpuRunning} running)`);
    const shot = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/screenshot` });
    assert.equal(shot.statusCode, 200);
  });
});

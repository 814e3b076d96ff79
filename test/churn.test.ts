import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import { ResourceNames, SESSION_ID_PATTERN } from '../src/network/names.js';
import { listSandboxLinks, listSandboxNetns } from '../src/network/netns.js';
import { run } from '../src/util/exec.js';
import { startTestOrchestrator, TEST_PREFIX, type TestOrchestrator } from './helpers/orchestrator.js';

/**
 * Many create/destroy cycles, several at a time (SBX_CHURN_CYCLES, default 200, 4 at a time):
 * afterwards the host and the orchestrator hold exactly what they held before. Every kind
 * of resource a session takes is counted.
 */
const NAMES = new ResourceNames(TEST_PREFIX);
const CYCLES = Number(process.env.SBX_CHURN_CYCLES || 200);
const PARALLEL = 4;

describe(`${CYCLES} create/destroy cycles, ${PARALLEL} at a time`, () => {
  let orch: TestOrchestrator;
  before(async () => {
    orch = await startTestOrchestrator();
  });
  after(async () => {
    await orch?.stop();
  });

  async function census() {
    const mounts = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').filter((l) => l.includes(orch.stateDir)).length;
    const loops = (await run(['losetup', '-a'])).stdout.split('\n').filter((l) => l.includes(orch.stateDir)).length;
    const containers = (await run(['runc', '--root', NAMES.runcRoot, 'list', '-q'], { allowFailure: true })).stdout.split('\n').filter(Boolean).length;
    const keyDirs = existsSync(orch.stateDir) ? (await readdir(orch.stateDir)).filter((d) => SESSION_ID_PATTERN.test(d)).length : 0;
    const egress = (await run(['nft', 'list', 'set', 'inet', NAMES.policyTable, 'egress'], { allowFailure: true })).stdout;
    return {
      netns: (await listSandboxNetns(NAMES)).length,
      veth: (await listSandboxLinks(NAMES)).length,
      mounts,
      loops,
      containers,
      keyDirs,
      leases: orch.manager.leasesInUse,
      sessions: orch.manager.list().length,
      egressEntries: (egress.match(/elements = \{([^}]*)\}/)?.[1] ?? '').split(',').filter((e) => e.trim()).length,
      childProcesses: await childProcessCount(),
      fds: (await readdir('/proc/self/fd')).length,
    };
  }

  it('leaves no netns, veth, mount, loop device, container, lease, key dir, process or file descriptor behind', async (t) => {
    // One cycle first, so that lazily made things (caches, the policy table) exist in both counts.
    const warm = (await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} })).json().id;
    await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${warm}` });
    const before = await census();
    // The census sees a live session's every resource (else it could not see a leak either).
    const probe = (await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { network: { egress: true } } })).json().id;
    const during = await census();
    await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${probe}` });
    for (const kind of ['netns', 'veth', 'loops', 'containers', 'keyDirs', 'leases', 'sessions', 'egressEntries'] as const) {
      assert.equal(during[kind], before[kind] + 1, `a live session shows in the ${kind} count`);
    }
    assert.ok(during.mounts >= before.mounts + 2, 'and in the mounts (its disk and its overlay)');

    let next = 0;
    let failures = 0;
    const started = Date.now();
    const worker = async (lane: number) => {
      while (next < CYCLES) {
        next++;
        // Every other session with egress, so the policy's per-session entries churn too.
        const created = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: lane % 2 ? { network: { egress: true } } : {} });
        if (created.statusCode !== 201) {
          failures++;
          continue;
        }
        const { id } = created.json();
        const shot = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/screenshot` });
        if (shot.statusCode !== 200) failures++;
        await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}` });
      }
    };
    await Promise.all(Array.from({ length: PARALLEL }, (_, lane) => worker(lane)));
    t.diagnostic(`${CYCLES} cycles in ${((Date.now() - started) / 1000).toFixed(0)} s`);
    assert.equal(failures, 0, 'every create and screenshot succeeded');

    const afterwards = await census();
    const { fds: fdsBefore, ...restBefore } = before;
    const { fds: fdsAfter, ...restAfter } = afterwards;
    assert.deepEqual(restAfter, restBefore);
    // A few descriptors come and go with timers and logs; a leak per session would be hundreds.
    assert.ok(fdsAfter <= fdsBefore + 8, `open descriptors: ${fdsBefore} before, ${fdsAfter} after`);
  });
});

/** Processes whose parent is this test process (read from /proc, no ps needed). */
async function childProcessCount(): Promise<number> {
  let count = 0;
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    // The command name (field 2) may hold spaces: the parent pid is the 2nd field after ')'.
    if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === process.pid) count++;
  }
  return count;
}

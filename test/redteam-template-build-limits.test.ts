import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { after, before, describe, it } from 'node:test';
import { buildIdBase } from '../src/runtimes/container/id-leases.js';
import { DEFAULT_ID_LEASE_DIR, ID_RANGE_SIZE } from '../src/runtimes/container/settings.js';
import { networkSettingsFromEnv } from '../src/network/settings.js';
import { BUILD_ID_RANGES, BUILD_RUNC_ROOT } from '../src/templates/build-container.js';
import { BUILD_FENCE_TABLE, fenceHostFromBuilds } from '../src/templates/build-fence.js';
import { run } from '../src/util/exec.js';
import { TEST_PREFIX } from './helpers/orchestrator.js';
import { leftovers, sbx, writeTemplate, type SbxResult } from './helpers/template-cli.js';

/**
 * Red team: a template step that never ends. Before, a step running `sleep 100000` (or a loop
 * of background sleepers that ignore SIGTERM) held its build, its id range, its container,
 * its idmapped mount and its copy of the base image for good: nothing timed a step out. Now a
 * step past --step-timeout-seconds, or a build past --build-timeout-seconds, has what runs
 * killed (the step's whole container: every process of its pid namespace) and the build
 * fails naming the step and the limit, and releases all it took. Each test measures from
 * the step's start (or the build's, for the build's limit) to the CLI's exit.
 */
const NAME = `test-endless-${TEST_PREFIX.replace(/[^a-z0-9]/g, '')}`;
const BUILD_UIDS = { first: buildIdBase(), last: buildIdBase() + BUILD_ID_RANGES * ID_RANGE_SIZE - 1 };

/** Processes running as a build uid whose command line is `argv` (the step's own, by its unique words). */
async function buildProcesses(argv: string): Promise<number[]> {
  const found: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const [cmdline, status] = await Promise.all([readFile(`/proc/${entry}/cmdline`, 'utf8'), readFile(`/proc/${entry}/status`, 'utf8')]).catch(() => ['', '']);
    const uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]);
    if (uid >= BUILD_UIDS.first && uid <= BUILD_UIDS.last && cmdline.split('\0').join(' ').trim() === argv) found.push(Number(entry));
  }
  return found;
}

/** What a build process (by its pid) may leave outside the templates dir: containers, cgroups, its id lease, processes naming its directory. */
async function hostLeftovers(cliPid: number): Promise<string[]> {
  const mine = `build-${cliPid}-`;
  const found = (await readdir(BUILD_RUNC_ROOT).catch(() => [] as string[])).filter((n) => n.startsWith(mine)).map((n) => `runc ${n}`);
  // cgroup v1 (a directory per controller) or v2.
  const roots = ['/sys/fs/cgroup', ...(await readdir('/sys/fs/cgroup')).map((c) => path.join('/sys/fs/cgroup', c))];
  for (const root of roots) {
    const dir = path.join(root, 'sbx-template-build');
    for (const name of await readdir(dir).catch(() => [] as string[])) if (name.startsWith(mine)) found.push(`cgroup ${dir}/${name}`);
  }
  for (const lease of await readdir(DEFAULT_ID_LEASE_DIR).catch(() => [] as string[])) {
    const text = await readFile(path.join(DEFAULT_ID_LEASE_DIR, lease), 'utf8').catch(() => '');
    if (text.includes(`"/proc/${cliPid}"`)) found.push(`id lease ${lease}`);
  }
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (new RegExp(`/\\.build-[0-9a-f]+-${cliPid}\\b`).test(cmdline)) found.push(`process ${entry}: ${cmdline.split('\0').join(' ')}`);
  }
  return found;
}

interface TimedBuild {
  result: SbxResult;
  /** From the `run[0]` line to the CLI's exit, s. */
  fromStep: number;
  /** From the build's start (its first line, once the CLI has started) to the CLI's exit, s. */
  fromBuild: number;
  /** The most processes `argv` had at once while the build ran (sampled every 200 ms). */
  mostSeen: number;
  pid: number;
}

/** `sbx template build` of `file`, watching the step's processes. */
async function timedBuild(args: string[], file: string, argv: string, env: Record<string, string> = {}): Promise<TimedBuild> {
  const started = performance.now();
  let stepAt: number | undefined;
  let buildAt: number | undefined;
  let pid = 0;
  let mostSeen = 0;
  let done = false;
  const sampler = (async () => {
    while (!done) {
      mostSeen = Math.max(mostSeen, (await buildProcesses(argv)).length);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  })();
  const result = await sbx(
    ['template', 'build', ...args, file],
    (stderr, child) => {
      pid = child.pid ?? 0;
      if (buildAt === undefined && stderr.includes('building template')) buildAt = performance.now();
      if (stepAt === undefined && stderr.includes('run[0]:')) stepAt = performance.now();
    },
    env,
  );
  const ended = performance.now();
  done = true;
  await sampler;
  return { result, fromStep: (ended - (stepAt ?? ended)) / 1000, fromBuild: (ended - (buildAt ?? started)) / 1000, mostSeen, pid };
}

describe('red team: a build step that never ends is killed at its time limit; the build fails and leaves nothing', () => {
  let workDir: string;
  const figures: string[] = [];

  before(async () => {
    workDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-endless-'));
  });
  after(async () => {
    await rm(workDir, { recursive: true, force: true });
    await sbx(['template', 'rm', NAME]);
    // The fence as a build with this environment leaves it (a test below built with another subnet); never deleted.
    await fenceHostFromBuilds(BUILD_UIDS, [networkSettingsFromEnv(process.env).subnet]);
    console.log(`# endless builds: ${figures.join('; ')}`);
  });

  it('`sleep 100000` with --step-timeout-seconds 2: fails within seconds naming the step and the limit; no process, container, cgroup, lease, mount or directory left', async () => {
    const file = await writeTemplate(workDir, 'sleep.yaml', `name: ${NAME}\nbase: minimal\nrun:\n  - sleep 100000\n`);
    // The entry point's SBX_SUBNET reaches the build's fence (build-fence.ts): a public block here.
    const build = await timedBuild(['--step-timeout-seconds', '2'], file, 'sleep 100000', { SBX_SUBNET: '198.51.100.0/24' });
    const { stderr } = build.result;
    figures.push(
      `sleep 100000, step limit 2 s: ${build.fromStep.toFixed(1)} s from the step's start to the CLI's exit (${build.fromBuild.toFixed(1)} s from the build's start)`,
    );
    assert.notEqual(build.result.code, 0);
    assert.match(
      stderr,
      /step "run 1 command\(s\)" failed: run\[0\]: sleep 100000 was still running at the step time limit of 2 s \(--step-timeout-seconds, SBX_TEMPLATE_BUILD_STEP_TIMEOUT_SECONDS\): it was killed with every process it started, and the build removed\. A step that needs longer: raise the limit; one that waits for input or never ends \(a server, sleep infinity\): change it so that it exits/,
      stderr.slice(-2000),
    );
    assert.ok(build.mostSeen >= 1, 'the control: the step was running as a build uid');
    // The kill, the container's delete, the view's unmount and the tree's removal (a copy of minimal's rootfs).
    assert.ok(build.fromStep < 15, `${build.fromStep} s`);
    assert.deepEqual(await buildProcesses('sleep 100000'), []);
    assert.deepEqual(await hostLeftovers(build.pid), []);
    assert.deepEqual(await leftovers(NAME), []);
    const fence = await run(['nft', 'list', 'set', 'inet', BUILD_FENCE_TABLE, 'sandboxes4']);
    assert.match(fence.stdout, /198\.51\.100\.0\/24/, 'SBX_SUBNET is in the fence');
  });

  it('a loop of background sleepers (setsid, SIGTERM ignored) and a shell waiting on them: every one killed at the limit', async () => {
    const sleeper = `sleep 100${Math.floor(100 + Math.random() * 900)}`;
    const step = `for i in $(seq 20); do setsid ${sleeper} & done; (trap "" TERM HUP INT; while :; do ${sleeper}; done) & wait`;
    const file = await writeTemplate(workDir, 'forks.yaml', `name: ${NAME}\nbase: minimal\nrun:\n  - ${JSON.stringify(step)}\n`);
    const build = await timedBuild(['--step-timeout-seconds', '3'], file, sleeper);
    figures.push(`21 background sleepers, step limit 3 s: ${build.fromStep.toFixed(1)} s from the step's start to the exit (most seen ${build.mostSeen})`);
    assert.match(
      build.result.stderr,
      /step "run 1 command\(s\)" failed: run\[0\]: .* was still running at the step time limit of 3 s/,
      build.result.stderr.slice(-2000),
    );
    assert.ok(build.mostSeen >= 20, `the control: the sleepers ran (${build.mostSeen} seen at once)`);
    assert.ok(build.fromStep < 16, `${build.fromStep} s`);
    assert.deepEqual(await buildProcesses(sleeper), []);
    assert.deepEqual(await hostLeftovers(build.pid), []);
    assert.deepEqual(await leftovers(NAME), []);
  });

  it("--build-timeout-seconds 3: the build's own limit stops it wherever it is (a host command: the base's copy) and names it", async () => {
    const file = await writeTemplate(workDir, 'build.yaml', `name: ${NAME}\nbase: minimal\nrun:\n  - sleep 100000\n`);
    const build = await timedBuild(['--build-timeout-seconds', '3'], file, 'sleep 100000');
    const { stderr } = build.result;
    const step = /step "([^"]+)" failed: the build was still running at its time limit of 3 s/.exec(stderr)?.[1];
    figures.push(`build limit 3 s: failed in "${step}", ${build.fromBuild.toFixed(1)} s from the build's start to the CLI's exit`);
    assert.ok(step, stderr.slice(-2000));
    assert.match(stderr, /\(--build-timeout-seconds, SBX_TEMPLATE_BUILD_TIMEOUT_SECONDS\): what ran was killed and the build removed/);
    assert.ok(build.fromBuild < 15, `${build.fromBuild} s`);
    assert.deepEqual(await buildProcesses('sleep 100000'), []);
    assert.deepEqual(await hostLeftovers(build.pid), []);
    assert.deepEqual(await leftovers(NAME), []);
    assert.equal(existsSync(path.join(BUILD_RUNC_ROOT, `build-${build.pid}-1`)), false);
  });
});

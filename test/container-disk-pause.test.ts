import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir, readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { mountsUnder, unmountAll } from '../src/host/mounts.js';
import { ResourceNames } from '../src/network/names.js';
import { criuUnavailable } from '../src/runtimes/container/criu-check.js';
import { removeRootfs } from '../src/runtimes/container/rootfs.js';
import { containerSettingsFromEnv } from '../src/runtimes/container/settings.js';
import { run } from '../src/util/exec.js';
import { COUNTER_BOX, counterOf, startCounter, startServeRig, type ServeRig } from './helpers/counting-desktop.js';
import { differingOutside, serveApi, type Json, type RawImage } from './helpers/serve-api.js';
import { TEST_PREFIX } from './helpers/orchestrator.js';

/**
 * Pause to disk of a real container desktop with CRIU (src/runtimes/container/checkpoint.ts),
 * across a SIGKILL of the orchestrator: an xterm counts on the screen and into a file; the
 * pause dumps the container's processes and ends them (runc has no container, nothing of it
 * runs, the counter stands still); the orchestrator is killed and started again and adopts
 * the session paused to disk; the resume restores the same process, which counts on from where
 * it stopped, the screen as it was (but for the counter's window), and the next action works.
 * Then a session with a volume, a process appending to a file on it, is paused to disk and a
 * host reboot played (its mounts, netns, policy table and id lease taken): it resumes where it was.
 * Needs a criu that runs on this kernel (scripts/setup-criu.sh unpacks one).
 */
const NAMES = new ResourceNames(TEST_PREFIX);
const SETTINGS = containerSettingsFromEnv(process.env);
const CRIU = SETTINGS.criuBin;

let rig: ServeRig;

const { api, bash, screenshot } = serveApi(
  () => rig.port,
  () => rig.keys.alpha,
);
const counter = (id: string) => counterOf(NAMES, id);

/** The session's containers as runc lists them. */
async function containers(): Promise<string[]> {
  const res = await run(['runc', '--root', NAMES.runcRoot, 'list', '-q'], { allowFailure: true });
  return res.stdout.split('\n').filter(Boolean);
}

/** Takes inotify instances until refused, tries again every ms, and writes how many it holds whenever it is refused. */
const GRABBER = `import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
held = written = 0
while True:
    if libc.inotify_init() >= 0:
        held += 1
        continue
    if held != written:
        open('/tmp/held.new', 'w').write(str(held))
        __import__('os').rename('/tmp/held.new', '/tmp/held')
        written = held
    time.sleep(0.001)
`;

/**
 * Spawns /bin/true in a loop with posix_spawn (a vfork), its child opening a FIFO first: a
 * writer (a forked child) opens it `argv[1]` seconds later, or never with `forever`. Counts
 * the spawns into /tmp/spawned.
 */
const VFORK_SPAWNER = `import os, sys, time
fifo = '/tmp/vf'
if not os.path.exists(fifo):
    os.mkfifo(fifo)
n = 0
while True:
    if sys.argv[1] != 'forever' and os.fork() == 0:
        time.sleep(float(sys.argv[1]))
        os.close(os.open(fifo, os.O_WRONLY))
        os._exit(0)
    pid = os.posix_spawn('/bin/true', ['true'], os.environ, file_actions=[(os.POSIX_SPAWN_OPEN, 3, fifo, os.O_RDONLY, 0)])
    os.waitpid(pid, 0)
    if sys.argv[1] != 'forever':
        os.wait()
    n += 1
    open('/tmp/spawned.new', 'w').write(str(n))
    os.rename('/tmp/spawned.new', '/tmp/spawned')
    time.sleep(0.15)
`;

const unavailable = await criuUnavailable(CRIU);

describe(
  'pause to disk of a container desktop (CRIU), across an orchestrator SIGKILL and a host reboot',
  { skip: unavailable && `no criu here: ${unavailable}` },
  () => {
    let id: string;
    let first: { pid: number; count: number };
    let atPause: { pid: number; count: number };
    let shotBefore: RawImage;

    before(async () => {
      rig = await startServeRig(NAMES, 'sbx-cdp-');
    });
    after(async () => {
      await rig.stop();
    });

    it('pauses a counting desktop to disk: its processes gone, the count stands still, the state on disk', async () => {
      const created = await api('POST', '/v1/sessions', { width: 1024, height: 768 });
      assert.equal(created.status, 201, JSON.stringify(created.json));
      id = String(created.json.id);
      await startCounter(bash, NAMES, id);
      first = await counter(id);
      assert.ok(first.count > 0);
      shotBefore = await screenshot(id);

      const started = performance.now();
      const paused = await api('POST', `/v1/sessions/${id}/pause`, { mode: 'disk' });
      const pauseMs = performance.now() - started;
      assert.equal(paused.status, 200, JSON.stringify(paused.json));
      assert.equal(paused.json.state, 'paused');
      const state = paused.json.paused as Json;
      assert.equal(state.mode, 'disk');
      atPause = await counter(id);
      await sleep(1_000);
      assert.deepEqual(await counter(id), atPause, 'the counter stands still: its process is gone');
      assert.deepEqual(await containers(), [], 'runc has no container of it');
      const images = await readdir(path.join(rig.stateDir, id, 'checkpoint'));
      assert.ok(images.includes('inventory.img') && images.includes('marker.json'), `a whole checkpoint: ${images.join(' ')}`);
      console.log(`pause to disk took ${pauseMs.toFixed(0)} ms (HTTP round trip); ${(Number(state.bytes) / 1e6).toFixed(1)} MB on disk`);
      assert.ok(Number(state.bytes) > 1e6, `the desktop's memory is in it (${String(state.bytes)} bytes)`);
    });

    it('survives a SIGKILL of the orchestrator: adopted paused to disk', async () => {
      await rig.crashAndRestart();
      const got = await api('GET', `/v1/sessions/${id}`);
      assert.equal(got.status, 200);
      assert.equal(got.json.state, 'paused');
      assert.equal((got.json.paused as Json).mode, 'disk');
      assert.deepEqual(await containers(), []);
    });

    it('resumes: the same process counts on from where it stopped, the screen is as it was, the next action works', async () => {
      const started = performance.now();
      const resumed = await api('POST', `/v1/sessions/${id}/resume`);
      const resumeMs = performance.now() - started;
      assert.equal(resumed.status, 200, JSON.stringify(resumed.json));
      assert.equal(resumed.json.state, 'ready');
      const shotAfter = await screenshot(id);
      await sleep(500);
      const after = await counter(id);
      console.log(
        `resume from disk took ${resumeMs.toFixed(0)} ms (HTTP round trip); counter ${first.count} before, ${atPause.count} at pause, ${after.count} 0.5 s after`,
      );
      assert.equal(after.pid, atPause.pid, 'the same process (its pid restored)');
      assert.ok(after.count > atPause.count, 'it counts again');
      assert.ok(after.count - atPause.count < 60, 'from where it stopped');
      assert.equal(differingOutside(shotBefore, shotAfter, COUNTER_BOX), 0, 'the screen outside the counter is pixel-identical to the one before the pause');
      const click = await api('POST', `/v1/sessions/${id}/actions`, { action: 'left_click', coordinate: [600, 600] });
      assert.equal(click.status, 200);
      assert.match(await bash(id, 'echo next-action-works; ip -o -4 addr show dev eth0'), /next-action-works[\s\S]*inet /);
      assert.equal(existsSync(path.join(rig.stateDir, id, 'checkpoint')), false, 'the checkpoint is gone once restored');
    });

    it('paused and resumed again (the restored container checkpointed in turn), then a destroy while paused to disk leaves nothing', async () => {
      for (let round = 0; round < 2; round++) {
        const before = await counter(id);
        assert.equal((await api('POST', `/v1/sessions/${id}/pause`, { mode: 'disk' })).status, 200);
        if (round === 1) break;
        const resumed = await api('POST', `/v1/sessions/${id}/resume`);
        assert.equal(resumed.status, 200, JSON.stringify(resumed.json));
        await sleep(500);
        const again = await counter(id);
        assert.equal(again.pid, before.pid, 'still the same process');
        assert.ok(again.count > before.count, 'counting after a second resume');
        assert.match(await bash(id, 'echo alive'), /alive/);
      }
      const deleted = await api('DELETE', `/v1/sessions/${id}`);
      assert.equal(deleted.status, 200);
      assert.equal(existsSync(path.join(rig.stateDir, id)), false, 'its session dir is gone');
      assert.deepEqual(await containers(), []);
      assert.deepEqual(await mountsUnder(NAMES.rootfsRoot), [], 'no rootfs or restore bind left');
      const netns = await run(['ip', 'netns', 'list']);
      assert.doesNotMatch(netns.stdout, new RegExp(NAMES.netns(id)), 'its netns is gone');
    });
    it('pauses a session with a volume to disk, survives a host reboot (its mounts, netns and id lease gone), and resumes where it was', async () => {
      assert.equal((await api('POST', '/v1/volumes', { name: 'notes', sizeMiB: 64 })).status, 201);
      const created = await api('POST', '/v1/sessions', { width: 1024, height: 768, volumes: [{ name: 'notes', path: '/data' }] });
      assert.equal(created.status, 201, JSON.stringify(created.json));
      const vid = String(created.json.id);
      await startCounter(bash, NAMES, vid);
      // A process holding a file on the volume open, appending its line numbers.
      const writer = 'exec 3>>/data/log; i=0; while :; do i=$((i+1)); echo $i >&3; sleep 0.05; done';
      await bash(vid, `setsid nohup sh -c '${writer}' >/dev/null 2>&1 < /dev/null &`);
      await sleep(500);
      const shot = await screenshot(vid);
      const paused = await api('POST', `/v1/sessions/${vid}/pause`, { mode: 'disk' });
      assert.equal(paused.status, 200, `a session with a volume pauses to disk: ${JSON.stringify(paused.json)}`);
      assert.equal((paused.json.paused as Json).mode, 'disk');
      const atPause = await counter(vid);
      const sessionDir = path.join(rig.stateDir, vid);
      const { ids } = JSON.parse(await readFile(path.join(sessionDir, 'bundle', 'mounts.json'), 'utf8')) as { ids: { first: number } };

      await rig.crashAndRestart(async () => {
        // What a reboot takes and the disk keeps: every mount (the loop devices with them), the
        // netns, the policy table, what is under /run. The session dir stays.
        await unmountAll(await mountsUnder(NAMES.containerRootfs(vid)));
        await removeRootfs(NAMES.containerRootfs(vid));
        await unmountAll(await mountsUnder(sessionDir));
        await run(['ip', 'netns', 'delete', NAMES.netns(vid)]);
        await run(['nft', 'delete', 'table', 'inet', NAMES.policyTable]);
        await rm(path.join(SETTINGS.idLeaseDir, String(ids.first)));
        assert.deepEqual(await mountsUnder(sessionDir), []);
        assert.equal((await run(['losetup', '-j', path.join(sessionDir, 'layer.ext4')])).stdout.trim(), '', 'no loop device on its disk');
      });
      const got = await api('GET', `/v1/sessions/${vid}`);
      assert.equal(got.json.state, 'paused');
      assert.ok(existsSync(`/run/netns/${NAMES.netns(vid)}`), 'its netns made again');

      const resumed = await api('POST', `/v1/sessions/${vid}/resume`);
      assert.equal(resumed.status, 200, JSON.stringify(resumed.json));
      assert.ok(existsSync(path.join(SETTINGS.idLeaseDir, String(ids.first))), 'its id range leased host-wide again');
      await sleep(500);
      const now = await counter(vid);
      assert.equal(now.pid, atPause.pid, 'the same process, after the reboot');
      assert.ok(now.count > atPause.count && now.count - atPause.count < 60, `counting on from where it stopped (${atPause.count} -> ${now.count})`);
      assert.equal(differingOutside(shot, await screenshot(vid), COUNTER_BOX), 0, 'the screen outside the counter is as it was');
      // Every line the writer appended, in order, none lost or doubled, before and after the pause.
      const log = await bash(vid, 'wc -l < /data/log; awk "NR != \\$1" /data/log | wc -l; touch /data/after && echo wrote');
      const [lines, misplaced] = log
        .trim()
        .split('\n')
        .map((l) => l.trim());
      assert.ok(Number(lines) > 10, `the writer's log grows on the volume (${lines} lines)`);
      assert.equal(misplaced, '0', `no line of the log is out of place: ${log}`);
      assert.match(log, /wrote/, 'the volume is writable');

      assert.equal((await api('DELETE', `/v1/sessions/${vid}`)).status, 200);
      assert.deepEqual(await containers(), []);
      assert.deepEqual(await mountsUnder(NAMES.rootfsRoot), []);
      assert.equal(existsSync(sessionDir), false);
      assert.equal(existsSync(path.join(SETTINGS.idLeaseDir, String(ids.first))), false, 'its id lease is given back');
    });

    it('red team: no restored process runs before its namespace has its limits again; a process stopped at the pause stays stopped', async () => {
      const created = await api('POST', '/v1/sessions', {});
      assert.equal(created.status, 201, JSON.stringify(created.json));
      const rid = String(created.json.id);
      // A guest program that takes every inotify instance its user may hold and keeps trying:
      // before the limits are back, a restored user namespace has none (every sandbox's counts
      // roll up into host root's, which all of them share).
      await bash(
        rid,
        `cat > /tmp/grab.py <<'EOF'\n${GRABBER}EOF\nsetsid nohup python3 /tmp/grab.py >/dev/null 2>&1 < /dev/null &\nsleep 1000 & kill -STOP $! && echo $! > /tmp/stopped`,
      );
      const held = async () => Number((await bash(rid, 'cat /tmp/held')).trim());
      let before = 0;
      for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(200)) {
        const now = await held().catch(() => 0);
        if (now > 0 && now === before) break;
        before = now;
      }
      assert.ok(before > 0, 'the grabber holds what its user may');
      const paused = await api('POST', `/v1/sessions/${rid}/pause`, { mode: 'disk' });
      assert.equal(paused.status, 200, JSON.stringify(paused.json));
      const started = performance.now();
      assert.equal((await api('POST', `/v1/sessions/${rid}/resume`)).status, 200);
      const resumeMs = performance.now() - started;
      await sleep(1_000);
      const after = await held();
      console.log(`red team: the grabber held ${before} inotify instances before the pause, ${after} after the resume (${resumeMs.toFixed(0)} ms)`);
      // criu remakes the instances it restores as the guest's root, so the user's own count starts
      // again at 0: it may take its limit once more, never more than that.
      assert.ok(after - before <= SETTINGS.inotifyInstances, `at most its own limit more at the resume (${after - before})`);
      assert.match(await bash(rid, 'ps -o stat= -p $(cat /tmp/stopped)'), /^T/, 'the job stopped before the pause is still stopped');
      assert.equal((await api('DELETE', `/v1/sessions/${rid}`)).status, 200);
    });

    it('a process waiting for a child it vforked does not hold a pause: the dump picks a moment without one, and one that waits for ever fails at once, the desktop running on', async () => {
      const created = await api('POST', '/v1/sessions', {});
      assert.equal(created.status, 201, JSON.stringify(created.json));
      const sid = String(created.json.id);
      // posix_spawn vforks: its child opens the FIFO (file actions run before the exec), which
      // blocks until a writer comes, 300 ms later; the parent waits in vfork two thirds of the time.
      await bash(
        sid,
        `cat > /tmp/spawner.py <<'EOF'\n${VFORK_SPAWNER}EOF\nsetsid nohup python3 /tmp/spawner.py 0.3 >/dev/null 2>&1 < /dev/null & echo $! > /tmp/spawner.pid`,
      );
      const spawned = async () => Number((await bash(sid, 'cat /tmp/spawned 2>/dev/null || echo 0')).trim());
      const pid = (await bash(sid, 'cat /tmp/spawner.pid')).trim();
      for (const deadline = Date.now() + 10_000; (await spawned()) < 2 && Date.now() < deadline;) await sleep(200);
      for (let round = 0; round < 3; round++) {
        const paused = await api('POST', `/v1/sessions/${sid}/pause`, { mode: 'disk' });
        assert.equal(paused.status, 200, `round ${round}: ${JSON.stringify(paused.json)}`);
        assert.equal((await api('POST', `/v1/sessions/${sid}/resume`)).status, 200);
      }
      const count = await spawned();
      await sleep(1_500);
      assert.ok((await spawned()) > count, 'the spawner spawns on after the resumes');
      assert.equal((await bash(sid, 'cat /tmp/spawner.pid')).trim(), pid);
      assert.match(await bash(sid, `ps -o comm= -p ${pid}`), /python3/, 'the same spawner process');

      // One whose child never gets a writer: the pause gives up within about a second and
      // says why; the desktop is neither frozen nor ended.
      await bash(sid, `kill -KILL -- -${pid}; rm -f /tmp/vf; setsid nohup python3 /tmp/spawner.py forever >/dev/null 2>&1 < /dev/null &`);
      await sleep(1_000);
      const started = performance.now();
      const refused = await api('POST', `/v1/sessions/${sid}/pause`, { mode: 'disk' });
      const refusedMs = performance.now() - started;
      console.log(`red team: a pause with a vfork parent waiting for ever answered ${refused.status} in ${refusedMs.toFixed(0)} ms`);
      assert.equal(refused.status, 503, JSON.stringify(refused.json));
      assert.match(String((refused.json.error as Json).message), /vforked/);
      assert.ok(refusedMs < 5_000, `given up within a few seconds (criu's own timeout is 10 s): ${refusedMs.toFixed(0)} ms`);
      assert.equal((await api('GET', `/v1/sessions/${sid}`)).json.state, 'ready', 'not paused');
      assert.match(await bash(sid, 'echo still-running'), /still-running/, 'the desktop runs on, thawed');
      // A writer comes and stays: its children go on to their exec, and the next pause goes through.
      await bash(sid, 'setsid nohup sleep 1000 3>/tmp/vf >/dev/null 2>&1 < /dev/null & sleep 0.5');
      const next = await api('POST', `/v1/sessions/${sid}/pause`, { mode: 'disk' });
      assert.equal(next.status, 200, JSON.stringify(next.json));
      assert.equal((await api('DELETE', `/v1/sessions/${sid}`)).status, 200);
    });

    it('a kill -9 of the orchestrator mid-pause and mid-resume leaves the old state or the new one, and the desktop goes on', async () => {
      const created = await api('POST', '/v1/sessions', { width: 1024, height: 768 });
      assert.equal(created.status, 201, JSON.stringify(created.json));
      const fid = String(created.json.id);
      await startCounter(bash, NAMES, fid);
      const before = await counter(fid);
      const sessionDir = path.join(rig.stateDir, fid);
      const killWhen = async (dir: string, request: Promise<unknown>): Promise<string> => {
        const deadline = Date.now() + 20_000;
        while (!existsSync(path.join(sessionDir, dir)) && Date.now() < deadline) await sleep(5);
        await rig.crashAndRestart();
        await request;
        const got = await api('GET', `/v1/sessions/${fid}`);
        assert.equal(got.status, 200, JSON.stringify(got.json));
        return String(got.json.state);
      };
      const resumeIfPaused = async (state: string) => {
        if (state === 'paused') assert.equal((await api('POST', `/v1/sessions/${fid}/resume`)).status, 200);
        await sleep(300);
        const now = await counter(fid);
        assert.equal(now.pid, before.pid, 'the same process');
        await sleep(300);
        assert.ok((await counter(fid)).count > now.count, 'counting');
      };
      // criu dumping (its log begun): the runc the orchestrator started finishes without it.
      const afterPause = await killWhen(
        'checkpoint.partial/dump.log',
        api('POST', `/v1/sessions/${fid}/pause`, { mode: 'disk' }).catch(() => undefined),
      );
      assert.ok(['paused', 'ready'].includes(afterPause), afterPause);
      await resumeIfPaused(afterPause);
      assert.equal((await api('POST', `/v1/sessions/${fid}/pause`, { mode: 'disk' })).status, 200);
      // criu restoring: the resume had not ended, so the checkpoint is the truth again.
      const afterResume = await killWhen(
        'checkpoint.restoring/restore.log',
        api('POST', `/v1/sessions/${fid}/resume`).catch(() => undefined),
      );
      assert.ok(['paused', 'ready'].includes(afterResume), afterResume);
      await resumeIfPaused(afterResume);
      assert.match(await bash(fid, 'echo alive'), /alive/);
      console.log(`a kill -9 mid-pause left it ${afterPause}, mid-resume ${afterResume}`);
      assert.equal((await api('DELETE', `/v1/sessions/${fid}`)).status, 200);
      assert.deepEqual(await containers(), []);
      assert.equal(existsSync(sessionDir), false);
    });
  },
);

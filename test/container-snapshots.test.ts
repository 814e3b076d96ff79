import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { chown, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { ResourceNames } from '../src/network/names.js';
import { criuUnavailable } from '../src/runtimes/container/criu-check.js';
import { containerSettingsFromEnv } from '../src/runtimes/container/settings.js';
import { run } from '../src/util/exec.js';
import { counterOf, startCounter, startServeRig, type ServeRig } from './helpers/counting-desktop.js';
import { assertOwnIdentities, guestIdentity, sshLogin } from './helpers/guest-identity.js';
import { serveApi, type Json } from './helpers/serve-api.js';
import { TEST_PREFIX } from './helpers/orchestrator.js';

/**
 * Snapshots and forks of a real container desktop (src/runtimes/container/snapshot.ts,
 * fork.ts): an xterm counts and a file is written; the snapshot stops the desktop for a moment
 * and it runs on; three sessions start from the snapshot, each with its own keys, host key,
 * address, hostname, machine id and host id range, the counter's process going on in each from
 * where the snapshot took it; each sees the file written before the snapshot as its guest user's,
 * none sees the source's later writes or another fork's; the source's key opens none of them.
 * Needs a criu that runs on this kernel (scripts/setup-criu.sh unpacks one).
 */
const NAMES = new ResourceNames(TEST_PREFIX);
const CRIU = containerSettingsFromEnv(process.env).criuBin;
const FORKS = 3;

let rig: ServeRig;

const { api, bash } = serveApi(
  () => rig.port,
  () => rig.keys.alpha,
);

/** The host uid its container's root runs as (its init's uid_map), as runc reports the init. */
async function hostRootOf(id: string): Promise<number> {
  const state = JSON.parse((await run(['runc', '--root', NAMES.runcRoot, 'state', NAMES.container(id)])).stdout) as { pid: number };
  const map = await readFile(`/proc/${state.pid}/uid_map`, 'utf8');
  return Number(map.trim().split(/\s+/)[1]);
}

const unavailable = await criuUnavailable(CRIU);

describe('snapshots and forks of a container desktop (CRIU)', { skip: unavailable && `no criu here: ${unavailable}` }, () => {
  let source: string;
  let snapshot: Json;
  let atSnapshot: { pid: number; count: number };
  const forks: string[] = [];

  before(async () => {
    rig = await startServeRig(NAMES, 'sbx-csnap-');
  });
  after(async () => {
    await rig.stop();
  });

  const stateOfStoppedJob = async (id: string) => (await bash(id, 'ps -o stat= -p $(cat /var/tmp/stopped)')).trim();

  it('a snapshot of a counting desktop: it stops for a moment and runs on', async () => {
    const created = await api('POST', '/v1/sessions', { width: 1024, height: 768 });
    assert.equal(created.status, 201, JSON.stringify(created.json));
    source = String(created.json.id);
    await startCounter(bash, NAMES, source);
    await bash(source, 'echo from-before-the-snapshot > /home/user/before.txt');
    // A stopped job (a Ctrl+Z): criu's seize of it in a frozen cgroup hung every snapshot until runc gave up.
    await bash(source, 'sleep 1000 & kill -STOP $! && echo $! > /var/tmp/stopped');
    const started = performance.now();
    const res = await api('POST', `/v1/sessions/${source}/snapshots`, { name: 'counting' });
    const snapshotMs = performance.now() - started;
    atSnapshot = await counterOf(NAMES, source);
    assert.equal(res.status, 201, JSON.stringify(res.json));
    snapshot = res.json;
    assert.equal(snapshot.runtime, 'container');
    assert.ok(Number(snapshot.bytes) > 10e6, `its memory and disk are in it (${String(snapshot.bytes)} bytes)`);
    await bash(source, 'echo source-after > /home/user/after.txt');
    await sleep(300);
    assert.ok((await counterOf(NAMES, source)).count > atSnapshot.count, 'the source counts on');
    assert.match(await stateOfStoppedJob(source), /^T/, "the source's stopped job is stopped still");
    console.log(`snapshot: ${Math.round(snapshotMs)} ms (HTTP round trip), ${(Number(snapshot.bytes) / 2 ** 20).toFixed(1)} MiB`);
  });

  it("three sessions from it: each its own keys, host key, address, name, machine id and id range; the counter goes on in each; each sees the snapshot's files and no one else's", async () => {
    for (let i = 0; i < FORKS; i++) {
      const started = performance.now();
      const res = await api('POST', '/v1/sessions', { snapshot: snapshot.id });
      assert.equal(res.status, 201, JSON.stringify(res.json));
      assert.equal(res.json.snapshot, snapshot.id);
      forks.push(String(res.json.id));
      console.log(`fork ${i + 1}: create to ready ${Math.round(performance.now() - started)} ms; load ${os.loadavg()[0]?.toFixed(2)}`);
    }
    const ids = [source, ...forks];
    const seen = await Promise.all(ids.map((id) => guestIdentity(bash, id)));
    const views = await Promise.all(ids.map(async (id) => (await api('GET', `/v1/sessions/${id}`)).json));
    assert.deepEqual(
      seen.map((s) => s.hostKey),
      views.map((v) => String(v.hostKeyFingerprint)),
      'each presents the host key its view pins',
    );
    assertOwnIdentities(seen, ids);
    const roots = await Promise.all(ids.map(hostRootOf));
    assert.equal(new Set(roots).size, ids.length, `each runs in a host id range of its own: ${roots.join(' ')}`);

    for (const fork of forks) {
      const counted = await counterOf(NAMES, fork);
      assert.equal(counted.pid, atSnapshot.pid, 'the same process as the source had');
      assert.ok(counted.count >= atSnapshot.count, `from where the snapshot took it (${atSnapshot.count} -> ${counted.count})`);
      await sleep(300);
      assert.ok((await counterOf(NAMES, fork)).count > counted.count, 'and counting');
      // The snapshot's file is the guest user's in the fork's range (not an unmapped owner).
      assert.equal((await bash(fork, 'stat -c "%U %s" /home/user/before.txt; cat /home/user/before.txt')).trim(), 'user 25\nfrom-before-the-snapshot');
      assert.equal((await bash(fork, 'test -e /home/user/after.txt && echo yes || echo no')).trim(), 'no', "the source's write after the snapshot");
      await bash(fork, `echo ${fork} > /home/user/mine-${fork}.txt`);
      assert.match(await stateOfStoppedJob(fork), /^T/, 'the stopped job is stopped in the fork too');
    }
    for (const fork of forks) {
      const files = (await bash(fork, 'ls /home/user/*.txt')).trim().split(/\s+/).sort();
      assert.deepEqual(files, ['/home/user/before.txt', `/home/user/mine-${fork}.txt`], `fork ${fork}`);
      const address = (await guestIdentity(bash, fork)).address.split('/')[0] ?? '';
      assert.equal(sshLogin('user', path.join(rig.stateDir, source, 'id_ed25519'), address), 'refused', `the source's key into fork ${fork}`);
      assert.equal(sshLogin('user', path.join(rig.stateDir, fork, 'id_ed25519'), address), 'accepted', 'its own key');
    }
  });

  it('a fork pauses to disk and resumes, and forks in turn', async () => {
    const fork = forks[0] ?? '';
    const before = await counterOf(NAMES, fork);
    assert.equal((await api('POST', `/v1/sessions/${fork}/pause`, { mode: 'disk' })).status, 200);
    const resumed = await api('POST', `/v1/sessions/${fork}/resume`);
    assert.equal(resumed.status, 200, JSON.stringify(resumed.json));
    await sleep(300);
    const after = await counterOf(NAMES, fork);
    assert.equal(after.pid, before.pid);
    assert.ok(after.count > before.count, 'it counts on after its resume');
    const again = await api('POST', `/v1/sessions/${fork}/snapshots`, { name: 'of-a-fork' });
    assert.equal(again.status, 201, JSON.stringify(again.json));
    const grandchild = await api('POST', '/v1/sessions', { snapshot: again.json.id });
    assert.equal(grandchild.status, 201, JSON.stringify(grandchild.json));
    const gid = String(grandchild.json.id);
    assert.equal((await bash(gid, 'hostname')).trim(), `sbx-${gid}`);
    assert.equal((await bash(gid, `cat /home/user/mine-${fork}.txt`)).trim(), fork, "its parent's file");
    assert.notEqual(await hostRootOf(gid), await hostRootOf(fork), 'a host id range of its own');
    await sleep(300);
    assert.ok((await counterOf(NAMES, gid)).count > after.count, 'the counter goes on in it too');
    assert.equal((await api('DELETE', `/v1/sessions/${gid}`)).status, 200);
    assert.equal((await api('DELETE', `/v1/snapshots/${String(again.json.id)}`)).status, 200);
  });

  it('a kill -9 of the orchestrator while a snapshot is taken leaves none or a whole one, and every session running', async () => {
    const before = (await api('GET', '/v1/snapshots')).json.snapshots as Json[];
    const pending = api('POST', `/v1/sessions/${source}/snapshots`, { name: 'cut-short' }).catch(() => undefined);
    await sleep(120); // the cgroup frozen, criu dumping
    await rig.crashAndRestart();
    await pending;
    const listed = (await api('GET', '/v1/snapshots')).json.snapshots as Json[];
    const dirs = await readdir(path.join(rig.stateDir, 'snapshots'));
    assert.deepEqual(dirs.sort(), listed.map((s) => String(s.id)).sort(), 'no snapshot dir but those of whole snapshots');
    assert.ok(listed.length - before.length <= 1);
    for (const id of [source, ...forks]) {
      assert.equal((await api('GET', `/v1/sessions/${id}`)).json.state, 'ready', `session ${id} adopted ready`);
      const counted = await counterOf(NAMES, id);
      await sleep(200);
      assert.ok((await counterOf(NAMES, id)).count > counted.count, `session ${id} runs (not left frozen)`);
    }
    console.log(`the kill -9 left ${listed.length === before.length ? 'no snapshot' : 'a whole snapshot'}`);
  });

  it("red team: links guest root plants do not lead a fork's host-side work out of its own disk", async () => {
    // A host file the guest names by its host path: a fork's owner shift and machine id must never reach it.
    const canary = path.join(rig.stateDir, 'canary');
    await writeFile(canary, 'host data\n', { mode: 0o600 });
    await chown(canary, 12345, 12345);
    const asGuestRoot = (script: string) => run(['runc', '--root', NAMES.runcRoot, 'exec', NAMES.container(source), 'sh', '-c', script]);
    await asGuestRoot(
      `ln -s ${canary} /home/user/to-host; ln -s / /home/user/host-root; chown -h 1000:1000 /home/user/to-host /home/user/host-root; ` +
        `rm -f /etc/machine-id; ln -s ${canary} /etc/machine-id`,
    );
    const linked = await api('POST', `/v1/sessions/${source}/snapshots`, { name: 'links' });
    assert.equal(linked.status, 201, JSON.stringify(linked.json));
    let started = performance.now();
    const fork = await api('POST', '/v1/sessions', { snapshot: linked.json.id });
    assert.equal(fork.status, 201, JSON.stringify(fork.json));
    console.log(`a fork of a disk full of links: ${Math.round(performance.now() - started)} ms`);
    const forkId = String(fork.json.id);
    const { uid, gid, mode } = await stat(canary);
    assert.deepEqual([uid, gid, mode & 0o7777, await readFile(canary, 'utf8')], [12345, 12345, 0o600, 'host data\n'], 'the host file is as it was');
    assert.match(
      (await bash(forkId, 'stat -c %F /etc/machine-id; cat /etc/machine-id')).trim(),
      /^regular file\n[0-9a-f]{32}$/,
      'a machine id of its own in place of the link',
    );
    assert.equal((await bash(forkId, 'stat -c %U /home/user/to-host')).trim(), 'user', "the link itself moved into the fork's range");
    assert.equal((await api('DELETE', `/v1/sessions/${forkId}`)).status, 200);

    // /etc itself a link out of the disk: the fork is refused before anything is written through it.
    await asGuestRoot('mv /etc /etc.moved && /etc.moved/../bin/ln -s /tmp /etc');
    const out = await api('POST', `/v1/sessions/${source}/snapshots`, { name: 'etc-link' });
    assert.equal(out.status, 201, JSON.stringify(out.json));
    started = performance.now();
    const refused = await api('POST', '/v1/sessions', { snapshot: out.json.id });
    assert.ok(refused.status >= 400, JSON.stringify(refused.json));
    assert.match(JSON.stringify(refused.json), /etc directory is a link/);
    console.log(`a fork refused for its /etc link: ${Math.round(performance.now() - started)} ms, status ${refused.status}`);
    const written = (await readdir('/tmp')).filter((n) => n === 'machine-id' || n.startsWith('.machine-id.sbx-'));
    assert.deepEqual(written, [], "nothing written into the host's /tmp");
    await asGuestRoot('rm /etc && /etc.moved/../bin/mv /etc.moved /etc');
  });

  it('a delete of the snapshot frees its files; the forks go on', async () => {
    const dir = path.join(rig.stateDir, 'snapshots', String(snapshot.id));
    assert.ok(existsSync(path.join(dir, 'layer.ext4')));
    assert.equal((await api('DELETE', `/v1/snapshots/${String(snapshot.id)}`)).status, 200);
    assert.equal(existsSync(dir), false);
    for (const fork of forks) assert.equal((await bash(fork, `cat /home/user/mine-${fork}.txt`)).trim(), fork);
    for (const id of [source, ...forks]) assert.equal((await api('DELETE', `/v1/sessions/${id}`)).status, 200);
    const left = await run(['runc', '--root', NAMES.runcRoot, 'list', '-q'], { allowFailure: true });
    assert.equal(left.stdout.trim(), '', 'no container left');
  });
});

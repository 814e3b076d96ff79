import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, statfsSync, statSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { openKeyStore } from '../src/api/auth/key-store-file.js';
import { ResourceNames } from '../src/network/names.js';
import { mountVolumes } from '../src/runtimes/container/volume-mounts.js';
import { CleanupStack } from '../src/util/cleanup-stack.js';
import { run } from '../src/util/exec.js';
import { guestWrittenMark, makeVolumeFile, markGuestWritten } from '../src/volumes/volume-files.js';
import { removeEmptyPrefixCgroups, TEST_PREFIX } from './helpers/orchestrator.js';
import { runCliWith, freePort, startServeOn } from './helpers/serve.js';

/**
 * Volumes on real container sandboxes (docs/volumes.md), through `sbx serve` and its HTTP API:
 * a volume written in one session is read in the next; a second writer is refused, readers
 * share; a guest that fills its volume gets ENOSPC while the host gives it no more than its
 * size; another tenant neither sees nor mounts it; an orchestrator SIGKILL and restart keeps
 * an adopted session's volume held; no loop device or mount is left after the sessions end
 * or after the volume is deleted.
 */
const NAMES = new ResourceNames(TEST_PREFIX);
const SIZE_MIB = 64;
const MOUNT = '/home/user/data';

let stateDir: string;
let port: number;
let child: ChildProcess | undefined;
let keyA: string;
let keyB: string;

type Json = Record<string, unknown>;

async function api(method: string, url: string, body?: unknown, key = keyA): Promise<{ status: number; json: Json }> {
  const headers: Record<string, string> = { authorization: `Bearer ${key}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`http://127.0.0.1:${port}${url}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, json: (await res.json()) as Json };
}

function errorOf(res: { json: Json }): { code: string; message: string } {
  return res.json.error as { code: string; message: string };
}

async function bash(id: string, command: string, key = keyA): Promise<string> {
  const res = await api('POST', `/v1/sessions/${id}/tools/bash`, { command }, key);
  assert.equal(res.status, 200, JSON.stringify(res.json));
  return (res.json.content as Array<{ text?: string }>).map((c) => c.text ?? '').join('');
}

async function createSession(volumes: unknown, key = keyA): Promise<{ status: number; json: Json; ms: number }> {
  const started = performance.now();
  const res = await api('POST', '/v1/sessions', { volumes }, key);
  return { ...res, ms: performance.now() - started };
}

/** The volume's file: under the state dir, in its tenant's hashed directory. */
function volumeFile(tenant: string, name: string): string {
  return path.join(stateDir, 'volumes', createHash('sha256').update(tenant).digest('hex').slice(0, 32), `${name}.ext4`);
}

/** Loop devices backed by anything under the state dir (there must be none once its sessions are gone). */
async function loopDevicesOfStateDir(): Promise<string[]> {
  const res = await run(['losetup', '--list', '--noheadings', '--output', 'NAME,BACK-FILE'], { allowFailure: true });
  return res.stdout
    .split('\n')
    .filter((line) => line.includes(stateDir))
    .map((line) => line.trim());
}

async function mountsOfStateDir(): Promise<string[]> {
  return (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').filter((line) => line.split(' ')[4]?.startsWith(stateDir));
}

function hostFreeBytes(): number {
  const fs = statfsSync(stateDir);
  return fs.bavail * fs.bsize;
}

describe('volumes on container sandboxes', () => {
  const sessions: string[] = [];
  let writer: string;

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-volumes-'));
    const keys = openKeyStore(stateDir);
    keyA = keys.keys.create('alpha').key;
    keyB = keys.keys.create('beta').key;
    keys.close();
    port = await freePort();
    child = await startServeOn(stateDir, port, { SBX_VOLUME_QUOTA_MIB: '200', SBX_VOLUME_QUOTA_COUNT: '3', SBX_VOLUME_MAX_MIB: '1024' });
  });
  after(async () => {
    for (const id of sessions) for (const key of [keyA, keyB]) await api('DELETE', `/v1/sessions/${id}`, undefined, key).catch(() => undefined);
    if (child && child.exitCode === null) {
      child.kill('SIGTERM');
      await new Promise((resolve) => child?.once('exit', resolve));
    }
    await rm(stateDir, { recursive: true, force: true });
    await rm(NAMES.runcRoot, { recursive: false, force: true }).catch(() => undefined);
    await rm(NAMES.rootfsRoot, { recursive: false, force: true }).catch(() => undefined);
    await removeEmptyPrefixCgroups();
  });

  it('creates a volume (sparse, of its size), refuses bad names, sizes and quota overruns, and hides it from another tenant', async () => {
    const started = performance.now();
    const made = await api('POST', '/v1/volumes', { name: 'data', sizeMiB: SIZE_MIB });
    const createMs = performance.now() - started;
    assert.equal(made.status, 201, JSON.stringify(made.json));
    assert.equal(made.json.sizeMiB, SIZE_MIB);
    assert.deepEqual(made.json.mountedBy, []);
    const file = statSync(volumeFile('alpha', 'data'));
    assert.equal(file.size, SIZE_MIB * 2 ** 20);
    console.log(`volume create ${createMs.toFixed(0)} ms; its ${SIZE_MIB} MiB file holds ${((file.blocks * 512) / 2 ** 20).toFixed(1)} MiB of host disk`);
    assert.ok(file.blocks * 512 < 8 * 2 ** 20, 'sparse: a few MiB of metadata');

    assert.equal(errorOf(await api('POST', '/v1/volumes', { name: 'data', sizeMiB: 16 })).code, 'volume_exists');
    for (const name of ['../x', 'a/b', '.hidden', '', 'x'.repeat(64)]) {
      const bad = await api('POST', '/v1/volumes', { name, sizeMiB: 16 });
      assert.equal(bad.status, 400, name);
      assert.match(errorOf(bad).message, /name/);
    }
    for (const sizeMiB of [0, 1, 1025, 1.5]) {
      const bad = await api('POST', '/v1/volumes', { name: 'sized', sizeMiB });
      assert.equal(bad.status, 400, String(sizeMiB));
      assert.match(errorOf(bad).message, /sizeMiB/);
    }
    const over = await api('POST', '/v1/volumes', { name: 'big', sizeMiB: 150 });
    assert.equal(over.status, 413);
    assert.equal(errorOf(over).code, 'volume_quota_exceeded');
    assert.match(errorOf(over).message, /SBX_VOLUME_QUOTA_MIB \(200 MiB\)/);
    assert.equal((await api('GET', '/v1/volumes/big')).status, 404, 'a refused volume left nothing behind');

    assert.equal((await api('GET', '/v1/volumes/data', undefined, keyB)).status, 404);
    assert.deepEqual((await api('GET', '/v1/volumes', undefined, keyB)).json.volumes, []);
    assert.equal(errorOf(await api('DELETE', '/v1/volumes/data', undefined, keyB)).code, 'volume_not_found');
    // Tenant beta may have a "data" of its own: a different volume.
    assert.equal((await api('POST', '/v1/volumes', { name: 'data', sizeMiB: 16 }, keyB)).status, 201);
  });

  it('mounts it writable in one session, owned by the guest user; a second writer, a reader and another tenant are refused', async () => {
    const control = await createSession(undefined);
    assert.equal(control.status, 201, JSON.stringify(control.json));
    sessions.push(String(control.json.id));
    const created = await createSession([{ name: 'data', path: MOUNT }]);
    assert.equal(created.status, 201, JSON.stringify(created.json));
    writer = String(created.json.id);
    sessions.push(writer);
    console.log(`session create with a volume ${created.ms.toFixed(0)} ms, without ${control.ms.toFixed(0)} ms`);
    assert.deepEqual(created.json.volumes, [{ name: 'data', path: MOUNT, readOnly: false }]);
    assert.equal(
      (await bash(writer, `echo kept > ${MOUNT}/note && stat -c '%U %a' ${MOUNT} ${MOUNT}/note && cat ${MOUNT}/note`)).trim(),
      'user 755\nuser 644\nkept',
    );
    assert.deepEqual((await api('GET', '/v1/volumes/data')).json.mountedBy, [{ sessionId: writer, readOnly: false }]);

    const second = await createSession([{ name: 'data', path: MOUNT }]);
    assert.equal(second.status, 409);
    assert.equal(errorOf(second).code, 'volume_in_use');
    const reader = await createSession([{ name: 'data', path: MOUNT, readOnly: true }]);
    assert.equal(errorOf(reader).code, 'volume_in_use');
    const foreign = await createSession([{ name: 'data', path: MOUNT }], keyB);
    assert.equal(foreign.status, 201, 'beta mounts its own "data", not alpha\'s');
    sessions.push(String(foreign.json.id));
    assert.equal((await bash(String(foreign.json.id), `ls -A ${MOUNT}; echo end`, keyB)).trim(), 'lost+found\nend');
    const unknown = await createSession([{ name: 'nope', path: MOUNT }], keyB);
    assert.equal(unknown.status, 404);
    assert.equal(errorOf(unknown).code, 'volume_not_found');
    const badPath = await createSession([{ name: 'data', path: '/etc/x' }]);
    assert.equal(badPath.status, 400);
    assert.match(errorOf(badPath).message, /volumes\[0\]\.path/);
    assert.equal(errorOf(await api('DELETE', '/v1/volumes/data')).code, 'volume_in_use');
    assert.equal((await api('GET', '/v1/volumes', undefined, keyB)).json.volumes instanceof Array, true);
  });

  it('a full volume is ENOSPC in the guest; the host gives it no more than its size', async () => {
    const freeBefore = hostFreeBytes();
    const allocatedBefore = statSync(volumeFile('alpha', 'data')).blocks * 512;
    const out = await bash(writer, `dd if=/dev/zero of=${MOUNT}/fill bs=1M count=${SIZE_MIB * 2} 2>&1; echo "rc=$?"; sync`);
    assert.match(out, /No space left on device/);
    assert.match(out, /rc=1/);
    const allocated = statSync(volumeFile('alpha', 'data')).blocks * 512;
    const hostCost = freeBefore - hostFreeBytes();
    console.log(
      `guest filled its ${SIZE_MIB} MiB volume: the file grew ${((allocated - allocatedBefore) / 2 ** 20).toFixed(1)} MiB to ${(allocated / 2 ** 20).toFixed(1)} MiB; ` +
        `host free space fell ${(hostCost / 2 ** 20).toFixed(1)} MiB`,
    );
    assert.ok(allocated <= SIZE_MIB * 2 ** 20, 'the file never outgrows the volume');
    // Other writers share the host disk: the bound is the volume's size with a margin for them.
    assert.ok(hostCost <= (SIZE_MIB + 16) * 2 ** 20, `host cost ${hostCost}`);
    await bash(writer, `rm ${MOUNT}/fill`);
  });

  it('an orchestrator SIGKILL and restart keeps the adopted session holding its volume, and frees that of a session gone meanwhile', async () => {
    assert.equal((await api('POST', '/v1/volumes', { name: 'scratch', sizeMiB: 16 })).status, 201);
    const doomed = await createSession([{ name: 'scratch', path: MOUNT }]);
    assert.equal(doomed.status, 201, JSON.stringify(doomed.json));
    const doomedId = String(doomed.json.id);
    child?.kill('SIGKILL');
    await new Promise((resolve) => child?.once('exit', resolve));
    // While the orchestrator is down, one session's sandbox dies: the restart cannot adopt it.
    await run(['runc', '--root', NAMES.runcRoot, 'kill', NAMES.container(doomedId), 'KILL']);
    await sleep(500);
    child = await startServeOn(stateDir, port, { SBX_VOLUME_QUOTA_MIB: '200', SBX_VOLUME_QUOTA_COUNT: '3', SBX_VOLUME_MAX_MIB: '1024' });
    assert.deepEqual((await api('GET', '/v1/volumes/data')).json.mountedBy, [{ sessionId: writer, readOnly: false }]);
    assert.deepEqual((await api('GET', '/v1/volumes/scratch')).json.mountedBy, [], 'the volume of a session that is gone is free again');
    assert.deepEqual(
      (await mountsOfStateDir()).filter((line) => line.includes(doomedId)),
      [],
      'and its mounts were reclaimed',
    );
    assert.equal((await run(['losetup', '-j', volumeFile('alpha', 'scratch')])).stdout.trim(), '');
    assert.equal((await api('DELETE', '/v1/volumes/scratch')).status, 200);
    assert.equal(errorOf(await createSession([{ name: 'data', path: MOUNT }])).code, 'volume_in_use');
    assert.equal((await bash(writer, `cat ${MOUNT}/note`)).trim(), 'kept');
  });

  it('readers share it once the writer is gone; its data outlived the session; nothing stays mounted', async () => {
    assert.equal((await api('DELETE', `/v1/sessions/${writer}`)).status, 200);
    assert.deepEqual((await api('GET', '/v1/volumes/data')).json.mountedBy, []);
    assert.equal((await run(['losetup', '-j', volumeFile('alpha', 'data')])).stdout.trim(), '', 'no loop device has the volume after its session');
    assert.deepEqual(
      (await mountsOfStateDir()).filter((line) => line.includes(writer)),
      [],
    );

    const readers = await Promise.all([0, 1].map(() => createSession([{ name: 'data', path: '/mnt/shared', readOnly: true }])));
    for (const r of readers) {
      assert.equal(r.status, 201, JSON.stringify(r.json));
      sessions.push(String(r.json.id));
      const id = String(r.json.id);
      assert.equal((await bash(id, 'cat /mnt/shared/note')).trim(), 'kept');
      assert.match(await bash(id, 'touch /mnt/shared/x 2>&1; echo "rc=$?"'), /Read-only file system[\s\S]*rc=1/);
    }
    assert.equal(errorOf(await createSession([{ name: 'data', path: MOUNT }])).code, 'volume_in_use', 'no writer while readers have it');
    for (const r of readers) assert.equal((await api('DELETE', `/v1/sessions/${String(r.json.id)}`)).status, 200);
  });

  it('deleting it removes its data; no loop device or mount is left', async () => {
    for (const id of sessions) for (const key of [keyA, keyB]) await api('DELETE', `/v1/sessions/${id}`, undefined, key);
    const deleted = await api('DELETE', '/v1/volumes/data');
    assert.equal(deleted.status, 200, JSON.stringify(deleted.json));
    assert.equal((await api('GET', '/v1/volumes/data')).status, 404);
    assert.equal(existsSync(volumeFile('alpha', 'data')), false);
    assert.equal((await api('GET', '/v1/volumes/data', undefined, keyB)).status, 200, "beta's own is untouched");
    assert.deepEqual(await loopDevicesOfStateDir(), []);
    assert.deepEqual(await mountsOfStateDir(), []);
  });

  it('red team: a volume a VM has written is never loop-mounted on the host: 409 volumes_unavailable, nothing mounted or held', async () => {
    // beta's "data", as the VM runtimes leave it once a VM has mounted it writable.
    await markGuestWritten(volumeFile('beta', 'data'));
    const refused = await createSession([{ name: 'data', path: MOUNT }], keyB);
    assert.equal(refused.status, 409, JSON.stringify(refused.json));
    assert.equal(errorOf(refused).code, 'volumes_unavailable');
    assert.match(errorOf(refused).message, /written by a VM's kernel/);
    assert.deepEqual((await api('GET', '/v1/volumes/data', undefined, keyB)).json.mountedBy, [], 'not held after the refusal');
    assert.deepEqual(await loopDevicesOfStateDir(), []);
    assert.equal((await api('DELETE', '/v1/volumes/data', undefined, keyB)).status, 200);
    assert.equal(existsSync(guestWrittenMark(volumeFile('beta', 'data'))), false, 'deleting the volume removes its mark');
  });

  it("the CLI: sbx volume create, ls and rm, as the key's tenant", async () => {
    const env = { SBX_URL: `http://127.0.0.1:${port}`, SBX_API_KEY: keyB };
    const made = await runCliWith(['volume', 'create', 'cli-vol', '--size', '16'], env);
    assert.equal(made.code, 0, made.stderr);
    assert.equal((JSON.parse(made.stdout) as Json).sizeMiB, 16);
    const listed = await runCliWith(['volume', 'ls'], env);
    assert.match(listed.stdout, /^cli-vol\s+16 MiB/m);
    assert.equal((await api('GET', '/v1/volumes/cli-vol', undefined, keyA)).status, 404, "not another tenant's");
    const gone = await runCliWith(['volume', 'rm', 'cli-vol'], env);
    assert.equal(gone.code, 0, gone.stderr);
    assert.equal((await api('GET', '/v1/volumes/cli-vol', undefined, keyB)).status, 404);
  });

  it('the runtime step alone: the loop and idmapped mounts of a volume timed, its view in the id range, nothing left after its release', async () => {
    const file = path.join(stateDir, 'probe', 'probe.ext4');
    let started = performance.now();
    await makeVolumeFile(file, 256);
    const mkfsMs = performance.now() - started;
    const cleanup = new CleanupStack();
    const sessionDir = path.join(stateDir, 'probe', 'session');
    started = performance.now();
    const views = await mountVolumes(
      sessionDir,
      [{ name: 'probe', file, path: MOUNT, readOnly: false }],
      { first: 3_999_000_000, size: 65_536 },
      cleanup,
      () => undefined,
    );
    const mountMs = performance.now() - started;
    assert.equal(views.length, 1);
    // Through the idmapped view, the volume's root (guest uid 1000 on disk) is host uid first + 1000.
    assert.equal(statSync(views[0]!.view).uid, 3_999_001_000);
    assert.equal(statSync(path.join(sessionDir, 'volumes', 'probe')).uid, 1000);
    started = performance.now();
    await cleanup.run();
    const releaseMs = performance.now() - started;
    console.log(`256 MiB volume: mkfs ${mkfsMs.toFixed(0)} ms; loop + idmapped mount ${mountMs.toFixed(0)} ms; unmount ${releaseMs.toFixed(0)} ms`);
    assert.equal((await run(['losetup', '-j', file])).stdout.trim(), '');
    assert.deepEqual(await mountsOfStateDir(), []);
  });
});

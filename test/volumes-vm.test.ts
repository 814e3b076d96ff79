import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { openKeyStore } from '../src/api/auth/key-store-file.js';
import { guestWrittenMark } from '../src/volumes/volume-files.js';
import { removeEmptyPrefixCgroups } from './helpers/orchestrator.js';
import { freePort, startServeOn } from './helpers/serve.js';

/**
 * Volumes on real QEMU microVMs (TCG here: each boot costs 15-40 s, so one compact test with
 * two sessions), through `sbx serve` and its HTTP API: the volume is a virtio-blk drive that
 * the guest's init finds by its serial and mounts at the path asked for. Written in one VM
 * session, it is read in the next; mounted read-only it refuses writes; full, it is ENOSPC in
 * the guest while the host gives its file no more than its size. Paused to disk with its volume,
 * across an orchestrator SIGKILL, it resumes with the same process writing to it.
 */
const SIZE_MIB = 32;
const MOUNT = '/home/user/work_data';

let stateDir: string;
let port: number;
let child: ChildProcess | undefined;
let key: string;
const sessions: string[] = [];

type Json = Record<string, unknown>;

async function api(method: string, url: string, body?: unknown): Promise<{ status: number; json: Json }> {
  const headers: Record<string, string> = { authorization: `Bearer ${key}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`http://127.0.0.1:${port}${url}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, json: (await res.json()) as Json };
}

async function bash(id: string, command: string): Promise<string> {
  const res = await api('POST', `/v1/sessions/${id}/tools/bash`, { command });
  assert.equal(res.status, 200, JSON.stringify(res.json));
  return (res.json.content as Array<{ text?: string }>).map((c) => c.text ?? '').join('');
}

async function createSession(volumes: unknown): Promise<string> {
  const started = performance.now();
  const res = await api('POST', '/v1/sessions', { volumes });
  assert.equal(res.status, 201, JSON.stringify(res.json));
  console.log(`qemu session with a volume ready in ${(performance.now() - started).toFixed(0)} ms`);
  const id = String(res.json.id);
  sessions.push(id);
  return id;
}

/** The lines of the counter's file on the volume, as numbers. */
async function counted(id: string): Promise<number[]> {
  return (await bash(id, `cat ${MOUNT}/count`)).trim().split('\n').map(Number);
}

/**
 * A process appending numbered lines to a file on the volume; the session paused to disk (its
 * QEMU gone, the volume its VM user's meanwhile), the orchestrator SIGKILLed and started again,
 * the session resumed: the same process counts on, no line lost or doubled.
 */
async function pauseToDiskAcrossRestart(id: string, file: string): Promise<void> {
  await bash(
    id,
    `setsid nohup sh -c 'echo $$ > /tmp/counter.pid; i=0; while :; do i=$((i+1)); echo $i >> ${MOUNT}/count; sleep 0.2; done' >/dev/null 2>&1 < /dev/null &`,
  );
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline && (await counted(id)).length < 3) await sleep(500);
  const paused = await api('POST', `/v1/sessions/${id}/pause`, { mode: 'disk' });
  assert.equal(paused.status, 200, JSON.stringify(paused.json));
  assert.equal((paused.json.paused as Json).mode, 'disk');
  const held = statSync(file);
  assert.ok(
    held.uid !== 0 && (held.mode & 0o777) === 0o600,
    `the volume is its VM user's alone while paused (uid ${held.uid}, mode ${(held.mode & 0o777).toString(8)})`,
  );
  child?.kill('SIGKILL');
  await new Promise((resolve) => child?.once('exit', resolve));
  child = await startServeOn(stateDir, port, { SBX_RUNTIME: 'qemu' });
  assert.equal((await api('GET', `/v1/sessions/${id}`)).json.state, 'paused');
  const started = performance.now();
  const resumed = await api('POST', `/v1/sessions/${id}/resume`);
  assert.equal(resumed.status, 200, JSON.stringify(resumed.json));
  console.log(`resumed from disk with a volume in ${(performance.now() - started).toFixed(0)} ms`);
  const atResume = (await counted(id)).length;
  await sleep(2_000);
  const lines = await counted(id);
  assert.ok(lines.length > atResume, `the same process counts on onto the volume (${atResume} -> ${lines.length} lines)`);
  assert.deepEqual(
    lines,
    lines.map((_, i) => i + 1),
    'no line lost or doubled',
  );
  await bash(id, `kill $(cat /tmp/counter.pid); rm ${MOUNT}/count`);
}

describe('volumes on qemu microVMs', () => {
  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-vm-volumes-'));
    const keys = openKeyStore(stateDir);
    key = keys.keys.create('alpha').key;
    keys.close();
    port = await freePort();
    child = await startServeOn(stateDir, port, { SBX_RUNTIME: 'qemu' });
  });
  after(async () => {
    for (const id of sessions) await api('DELETE', `/v1/sessions/${id}`).catch(() => undefined);
    if (child && child.exitCode === null) {
      child.kill('SIGTERM');
      await new Promise((resolve) => child?.once('exit', resolve));
    }
    await rm(stateDir, { recursive: true, force: true });
    await removeEmptyPrefixCgroups();
  });

  it('written in one VM session (paused to disk and resumed meanwhile), read in the next; read-only refuses writes; full is ENOSPC in the guest', async () => {
    assert.equal((await api('POST', '/v1/volumes', { name: 'vmdata', sizeMiB: SIZE_MIB })).status, 201);
    const file = path.join(stateDir, 'volumes', createHash('sha256').update('alpha').digest('hex').slice(0, 32), 'vmdata.ext4');

    const writer = await createSession([{ name: 'vmdata', path: MOUNT }]);
    // Mounted from the virtio disk (not a directory of the root disk), nosuid and nodev, the user's.
    const mount = await bash(writer, `findmnt -n -o SOURCE,FSTYPE,OPTIONS --target ${MOUNT}; stat -c '%U' ${MOUNT}`);
    assert.match(mount, /^\/dev\/vd[c-z]\s+ext4\s+rw,nosuid,nodev,noatime/m, mount);
    assert.match(mount, /^user$/m);
    assert.ok(existsSync(guestWrittenMark(file)), 'a volume a VM writes is marked: never loop-mounted on the host again');
    // Full: ENOSPC in the guest; the file on the host never grows past the volume's size.
    const fill = await bash(writer, `dd if=/dev/zero of=${MOUNT}/fill bs=1M count=${SIZE_MIB * 2} 2>&1; echo "rc=$?"; rm ${MOUNT}/fill`);
    assert.match(fill, /No space left on device/);
    assert.match(fill, /rc=1/);
    assert.ok(statSync(file).blocks * 512 <= SIZE_MIB * 2 ** 20, 'the file never outgrows the volume');
    await pauseToDiskAcrossRestart(writer, file);
    // Written last, with no sync of its own: the destroy flushes the guest before QEMU stops.
    assert.equal((await bash(writer, `echo kept-across-vms > ${MOUNT}/note; cat ${MOUNT}/note`)).trim(), 'kept-across-vms');
    assert.equal((await api('DELETE', `/v1/sessions/${writer}`)).status, 200);
    const owner = statSync(file);
    assert.deepEqual([owner.uid, owner.mode & 0o777], [0, 0o600], "the volume is root's again once its VM is gone");

    const reader = await createSession([{ name: 'vmdata', path: MOUNT, readOnly: true }]);
    assert.equal((await bash(reader, `cat ${MOUNT}/note`)).trim(), 'kept-across-vms');
    const write = await bash(reader, `touch ${MOUNT}/other 2>&1; echo "rc=$?"`);
    assert.match(write, /Read-only file system/);
    assert.match(write, /rc=1/);
    assert.match(await bash(reader, `findmnt -n -o OPTIONS --target ${MOUNT}`), /^ro,/);
    assert.equal((await api('DELETE', `/v1/sessions/${reader}`)).status, 200);
  });
});

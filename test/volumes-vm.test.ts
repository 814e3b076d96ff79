import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { openKeyStore } from '../src/api/auth/key-store-file.js';
import { guestWrittenMark } from '../src/volumes/volume-files.js';
import { removeEmptyPrefixCgroups } from './helpers/orchestrator.js';
import { freePort, startServeOn } from './helpers/serve.js';

/**
 * Volumes on real QEMU microVMs (TCG here: each boot costs 15-40 s, so one compact test with
 * two sessions), through `sbx serve` and its HTTP API: the volume is a virtio-blk drive that
 * the guest's init finds by its serial and mounts at the path asked for. Written in one VM
 * session, it is read in the next; mounted read-only it refuses writes; full, it is ENOSPC in
 * the guest while the host gives its file no more than its size.
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

  it('written in one VM session, read in the next; read-only refuses writes; full is ENOSPC in the guest', async () => {
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
    // Written last, with no sync of its own: the destroy flushes the guest before QEMU stops.
    assert.equal((await bash(writer, `echo kept-across-vms > ${MOUNT}/note; cat ${MOUNT}/note`)).trim(), 'kept-across-vms');
    assert.equal((await api('DELETE', `/v1/sessions/${writer}`)).status, 200);

    const reader = await createSession([{ name: 'vmdata', path: MOUNT, readOnly: true }]);
    assert.equal((await bash(reader, `cat ${MOUNT}/note`)).trim(), 'kept-across-vms');
    const write = await bash(reader, `touch ${MOUNT}/other 2>&1; echo "rc=$?"`);
    assert.match(write, /Read-only file system/);
    assert.match(write, /rc=1/);
    assert.match(await bash(reader, `findmnt -n -o OPTIONS --target ${MOUNT}`), /^ro,/);
    assert.equal((await api('DELETE', `/v1/sessions/${reader}`)).status, 200);
  });
});

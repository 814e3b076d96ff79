/**
 * Containers reached over a Unix socket (SBX_TRANSPORT=unix, issue 23), for real: `sbx
 * serve` as its own process, runc sandboxes, stock sshd behind the guest's socket listener.
 *
 * A session without egress has no network interface but lo (seen inside and from the
 * host: no veth, no netns of ours, no address lease), and every route family works over the
 * socket exactly as over TCP: the computer tool, bash, the editor, files, the live view.
 * The socket carries the same SSH: the pinned host key and the session's own client key are
 * still what lets anyone in. A SIGKILLed orchestrator's successor adopts the session over
 * the socket, and its destroy leaves nothing behind.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { existsSync, lstatSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { WebSocket } from 'ws';
import { ResourceNames } from '../src/network/names.js';
import { guestTransport, HostKeyMismatchError, SshAuthenticationError, type GuestTransport } from '../src/transport/index.js';
import { generateSessionKeys, publicKeyBlob, readSessionKeys } from '../src/transport/ssh-keys.js';
import { run } from '../src/util/exec.js';
import { freePort } from './helpers/cluster.js';
import { removeEmptyPrefixCgroups, TEST_PREFIX } from './helpers/orchestrator.js';
import { startServe, type ServeProcess } from './helpers/serve.js';

const NAMES = new ResourceNames(TEST_PREFIX);
const SUBNET = `10.243.${Math.floor(Math.random() * 256)}.0/24`;
const ENV = { SBX_TRANSPORT: 'unix' };

let stateDir: string;
let port: number;
let serve: ServeProcess | undefined;
const readyMs = { unix: 0, tcp: 0 };

interface View {
  id: string;
  state: string;
  network: { egress: boolean; transport: string; interfaces: string[] };
}

async function api(method: string, url: string, body?: unknown): Promise<{ status: number; buffer: Buffer; json: () => Record<string, unknown> }> {
  const headers: Record<string, string> = {};
  let payload: string | Uint8Array<ArrayBuffer> | undefined;
  if (Buffer.isBuffer(body)) {
    headers['content-type'] = 'application/octet-stream';
    payload = new Uint8Array(body);
  } else if (body !== undefined) {
    headers['content-type'] = 'application/json';
    payload = JSON.stringify(body);
  }
  const res = await fetch(`${serve!.url}${url}`, { method, headers, body: payload });
  const buffer = Buffer.from(await res.arrayBuffer());
  return { status: res.status, buffer, json: () => JSON.parse(buffer.toString('utf8')) as Record<string, unknown> };
}

async function create(body: unknown = {}): Promise<View> {
  const res = await api('POST', '/v1/sessions', body);
  assert.equal(res.status, 201, res.buffer.toString());
  return res.json() as unknown as View;
}

async function bash(id: string, command: string): Promise<string> {
  const res = await api('POST', `/v1/sessions/${id}/tools/bash`, { command });
  assert.equal(res.status, 200, res.buffer.toString());
  const content = res.json().content as Array<{ type: string; text?: string }>;
  return content.map((c) => c.text ?? '').join('');
}

function containerPid(id: string): Promise<number> {
  return readFile(path.join(stateDir, id, 'container.pid'), 'utf8').then((text) => Number(text.trim()));
}

/** The interfaces of a process's network namespace, read from the host (/proc/<pid>/net/dev). */
async function interfacesOf(pid: number): Promise<string[]> {
  const lines = (await readFile(`/proc/${pid}/net/dev`, 'utf8')).split('\n').slice(2);
  return lines.map((line) => line.split(':')[0]!.trim()).filter(Boolean);
}

function storedRow(id: string): { address_index: number | null; transport: string; kinds: string[] } {
  const db = new Database(path.join(stateDir, 'orchestrator.db'), { readonly: true });
  try {
    const row = db.prepare('SELECT address_index, transport FROM sessions WHERE id = ?').get(id) as { address_index: number | null; transport: string };
    const kinds = (db.prepare('SELECT kind FROM session_resources WHERE session_id = ?').all(id) as Array<{ kind: string }>).map((r) => r.kind);
    return { ...row, kinds };
  } finally {
    db.close();
  }
}

/** The RFB handshake through a live view, up to ServerInit: the framebuffer's size. */
async function viewServerInit(id: string): Promise<{ width: number; height: number }> {
  const made = await api('POST', `/v1/sessions/${id}/views`, { mode: 'view' });
  assert.equal(made.status, 201, made.buffer.toString());
  const ws = new WebSocket(String(made.json().url).replace(/^http/, 'ws') + '/rfb');
  const steps: Array<[number, Buffer | undefined]> = [
    [12, Buffer.from('RFB 003.008\n')],
    [2, Buffer.from([1])],
    [4, Buffer.from([1])],
    [24, undefined],
  ];
  let got = Buffer.alloc(0);
  try {
    return await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no ServerInit within 20 s')), 20_000);
      ws.on('close', () => reject(new Error('closed during the RFB handshake')));
      ws.on('error', reject);
      ws.on('message', (data: Buffer) => {
        got = Buffer.concat([got, data]);
        while (steps.length > 0 && got.length >= steps[0]![0]) {
          const [need, answer] = steps.shift()!;
          if (!answer) {
            clearTimeout(timer);
            return resolve({ width: got.readUInt16BE(0), height: got.readUInt16BE(2) });
          }
          got = got.subarray(need);
          ws.send(answer);
        }
      });
    });
  } finally {
    ws.terminate();
  }
}

async function tryOpen(connection: GuestTransport): Promise<unknown> {
  try {
    await connection.open(10_000);
    return 'opened';
  } catch (err) {
    return err;
  } finally {
    connection.close();
  }
}

describe('containers over a Unix socket (SBX_TRANSPORT=unix)', { concurrency: false }, () => {
  let isolated: View;
  let egress: View;

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-unix-'));
    port = await freePort();
    serve = await startServe(stateDir, port, SUBNET, [], ENV);
  });

  after(async () => {
    if (serve && serve.child.exitCode === null) {
      serve.child.kill('SIGTERM');
      await once(serve.child, 'exit');
    }
    await rm(stateDir, { recursive: true, force: true });
    await removeEmptyPrefixCgroups();
  });

  it('a session without egress has no interface but lo: inside, from the host, and in its view; no veth, netns or lease', { timeout: 120_000 }, async (t) => {
    const started = performance.now();
    isolated = await create();
    readyMs.unix = performance.now() - started;
    t.diagnostic(`create to ready over the socket: ${Math.round(readyMs.unix)} ms`);
    assert.equal(isolated.state, 'ready');
    assert.deepEqual(isolated.network, { egress: false, transport: 'unix', interfaces: ['lo'] });

    const inside = await bash(isolated.id, 'ip -o link | cut -d: -f2 | tr -d " "; echo ---; cat /proc/net/dev');
    const [links, dev] = inside.split('---');
    assert.deepEqual(links!.trim().split('\n'), ['lo'], `ip link inside: ${inside}`);
    assert.deepEqual(
      dev!
        .trim()
        .split('\n')
        .slice(2)
        .map((l) => l.split(':')[0]!.trim()),
      ['lo'],
      'the kernel lists only lo in the guest',
    );

    const pid = await containerPid(isolated.id);
    assert.deepEqual(await interfacesOf(pid), ['lo'], "the container's netns, seen from the host");
    const hostLinks = (await run(['ip', '-o', 'link'])).stdout;
    assert.ok(!hostLinks.includes(NAMES.hostVeth(isolated.id)), 'no host veth');
    const netns = (await run(['ip', 'netns', 'list'])).stdout;
    assert.ok(!netns.includes(NAMES.netns(isolated.id)), 'no netns of ours');
    const stored = storedRow(isolated.id);
    assert.equal(stored.address_index, null, 'no address lease');
    assert.equal(stored.transport, 'unix');
    assert.ok(!stored.kinds.includes('veth') && !stored.kinds.includes('netns'), `ledger: ${stored.kinds.join(', ')}`);

    // The socket is the host's, in the root-only session dir; the guest does not see the path.
    const socketPath = path.join(stateDir, isolated.id, 'ssh.sock');
    assert.ok(lstatSync(socketPath).isSocket(), 'the control socket is in the session dir');
    assert.equal(lstatSync(path.join(stateDir, isolated.id)).mode & 0o077, 0, 'the session dir is root-only');
    assert.equal((await bash(isolated.id, `test -e ${socketPath} && echo visible || echo invisible`)).trim(), 'invisible');
  });

  it('every route family works over the socket: computer tool, screenshot, bash, editor, files, live view, health', { timeout: 120_000 }, async () => {
    const id = isolated.id;
    const shot = await api('POST', `/v1/sessions/${id}/tools/computer`, { action: 'screenshot' });
    assert.equal(shot.status, 200, shot.buffer.toString());
    assert.ok(
      (shot.json().content as Array<{ type: string }>).some((c) => c.type === 'image'),
      'a screenshot image',
    );
    const click = await api('POST', `/v1/sessions/${id}/tools/computer`, { action: 'left_click', coordinate: [20, 20] });
    assert.equal(click.status, 200, click.buffer.toString());
    const png = await api('GET', `/v1/sessions/${id}/screenshot`);
    assert.equal(png.status, 200);
    assert.deepEqual([...png.buffer.subarray(1, 4)], [...Buffer.from('PNG')]);

    assert.equal((await bash(id, 'echo $((6 * 7))')).trim(), '42');

    const edit = await api('POST', `/v1/sessions/${id}/tools/str_replace_based_edit_tool`, {
      command: 'create',
      path: '/home/user/notes.txt',
      file_text: 'over the socket\n',
    });
    assert.equal(edit.status, 200, edit.buffer.toString());
    const viewed = await api('POST', `/v1/sessions/${id}/tools/str_replace_based_edit_tool`, { command: 'view', path: '/home/user/notes.txt' });
    assert.match(JSON.stringify(viewed.json()), /over the socket/);

    const bytes = Buffer.from(Array.from({ length: 300_000 }, (_, i) => i % 251));
    const put = await api('PUT', `/v1/sessions/${id}/files?path=/home/user/blob.bin`, bytes);
    assert.equal(put.status, 201, put.buffer.toString());
    const got = await api('GET', `/v1/sessions/${id}/files?path=/home/user/blob.bin`);
    assert.equal(got.status, 200);
    assert.ok(got.buffer.equals(bytes), 'the file came back byte for byte');

    assert.deepEqual(await viewServerInit(id), { width: 1024, height: 768 }, 'the live view reached the guest VNC server through the socket');

    const health = await api('GET', `/v1/sessions/${id}/health`);
    assert.equal(health.status, 200);
    assert.equal(health.json().healthy, true, health.buffer.toString());
  });

  it('a session with egress keeps its NIC and is reached over TCP', { timeout: 120_000 }, async (t) => {
    const started = performance.now();
    egress = await create({ network: { egress: true } });
    readyMs.tcp = performance.now() - started;
    t.diagnostic(`create to ready over TCP: ${Math.round(readyMs.tcp)} ms (over the socket: ${Math.round(readyMs.unix)} ms)`);
    assert.deepEqual(egress.network, { egress: true, transport: 'tcp', interfaces: ['lo', 'eth0'] });
    assert.deepEqual((await interfacesOf(await containerPid(egress.id))).sort(), ['eth0', 'lo']);
    assert.equal(existsSync(path.join(stateDir, egress.id, 'ssh.sock')), false, 'no control socket');
    assert.notEqual(storedRow(egress.id).address_index, null);
    // And the metrics say so: one session without a NIC over the socket, one with its NIC over TCP.
    const metrics = (await api('GET', '/metrics')).buffer.toString();
    assert.match(metrics, /^sandbox_sessions_by_transport\{transport="unix",nic="false"\} 1$/m);
    assert.match(metrics, /^sandbox_sessions_by_transport\{transport="tcp",nic="true"\} 1$/m);
  });

  it('actions over the socket are as fast as over TCP, side by side in one run', { timeout: 180_000 }, async (t) => {
    // Alternating, so both see the same load of this busy host.
    const times: Record<'unix' | 'tcp', number[]> = { unix: [], tcp: [] };
    for (let i = 0; i < 25; i++) {
      for (const [kind, session] of [
        ['unix', isolated],
        ['tcp', egress],
      ] as const) {
        const started = performance.now();
        const res = await api('POST', `/v1/sessions/${session.id}/actions`, { action: 'cursor_position' });
        assert.equal(res.status, 200, res.buffer.toString());
        times[kind].push(performance.now() - started);
      }
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const unix = median(times.unix);
    const tcp = median(times.tcp);
    t.diagnostic(`cursor_position p50: unix ${unix.toFixed(1)} ms, tcp ${tcp.toFixed(1)} ms (25 each, alternating)`);
    assert.ok(unix <= 2 * tcp + 20, `the socket is not slower than TCP beyond noise: unix ${unix.toFixed(1)} ms, tcp ${tcp.toFixed(1)} ms`);

    // Create to ready again, now that the first create of the run (which makes the shared
    // writable-layer template) is behind both: one more of each, alternating, then gone.
    const ready: Record<'unix' | 'tcp', number[]> = { unix: [], tcp: [] };
    for (let i = 0; i < 2; i++) {
      for (const [kind, body] of [
        ['unix', {}],
        ['tcp', { network: { egress: true } }],
      ] as const) {
        const started = performance.now();
        const view = await create(body);
        ready[kind].push(performance.now() - started);
        assert.equal(view.network.transport, kind);
        assert.equal((await api('DELETE', `/v1/sessions/${view.id}`)).status, 200);
      }
    }
    t.diagnostic(`create to ready, later creates: unix ${ready.unix.map(Math.round).join(', ')} ms; tcp ${ready.tcp.map(Math.round).join(', ')} ms`);
  });

  it('the socket carries the same SSH: a wrong pinned host key, another session key and a fresh key are refused', { timeout: 60_000 }, async () => {
    const socket = { transport: 'unix' as const, path: path.join(stateDir, isolated.id, 'ssh.sock') };
    const own = await readSessionKeys(path.join(stateDir, isolated.id), path.join(stateDir, isolated.id, 'config'));
    const other = await readSessionKeys(path.join(stateDir, egress.id), path.join(stateDir, egress.id, 'config'));
    const pinned = publicKeyBlob(own.hostPublicKey);

    const ok = guestTransport({ endpoint: socket, username: 'user', privateKey: own.clientPrivateKey, pinnedHostKey: pinned });
    try {
      await ok.open(10_000);
      assert.equal((await ok.exec('echo in')).stdout.toString().trim(), 'in', 'the session key with the pinned host key gets in');
    } finally {
      ok.close();
    }
    const wrongHost = await tryOpen(
      guestTransport({ endpoint: socket, username: 'user', privateKey: own.clientPrivateKey, pinnedHostKey: publicKeyBlob(other.hostPublicKey) }),
    );
    assert.ok(wrongHost instanceof HostKeyMismatchError, `a host key other than the pinned one: ${String(wrongHost)}`);
    const otherKey = await tryOpen(guestTransport({ endpoint: socket, username: 'user', privateKey: other.clientPrivateKey, pinnedHostKey: pinned }));
    assert.ok(otherKey instanceof SshAuthenticationError, `another session's key: ${String(otherKey)}`);
    const fresh = generateSessionKeys('strangerxx');
    const freshKey = await tryOpen(guestTransport({ endpoint: socket, username: 'user', privateKey: fresh.clientPrivateKey, pinnedHostKey: pinned }));
    assert.ok(freshKey instanceof SshAuthenticationError, `a key of no session: ${String(freshKey)}`);
    assert.equal((await bash(isolated.id, 'echo still')).trim(), 'still', 'the session itself is unharmed');
  });

  it('SIGKILL of the orchestrator: its successor adopts the session over the socket; destroy leaves nothing', { timeout: 180_000 }, async () => {
    const id = isolated.id;
    const pidBefore = await containerPid(id);
    await bash(id, 'echo before-crash > /home/user/mark');
    serve!.child.kill('SIGKILL');
    await once(serve!.child, 'exit');
    serve = await startServe(stateDir, port, SUBNET, [], ENV);

    let view: Record<string, unknown> = {};
    for (let i = 0; i < 50; i++) {
      view = (await api('GET', `/v1/sessions/${id}`)).json();
      if (view.state === 'ready') break;
      await sleep(200);
    }
    assert.equal(view.state, 'ready', JSON.stringify(view));
    assert.deepEqual(view.network, { egress: false, transport: 'unix', interfaces: ['lo'] });
    assert.equal(await containerPid(id), pidBefore, 'the same container, not a new one');
    assert.equal((await bash(id, 'cat /home/user/mark')).trim(), 'before-crash', 'its state survived');
    assert.match(serve.output(), /adopted a live session of an earlier run/);
    assert.deepEqual(await interfacesOf(pidBefore), ['lo'], 'still no NIC after adoption');

    for (const session of [isolated, egress]) assert.equal((await api('DELETE', `/v1/sessions/${session.id}`)).status, 200);
    assert.equal(existsSync(path.join(stateDir, id)), false, 'the session dir and its socket are gone');
    const links = (await run(['ip', '-o', 'link'])).stdout;
    assert.ok(!links.includes(NAMES.hostVeth(egress.id)), "the egress session's veth is gone");
    assert.equal((await run(['runc', '--root', NAMES.runcRoot, 'list', '-q'], { allowFailure: true })).stdout.trim(), '', 'no container left');
  });
});

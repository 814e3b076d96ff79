/**
 * Issue 27's warm claim, for real (root, runc, sshd, Xvfb): the pooled sandbox's desktop helpers
 * are forked from a launcher started in the pool (src/computer/warm-helpers.ts), and the claim
 * still gives the session its own key and the pinned host key. What a user of the session sees:
 * the pool's key is refused (a real handshake with it), the helpers that answer the session's
 * actions sit on channels of the session's own connection, nothing of the pool's connection is
 * left in the guest, and a guest process without the launcher's token gets no helper.
 */
import assert from 'node:assert/strict';
import { readdir, readFile, readlink } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { CONFIG_FILES, GUEST_USER } from '../src/guest/contract.js';
import { publicKeyBlob } from '../src/transport/ssh-keys.js';
import { guestTransport, SshAuthenticationError } from '../src/transport/index.js';
import { guestAddress, pngSize } from './helpers/guest.js';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

interface GuestProcess {
  pid: number;
  ppid: number;
  cmdline: string;
  sockets: Set<string>;
}

/** Every process in the sandbox's pid namespace, seen from the host's /proc. */
async function guestProcesses(initPid: number): Promise<GuestProcess[]> {
  const ns = await readlink(`/proc/${initPid}/ns/pid`);
  const out: GuestProcess[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if ((await readlink(`/proc/${name}/ns/pid`)) !== ns) continue;
      const stat = await readFile(`/proc/${name}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const cmdline = (await readFile(`/proc/${name}/cmdline`, 'utf8')).replace(/\0/g, ' ').trim();
      const sockets = new Set<string>();
      for (const fd of await readdir(`/proc/${name}/fd`).catch(() => [])) {
        const target = await readlink(`/proc/${name}/fd/${fd}`).catch(() => '');
        const match = /^socket:\[(\d+)\]$/.exec(target);
        if (match?.[1]) sockets.add(match[1]);
      }
      out.push({ pid: Number(name), ppid, cmdline, sockets });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

interface TcpEntry {
  local: string;
  remote: string;
  state: string;
  inode: string;
}

/** The TCP sockets of the network namespace `pid` is in. */
async function tcpTable(pid: number): Promise<TcpEntry[]> {
  const lines = (await readFile(`/proc/${pid}/net/tcp`, 'utf8')).trim().split('\n').slice(1);
  return lines.map((line) => {
    const f = line.trim().split(/\s+/);
    return { local: f[1] ?? '', remote: f[2] ?? '', state: f[3] ?? '', inode: f[9] ?? '' };
  });
}

const isSshSession = (p: GuestProcess) => /^sshd: user/.test(p.cmdline);
const isLauncher = (p: GuestProcess) => p.cmdline.startsWith('/usr/bin/python3 -I -S -c');

async function tryLogin(address: string, privateKey: string, hostPublicKey: string): Promise<'accepted' | Error> {
  const conn = guestTransport({ endpoint: { host: address, port: 22 }, username: GUEST_USER, privateKey, pinnedHostKey: publicKeyBlob(hostPublicKey.trim()) });
  try {
    await conn.open(5_000);
    return 'accepted';
  } catch (err) {
    return err as Error;
  } finally {
    conn.close();
  }
}

describe('a warm claim with the helpers forked from the pool’s launcher (issue 27)', () => {
  let orch: TestOrchestrator;
  before(async () => {
    orch = await startTestOrchestrator({ warmPoolSize: 1 });
  });
  after(async () => {
    await orch?.stop();
  });

  it("gives the session its own key (the pool's refused, for real), and its helpers answer on the session's connection only", async () => {
    let pooledId: string | undefined;
    for (let i = 0; i < 600 && !pooledId; i++) {
      pooledId = orch.manager.warmPoolStatus().ready[0];
      if (!pooledId) await sleep(50);
    }
    assert.ok(pooledId, 'the pool filled');
    const initPid = orch.manager.registry.find(pooledId)?.sandbox?.pid;
    // A pooled sandbox is not in the registry: its pid from the runtime's pid file.
    const pid = initPid ?? Number((await readFile(path.join(orch.stateDir, pooledId, 'container.pid'), 'utf8')).trim());
    const poolKey = await readFile(path.join(orch.stateDir, pooledId, 'id_ed25519'), 'utf8');
    const hostKey = await readFile(path.join(orch.stateDir, pooledId, 'config', CONFIG_FILES.hostKeyPub), 'utf8');

    // In the pool: the launcher runs, and no SSH session is left (the pool keeps no connection).
    let before: GuestProcess[] = [];
    for (let i = 0; i < 100; i++) {
      before = await guestProcesses(pid);
      if (!before.some(isSshSession)) break;
      await sleep(50);
    }
    assert.deepEqual(before.filter(isSshSession), [], "nothing of the pool's connection in the guest");
    const launcher = before.find(isLauncher);
    assert.ok(launcher, 'the helper launcher runs in the pooled sandbox');
    const beforePids = new Set(before.map((p) => p.pid));

    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { width: 1024, height: 768 } });
    assert.equal(res.statusCode, 201, res.body);
    const id = res.json().id as string;
    assert.equal(id, pooledId, 'a warm claim');
    // The session works: a screenshot (the grabber) and a click (the input helper).
    const shot = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/screenshot` });
    assert.equal(shot.statusCode, 200);
    assert.deepEqual(pngSize(shot.rawPayload), { width: 1024, height: 768 });
    const click = await orch.server.inject({
      method: 'POST',
      url: `/v1/sessions/${id}/tools/computer`,
      payload: { action: 'left_click', coordinate: [10, 10] },
    });
    assert.equal(click.statusCode, 200, click.body);
    assert.equal(click.json().is_error, false, click.body);

    // The pool's key is refused by the guest's sshd; the session's own key and the pinned host key let it in.
    const address = await guestAddress(orch.names, id);
    const refused = await tryLogin(address, poolKey, hostKey);
    assert.ok(refused instanceof SshAuthenticationError, `the pool's key must be refused, got ${String(refused)}`);
    const sessionKey = await readFile(path.join(orch.stateDir, id, 'id_ed25519'), 'utf8');
    assert.notEqual(sessionKey, poolKey);
    assert.equal(await tryLogin(address, sessionKey, hostKey), 'accepted');

    // The helpers: forks of the launcher, each on a TCP socket whose other end is held by an sshd
    // session that did not exist before the claim (the session's connection's), and there is one such session.
    const after = await guestProcesses(pid);
    const sessions = after.filter(isSshSession);
    assert.ok(
      sessions.every((s) => !beforePids.has(s.pid)),
      'every SSH session in the guest began after the claim',
    );
    const helpers = after.filter((p) => p.ppid === launcher.pid);
    assert.ok(helpers.length >= 2, `the input helper and the grabber are forks of the launcher (${helpers.length})`);
    const table = await tcpTable(pid);
    for (const helper of helpers) {
      const own = table.find((e) => helper.sockets.has(e.inode) && e.state === '01');
      assert.ok(own, `helper ${helper.pid} has an established TCP connection`);
      const peer = table.find((e) => e.local === own.remote && e.remote === own.local);
      assert.ok(peer, `its peer socket is in the guest (${own.remote})`);
      const holders = after.filter((p) => p.sockets.has(peer.inode));
      assert.ok(holders.length > 0, 'someone holds the peer');
      for (const holder of holders) {
        assert.match(holder.cmdline, /^sshd: user/, `the peer of helper ${helper.pid} is an SSH session`);
        assert.ok(!beforePids.has(holder.pid), 'the SSH session that carries it began after the claim');
      }
    }
    assert.ok(!helpers.some((h) => beforePids.has(h.pid)), "no helper of the pool's time is left");

    // A guest process without the token gets no helper: the fork closes on it without a byte (or resets it).
    const listening = table.find((e) => launcher.sockets.has(e.inode) && e.state === '0A');
    assert.ok(listening, 'the launcher listens');
    const port = parseInt(listening.local.split(':')[1] ?? '', 16);
    const session = orch.manager.registry.find(id);
    assert.ok(session?.connection);
    const probe = [
      'import socket',
      `s = socket.create_connection(("127.0.0.1", ${port}))`,
      's.sendall(b"' + '0'.repeat(48) + ' input\\nwhere\\n")',
      's.settimeout(5)',
      'try:',
      '    said = s.recv(100)',
      'except ConnectionResetError:',
      '    said = b""',
      'print(repr(said))',
    ].join('\n');
    const out = await session.connection.exec(`python3 -I -c '${probe}'`, { timeoutMs: 10_000 });
    assert.equal(out.stdout.toString().trim(), "b''", `a wrong token gets nothing (stderr: ${out.stderr.toString()})`);
  });
});

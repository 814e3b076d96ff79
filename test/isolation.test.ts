import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { utils } from './helpers/ssh2-utils.js';
import { GUEST_USER } from '../src/guest/contract.js';
import { generateSessionKeys } from '../src/transport/ssh-keys.js';
import { guestTransport, type GuestTransport, HostKeyMismatchError, SshAuthenticationError } from '../src/transport/index.js';
import { connectToGuest, guestAddress, guestSh } from './helpers/guest.js';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';
import { readFile } from 'node:fs/promises';
import path from 'node:path';

describe('two sandboxes at once', () => {
  let orch: TestOrchestrator;
  let a: string;
  let b: string;

  before(async () => {
    orch = await startTestOrchestrator();
    const [ra, rb] = await Promise.all([
      orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { width: 640, height: 480 } }),
      orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { width: 800, height: 600 } }),
    ]);
    assert.equal(ra.statusCode, 201, ra.body);
    assert.equal(rb.statusCode, 201, rb.body);
    a = ra.json().id;
    b = rb.json().id;
  });
  after(async () => {
    await orch?.stop();
  });

  it('have separate displays', async () => {
    const move = (id: string, x: number, y: number) =>
      orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/actions`, payload: { action: 'mouse_move', coordinate: [x, y] } });
    const where = async (id: string) =>
      (await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/actions`, payload: { action: 'cursor_position' } })).json().output;
    await move(a, 11, 22);
    await move(b, 333, 444);
    assert.equal(await where(a), 'X=11,Y=22');
    assert.equal(await where(b), 'X=333,Y=444');
    const ga = await connectToGuest(orch.stateDir, a, await guestAddress(orch.names, a));
    const gb = await connectToGuest(orch.stateDir, b, await guestAddress(orch.names, b));
    try {
      assert.equal((await guestSh(ga, 'DISPLAY=:99 xdotool getdisplaygeometry')).text.trim(), '640 480');
      assert.equal((await guestSh(gb, 'DISPLAY=:99 xdotool getdisplaygeometry')).text.trim(), '800 600');
      assert.equal((await guestSh(ga, 'hostname')).text.trim(), `sbx-${a}`);
      assert.equal((await guestSh(gb, 'hostname')).text.trim(), `sbx-${b}`);
      // Each its own machine id, written at boot (the image has none).
      const ids = await Promise.all([ga, gb].map(async (g) => (await guestSh(g, 'cat /etc/machine-id')).text.trim()));
      for (const id of ids) assert.match(id, /^[0-9a-f]{32}$/);
      assert.notEqual(ids[0], ids[1]);
      // Separate pid namespaces: neither sees the other's processes (the init is pid 1 in each).
      assert.match((await guestSh(ga, 'cat /proc/1/cmdline | tr "\\0" " "')).text, /sandbox-init/);
      const psA = (await guestSh(ga, 'ps -eo pid= | wc -l')).text.trim();
      assert.ok(Number(psA) < 40, `a sees only its own processes (${psA})`);
    } finally {
      ga.close();
      gb.close();
    }
  });

  it('have separate networks, each with only its own address', async () => {
    const addrA = await guestAddress(orch.names, a);
    const addrB = await guestAddress(orch.names, b);
    assert.notEqual(addrA, addrB);
    const ga = await connectToGuest(orch.stateDir, a, addrA);
    try {
      const ips = (await guestSh(ga, 'ip -o -4 addr show scope global')).text;
      assert.match(ips, new RegExp(`eth0\\s+inet ${addrA.replace(/\./g, '\\.')}/30`));
      assert.doesNotMatch(ips, new RegExp(addrB.replace(/\./g, '\\.')));
    } finally {
      ga.close();
    }
  });

  it('refuse a guest that presents another host key than the one pinned', async () => {
    // Session a's guest is asked to be session b's (or any other) machine: its host key
    // differs from the pinned one, so the connection is refused before authentication.
    const privateKey = await readFile(path.join(orch.stateDir, a, 'id_ed25519'), 'utf8');
    const impostorPin = utils.parseKey(generateSessionKeys('impostor00').hostPublicKey);
    if (impostorPin instanceof Error) throw impostorPin;
    const conn = guestTransport({
      endpoint: { host: await guestAddress(orch.names, a), port: 22 },
      username: GUEST_USER,
      privateKey,
      pinnedHostKey: impostorPin.getPublicSSH(),
    });
    await assert.rejects(conn.open(5_000), HostKeyMismatchError);
    conn.close();
    // And b's pinned key does not open a's guest either.
    const bHostPub = await readFile(path.join(orch.stateDir, b, 'config', 'ssh_host_ed25519_key.pub'), 'utf8');
    const bPin = utils.parseKey(bHostPub.trim());
    if (bPin instanceof Error) throw bPin;
    const cross = guestTransport({
      endpoint: { host: await guestAddress(orch.names, a), port: 22 },
      username: GUEST_USER,
      privateKey,
      pinnedHostKey: bPin.getPublicSSH(),
    });
    await assert.rejects(cross.open(5_000), HostKeyMismatchError);
    cross.close();
  });

  /** A login to session a's guest, pinning a's host key, as `username` with the key of `keyOf`. */
  async function loginToA(username: string, keyOf: string): Promise<GuestTransport> {
    const privateKey = await readFile(path.join(orch.stateDir, keyOf, 'id_ed25519'), 'utf8');
    const aHostPub = await readFile(path.join(orch.stateDir, a, 'config', 'ssh_host_ed25519_key.pub'), 'utf8');
    const aPin = utils.parseKey(aHostPub.trim());
    if (aPin instanceof Error) throw aPin;
    return guestTransport({ endpoint: { host: await guestAddress(orch.names, a), port: 22 }, username, privateKey, pinnedHostKey: aPin.getPublicSSH() });
  }

  it("refuse another session's client key", async () => {
    const conn = await loginToA(GUEST_USER, b);
    await assert.rejects(conn.open(3_000), SshAuthenticationError);
    conn.close();
  });

  it('refuse root, even with the session key (only a snapshot template has a root key, for sbx-rekey)', async () => {
    const conn = await loginToA('root', a);
    await assert.rejects(conn.open(3_000), SshAuthenticationError);
    conn.close();
  });
});

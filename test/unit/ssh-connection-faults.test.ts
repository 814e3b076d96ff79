import assert from 'node:assert/strict';
import { once } from 'node:events';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import ssh2 from 'ssh2';
import { generateSessionKeys, publicKeyBlob, type SessionKeys } from '../../src/transport/ssh-keys.js';
import { ConnectionLostError, guestTransport, type GuestTransport, HostKeyMismatchError, SshTimeoutError } from '../../src/transport/index.js';
import { watchUncaught } from '../helpers/uncaught-guard.js';

/**
 * A guest decides what its end of the SSH connection does. Each peer here is what a guest
 * (its root, or a user who starves sshd of CPU) can put on port 22; none of it may end the
 * orchestrator's process. Before the fix, the silent listener alone did: ssh2 emits a
 * second 'error' after its handshake timeout, and the client listened with `once`.
 */

interface Peer {
  port: number;
  connections: number;
  close(): Promise<void>;
}

/** A TCP listener on loopback (on `port`, or any) that does `onSocket` with every connection. */
async function tcpPeer(onSocket: (socket: net.Socket) => void, port = 0): Promise<Peer> {
  const sockets = new Set<net.Socket>();
  const peer = { port: 0, connections: 0, close: async () => undefined };
  const server = net.createServer((socket) => {
    peer.connections++;
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
    onSocket(socket);
  });
  server.listen(port, '127.0.0.1');
  await once(server, 'listening');
  peer.port = (server.address() as net.AddressInfo).port;
  peer.close = async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return peer;
}

/** A real SSH server (ssh2's) with `hostKey`, letting in `clientKey` and running any exec as `true`. */
async function sshPeer(hostPrivateKey: string, port = 0): Promise<Peer & { server: InstanceType<typeof ssh2.Server> }> {
  const clients = new Set<ssh2.Connection>();
  const server = new ssh2.Server({ hostKeys: [hostPrivateKey] }, (client) => {
    clients.add(client);
    client.on('error', () => undefined);
    client.on('close', () => clients.delete(client));
    client.on('authentication', (ctx) => (ctx.method === 'publickey' ? ctx.accept() : ctx.reject(['publickey'])));
    client.on('session', (accept) => {
      const session = accept();
      session.on('exec', (acceptExec) => {
        const channel = acceptExec();
        channel.exit(0);
        channel.end();
      });
    });
  });
  server.listen(port, '127.0.0.1');
  await once(server, 'listening');
  const peer = {
    server,
    port: (server.address() as net.AddressInfo).port,
    connections: 0,
    async close() {
      for (const client of clients) client.end();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return peer;
}

function connectionTo(port: number, keys: SessionKeys, reconnectGiveUpMs = 3_000): GuestTransport {
  return guestTransport({
    endpoint: { host: '127.0.0.1', port },
    username: 'user',
    privateKey: keys.clientPrivateKey,
    pinnedHostKey: publicKeyBlob(keys.hostPublicKey),
    reconnectGiveUpMs,
  });
}

describe('a guest that will not speak SSH cannot end the orchestrator', () => {
  const uncaught = watchUncaught();
  let keys: SessionKeys;
  before(() => {
    keys = generateSessionKeys('faults');
  });
  after(() => uncaught.assertNone());

  it('a listener that accepts and never sends a banner: open() fails in bounded time, nothing uncaught', async () => {
    const peer = await tcpPeer(() => undefined);
    const connection = connectionTo(peer.port, keys);
    const started = Date.now();
    await assert.rejects(connection.open(1_500), SshTimeoutError);
    const took = Date.now() - started;
    connection.close();
    // ssh2's second error comes after the socket is destroyed: give it its turn.
    await new Promise((resolve) => setTimeout(resolve, 200));
    await peer.close();
    uncaught.assertNone();
    assert.ok(took < 4_000, `open() took ${took} ms against a 1.5 s deadline`);
    assert.ok(peer.connections >= 1);
  });

  for (const [name, behave] of [
    ['a banner, then silence', (s: net.Socket) => s.write('SSH-2.0-OpenSSH_9.2\r\n')],
    ['garbage instead of a banner', (s: net.Socket) => s.write(Buffer.alloc(64 * 1024, 0xff))],
    ['a banner, then garbage packets', (s: net.Socket) => s.write(Buffer.concat([Buffer.from('SSH-2.0-x\r\n'), Buffer.alloc(70_000, 0x41)]))],
    ['a reset right after accepting', (s: net.Socket) => s.resetAndDestroy()],
    ['an endless banner line', (s: net.Socket) => s.write(Buffer.alloc(300_000, 0x53))],
  ] as const) {
    it(`${name}: open() fails, nothing uncaught`, async () => {
      const peer = await tcpPeer(behave);
      const connection = connectionTo(peer.port, keys);
      await assert.rejects(connection.open(1_500));
      connection.close();
      await new Promise((resolve) => setTimeout(resolve, 200));
      await peer.close();
      uncaught.assertNone();
    });
  }

  it('a live connection whose guest then turns silent: reconnecting gives up ("lost") in bounded time, nothing uncaught', async () => {
    const real = await sshPeer(keys.hostPrivateKey);
    const connection = connectionTo(real.port, keys, 2_500);
    await connection.open(5_000);
    assert.equal((await connection.exec('true')).exitCode, 0);
    const lost = new Promise<ConnectionLostError>((resolve) => connection.once('lost', resolve));
    // The guest's sshd goes and a listener that never answers takes port 22.
    const port = real.port;
    await real.close();
    const silent = await tcpPeer(() => undefined, port);
    const started = Date.now();
    const err = await lost;
    const took = Date.now() - started;
    assert.equal(err.reason, 'unreachable');
    assert.ok(took < 10_000, `gave up after ${took} ms (give-up 2.5 s, one attempt at most 5 s)`);
    assert.ok(silent.connections >= 1, 'it did try the silent listener');
    await assert.rejects(connection.exec('true'), /closed/);
    connection.close();
    await silent.close();
    uncaught.assertNone();
  });

  it('a guest that comes back with another host key: "lost" at once, as host_key_mismatch', async () => {
    const real = await sshPeer(keys.hostPrivateKey);
    const connection = connectionTo(real.port, keys, 20_000);
    await connection.open(5_000);
    const lost = new Promise<ConnectionLostError>((resolve) => connection.once('lost', resolve));
    const port = real.port;
    await real.close();
    const impostor = await sshPeer(generateSessionKeys('impostor').hostPrivateKey, port);
    const started = Date.now();
    const err = await lost;
    assert.equal(err.reason, 'host_key_mismatch');
    assert.ok(err.cause instanceof HostKeyMismatchError);
    assert.ok(Date.now() - started < 5_000, 'not retried until the give-up');
    connection.close();
    await impostor.close();
    uncaught.assertNone();
  });
});

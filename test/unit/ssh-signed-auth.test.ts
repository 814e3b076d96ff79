import assert from 'node:assert/strict';
import { once } from 'node:events';
import type net from 'node:net';
import { describe, it } from 'node:test';
import ssh2 from 'ssh2';
import { generateSessionKeys, publicKeyBlob, type SessionKeys } from '../../src/transport/ssh-keys.js';
import { guestTransport, SshAuthenticationError } from '../../src/transport/index.js';

/**
 * The login sends the session key's signature in its first request (ssh-signed-auth.ts): sshd
 * delays its answer to every key request, so ssh2's unsigned query first cost a round trip
 * and part of a delay on every handshake. An ssh2 server here records what each request carried.
 */
interface Attempt {
  method: string;
  signed: boolean;
}

async function recordingPeer(keys: SessionKeys, accept: boolean) {
  const attempts: Attempt[] = [];
  const clients = new Set<ssh2.Connection>();
  const server = new ssh2.Server({ hostKeys: [keys.hostPrivateKey] }, (client) => {
    clients.add(client);
    client.on('error', () => undefined);
    client.on('authentication', (ctx) => {
      attempts.push({ method: ctx.method, signed: ctx.method === 'publickey' && ctx.signature !== undefined });
      if (ctx.method !== 'publickey' || !accept) return ctx.reject(['publickey']);
      const key = ssh2.utils.parseKey(keys.clientPublicKey);
      if (key instanceof Error || !ctx.key.data.equals(key.getPublicSSH())) return ctx.reject(['publickey']);
      if (ctx.signature === undefined) return ctx.accept(); // a query: USERAUTH_PK_OK
      ctx.accept();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    attempts,
    port: (server.address() as net.AddressInfo).port,
    async close() {
      for (const client of clients) client.end();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function connectionTo(port: number, keys: SessionKeys) {
  return guestTransport({
    endpoint: { host: '127.0.0.1', port },
    username: 'user',
    privateKey: keys.clientPrivateKey,
    pinnedHostKey: publicKeyBlob(keys.hostPublicKey),
  });
}

describe('the SSH login signs at once', () => {
  it('one request, carrying the signature: no unsigned query before it', async () => {
    const keys = generateSessionKeys('signed');
    const peer = await recordingPeer(keys, true);
    const connection = connectionTo(peer.port, keys);
    try {
      await connection.open(5_000);
      assert.deepEqual(peer.attempts, [{ method: 'publickey', signed: true }]);
    } finally {
      connection.close();
      await peer.close();
    }
  });

  it('a refused signed request is the same authentication error as before, and is not retried unsigned', async () => {
    const keys = generateSessionKeys('refused');
    const peer = await recordingPeer(keys, false);
    const connection = connectionTo(peer.port, keys);
    try {
      await assert.rejects(connection.open(5_000), SshAuthenticationError);
      assert.deepEqual(peer.attempts, [{ method: 'publickey', signed: true }]);
    } finally {
      connection.close();
      await peer.close();
    }
  });
});
